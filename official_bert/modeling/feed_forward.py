"""BERT's position-wise feed-forward network (`intermediate`, `output`)."""

import keras
from keras import ops

from official_bert.modeling import activations
from official_bert.modeling import initializers
from official_bert.modeling import kernels as kernels_lib


@keras.saving.register_keras_serializable(package="official_bert")
class FeedForward(keras.layers.Layer):
  """y = act(x W1 + b1) W2 + b2, applied at every position.

  Owns the two dense layers of google-research/bert's block: `intermediate`
  (`intermediate/dense`, [H, I]) and `output_dense` (`output/dense`, [I, H],
  named "output"). It computes `kernels.feed_forward` with their weights, so
  there is one call path: with `kernels="keras"` that is exactly
  `output_dense(intermediate(x))`, with `kernels="fast"` and GELU the same
  value with the gradient written out.

  Args:
    hidden_size: H.
    intermediate_size: I.
    hidden_act: a `bert_config.json` activation name.
    initializer_range: stddev of the truncated-normal initializer.
    kernels: "fast" or "keras" (see `kernels.py`).

  Input: float [..., H] (and `training`: at inference a network of >= 3072
    columns runs in blocks, `kernels.inference_column_blocks`). Output:
    float [..., H].

  Example:
    >>> ffn = FeedForward(32, 37)
    >>> ffn(keras.ops.ones((3, 7, 32))).shape
    (3, 7, 32)
  """

  def __init__(self, hidden_size, intermediate_size, hidden_act="gelu",
               initializer_range=0.02, kernels="keras", **kwargs):
    super().__init__(**kwargs)
    activations.get(hidden_act)  # Validates the name early.
    self.hidden_size = hidden_size
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.kernels = kernels_lib.check(kernels)

  def build(self, input_shape):
    input_shape = tuple(input_shape)
    self.intermediate = keras.layers.Dense(
        self.intermediate_size,
        activation=kernels_lib.activation(self.hidden_act, self.kernels),
        kernel_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="intermediate")
    self.intermediate.build(input_shape)
    self.output_dense = keras.layers.Dense(
        self.hidden_size,
        kernel_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="output")
    self.output_dense.build(input_shape[:-1] + (self.intermediate_size,))
    self.built = True

  def call(self, x, training=None):
    dtype = self.compute_dtype
    w1, b1, w2, b2 = [ops.cast(w, dtype) for w in (
        self.intermediate.kernel, self.intermediate.bias,
        self.output_dense.kernel, self.output_dense.bias)]
    # Inference only: column blocks (same value; training keeps one matmul).
    blocks = 1 if training else self.inference_column_blocks()
    # [..., H] -> [..., I] -> [..., H]
    return kernels_lib.feed_forward(ops.cast(x, dtype), w1, b1, w2, b2,
                                    self.hidden_act, self.kernels, blocks)

  def inference_column_blocks(self):
    """How many column blocks of `intermediate.kernel` inference runs.

    See `kernels.inference_column_blocks`; 1 for the fast GELU kernel,
    which runs one matmul pair.
    """
    if self.kernels == "fast" and self.hidden_act == "gelu":
      return 1
    return kernels_lib.inference_column_blocks(self.intermediate_size)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape)

  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size,
                  intermediate_size=self.intermediate_size,
                  hidden_act=self.hidden_act,
                  initializer_range=self.initializer_range,
                  kernels=self.kernels)
    return config
