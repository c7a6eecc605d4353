"""The post-LayerNorm Transformer block of BERT."""

import keras

from official_bert.modeling import activations
from official_bert.modeling import attention
from official_bert.modeling import dropout
from official_bert.modeling import feed_forward
from official_bert.modeling import kernels as kernels_lib
from official_bert.modeling import normalization
from official_bert.modeling import packing as packing_lib
from official_bert.modeling import positions as positions_lib
from official_bert.modeling import sequence_packing


@keras.saving.register_keras_serializable(package="official_bert")
class TransformerBlock(keras.layers.Layer):
  """Self-attention and a feed-forward network, each + residual + LayerNorm.

      a = LayerNorm(x + Dropout(Attention(x, mask)))
      y = LayerNorm(a + Dropout(FeedForward(a)))

  Sublayer names mirror google-research/bert's `layer_N` scope: `attention`
  (query/key/value/output), `attention_layer_norm` (`attention/output/LayerNorm`),
  `feed_forward` (a `FeedForward` owning `intermediate`, the original's
  `intermediate/dense`, and `output`, its `output/dense`) and
  `output_layer_norm` (`output/LayerNorm`). The block also holds the two
  dense layers as `intermediate` and `output_dense`, so checkpoint keys stay
  `layer_N/intermediate/...` and `layer_N/output_dense/...`.

  Args:
    hidden_size: H.
    num_attention_heads: N.
    intermediate_size: width I of the feed-forward layer.
    hidden_act: a `bert_config.json` activation name.
    hidden_dropout_prob: dropout on the attention and feed-forward outputs.
    attention_probs_dropout_prob: dropout on the attention probabilities.
    initializer_range: stddev of the truncated-normal initializer.
    kernels: "fast" or "keras", for every sublayer (see `kernels.py`).
    fused_attention: the attention's fused op (see `SelfAttention`).

  Inputs: `(x, mask)`: float [B, T, H], int [B, T] (or [B, T, S]: packed
  rows' attention mask, sequence_packing.py). Output: float [B, T, H].
  With `output_positions` (int [B, P]) the block attends from those positions
  only (to all of them) and returns [B, P, H]: equal to the full output
  gathered there, for a fraction of the work when only P positions are read.
  With `packing` (`packing.pack_indices(mask)`), x holds the tokens only,
  packed [N, H], and so does the output: every position-wise step runs on
  the N tokens, attention on [B, T] (see `packing.py`). With both, the
  output is [B, P, H] at `output_positions` (which must be tokens).

  Example:
    >>> block = TransformerBlock(32, 4, 37)
    >>> block((keras.ops.ones((3, 7, 32)), keras.ops.ones((3, 7)))).shape
    (3, 7, 32)
  """

  def __init__(self, hidden_size, num_attention_heads, intermediate_size,
               hidden_act="gelu", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, initializer_range=0.02,
               kernels="keras", fused_attention=False, **kwargs):
    super().__init__(**kwargs)
    activations.get(hidden_act)  # Validates the name early.
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.initializer_range = initializer_range
    self.kernels = kernels_lib.check(kernels)
    self.fused_attention = bool(fused_attention)

  def build(self, input_shape):
    x_shape = tuple(input_shape[0])
    self.attention = attention.SelfAttention(
        self.hidden_size, self.num_attention_heads,
        dropout_rate=self.attention_probs_dropout_prob,
        initializer_range=self.initializer_range, kernels=self.kernels,
        fused_attention=self.fused_attention, dtype=self.dtype_policy,
        name="attention")
    self.attention.build(input_shape)
    self.attention_layer_norm = normalization.LayerNormalization(
        epsilon=1e-12, kernels=self.kernels, dtype=self.dtype_policy,
        name="attention_layer_norm")
    self.attention_layer_norm.build(x_shape)
    self.feed_forward = feed_forward.FeedForward(
        self.hidden_size, self.intermediate_size, self.hidden_act,
        initializer_range=self.initializer_range, kernels=self.kernels,
        dtype=self.dtype_policy, name="feed_forward")
    self.feed_forward.build(x_shape)
    # The checkpoint's names for them (tf.train.Checkpoint names an object by
    # its shortest path, so these, not feed_forward/...).
    self.intermediate = self.feed_forward.intermediate
    self.output_dense = self.feed_forward.output_dense
    self.output_layer_norm = normalization.LayerNormalization(
        epsilon=1e-12, kernels=self.kernels, dtype=self.dtype_policy,
        name="output_layer_norm")
    self.output_layer_norm.build(x_shape)
    self.attention_dropout = dropout.Dropout(
        self.hidden_dropout_prob, kernels=self.kernels,
        dtype=self.dtype_policy)
    self.output_dropout = dropout.Dropout(
        self.hidden_dropout_prob, kernels=self.kernels,
        dtype=self.dtype_policy)
    self.built = True

  def call(self, inputs, training=None, output_positions=None, packing=None):
    x, mask = inputs
    queries = None
    attention_mask = mask
    if output_positions is not None and len(mask.shape) == 3:
      # A packed row's [B, T, S] mask at the query positions: [B, P, S].
      attention_mask = sequence_packing.gather_query_rows(mask,
                                                          output_positions)
    if output_positions is not None and packing is not None:
      # [N, H] -> [B, P, H]: the packed rows of those positions (which must
      # be tokens), the queries and the residual.
      queries = packing_lib.gather_packed(x, packing, mask, output_positions)
    elif output_positions is not None:
      # [B, T, H] -> [B, P, H]: the queries, and the residual.
      queries = positions_lib.gather_positions(x, output_positions)
    attended = self.attention((x, attention_mask), training=training,
                              query_inputs=queries, packing=packing)
    if queries is not None:
      x = queries
    attended = self.attention_dropout(attended, training=training)
    x = self.attention_layer_norm(x + attended)
    y = self.output_dropout(self.feed_forward(x, training=training),
                            training=training)
    return self.output_layer_norm(x + y)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[0])

  def get_config(self):
    config = super().get_config()
    config.update(
        hidden_size=self.hidden_size,
        num_attention_heads=self.num_attention_heads,
        intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
        hidden_dropout_prob=self.hidden_dropout_prob,
        attention_probs_dropout_prob=self.attention_probs_dropout_prob,
        initializer_range=self.initializer_range, kernels=self.kernels,
        fused_attention=self.fused_attention)
    return config
