"""Layer normalization with a choice of kernels (see `kernels.layer_norm`).

`LayerNormalization` is Keras's layer (same arguments, variables `gamma` and
`beta`, float32 statistics under mixed precision). Over the last axis with
`gamma` and `beta` it computes `kernels.layer_norm`: with `kernels="keras"`
Keras's own formula and autodiff, with `kernels="fast"` the same value with
the gradient written out. Other axes, and layers without `gamma` or `beta`,
use Keras's call either way.
"""

import keras
from keras import ops

from official_bert.modeling import kernels as kernels_lib


@keras.saving.register_keras_serializable(package="official_bert")
class LayerNormalization(keras.layers.LayerNormalization):
  """`keras.layers.LayerNormalization` with a `kernels` argument."""

  def __init__(self, kernels="keras", **kwargs):
    super().__init__(**kwargs)
    self.kernels = kernels_lib.check(kernels)

  def call(self, inputs):
    rank = len(inputs.shape)
    axes = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
    last_axis = [a % rank for a in axes] == [rank - 1]
    if not (last_axis and self.center and self.scale) or self.rms_scaling:
      return super().call(inputs)
    outputs = kernels_lib.layer_norm(inputs, self.gamma, self.beta,
                                     self.epsilon, self.kernels)
    return ops.cast(outputs, self.compute_dtype)

  def get_config(self):
    config = super().get_config()
    config.update(kernels=self.kernels)
    return config
