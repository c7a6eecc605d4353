"""BERT's optimisation: the original's AdamW or LAMB, linear warmup then decay.

As google-research/bert's `optimization.py`:

    lr(step) = peak * step / warmup                      step <  warmup
    lr(step) = peak * (1 - step / num_train_steps)       step >= warmup

(the original multiplies the decayed rate by the warmup fraction only while
warming up; both pieces meet at `peak * (1 - warmup / num_train_steps)`.)

    optimizer = optimization.create_optimizer(
        "adamw", learning_rate=1e-4, num_train_steps=1000, num_warmup_steps=100)

"adamw" (the default of every program) is the original's
`AdamWeightDecayOptimizer`: beta 0.9/0.999, epsilon 1e-6, decoupled weight
decay 0.01, and **no bias correction**:

    m = 0.9 m + 0.1 g;  v = 0.999 v + 0.001 g^2
    w -= lr * (m / (sqrt(v) + 1e-6) + 0.01 w)

Its first steps are therefore several times larger than bias-corrected
Adam's (m/sqrt(v) starts near 0.1/sqrt(0.001) = 3.2 per coordinate), and the
paper's fine-tuning rates (2e-5 to 5e-5) were tuned for exactly that update.
"keras_adamw" is Keras's AdamW (bias-corrected, epsilon added to the
uncorrected sqrt(v)), the usual modern update. "lamb": Keras's LAMB with the
same settings and the layer-wise trust ratio (You et al., 2019), for large
batches. All skip weight decay on LayerNorm (`gamma`, `beta`) and biases, as
the original.

Gradients are *not* clipped or all-reduced by these optimizers: `trainer.py`
sums them across replicas once, clips them by the global norm of the summed
gradient (the same on 1 or N replicas), then calls `optimizer.apply`. The
`_PreReduced` classes therefore skip Keras's own per-replica all-reduce.
"""

import keras

# Variable names (Keras `variable.name`) that get no weight decay: the
# LayerNorm scale/offset and every bias (`bias`, `output_bias`).
NO_DECAY_NAMES = ("gamma", "beta", "bias")
OPTIMIZERS = ("adamw", "keras_adamw", "lamb")


@keras.saving.register_keras_serializable(package="official_bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to 0.

  Args:
    peak: the learning rate reached at the end of warmup.
    num_train_steps: step at which the rate reaches 0 (stays 0 after).
    warmup_steps: steps of linear warmup (0 = none).
  """

  def __init__(self, peak, num_train_steps, warmup_steps=0):
    if num_train_steps <= 0:
      raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
    if warmup_steps < 0:  # > num_train_steps: never peaks, as the original
      raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    self.peak = float(peak)
    self.num_train_steps = int(num_train_steps)
    self.warmup_steps = int(warmup_steps)

  def __call__(self, step):
    step = keras.ops.cast(step, "float32")
    decayed = self.peak * keras.ops.maximum(
        0.0, 1.0 - step / float(self.num_train_steps))
    if self.warmup_steps == 0:
      return decayed
    warm = self.peak * step / float(self.warmup_steps)
    return keras.ops.where(step < float(self.warmup_steps), warm, decayed)

  def get_config(self):
    return {"peak": self.peak, "num_train_steps": self.num_train_steps,
            "warmup_steps": self.warmup_steps}


class _PreReduced:
  """Mixin: gradients arrive already summed over replicas (by the trainer)."""

  def _all_reduce_sum_gradients(self, grads_and_vars):
    return list(grads_and_vars)


@keras.saving.register_keras_serializable(package="official_bert")
class AdamWeightDecay(keras.optimizers.AdamW):
  """google-research/bert's `AdamWeightDecayOptimizer`: Adam without bias
  correction, plus decoupled weight decay (see the module docstring).

  Keras's AdamW with its update step replaced: the same variables (a
  momentum and a velocity per weight, `iterations`), so checkpoints written
  with either restore into the other. Keras applies the decay `w -= lr * wd
  * w` before the step; the original adds `wd * w` to the update computed
  from the gradient alone, the same sum.
  """

  def update_step(self, gradient, variable, learning_rate):
    lr = keras.ops.cast(learning_rate, variable.dtype)
    gradient = keras.ops.cast(gradient, variable.dtype)
    index = self._get_variable_index(variable)
    m, v = self._momentums[index], self._velocities[index]
    self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
    self.assign(v, self.beta_2 * v +
                (1.0 - self.beta_2) * keras.ops.square(gradient))
    self.assign_sub(variable,
                    lr * m / (keras.ops.sqrt(v) + self.epsilon))


class PreReducedAdamWeightDecay(_PreReduced, AdamWeightDecay):
  """AdamWeightDecay fed gradients the trainer already all-reduced."""


class PreReducedAdamW(_PreReduced, keras.optimizers.AdamW):
  """keras.optimizers.AdamW fed gradients the trainer already all-reduced."""


class PreReducedLamb(_PreReduced, keras.optimizers.Lamb):
  """keras.optimizers.Lamb fed gradients the trainer already all-reduced."""


def create_optimizer(name, learning_rate, num_train_steps, num_warmup_steps=0,
                     weight_decay=0.01, mixed_precision="float32"):
  """BERT's optimizer with its learning-rate schedule.

  Args:
    name: "adamw" (the original's update), "keras_adamw" or "lamb".
    learning_rate: peak learning rate (after warmup).
    num_train_steps: steps to decay the rate to 0 over.
    num_warmup_steps: steps of linear warmup.
    weight_decay: decoupled weight-decay rate (0.01 in BERT).
    mixed_precision: "mixed_float16" wraps the optimizer in
      `keras.optimizers.LossScaleOptimizer` (dynamic loss scaling); other
      policies need none.

  Returns:
    A Keras optimizer, built on first `apply`. Its `iterations` counts
    applied updates; the schedule reads it, so restoring the optimizer from
    a checkpoint resumes the learning-rate schedule.
  """
  if name not in OPTIMIZERS:
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
  schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
  cls = {"adamw": PreReducedAdamWeightDecay, "keras_adamw": PreReducedAdamW,
         "lamb": PreReducedLamb}[name]
  optimizer = cls(learning_rate=schedule, weight_decay=weight_decay,
                  beta_1=0.9, beta_2=0.999, epsilon=1e-6, name=name)
  optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
  if mixed_precision == "mixed_float16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer


def current_learning_rate(optimizer):
  """The rate the next update uses, as a Python float."""
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  rate = inner.learning_rate
  return float(keras.ops.convert_to_numpy(rate))
