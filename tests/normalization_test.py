"""Tests for official_bert/modeling/normalization.py (the written-out gradient:
kernels="fast")."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import normalization


def _pair(shape, policy="float32", **kwargs):
  """Ours and Keras's layer, built on `shape` with the same random weights."""
  rng = np.random.default_rng(0)
  ours = normalization.LayerNormalization(epsilon=1e-12, dtype=policy,
                                          kernels="fast", **kwargs)
  reference = keras.layers.LayerNormalization(epsilon=1e-12, dtype=policy,
                                              **kwargs)
  for layer in (ours, reference):
    layer.build(shape)
  for a, b in zip(ours.weights, reference.weights):
    value = rng.normal(size=a.shape).astype("float32")
    a.assign(value)
    b.assign(value)
  return ours, reference


def _value_and_grads(layer, x, upstream):
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x)
    total = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
  return [y] + tape.gradient(total, [x] + layer.trainable_weights)


@pytest.mark.parametrize("shape", [(3, 5, 16), (7, 16)])
def test_value_and_gradients_match_keras(shape):
  rng = np.random.default_rng(1)
  # An offset mean and a large scale: the backward's mean terms matter.
  x = tf.constant(rng.normal(size=shape) * 4 + 3, tf.float32)
  upstream = tf.constant(rng.normal(size=shape), tf.float32)
  ours, reference = _pair(shape)
  for a, b in zip(_value_and_grads(ours, x, upstream),
                  _value_and_grads(reference, x, upstream)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_mixed_precision_statistics_in_float32():
  shape = (4, 8, 32)
  rng = np.random.default_rng(2)
  x = tf.constant(rng.normal(size=shape) + 100.0, tf.bfloat16)
  upstream = tf.constant(rng.normal(size=shape), tf.float32)
  ours, reference = _pair(shape, policy="mixed_bfloat16")
  got = _value_and_grads(ours, x, upstream)
  want = _value_and_grads(reference, x, upstream)
  assert got[0].dtype == tf.bfloat16 and got[1].dtype == tf.bfloat16
  assert got[2].dtype == tf.float32  # gamma's gradient, like the variable
  for a, b in zip(got, want):
    np.testing.assert_allclose(tf.cast(a, tf.float32), tf.cast(b, tf.float32),
                               rtol=2e-2, atol=2e-2)


def test_other_axes_use_keras():
  shape = (3, 6, 4)
  x = tf.constant(np.random.default_rng(3).normal(size=shape), tf.float32)
  upstream = tf.ones(shape)
  ours, reference = _pair(shape, axis=1)
  for a, b in zip(_value_and_grads(ours, x, upstream),
                  _value_and_grads(reference, x, upstream)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_saves_and_loads_as_itself(tmp_path):
  ours, _ = _pair((2, 8))
  model = keras.Sequential([keras.Input((8,)), ours])
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.saving.load_model(path)
  assert type(loaded.layers[0]) is normalization.LayerNormalization
  assert loaded.layers[0].kernels == "fast"
  x = np.random.default_rng(4).normal(size=(2, 8)).astype("float32")
  np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6, atol=1e-6)
