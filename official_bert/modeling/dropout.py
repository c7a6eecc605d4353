"""Dropout with 16-bit draws (see `kernels.dropout`).

`Dropout` is Keras's layer (same arguments, the same seed-generator variable,
so checkpoints are unchanged) whose training-time mask comes from
`kernels.dropout`: one random int32 decides two neighbouring elements by its
16-bit halves (the rate rounded to a multiple of 1/65536, the expected value
unchanged, the gradient one multiplication), read through an int16 view with
`kernels="fast"` and split by shifts with `kernels="keras"`: the same mask
either way. With a `noise_shape` it is Keras's dropout.
"""

import keras

from official_bert.modeling import kernels as kernels_lib


@keras.saving.register_keras_serializable(package="official_bert")
class Dropout(keras.layers.Dropout):
  """`keras.layers.Dropout` with a `kernels` argument ("fast" or "keras").

  Example:
    >>> layer = Dropout(0.5, seed=1, kernels="fast")
    >>> y = layer(keras.ops.ones((2, 8)), training=True)
    >>> sorted(set(keras.ops.convert_to_numpy(y).ravel().tolist()))
    [0.0, 2.0]
  """

  def __init__(self, rate, noise_shape=None, seed=None, kernels="keras",
               **kwargs):
    super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)
    self.kernels = kernels_lib.check(kernels)

  def call(self, inputs, training=False):
    if not training or self.rate == 0:
      return inputs
    if self.noise_shape is not None:
      return super().call(inputs, training=training)
    return kernels_lib.dropout(inputs, self.rate, self.seed_generator,
                               self.kernels)

  def get_config(self):
    config = super().get_config()
    config.update(kernels=self.kernels)
    return config
