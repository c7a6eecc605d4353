"""Helpers for the model's written-out gradients.

Several functions here (GELU, LayerNorm, the feed-forward network, the
masked-LM scores) have their gradients written by hand: automatic
differentiation makes more passes over the activations than needed, and on
CPU those element-wise passes are a large part of a training step.
"""

import contextlib

from keras import ops


_written_out = True


def written_out():
  """Whether the layers use their written-out versions (not in `keras_formulas()`)."""
  return _written_out


@contextlib.contextmanager
def keras_formulas():
  """Within it, the layers trace Keras's formulas and automatic differentiation.

  That is GELU, the feed-forward network and dropout. For code that XLA
  compiles: XLA fuses their element-wise passes by itself, and on CPU the
  written-out versions ran slower under it (a BERT-Mini step ~6% slower with
  the written-out GELU; the 16-bit dropout draws several hundred times
  slower). It acts when a model's call is traced.
  """
  global _written_out
  previous, _written_out = _written_out, False
  try:
    yield
  finally:
    _written_out = previous


def custom_gradient(forward):
  """`keras.ops.custom_gradient` with one calling convention for the gradient.

  `forward(*inputs)` returns `(outputs, grad)` and `grad(upstream)` returns
  the gradients of the inputs, in order. TensorFlow passes the upstream
  gradient positionally and JAX by keyword; this takes either.
  """

  @ops.custom_gradient
  def wrapped(*inputs):
    outputs, grad = forward(*inputs)

    def backend_grad(*args, upstream=None):
      if upstream is None:
        (upstream,) = args
      return grad(upstream)

    return outputs, backend_grad

  return wrapped


def sum_rows(x):
  """Sums a [..., H] tensor over every axis but the last, as a matmul.

  A [1, N] x [N, H] product with a row of ones: on CPU it took a quarter to a
  half of the time of a reduction over the leading axis (which is what the
  gradient of a bias or of LayerNorm's gamma and beta needs). Within
  `keras_formulas()` it is that reduction, which XLA runs the faster.
  """
  if not _written_out:
    return ops.sum(x, axis=tuple(range(len(x.shape) - 1)))
  rows = ops.reshape(x, (-1, x.shape[-1]))
  ones = ops.ones((1, ops.shape(rows)[0]), rows.dtype)
  return ops.matmul(ones, rows)[0]
