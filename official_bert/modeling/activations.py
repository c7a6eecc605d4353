"""The activations that `bert_config.json` names, as Keras functions."""

import math

import keras
from keras import ops

from official_bert import configs
from official_bert.modeling import gradients

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu(x):
  """Exact GELU, x * Phi(x) with the erf form (Hugging Face's "gelu").

  The value is `keras.activations.gelu(x, approximate=False)`'s. The gradient
  is written out, Phi(x) + x * phi(x), reusing the forward's Phi(x):
  automatic differentiation of the erf form makes more element-wise passes
  over the [B, T, intermediate] activations, the encoder's largest tensors.
  A BERT-Mini training step on CPU is about 5% faster with it. Code traced
  within `gradients.keras_formulas()` gets Keras's GELU and automatic
  differentiation.
  """
  if not gradients.written_out():
    return keras.activations.gelu(x, approximate=False)
  return _gelu_written_out_gradient(x)


@gradients.custom_gradient
def _gelu_written_out_gradient(x):
  cdf = 0.5 * ops.erfc(x * -_SQRT_HALF)  # Phi(x), accurate in the left tail

  def grad(upstream):
    pdf = ops.exp(ops.square(x) * -0.5) * _INV_SQRT_2PI  # phi(x)
    return upstream * (cdf + x * pdf)

  return x * cdf, grad


def gelu_approximate(x):
  """Tanh approximation of GELU, as google-research/bert's TF code computes."""
  return keras.activations.gelu(x, approximate=True)


_BY_NAME = {
    "gelu": gelu,
    "gelu_new": gelu_approximate,
    "gelu_approximate": gelu_approximate,
    "relu": keras.activations.relu,
    "swish": keras.activations.silu,
    "silu": keras.activations.silu,
}
assert set(_BY_NAME) == set(configs.ACTIVATIONS)


def get(name):
  """Returns the activation function for a `hidden_act` name."""
  if name not in _BY_NAME:
    raise ValueError(f"hidden_act {name!r} is not one of "
                     f"{', '.join(configs.ACTIVATIONS)}")
  return _BY_NAME[name]
