"""Multi-head self-attention with BERT's padding mask."""

import math

import keras
from keras import ops

from official_bert.modeling import dropout
from official_bert.modeling import initializers
from official_bert.modeling import kernels as kernels_lib
from official_bert.modeling import packing as packing_lib

# Shape legend: B batch, T query positions, S key positions, N heads,
# D size per head, H = N * D hidden size.


@keras.saving.register_keras_serializable(package="official_bert")
class SelfAttention(keras.layers.Layer):
  """Scaled dot-product self-attention over N heads, then an output projection.

  Mirrors the original's `attention/self/{query,key,value}` and
  `attention/output/dense` (here `output`): four [H, H] dense layers, so a
  released checkpoint loads without reshaping. Keys where `mask == 0` get a
  -10000 bias before the softmax, as in google-research/bert; the softmax is
  computed in float32 under mixed precision.

  Args:
    hidden_size: H.
    num_attention_heads: N; must divide H.
    dropout_rate: dropout on the attention probabilities.
    initializer_range: stddev of the truncated-normal initializer.
    kernels: "fast" or "keras", for the dropout (see `kernels.py`).
    fused_attention: the scores, softmax and weighted sum as one fused op
      (`kernels.fused_attention`: `keras.ops.dot_product_attention`, flash
      or cuDNN where the backend has them), the same values; the attention
      probabilities are then not dropped out (the fused op has no dropout:
      the recipes that fuse set attention_probs_dropout_prob to 0, as
      ModernBERT). Not with the padding-free path (`packing`).

  Inputs: `(x, mask)`: x float [B, T, H], mask int/bool [B, T] (1 = real
    token), or [B, T, S] (1 where query t may attend to key s: packed rows,
    sequence_packing.py; with `query_inputs`, [B, P, S]).
    `query_inputs` (optional, float [B, P, H]): attend from these instead
    (e.g. x at a few positions); every position of x is still a key and a
    value.
  Output: float [B, T, H] (or [B, P, H]), before the residual and LayerNorm.

  Example:
    >>> att = SelfAttention(hidden_size=32, num_attention_heads=4)
    >>> att((ops.ones((3, 7, 32)), ops.ones((3, 7)))).shape
    (3, 7, 32)

  From "Attention Is All You Need" (Vaswani et al., 2017).
  """

  def __init__(self, hidden_size, num_attention_heads, dropout_rate=0.1,
               initializer_range=0.02, kernels="keras",
               fused_attention=False, **kwargs):
    super().__init__(**kwargs)
    if hidden_size % num_attention_heads:
      raise ValueError(f"hidden_size ({hidden_size}) must be divisible by "
                       f"num_attention_heads ({num_attention_heads})")
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.dropout_rate = dropout_rate
    self.initializer_range = initializer_range
    self.head_size = hidden_size // num_attention_heads
    self.kernels = kernels_lib.check(kernels)
    self.fused_attention = bool(fused_attention)

  def _dense(self, name):
    return keras.layers.Dense(
        self.hidden_size,
        kernel_initializer=initializers.truncated_normal(self.initializer_range),
        dtype=self.dtype_policy, name=name)

  def build(self, input_shape):
    x_shape = input_shape[0]
    self.query = self._dense("query")
    self.key = self._dense("key")
    self.value = self._dense("value")
    self.output_dense = self._dense("output")
    for layer in (self.query, self.key, self.value, self.output_dense):
      layer.build(x_shape)
    self.dropout = dropout.Dropout(self.dropout_rate, kernels=self.kernels,
                                   dtype=self.dtype_policy)
    self.built = True

  def _split_heads(self, x, dims=None):
    # [B, T, H] -> [B, T, N, D]; or [B * T, H] with dims = (B, T).
    batch, length = dims if dims is not None else ops.shape(x)[:2]
    return ops.reshape(x, (batch, length, self.num_attention_heads,
                           self.head_size))

  def call(self, inputs, training=None, query_inputs=None, packing=None):
    x, mask = inputs
    if packing is not None:
      return self._call_packed(x, mask, packing, training, query_inputs)
    query = self._split_heads(self.query(x if query_inputs is None
                                         else query_inputs))
    key = self._split_heads(self.key(x))
    value = self._split_heads(self.value(x))
    return self._attend(query, key, value, mask, training)

  def _call_packed(self, x, mask, packing, training, query_inputs=None):
    batch, length = ops.shape(mask)
    queries = x if query_inputs is None else query_inputs

    def heads(rows, perm):
      # [N, H] -> [B * T, H] -> [B, T, N, D] -> `perm`. Padding rows hold
      # some token's values: as keys they get the -10000 bias (zero weight),
      # as queries their context is dropped by the final `pack`.
      rows = packing_lib.spread(rows, packing, zero_padding=False,
                                kernels=self.kernels)
      return ops.transpose(self._split_heads(rows, (batch, length)), perm)

    # 1/sqrt(D) on the query, not a pass over the [B, N, T, S] scores: in
    # training folded into its kernel and bias (H x H products, fewer than
    # the N x H query for a batch); at inference, where a request is often
    # fewer than H tokens and the weights are read afresh on every call,
    # on the query's N x H values.
    scale = 1.0 / math.sqrt(self.head_size)
    dtype = self.compute_dtype
    if training:
      query = ops.add(
          ops.matmul(queries, ops.cast(self.query.kernel * scale, dtype)),
          ops.cast(self.query.bias * scale, dtype))
    else:
      query = ops.multiply(self.query(queries), ops.cast(scale, dtype))
    if query_inputs is None:
      query = heads(query, (0, 2, 1, 3))  # [B, N, T, D]
    else:  # [B, P, H] -> [B, N, P, D]
      query = ops.transpose(self._split_heads(query), (0, 2, 1, 3))
    key = heads(self.key(x), (0, 2, 3, 1))  # [B, N, D, S]
    value = heads(self.value(x), (0, 2, 1, 3))  # [B, N, S, D]
    scores = ops.cast(ops.matmul(query, key), "float32")  # [B, N, T, S]
    probs = self._probabilities(scores, mask, training)
    # [B, N, T, D] -> [B, T, N, D] -> [B, T, H] -> [N, H]: the output
    # projection runs on the tokens only (with query_inputs: [B, P, H]).
    context = ops.transpose(ops.matmul(probs, value), (0, 2, 1, 3))
    if query_inputs is not None:
      context = ops.reshape(context, (batch, ops.shape(query_inputs)[1],
                                      self.hidden_size))
      return self.output_dense(context)
    context = ops.reshape(context, (batch, length, self.hidden_size))
    return self.output_dense(packing_lib.pack(context, packing,
                                              kernels=self.kernels))

  def _attend(self, query, key, value, mask, training):
    if self.fused_attention:
      # [B, T, N, D] -> [B, T, N, D], the mask as the original's additive
      # -10000 (in the compute dtype: a fused kernel's bias is).
      context = kernels_lib.fused_attention(
          query, key, value, ops.cast(_mask_bias(mask), query.dtype),
          1.0 / math.sqrt(self.head_size))
      batch, length = ops.shape(query)[:2]
      return self.output_dense(
          ops.reshape(context, (batch, length, self.hidden_size)))
    # [B, N, T, S] scores in float32: the softmax must not run in half precision.
    scores = ops.einsum("btnd,bsnd->bnts", query, key)
    scores = ops.cast(scores, "float32") / math.sqrt(self.head_size)
    probs = self._probabilities(scores, mask, training)
    # [B, N, T, S] x [B, S, N, D] -> [B, T, N, D] -> [B, T, H]
    context = ops.einsum("bnts,bsnd->btnd", probs, value)
    batch, length = ops.shape(query)[:2]
    context = ops.reshape(context, (batch, length, self.hidden_size))
    return self.output_dense(context)

  def _probabilities(self, scores, mask, training):
    """Scaled float32 scores [B, N, T, S] -> attention probabilities in the
    compute dtype, after dropout. Keys where `mask` [B, S] is 0 get -10000
    before the softmax, as the original."""
    probs = ops.softmax(scores + _mask_bias(mask), axis=-1)
    return self.dropout(ops.cast(probs, self.compute_dtype),
                        training=training)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[0])

  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size,
                  num_attention_heads=self.num_attention_heads,
                  dropout_rate=self.dropout_rate,
                  initializer_range=self.initializer_range,
                  kernels=self.kernels, fused_attention=self.fused_attention)
    return config


def _mask_bias(mask):
  """The original's additive mask: 0 where a key may be attended, -10000
  where not; float32, [B, 1, 1, S] from a [B, S] mask, [B, 1, T, S] from a
  [B, T, S] one (packed rows)."""
  bias = (1.0 - ops.cast(mask, "float32")) * -10000.0
  # expand_dims, not bias[:, None, None, :]: a new-axis slice has no LiteRT
  # builtin (the int8 export converts this graph).
  if len(mask.shape) == 3:
    return ops.expand_dims(bias, 1)
  return ops.expand_dims(bias, (1, 2))
