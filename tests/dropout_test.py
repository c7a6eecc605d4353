"""Tests for official_bert/modeling/dropout.py (the 16-bit draws)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import dropout


def _fast(*args, **kwargs):
  return dropout.Dropout(*args, kernels="fast", **kwargs)


def _drop(layer, x):
  """Output and input gradient (upstream 1) of a training call."""
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x, training=True)
    total = tf.reduce_sum(tf.cast(y, tf.float32))
  return y.numpy(), tape.gradient(total, x).numpy()


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_rate_and_expected_value(rate):
  x = tf.fill((64, 4, 32, 32), 3.0)  # 262144 elements
  y, grad = _drop(_fast(rate, seed=1), x)
  dropped = np.mean(y == 0)
  # Binomial standard deviation ~0.001 for rate 0.5: 6 sigma bounds.
  assert abs(dropped - rate) < 0.006
  kept = y[y != 0]
  np.testing.assert_allclose(kept, 3.0 / (1 - round(rate * 65536) / 65536),
                             rtol=1e-6)
  assert abs(y.mean() / 3.0 - 1) < 0.015
  # The gradient is the same mask and scale.
  np.testing.assert_allclose(grad, y / 3.0, rtol=1e-6)


def test_halves_of_one_draw_are_independent():
  # Neighbours come from the two halves of one int32: were they correlated,
  # pairs would be dropped together more (or less) often than rate^2.
  y, _ = _drop(_fast(0.5, seed=2), tf.ones((512, 256)))
  pairs = (y == 0).reshape(-1, 2)
  both = np.mean(pairs[:, 0] & pairs[:, 1])
  assert abs(both - 0.25) < 0.006


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 9), (4, 1)])
def test_odd_last_axis(shape):
  y, grad = _drop(_fast(0.5, seed=3), tf.ones(shape))
  assert y.shape == shape
  assert set(np.unique(y)) <= {0.0, 2.0}
  np.testing.assert_array_equal(grad, y)


def test_seeded_layers_repeat_and_calls_differ():
  x = tf.ones((8, 64))
  a, b = _fast(0.3, seed=7), _fast(0.3, seed=7)
  first = a(x, training=True).numpy()
  np.testing.assert_array_equal(first, b(x, training=True).numpy())
  assert not np.array_equal(first, a(x, training=True).numpy())


def test_inference_rate_zero_and_rate_one():
  x = tf.constant(np.random.default_rng(0).normal(size=(4, 6)), tf.float32)
  np.testing.assert_array_equal(_fast(0.5)(x), x)
  np.testing.assert_array_equal(_fast(0.0)(x, training=True), x)
  np.testing.assert_array_equal(_fast(1.0)(x, training=True), 0 * x)


def test_noise_shape_is_keras_dropout():
  y = _fast(0.5, noise_shape=(None, 1), seed=4)(
      tf.ones((16, 10)), training=True).numpy()
  # Keras's semantics: one draw per row, broadcast along the row.
  assert all(len(set(row)) == 1 for row in y)
  assert set(np.unique(y)) <= {0.0, 2.0}


@pytest.mark.parametrize("jit_compile", [False, True])
def test_keras_kernels_draw_the_same_mask(jit_compile):
  x = tf.ones((16, 33))  # odd last axis: the last pair's high half unused
  outputs = []
  for kernels in ("fast", "keras"):
    layer = dropout.Dropout(0.3, seed=9, kernels=kernels)
    outputs.append(tf.function(lambda x, layer=layer: layer(x, training=True),
                               jit_compile=jit_compile)(x).numpy())
  np.testing.assert_array_equal(outputs[0], outputs[1])
  # Not Keras's own draws (a float32 per element) from the same seed.
  assert not np.array_equal(
      outputs[1], keras.layers.Dropout(0.3, seed=9)(x, training=True).numpy())


@pytest.mark.parametrize("jit_compile", [False, True])
def test_unknown_last_axis_gets_the_16_bit_draws(jit_compile):
  # Attention's probabilities in a graph traced for any padded length: the
  # last axis is unknown when the layer is called. Its mask is the 16-bit
  # draws too (kept at the rounded rate, no float32 draw per element), the
  # same with either kernels, and differs from call to call.
  x = tf.fill((64, 4, 7, 33), 3.0)  # 59136 elements, 33: not whole rows of 16
  spec = tf.TensorSpec((None, 4, None, None), tf.float32)
  outputs = []
  for kernels in ("fast", "keras"):
    layer = dropout.Dropout(0.3, seed=11, kernels=kernels)

    @tf.function(input_signature=[spec], jit_compile=jit_compile)
    def step(x, layer=layer):
      with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        total = tf.reduce_sum(y * 2.0)
      return y, tape.gradient(total, x)

    y, grad = (t.numpy() for t in step(x))
    assert y.shape == x.shape
    assert abs(np.mean(y == 0) - 0.3) < 0.012  # ~6 sigma
    np.testing.assert_allclose(y[y != 0], 3.0 / (1 - 19661 / 65536),
                               rtol=1e-6)
    np.testing.assert_allclose(grad, 2.0 * y / 3.0, rtol=1e-6)
    assert not np.array_equal(y, step(x)[0].numpy())
    traced = step.get_concrete_function().graph.get_operations()
    assert not [op.type for op in traced if op.type.startswith(
        "StatelessRandomUniform") and not op.type.endswith("IntV2")], kernels
    outputs.append(y)
  np.testing.assert_array_equal(outputs[0], outputs[1])


def test_mixed_precision_dtype():
  layer = _fast(0.1, seed=5, dtype="mixed_bfloat16")
  y = layer(tf.ones((4, 32), tf.bfloat16), training=True)
  assert y.dtype == tf.bfloat16
  scale = tf.cast(tf.constant(65536 / 58982, tf.bfloat16), tf.float32)
  assert set(np.unique(tf.cast(y, tf.float32))) <= {0.0, float(scale)}


def test_xla_compiles_the_mask_and_its_gradient():
  layer = _fast(0.25, seed=6)

  @tf.function(jit_compile=True)
  def step(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      y = layer(x, training=True)
      total = tf.reduce_sum(y * 2.0)
    return y, tape.gradient(total, x)

  y, grad = step(tf.ones((32, 128)))
  assert abs(np.mean(y.numpy() == 0) - 0.25) < 0.03
  np.testing.assert_allclose(grad, 2.0 * y.numpy(), rtol=1e-6)


def test_checkpoints_are_those_with_keras_dropout(tmp_path):
  # Replacing Keras's layer in a model changes none of its checkpoint keys.
  keys = []
  for layer in (keras.layers.Dropout(0.1), _fast(0.1)):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), layer])
    model(tf.ones((2, 4)), training=True)
    path = tf.train.Checkpoint(model=model).write(
        str(tmp_path / type(layer).__module__ / "ckpt"))
    keys.append([name for name, _ in tf.train.list_variables(path)])
  assert keys[0] == keys[1]
  assert len(keys[0]) == 3  # the object graph, the kernel and the bias


def test_saves_and_loads_as_itself(tmp_path):
  model = keras.Sequential([keras.Input((8,)), _fast(0.2)])
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.saving.load_model(path)
  assert type(loaded.layers[0]) is dropout.Dropout
  assert loaded.layers[0].rate == 0.2
  assert loaded.layers[0].kernels == "fast"
