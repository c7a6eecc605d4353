"""The custom training loop every official_bert trainer shares.

Model Garden's split: an inner loop of `steps_per_loop` steps runs inside one
`tf.function` (`strategy.run` per step), an outer Python loop logs, writes
summaries and checkpoints. Works under any tf.distribute strategy, including
MultiWorkerMirroredStrategy, where Keras 3 `fit()` does not.

API (build the model and the optimizer under `strategy.scope()`):

    trainer = Trainer(strategy, model, optimizer, loss_fn,
                      TrainConfig(output_dir="out", num_train_steps=1000),
                      metric_fn=metric_fn)
    start = trainer.restore_or_init(init_fn=None)   # resume, or warm-start
    result = trainer.train(dataset_fn)              # TrainResult
    sums = trainer.evaluate(eval_dataset_fn, eval_fn, max_steps=100)

  model(inputs, training=True) -> outputs (any structure).
  loss_fn(labels, outputs) -> dict of float32 scalars with key "loss" (the
    per-replica mean loss; the trainer divides by the number of replicas and
    accumulation steps, so the update is the mean over the global batch).
  metric_fn(labels, outputs) -> dict of float32 sums; `X_correct`/`X_total`
    pairs are summed over replicas and steps and logged as `X_accuracy`.
  dataset_fn(input_context) -> per-replica dataset of (inputs, labels), for
    `strategy.distribute_datasets_from_function`; its batch is the global
    batch / (replicas * gradient_accumulation_steps). Training datasets must
    repeat and be deterministic for a given seed: a resumed run skips the
    batches already consumed, so it sees the same data as an uninterrupted run.
  eval_fn(labels, outputs) -> dict of float32 sums, summed over the eval set.

One step: forward/backward on each of `gradient_accumulation_steps`
micro-batches, gradients summed over micro-batches and replicas (one
all-reduce), clipped by their global norm (`max_grad_norm`, the same on 1 or
N replicas), applied by the optimizer (a `LossScaleOptimizer` under
mixed_float16 unscales and skips non-finite steps). The losses and metrics
are compiled with XLA (except on TPUs, which compile everything): it fuses
the softmax cross-entropy, its gradient and the accuracy's pass over the
[B, P, V] logits. With a single replica the update (clipping and optimizer)
is compiled too, which fuses its element-wise passes. `jit_compile` also
compiles the forward and backward passes (one device per process; under
multi_worker_mirrored the update stays uncompiled, as the optimizer's
cross-replica `merge_call` cannot run in XLA).

Checkpoints (`tf.train.CheckpointManager`, `ckpt-<step>` in output_dir) hold
`model`, `optimizer` (its variables: iterations, slots, loss scale), `step`
and `rng` (dropout seed states): the project format of `checkpoints.py`. They are
written every `save_checkpoints_steps`, at the end, and after the current
inner loop when the process gets SIGTERM. A rerun with the same output_dir
resumes the step, the optimizer slots (and so the learning-rate schedule).
SIGTERM reaching only one worker of a multi-worker job stops them all: at each
loop boundary the workers sum their SIGTERM flags (one small all-reduce), so
all save the same checkpoint and return together. A SIGTERM that arrived
before training (`preemption.install()` records it from the program's start)
stops all workers at their first boundary, before the first step.
A non-finite loss stops training with `NonFiniteLossError`, leaving the last
good checkpoint as the latest.
"""

import dataclasses
import functools
import os
import shutil
import sys
import time

import numpy as np
import tensorflow as tf

from official_bert.training import distribution
from official_bert.training import preemption


class NonFiniteLossError(RuntimeError):
  """The training loss became NaN or Inf."""


@dataclasses.dataclass
class TrainConfig:
  """How long to train and how often to log and save.

  output_dir: checkpoints (ckpt-N), TensorBoard summaries (train/, eval/).
  num_train_steps: optimizer steps in total (one step = one global batch).
  steps_per_loop: steps per tf.function call, between two progress lines.
  save_checkpoints_steps: checkpoint every this many steps (and at the end).
  max_grad_norm: clip the gradient's global norm to this (0 = no clipping).
  gradient_accumulation_steps: micro-batches per step.
  jit_compile: compile the step with XLA.
  keep_checkpoints: checkpoints kept (older ones deleted).
  """
  output_dir: str
  num_train_steps: int
  steps_per_loop: int = 1000
  save_checkpoints_steps: int = 1000
  max_grad_norm: float = 1.0
  gradient_accumulation_steps: int = 1
  jit_compile: bool = False
  keep_checkpoints: int = 5


@dataclasses.dataclass
class TrainResult:
  """What `train` did: the step reached, the last loop's metrics, and every
  loop's metrics (with `step` and `seconds`) in `history`."""
  step: int
  metrics: dict
  preempted: bool = False
  history: list = dataclasses.field(default_factory=list)


def accuracies(sums):
  """{X_correct, X_total} sums -> {X_accuracy}; other keys pass through."""
  result = {}
  for key, value in sums.items():
    if key.endswith("_total"):
      continue
    if key.endswith("_correct"):
      prefix = key[:-len("_correct")]
      total = sums.get(prefix + "_total", 0.0)
      result[prefix + "_accuracy"] = float(value) / max(float(total), 1e-12)
    else:
      result[key] = float(value)
  return result


class Trainer:
  """Runs, checkpoints and resumes training (see the module docstring)."""

  def __init__(self, strategy, model, optimizer, loss_fn, config,
               metric_fn=None, log=print):
    distribution.check_jit_compile(strategy, config.jit_compile)
    if config.num_train_steps <= 0:
      raise ValueError(f"num_train_steps must be positive, got "
                       f"{config.num_train_steps}")
    self.strategy = strategy
    self.model = model
    self.optimizer = optimizer
    self.loss_fn = loss_fn
    self.metric_fn = metric_fn or (lambda labels, outputs: {})
    self.config = config
    self.log = log
    self.is_chief = distribution.is_chief(strategy)
    with strategy.scope():
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
      # Slots exist before any restore, so it restores them at once.
      optimizer.build(model.trainable_variables)
    # The optimizer edge holds its own variables (iterations, slots, loss
    # scale) but not the optimizer object: that one also tracks the model's
    # variables, and a checkpoint names each variable by its shortest path,
    # which would put the weights under optimizer/ instead of model/.
    # `rng` holds the dropout seed generators' states, so a resumed run draws
    # the same dropout masks as an uninterrupted one.
    weights = {id(v) for v in model.weights}
    seed_states = [v for v in model.variables if id(v) not in weights]
    self.checkpoint = tf.train.Checkpoint(
        model=model, optimizer=tf.train.Checkpoint(
            variables=list(optimizer.variables)), step=self.step,
        rng=tf.train.Checkpoint(states=seed_states))
    self._checkpoint_dir = config.output_dir
    if not self.is_chief:
      # Every worker must take part in a save; only the chief's is kept.
      self._checkpoint_dir = os.path.join(
          config.output_dir, f".worker_{strategy.cluster_resolver.task_id}")
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self._checkpoint_dir,
        max_to_keep=config.keep_checkpoints, checkpoint_name="ckpt")
    preemption.install()  # programs install it earlier; tests and notebooks here
    self._terminate_sum = None  # a tf.function, built on first use
    self._train_loop = None  # a tf.function, built by the first train()

  # ------------------------------------------------------- checkpoints ----
  def restore_or_init(self, init_fn=None):
    """Resumes from output_dir's latest checkpoint, else calls `init_fn()`.

    `init_fn` warm-starts the weights (e.g. `--init_checkpoint`); it is not
    called on resume, since the checkpoint holds newer weights. Returns the
    step training starts from.
    """
    latest = tf.train.latest_checkpoint(self.config.output_dir)
    if latest:
      self.checkpoint.read(latest).assert_existing_objects_matched()
      self.log(f"Resumed from {latest} at step {int(self.step.numpy())}")
    elif init_fn is not None:
      init_fn()
    return int(self.step.numpy())

  def save(self):
    step = int(self.step.numpy())
    path = self.manager.save(checkpoint_number=step)
    if not self.is_chief:
      shutil.rmtree(self._checkpoint_dir, ignore_errors=True)
    return path

  # -------------------------------------------------------- train step ----
  def _losses_and_metrics(self, labels, outputs):
    return self.loss_fn(labels, outputs), self.metric_fn(labels, outputs)

  def _replica_grads(self, batches, losses_and_metrics):
    """Per replica: summed gradients and losses/metrics of the micro-batches."""
    variables = self.model.trainable_variables
    scale = 1.0 / (self.strategy.num_replicas_in_sync * len(batches))
    grads, loss_sums, metric_sums = None, {}, {}
    for inputs, labels in batches:
      with tf.GradientTape() as tape:
        outputs = self.model(inputs, training=True)
        losses, metrics = losses_and_metrics(labels, outputs)
        scaled = self.optimizer.scale_loss(losses["loss"] * scale)
      step_grads = tape.gradient(scaled, variables)
      step_grads = [tf.convert_to_tensor(g) for g in step_grads]
      grads = step_grads if grads is None else [
          a + b for a, b in zip(grads, step_grads)]
      for key, value in losses.items():
        loss_sums[key] = loss_sums.get(key, 0.0) + value / len(batches)
      for key, value in metrics.items():
        metric_sums[key] = metric_sums.get(key, 0.0) + value
    return grads, loss_sums, metric_sums

  def _apply(self, grads):
    """Clips the (all-reduced) gradients by global norm and applies them."""
    if self.config.max_grad_norm > 0:
      limit = self.config.max_grad_norm
      dynamic_scale = getattr(self.optimizer, "dynamic_scale", None)
      if dynamic_scale is not None:  # grads are still multiplied by it
        limit = limit * tf.cast(tf.convert_to_tensor(dynamic_scale), tf.float32)
      grads, _ = tf.clip_by_global_norm(grads, limit)
    self.optimizer.apply(grads, self.model.trainable_variables)

  def _make_train_loop(self):
    strategy = self.strategy
    accumulation = self.config.gradient_accumulation_steps
    losses_and_metrics = self._losses_and_metrics
    xla_compiles_model = self.config.jit_compile or _is_tpu(strategy)
    if not xla_compiles_model:
      # Fuses the passes over the logits (see the module docstring); on CPU
      # a BERT-Mini step was ~8% faster with it.
      losses_and_metrics = tf.function(losses_and_metrics, jit_compile=True,
                                       autograph=False)
    replica_grads = functools.partial(self._replica_grads,
                                      losses_and_metrics=losses_and_metrics)
    apply = self._apply
    if self.config.jit_compile:
      replica_grads = tf.function(replica_grads, jit_compile=True)
    if _compile_update(strategy):
      apply = tf.function(apply, jit_compile=True)

    # Autograph only for the tf.range loop: converting the model and the
    # Keras optimizer's Python would multiply the tracing time.
    @tf.autograph.experimental.do_not_convert
    def replica_step(batches):
      grads, losses, metrics = replica_grads(batches)
      if strategy.num_replicas_in_sync > 1:
        grads = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, grads)
      apply(grads)
      return losses, metrics

    def reduce(per_replica, op):
      return {k: strategy.reduce(op, v, axis=None)
              for k, v in per_replica.items()}

    @tf.function
    def train_loop(iterator, num_steps):
      losses, metrics = self._zero_sums()
      for _ in tf.range(num_steps):
        batches = [next(iterator) for _ in range(accumulation)]
        step_losses, step_metrics = strategy.run(replica_step, args=(batches,))
        step_losses = reduce(step_losses, tf.distribute.ReduceOp.MEAN)
        step_metrics = reduce(step_metrics, tf.distribute.ReduceOp.SUM)
        losses = {k: losses[k] + step_losses[k] for k in losses}
        metrics = {k: metrics[k] + step_metrics[k] for k in metrics}
        self.step.assign_add(1)
      return losses, metrics

    return train_loop

  def _zero_sums(self):
    """Zeros with the keys of loss_fn/metric_fn (found by tracing them)."""
    return ({k: tf.zeros(()) for k in self._loss_keys},
            {k: tf.zeros(()) for k in self._metric_keys})

  def _trace_keys(self, element_spec):
    """Finds loss_fn's and metric_fn's keys on a symbolic batch."""
    inputs_spec, labels_spec = element_spec
    keys = {}

    @tf.function(autograph=False)
    def probe(inputs, labels):
      outputs = self.model(inputs, training=False)
      keys["loss"] = sorted(self.loss_fn(labels, outputs))
      keys["metric"] = sorted(self.metric_fn(labels, outputs))
      return 0

    probe.get_concrete_function(inputs_spec, labels_spec)
    self._loss_keys, self._metric_keys = keys["loss"], keys["metric"]

  # ------------------------------------------------------------- train ----
  def train_or_exit(self, dataset_fn, global_batch_size=None):
    """`train` for command-line programs: a NaN/Inf loss is one line on
    stderr and exit status 1 (the last good checkpoint stays)."""
    try:
      return self.train(dataset_fn, global_batch_size=global_batch_size)
    except NonFiniteLossError as e:
      print(f"Error: {e}", file=sys.stderr)
      sys.exit(1)

  def train(self, dataset_fn, global_batch_size=None):
    """Trains from the current step to num_train_steps. Returns TrainResult."""
    config = self.config
    start = int(self.step.numpy())
    accumulation = config.gradient_accumulation_steps
    skip = start * accumulation

    def skipping_dataset_fn(input_context):
      # Deterministic, repeated data: skipping the consumed batches puts a
      # resumed run where an uninterrupted one would be.
      return dataset_fn(input_context).skip(skip)

    dataset = self.strategy.distribute_datasets_from_function(
        skipping_dataset_fn)
    per_replica_spec = dataset.element_spec
    self._trace_keys(tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape, s.dtype),
        _local_spec(per_replica_spec)))
    iterator = iter(dataset)
    if self._train_loop is None:  # a second train() call does not retrace
      self._train_loop = self._make_train_loop()
    train_loop = self._train_loop
    writer = self._summary_writer("train")
    preemption.install()
    step, metrics = start, {}
    if start >= config.num_train_steps:
      self.log(f"Already at step {start} >= num_train_steps="
               f"{config.num_train_steps}; nothing to train.")
      return TrainResult(step=start, metrics={})
    if self._any_worker_terminating():  # SIGTERM while the job started up
      self.log(f"SIGTERM before training started: stopped at step {start} "
               f"with nothing new to save{_consume_sigterm()}; rerun with "
               "the same --output_dir to go on.")
      return TrainResult(step=start, metrics={}, preempted=True)
    t_start, steps_done, history = time.time(), 0, []
    while step < config.num_train_steps:
      next_save = (step // config.save_checkpoints_steps + 1) * (
          config.save_checkpoints_steps)
      num_steps = min(config.steps_per_loop, config.num_train_steps - step,
                      next_save - step)
      t0 = time.time()
      losses, sums = train_loop(iterator, tf.constant(num_steps, tf.int32))
      elapsed = time.time() - t0
      step = int(self.step.numpy())
      steps_done += num_steps
      metrics = {k: float(v) / num_steps for k, v in losses.items()}
      metrics.update(accuracies({k: float(v) for k, v in sums.items()}))
      if not all(np.isfinite(v) for v in metrics.values()):
        raise NonFiniteLossError(
            f"training loss became non-finite ({_fmt(metrics)}) between steps "
            f"{step - num_steps} and {step}; stopped without saving, the last "
            f"good checkpoint is {tf.train.latest_checkpoint(config.output_dir)}"
            "; lower --learning_rate or check the data.")
      metrics["learning_rate"] = _learning_rate(self.optimizer)
      rate = None
      if global_batch_size:
        metrics["sequences_per_second"] = rate = (
            global_batch_size * num_steps / max(elapsed, 1e-9))
      history.append(dict(metrics, step=step, seconds=elapsed))
      eta = (time.time() - t_start) / steps_done * (
          config.num_train_steps - step)
      shown = {k: v for k, v in metrics.items()
               if k != "sequences_per_second"}
      self.log(f"step {step}/{config.num_train_steps} {_fmt(shown)} "
               f"{'' if rate is None else f'{rate:.1f} seq/s '}"
               f"ETA {_hms(eta)}")
      if writer is not None:
        with writer.as_default(step=step):
          for key, value in metrics.items():
            tf.summary.scalar(key, value)
        writer.flush()
      # Every worker takes the same decision here: a save is collective.
      terminate = self._any_worker_terminating()
      finished = step >= config.num_train_steps
      if step % config.save_checkpoints_steps == 0 or finished or terminate:
        path = self.save()
        if self.is_chief:
          self.log(f"Saved checkpoint {path}")
      if terminate and not finished:
        self.log(f"SIGTERM: saved checkpoint "
                 f"{os.path.join(config.output_dir, f'ckpt-{step}')} at step "
                 f"{step}{_consume_sigterm()}; rerun with the same "
                 "--output_dir to resume.")
        return TrainResult(step=step, metrics=metrics, preempted=True,
                           history=history)
    return TrainResult(step=step, metrics=metrics, history=history)

  # ---------------------------------------------------------- evaluate ----
  def evaluate(self, dataset_fn, eval_fn, max_steps=None):
    """Sums `eval_fn(labels, outputs)` over the eval data (≤ max_steps batches)."""
    dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
    strategy = self.strategy

    @tf.function(autograph=False)
    def eval_step(batch):
      def replica_fn(inputs, labels):
        return eval_fn(labels, self.model(inputs, training=False))
      sums = strategy.run(replica_fn, args=batch)
      return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
              for k, v in sums.items()}

    totals, steps = {}, 0
    for batch in dataset:
      if max_steps is not None and steps >= max_steps:
        break
      for key, value in eval_step(batch).items():
        totals[key] = totals.get(key, 0.0) + float(value)
      steps += 1
    totals["eval_steps"] = steps
    return totals

  # ------------------------------------------------------------ helpers ----
  def _summary_writer(self, name):
    if not self.is_chief:
      return None
    return tf.summary.create_file_writer(
        os.path.join(self.config.output_dir, name))

  def _any_worker_terminating(self):
    """True when any worker got SIGTERM (each worker asks at the same step).

    A signal reaches one machine of a multi-worker job (a preempted VM):
    that worker alone would start a checkpoint save the others never join,
    and hang. So the local flags are summed over all replicas of all
    workers, and all of them save and stop at the same loop boundary.
    """
    if self.strategy.num_replicas_in_sync == 1:
      return preemption.requested()
    if self._terminate_sum is None:
      strategy = self.strategy

      @tf.function(autograph=False)
      def terminate_sum(flag):
        def replica_fn(flag):
          # identity: a copy on this replica's device (the reduction needs one)
          return tf.distribute.get_replica_context().all_reduce(
              tf.distribute.ReduceOp.SUM, tf.identity(flag))
        return strategy.experimental_local_results(
            strategy.run(replica_fn, args=(flag,)))[0]
      self._terminate_sum = terminate_sum
    flag = tf.constant(1.0 if preemption.requested() else 0.0)
    return float(self._terminate_sum(flag)) > 0


def _consume_sigterm():
  """Forgets the SIGTERM a train() stops on; says where it came from."""
  here = preemption.requested()
  preemption.clear()
  return "" if here else " (signal on another worker)"


def _compile_update(strategy):
  """Whether the update (clipping + optimizer) runs under XLA.

  XLA fuses the element-wise passes of the global norm, the clipping and
  AdamW/LAMB over all the weights into a few loops; on CPU that makes a
  BERT-Mini step a few percent faster. Only with a single replica: with
  several, the Keras optimizer synchronises replicas (`merge_call`), which a
  nested compiled function cannot do, and TPUs compile everything anyway.
  """
  return strategy.num_replicas_in_sync == 1 and not _is_tpu(strategy)


def _is_tpu(strategy):
  return isinstance(strategy, tf.distribute.TPUStrategy)


def _local_spec(spec):
  """Per-replica TypeSpec -> the spec of one replica's batch."""
  def one(s):
    if hasattr(s, "_value_specs"):  # PerReplicaSpec
      return s._value_specs[0]  # pylint: disable=protected-access
    return s
  return tf.nest.map_structure(one, spec)


def _learning_rate(optimizer):
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  return float(np.asarray(inner.learning_rate))


def _fmt(metrics):
  return " ".join(f"{k} {v:.4g}" for k, v in metrics.items())


def _hms(seconds):
  seconds = int(max(0, seconds))
  return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
