"""Tests for official_bert/modeling/gradients.py."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from official_bert.modeling import gradients


@pytest.mark.parametrize("shape", [(7, 5), (3, 4, 6), (1, 9)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sum_rows_is_the_sum_over_leading_axes(shape, dtype):
  x = np.random.default_rng(0).normal(size=shape).astype("float32")
  got = gradients.sum_rows(tf.constant(x, dtype))
  assert got.dtype == dtype and got.shape == (shape[-1],)
  tolerance = 1e-5 if dtype == "float32" else 5e-2
  np.testing.assert_allclose(tf.cast(got, tf.float32),
                             x.reshape(-1, shape[-1]).sum(0),
                             rtol=tolerance, atol=tolerance)


def test_sum_rows_within_keras_formulas():
  x = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
  with gradients.keras_formulas():
    assert not gradients.written_out()
    got = gradients.sum_rows(tf.constant(x))
  assert gradients.written_out()
  np.testing.assert_allclose(got, x.sum((0, 1)), rtol=1e-5, atol=1e-5)


def test_custom_gradient_passes_the_upstream_gradient():

  @gradients.custom_gradient
  def cube(x, y):
    # Deliberately not the true gradient of x**3 * y: shows it is used.
    return x ** 3 * y, lambda upstream: (upstream * 10.0, upstream * -1.0)

  x, y = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
  with tf.GradientTape() as tape:
    tape.watch([x, y])
    value = cube(x, y)
  np.testing.assert_allclose(value, [3.0, 32.0])
  dx, dy = tape.gradient(value, [x, y], output_gradients=tf.constant([1.0, 2.0]))
  np.testing.assert_allclose(dx, [10.0, 20.0])
  np.testing.assert_allclose(dy, [-1.0, -2.0])
  assert ops.is_tensor(dx)
