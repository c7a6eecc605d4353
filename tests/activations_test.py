"""Tests for official_bert/modeling/activations.py and GELU's fast kernel."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import activations
from official_bert import configs
from official_bert.modeling import kernels


def _points():
  # Both tails (where erf's 1 + erf(x) form loses everything), and the middle.
  return np.concatenate([np.linspace(-12, 12, 2001),
                         np.random.default_rng(0).normal(size=1000) * 3]
                        ).astype("float32")


def test_gelu_value_and_gradient_match_keras_exact_gelu():
  x = tf.constant(_points())
  upstream = tf.sin(x)  # not all ones: the upstream gradient must multiply
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    ours = kernels.fast_gelu(x)
    reference = keras.activations.gelu(x, approximate=False)
    ours_sum = tf.reduce_sum(ours * upstream)
    reference_sum = tf.reduce_sum(reference * upstream)
  np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-7)
  grad = tape.gradient(ours_sum, x)
  np.testing.assert_allclose(grad, tape.gradient(reference_sum, x),
                             rtol=1e-5, atol=1e-6)
  # Far left tail (x < -11.4): GELU's gradient vanishes; far right: it is 1.
  assert float(tf.reduce_max(tf.abs(grad[:50]))) < 1e-20
  np.testing.assert_allclose(grad[1950:2001], upstream[1950:2001], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gelu_gradient_in_half_precision(dtype):
  x32 = tf.constant(_points()[::7] / 4)
  x = tf.cast(x32, dtype)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = kernels.fast_gelu(x)
  grad = tape.gradient(y, x)
  assert y.dtype == grad.dtype == x.dtype
  with tf.GradientTape() as tape:
    tape.watch(x32)
    y32 = keras.activations.gelu(x32, approximate=False)
  tolerance = 2e-2 if dtype == "bfloat16" else 2e-3
  np.testing.assert_allclose(tf.cast(grad, tf.float32),
                             tape.gradient(y32, x32), rtol=tolerance,
                             atol=tolerance)


def test_every_config_name_resolves_and_unknown_names_fail():
  x = tf.constant([-1.0, 0.0, 2.0])
  for name in configs.ACTIVATIONS:
    assert activations.get(name)(x).shape == (3,)
  with pytest.raises(ValueError, match="hidden_act 'tanh' is not one of"):
    activations.get("tanh")


def test_keras_kernels_give_keras_gelu_and_fast_kernels_the_fast_one():
  x = tf.constant(_points())
  keras_gelu = kernels.activation("gelu", "keras")
  np.testing.assert_array_equal(
      keras_gelu(x), keras.activations.gelu(x, approximate=False))
  assert keras_gelu is activations.gelu
  assert kernels.activation("gelu", "fast") is kernels.fast_gelu
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = kernels.gelu(x, "fast")
  np.testing.assert_allclose(y, keras_gelu(x), rtol=1e-6, atol=1e-7)
  assert tape.gradient(y, x).shape == x.shape
  # Other names are the same function with either kernels.
  assert kernels.activation("relu", "fast") is activations.get("relu")
