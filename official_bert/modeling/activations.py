"""The activations that `bert_config.json` names, as Keras functions.

These are Keras's formulas; `kernels.activation(name, kernels)` gives GELU's
fast kernel (the same value, a written-out gradient) for `kernels="fast"`.
"""

import keras

from official_bert import configs


def gelu(x):
  """Exact GELU, x * Phi(x) with the erf form (Hugging Face's "gelu")."""
  return keras.activations.gelu(x, approximate=False)


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
