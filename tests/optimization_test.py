"""Tests for official_bert/training/optimization.py: the schedule and weight decay."""

import keras
import numpy as np
import pytest

from official_bert.training import optimization
from tests import testing


def test_warmup_then_linear_decay_values():
  schedule = optimization.WarmupLinearDecay(1e-3, num_train_steps=100,
                                            warmup_steps=10)
  got = [float(schedule(s)) for s in (0, 5, 9, 10, 55, 100, 150)]
  want = [0.0, 5e-4, 9e-4, 9e-4, 4.5e-4, 0.0, 0.0]
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
  no_warmup = optimization.WarmupLinearDecay(2.0, 4)
  assert [float(no_warmup(s)) for s in range(5)] == [2.0, 1.5, 1.0, 0.5, 0.0]


def test_warmup_longer_than_training_never_peaks_as_the_original():
  # google-research/bert: is_warmup stays 1, so lr = peak * step / warmup.
  schedule = optimization.WarmupLinearDecay(1e-3, 10, 40)
  got = [float(schedule(s)) for s in (0, 4, 10)]
  np.testing.assert_allclose(got, [0.0, 1e-4, 2.5e-4], rtol=1e-6)


def test_schedule_rejects_bad_steps():
  with pytest.raises(ValueError, match="warmup_steps"):
    optimization.WarmupLinearDecay(1e-3, 10, -1)
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.WarmupLinearDecay(1e-3, 0)


@pytest.mark.parametrize("where", ["eager", "tf.function", "XLA",
                                   "strategy"])
def test_adamw_is_the_originals_update_step_by_step(where):
  """Eight unclipped steps with warmup and decay, against the transcription:
  a bias correction (Keras's AdamW: steps 3-5x smaller at first), epsilon
  inside or a decay on the bias each fail it. Outside a strategy the update
  is TensorFlow's fused kernels (eagerly, traced, and compiled by XLA as
  under mixed_float16); under one, `update_step`. The kernels round
  `1 - beta_2` from float32 (1e-5 relative), hence their tolerance."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  strategy = (tf.distribute.OneDeviceStrategy("/cpu:0")
              if where == "strategy" else tf.distribute.get_strategy())
  rng = np.random.default_rng(0)
  steps = 8
  with strategy.scope():
    layer = keras.layers.Dense(5, name="dense")
    layer.build((None, 3))
    variables = layer.trainable_variables
    optimizer = optimization.create_optimizer("adamw", 1e-2, steps, 2)
    optimizer.build(variables)
    assert optimizer.fused_kernels() == (where != "strategy")
  start = {v.path: rng.normal(size=v.shape).astype("float32")
           for v in variables}
  for v in variables:
    v.assign(start[v.path])
  schedule = optimization.WarmupLinearDecay(1e-2, steps, 2)
  grads = [{v.path: (rng.normal(size=v.shape) * 10.0 ** rng.integers(-4, 1)
                     ).astype("float32") for v in variables}
           for _ in range(steps)]
  want = testing.original_adam_weight_decay(
      start, grads, [float(schedule(i)) for i in range(steps)],
      decayed={"dense/kernel"})

  def update(step_grads):
    optimizer.apply(step_grads, variables)
  apply = update
  if where in ("tf.function", "XLA"):
    apply = tf.function(update, jit_compile=where == "XLA")
  elif where == "strategy":
    apply = tf.function(lambda g: strategy.run(update, args=(g,)))
  rtol = 2e-6 if where == "strategy" else 1e-5
  for step in range(steps):
    apply([tf.constant(grads[step][v.path]) for v in variables])
    for v in variables:
      np.testing.assert_allclose(np.asarray(v), want[step][v.path],
                                 rtol=rtol, atol=1e-7,
                                 err_msg=f"{v.path} after step {step + 1}")
  # The point of matching it: Keras's bias-corrected AdamW moves less early.
  keras_adamw = optimization.create_optimizer("keras_adamw", 1e-2, steps, 2)
  for v in variables:
    v.assign(start[v.path])
  keras_adamw.apply([grads[0][v.path] for v in variables], variables)
  keras_adamw.apply([grads[1][v.path] for v in variables], variables)
  ours = np.abs(want[1]["dense/kernel"] - start["dense/kernel"]).mean()
  theirs = np.abs(np.asarray(variables[0]) - start["dense/kernel"]).mean()
  assert ours > 2.0 * theirs, (ours, theirs)


@pytest.mark.parametrize("name", ["adamw", "keras_adamw", "lamb"])
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
  # --adam_epsilon reaches the update, fused kernels included: on the first
  # step m = 0.1 g and sqrt(v) = sqrt(0.001) g, so a gradient of 1e-6 moves
  # a weight by lr * 1e-7 / (3.16e-8 + epsilon): 25x less at 1e-6.
  moved = {}
  for epsilon in (1e-6, 1e-8):
    weight = keras.Variable(np.zeros((2,), "float32"))
    opt = optimization.create_optimizer("adamw", 1e-2, 10, 0, epsilon=epsilon)
    assert opt.epsilon == epsilon
    opt.apply([np.full((2,), 1e-6, "float32")], [weight])
    moved[epsilon] = -float(np.asarray(weight)[0])
  for epsilon, distance in moved.items():
    assert distance == pytest.approx(
        1e-2 * 1e-7 / (np.sqrt(1e-3) * 1e-6 + epsilon), rel=1e-3), epsilon
  scaled = optimization.create_optimizer("lamb", 1e-4, 100, 10,
                                         mixed_precision="mixed_float16")
  assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
  assert isinstance(scaled.inner_optimizer, keras.optimizers.Lamb)
  assert isinstance(optimizer, optimization.AdamWeightDecay)
  keras_adamw = optimization.create_optimizer("keras_adamw", 1e-4, 100, 10)
  assert not isinstance(keras_adamw, optimization.AdamWeightDecay)
  assert isinstance(keras_adamw, keras.optimizers.AdamW)
  with pytest.raises(ValueError, match="adamw"):
    optimization.create_optimizer("sgd", 1e-4, 100)


@pytest.mark.parametrize("name", ["adamw", "keras_adamw", "lamb"])
def test_weight_decay_on_bert_follows_the_original_exclusions(name):
  """On every BertPretrainer weight, by its original name: google-research/
  bert decays all but those matching "LayerNorm", "layer_norm" or "bias"."""
  import re  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  model = pretrainer.BertPretrainer.from_bert_config(testing.tiny_config())
  table = checkpoint_names.original_names(model)
  variables = model.trainable_variables
  assert len(table) == len(variables)  # every weight has an original name
  before = {id(v): v.numpy() + 0.5 for v in variables}  # biases not 0
  for v in variables:
    v.assign(before[id(v)])
  optimizer = optimization.create_optimizer(
      name, learning_rate=0.1, num_train_steps=10, weight_decay=0.5)
  # Zero gradients: Adam/LAMB moves nothing, only decoupled decay acts.
  optimizer.apply([np.zeros(v.shape, "float32") for v in variables], variables)
  decayed = 0
  for original, (variable, _) in table.items():
    if re.search("LayerNorm|layer_norm|bias", original):
      np.testing.assert_array_equal(variable, before[id(variable)],
                                    err_msg=original)
    else:
      np.testing.assert_allclose(variable, before[id(variable)] * 0.95,
                                 rtol=1e-6, err_msg=original)
      decayed += 1
  # word/position/token-type embeddings, 6 kernels per layer, pooler,
  # MLM transform, NSP weights.
  assert decayed == 3 + 6 * testing.LAYERS + 3
