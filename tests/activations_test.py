"""Tests for official_bert/modeling/activations.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import activations
from official_bert import configs
from official_bert.modeling import gradients


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
    ours = activations.gelu(x)
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
    y = activations.gelu(x)
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


def test_keras_formulas_give_keras_gelu_inside_and_restore_outside():
  x = tf.constant(_points())
  with gradients.keras_formulas():
    with gradients.keras_formulas():
      pass
    inside = activations.gelu(x)  # still inside after the nested exit
  np.testing.assert_array_equal(
      inside, keras.activations.gelu(x, approximate=False))
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = activations.gelu(x)
  assert gradients.written_out()
  np.testing.assert_allclose(y, inside, rtol=1e-6, atol=1e-7)
  assert tape.gradient(y, x).shape == x.shape
