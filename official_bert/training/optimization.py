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
  with either restore into the other. The decay is part of the update, as
  in the original (`wd * w` added to the update computed from the gradient,
  with w before the step), not Keras's separate pass over the weights
  before the step: the same sum.

  On TensorFlow outside any distribution strategy (one CPU or GPU: the
  programs' default) the update is TensorFlow's fused kernels: per weight a
  `ResourceApplyGradientDescent` for the decay (w -= lr * wd * w) and a
  `ResourceApplyAdam` with both bias-correction powers at 0 (no
  correction), each one pass over its tensors. Traced in a fraction of the
  time of Keras's per-variable `merge_call`s, and nothing left for XLA to
  fuse (compiling the update took 3-4 s for BERT's 105 weights, for no
  faster a step): `train_step.compiles_update` leaves it uncompiled. The
  kernels compute `m += (g - m) * (1 - beta_1)`, the original `beta_1 * m +
  (1 - beta_1) * g`: the same, to float32 rounding of `1 - beta` (1e-5
  relative for 0.999). Under a strategy, and on other backends,
  `update_step` is the update.
  """

  def fused_kernels(self):
    """Whether `apply` runs TensorFlow's fused kernels (see above)."""
    if keras.backend.backend() != "tensorflow":
      return False
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return not tf.distribute.has_strategy()

  def _apply_weight_decay(self, variables):
    """Nothing: the update decays, as the original does."""

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    if not self.fused_kernels():
      super()._backend_update_step(grads, trainable_variables, learning_rate)
      return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    scalars = {}  # per dtype, made once: not ~5 constants per weight
    for grad, variable in zip(grads, trainable_variables):
      if isinstance(variable, keras.Variable):
        variable = variable.value
      index = self._get_variable_index(variable)
      dtype = variable.dtype
      if dtype not in scalars:
        lr = tf.cast(learning_rate, dtype)
        scalars[dtype] = dict(
            lr=lr, beta1_power=tf.zeros([], dtype),
            beta2_power=tf.zeros([], dtype),
            beta1=tf.cast(self.beta_1, dtype),
            beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype)), lr * self.weight_decay
      adam, decay_rate = scalars[dtype]
      # Dense, as the original's update makes a sparse gradient.
      grad = tf.cast(tf.convert_to_tensor(grad), dtype)
      if self._decays(variable):
        tf.raw_ops.ResourceApplyGradientDescent(
            var=variable.handle, alpha=decay_rate,
            delta=variable.read_value())
      tf.raw_ops.ResourceApplyAdam(
          var=variable.handle, m=self._momentums[index].value.handle,
          v=self._velocities[index].value.handle, grad=grad, **adam)

  def _decays(self, variable):
    """Whether `variable` gets weight decay (not LayerNorm, not biases)."""
    return bool(self.weight_decay) and self._use_weight_decay(variable)

  def update_step(self, gradient, variable, learning_rate):
    lr = keras.ops.cast(learning_rate, variable.dtype)
    gradient = keras.ops.cast(gradient, variable.dtype)
    index = self._get_variable_index(variable)
    m, v = self._momentums[index], self._velocities[index]
    self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
    self.assign(v, self.beta_2 * v +
                (1.0 - self.beta_2) * keras.ops.square(gradient))
    update = m / (keras.ops.sqrt(v) + self.epsilon)
    if self._decays(variable):
      update = update + self.weight_decay * variable
    self.assign_sub(variable, lr * update)


class PreReducedAdamWeightDecay(_PreReduced, AdamWeightDecay):
  """AdamWeightDecay fed gradients the trainer already all-reduced."""


class PreReducedAdamW(_PreReduced, keras.optimizers.AdamW):
  """keras.optimizers.AdamW fed gradients the trainer already all-reduced."""


class PreReducedLamb(_PreReduced, keras.optimizers.Lamb):
  """keras.optimizers.Lamb fed gradients the trainer already all-reduced."""


def create_optimizer(name, learning_rate, num_train_steps, num_warmup_steps=0,
                     weight_decay=0.01, mixed_precision="float32",
                     epsilon=1e-6):
  """BERT's optimizer with its learning-rate schedule.

  Args:
    name: "adamw" (the original's update), "keras_adamw" or "lamb".
    learning_rate: peak learning rate (after warmup).
    num_train_steps: steps to decay the rate to 0 over.
    num_warmup_steps: steps of linear warmup.
    weight_decay: decoupled weight-decay rate (0.01 in BERT).
    epsilon: added to sqrt(v) before bias correction (1e-6 in BERT; see the
      module docstring).
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
                  beta_1=0.9, beta_2=0.999, epsilon=epsilon, name=name)
  optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
  if mixed_precision == "mixed_float16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer


def current_learning_rate(optimizer):
  """The rate the next update uses, as a Python float."""
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  rate = inner.learning_rate
  return float(keras.ops.convert_to_numpy(rate))
