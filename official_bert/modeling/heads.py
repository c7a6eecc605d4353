"""BERT's pretraining heads: masked-LM and next-sentence prediction."""

import keras
from keras import ops

from official_bert.modeling import activations
from official_bert.modeling import initializers
from official_bert.modeling import kernels as kernels_lib
from official_bert.modeling import normalization
from official_bert.modeling import positions

# Shape legend: B batch, T sequence, P masked positions per sequence,
# H hidden size, V vocabulary size.


@keras.saving.register_keras_serializable(package="official_bert")
class MaskedLMHead(keras.layers.Layer):
  """Predicts the original ids at the masked positions only.

  Gathers the P masked positions, applies the original's `cls/predictions/
  transform` (dense + activation + LayerNorm) and scores against the **tied**
  word-embedding matrix plus a per-id `output_bias`. The embedding table is
  passed in, not copied, so the head trains the encoder's embeddings.

  Args:
    embedding_table: the encoder's [V, H] word-embedding variable.
    hidden_act: activation of the transform, a `bert_config.json` name.
    initializer_range: stddev of the truncated-normal initializer.
    kernels: "fast" or "keras" (see `kernels.py`), for the transform's
      activation and LayerNorm and the scores against the table.

  Inputs: `(sequence_output [B, T, H], masked_lm_positions int [B, P])`, or
    the [B, P, H] output already at the masked positions (what
    `BertEncoder(..., output_positions=masked_lm_positions)` returns).
  Output: float32 logits [B, P, V].
  """

  def __init__(self, embedding_table, hidden_act="gelu",
               initializer_range=0.02, kernels="keras", **kwargs):
    super().__init__(**kwargs)
    activations.get(hidden_act)
    self.embedding_table = embedding_table
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.vocab_size, self.hidden_size = embedding_table.shape
    self.kernels = kernels_lib.check(kernels)

  def build(self, input_shape):
    sequence_shape = tuple(input_shape[0])
    self.dense = keras.layers.Dense(
        self.hidden_size,
        activation=kernels_lib.activation(self.hidden_act, self.kernels),
        kernel_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="dense")
    self.dense.build(sequence_shape)
    self.layer_norm = normalization.LayerNormalization(
        epsilon=1e-12, kernels=self.kernels, dtype=self.dtype_policy,
        name="layer_norm")
    self.layer_norm.build(sequence_shape)
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.vocab_size,), initializer="zeros")
    self.built = True

  def call(self, inputs):
    if isinstance(inputs, (tuple, list)):
      gathered = positions.gather_positions(*inputs)  # [B, P, H]
    else:
      gathered = inputs
    x = self.layer_norm(self.dense(gathered))
    # [B*P, H] x [V, H]^T -> [B, P, V], in float32. One 2-D matmul: a
    # batched [B, P, H] x [H, V] product's gradient builds a [B, H, V]
    # per-sequence copy of the table's gradient before summing it.
    table = ops.cast(self.embedding_table, self.compute_dtype)
    batch, num_positions = ops.shape(x)[:2]
    logits = kernels_lib.mlm_logits(ops.reshape(x, (-1, self.hidden_size)),
                                    table, self.output_bias, self.kernels)
    return ops.reshape(logits, (batch, num_positions, self.vocab_size))

  def compute_output_shape(self, input_shape):
    if isinstance(input_shape, (tuple, list)) and isinstance(
        input_shape[0], (tuple, list)):
      return tuple(input_shape[1]) + (self.vocab_size,)
    return tuple(input_shape[:-1]) + (self.vocab_size,)

  def get_config(self):
    # The embedding table is shared state, not config: whoever rebuilds this
    # head (BertPretrainer.from_config) passes the encoder's table again.
    config = super().get_config()
    config.update(hidden_act=self.hidden_act,
                  initializer_range=self.initializer_range,
                  kernels=self.kernels)
    return config


@keras.saving.register_keras_serializable(package="official_bert")
class NextSentenceHead(keras.layers.Layer):
  """Classifies the pooled output: 0 = B follows A, 1 = B is random.

  The original's `cls/seq_relationship` (`output_weights` [2, H], stored
  transposed here as a [H, 2] dense kernel).

  Args:
    initializer_range: stddev of the truncated-normal initializer.

  Input: pooled_output [B, H]. Output: float32 logits [B, 2].
  """

  def __init__(self, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.initializer_range = initializer_range

  def build(self, input_shape):
    self.dense = keras.layers.Dense(
        2,
        kernel_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="dense")
    self.dense.build(input_shape)
    self.built = True

  def call(self, pooled_output):
    return ops.cast(self.dense(pooled_output), "float32")

  def compute_output_shape(self, input_shape):
    return (input_shape[0], 2)

  def get_config(self):
    config = super().get_config()
    config.update(initializer_range=self.initializer_range)
    return config
