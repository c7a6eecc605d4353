"""Tests for official_bert/optimization.py: the schedule and weight decay."""

import keras
import numpy as np
import pytest

from official_bert import optimization


def test_warmup_then_linear_decay_values():
  schedule = optimization.WarmupLinearDecay(1e-3, num_train_steps=100,
                                            warmup_steps=10)
  got = [float(schedule(s)) for s in (0, 5, 9, 10, 55, 100, 150)]
  want = [0.0, 5e-4, 9e-4, 9e-4, 4.5e-4, 0.0, 0.0]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
  no_warmup = optimization.WarmupLinearDecay(2.0, 4)
  assert [float(no_warmup(s)) for s in range(5)] == [2.0, 1.5, 1.0, 0.5, 0.0]


def test_schedule_rejects_bad_steps():
  with pytest.raises(ValueError, match="warmup_steps"):
    optimization.WarmupLinearDecay(1e-3, 10, 11)
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.WarmupLinearDecay(1e-3, 0)


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_weight_decay_skips_layer_norm_and_bias(name):
  layer = keras.layers.Dense(3, name="dense")
  layer.build((None, 2))
  norm = keras.layers.LayerNormalization(name="layer_norm")
  norm.build((None, 3))
  variables = layer.trainable_variables + norm.trainable_variables
  for v in variables:
    v.assign(np.full(v.shape, 2.0, "float32"))
  optimizer = optimization.create_optimizer(
      name, learning_rate=0.1, num_train_steps=10, weight_decay=0.5)
  # Zero gradients: Adam/LAMB moves nothing, only decoupled decay acts.
  optimizer.apply([np.zeros(v.shape, "float32") for v in variables], variables)
  after = {v.path: float(np.asarray(v)[(0,) * len(v.shape)]) for v in variables}
  assert after["dense/kernel"] == pytest.approx(2.0 * (1 - 0.1 * 0.5))
  for path in ("dense/bias", "layer_norm/gamma", "layer_norm/beta"):
    assert after[path] == 2.0, path


def test_hyperparameters_and_loss_scaling():
  optimizer = optimization.create_optimizer("adamw", 1e-4, 100, 10)
  assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (
      0.9, 0.999, 1e-6)
  assert optimizer.weight_decay == 0.01
  scaled = optimization.create_optimizer("lamb", 1e-4, 100, 10,
                                         mixed_precision="mixed_float16")
  assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
  assert isinstance(scaled.inner_optimizer, keras.optimizers.Lamb)
  with pytest.raises(ValueError, match="adamw"):
    optimization.create_optimizer("sgd", 1e-4, 100)
