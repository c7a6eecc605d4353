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

What one step does and what XLA compiles: `train_step.py`. The checkpoint
layout (`model`, `optimizer`, `step`, `rng`; `ckpt-<step>` in output_dir):
`checkpoints.training_checkpoint`. Checkpoints are written every
`save_checkpoints_steps`, at the end, and after the current inner loop when
any worker gets SIGTERM (`preemption.WorkerAgreement`: all workers save the
same checkpoint and return together; a SIGTERM that arrived before training
stops all of them at their first boundary, before the first step). A rerun
with the same output_dir resumes the step, the optimizer slots (and so the
learning-rate schedule) and the dropout seeds. A non-finite loss stops
training with `NonFiniteLossError`, leaving the last good checkpoint as the
latest.

This module imports no model code: the program that builds the model chooses
its kernels; the trainer traces whatever the model is.
"""

import dataclasses
import os
import sys
import time
import typing

import numpy as np
import tensorflow as tf

from official_bert.training import checkpoints
from official_bert.training import distribution
from official_bert.training import preemption
from official_bert.training import train_step


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
  eval_every_steps: inner loops also end at multiples of this (and
    `train`'s `after_loop` runs there and at the end); 0 = never.
  remove_padding: call the model with `remove_padding=True` (the fine-tuning
    models: their position-wise work on the tokens only, modeling/packing.py;
    a shape XLA cannot compile, so not with jit_compile).
  in_batch_loss: a training/task.py InBatchLoss (the loss scores each
    example against the whole batch: candidates gathered across replicas,
    GradCache with its mini_batch_size; train_step.py), or None.
  """
  output_dir: str
  num_train_steps: int
  steps_per_loop: int = 1000
  save_checkpoints_steps: int = 1000
  max_grad_norm: float = 1.0
  gradient_accumulation_steps: int = 1
  jit_compile: bool = False
  keep_checkpoints: int = 5
  eval_every_steps: int = 0
  remove_padding: bool = False
  in_batch_loss: typing.Any = None


@dataclasses.dataclass
class TrainResult:
  """What `train` did: the step reached, the last loop's metrics, and every
  loop's metrics (with `step` and `seconds`) in `history`; `early_stopped`
  when `after_loop` stopped it."""
  step: int
  metrics: dict
  preempted: bool = False
  history: list = dataclasses.field(default_factory=list)
  early_stopped: bool = False


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
               metric_fn=None, log=print, transform_gradients=None):
    distribution.check_jit_compile(strategy, config.jit_compile)
    if config.remove_padding and (config.jit_compile
                                  or train_step.is_tpu(strategy)):
      raise ValueError("remove_padding gives tensors of data-dependent "
                       "shape, which XLA cannot compile: not with "
                       "jit_compile or on TPUs")
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
    # fn(grads, variables, step) -> grads, on the all-reduced gradients
    # before clipping (e.g. extension.freeze_rows); None: unchanged.
    self.transform_gradients = transform_gradients
    self.is_chief = distribution.is_chief(strategy)
    with strategy.scope():
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
      # Slots exist before any restore, so it restores them at once.
      optimizer.build(model.trainable_variables)
    self.checkpoints = checkpoints.TrainingCheckpoints(
        checkpoints.training_checkpoint(model, optimizer, self.step),
        config.output_dir, max_to_keep=config.keep_checkpoints,
        worker_id=(None if self.is_chief
                   else strategy.cluster_resolver.task_id))
    self._preemption = preemption.WorkerAgreement(strategy)
    self._train_loop = None  # a tf.function, built by the first train()

  # ------------------------------------------------------- checkpoints ----
  def restore_or_init(self, init_fn=None):
    """Resumes from output_dir's latest checkpoint, else calls `init_fn()`.

    `init_fn` warm-starts the weights (e.g. `--init_checkpoint`); it is not
    called on resume, since the checkpoint holds newer weights. Returns the
    step training starts from.
    """
    latest = self.checkpoints.restore_latest()
    if latest:
      self.log(f"Resumed from {latest} at step {int(self.step.numpy())}")
    elif init_fn is not None:
      init_fn()
    return int(self.step.numpy())

  def save(self):
    """Writes ckpt-<step> (every worker must call it: the save is collective)."""
    return self.checkpoints.save(int(self.step.numpy()))

  # ------------------------------------------------------------- train ----
  def train_or_exit(self, dataset_fn, global_batch_size=None,
                    after_loop=None, first_step=0, stop_at=None):
    """`train` for command-line programs: a NaN/Inf loss is one line on
    stderr and exit status 1 (the last good checkpoint stays)."""
    try:
      return self.train(dataset_fn, global_batch_size=global_batch_size,
                        after_loop=after_loop, first_step=first_step,
                        stop_at=stop_at)
    except NonFiniteLossError as e:
      print(f"Error: {e}", file=sys.stderr)
      sys.exit(1)

  def train(self, dataset_fn, global_batch_size=None, after_loop=None,
            first_step=0, stop_at=None):
    """Trains from the current step to num_train_steps. Returns TrainResult.

    `stop_at` < num_train_steps ends the call there, with a checkpoint (a
    part of the run: the learning rate's schedule stays the whole run's);
    `dataset_fn`'s first batch is then step `first_step`'s (a resumed run
    skips to the current step from there).

    A SIGTERM during the call stops it at the next loop boundary with a
    checkpoint; unless the program installed the handler for its whole run,
    the signal then has its usual effect (`preemption.handled()`).
    `after_loop(step) -> (metrics to show, stop)` runs at every multiple of
    eval_every_steps and at the last step, before the progress line (which
    shows its metrics); `stop` ends training there with a checkpoint.
    """
    with preemption.handled():
      return self._train(dataset_fn, global_batch_size, after_loop,
                         first_step, stop_at or self.config.num_train_steps)

  def _train(self, dataset_fn, global_batch_size, after_loop, first_step,
             end):
    config = self.config
    start = step = int(self.step.numpy())
    if start >= end:
      self.log(f"Already at step {start} >= "
               + (f"num_train_steps={end}" if end == config.num_train_steps
                  else f"this part's last step {end}")
               + "; nothing to train.")
      return TrainResult(step=start, metrics={})
    iterator = self._iterator(dataset_fn, start - first_step)
    writer = self._summary_writer("train")
    if self._preemption.any_requested():  # SIGTERM while the job started up
      self.log(f"SIGTERM before training started: stopped at step {start} "
               f"with nothing new to save{self._preemption.consume()}; rerun "
               "with the same --output_dir to go on.")
      return TrainResult(step=start, metrics={}, preempted=True)
    t_start, history, timed_from = time.time(), [], start
    while step < end:
      metrics = self._run_loop(iterator, self._loop_length(step, end),
                               global_batch_size, warm_up=not history)
      timed_steps = metrics.pop("timed_steps")
      step = metrics["step"]
      if not history:  # the ETA counts from the first timed step
        t_start, timed_from = time.time() - metrics["seconds"], step - timed_steps
      finished = step >= config.num_train_steps
      stop = False
      if after_loop is not None and (finished or (
          config.eval_every_steps and step % config.eval_every_steps == 0)):
        shown, stop = after_loop(step)
        metrics.update(shown)
      history.append(metrics)
      self._report(metrics, t_start, timed_from, writer)
      # Every worker takes the same decision here: a save is collective.
      terminate = self._preemption.any_requested()
      if stop and not finished:
        finished = True
        path = self.save()
        if self.is_chief:
          self.log(f"Saved checkpoint {path}")
        return TrainResult(step, _last_metrics(history), False, history, True)
      if (step % config.save_checkpoints_steps == 0 or step >= end
          or terminate):
        path = self.save()
        if self.is_chief:
          self.log(f"Saved checkpoint {path}")
      if terminate and not finished:  # a part's end too: the run goes on
        self.log(f"SIGTERM: saved checkpoint "
                 f"{os.path.join(config.output_dir, f'ckpt-{step}')} at step "
                 f"{step}{self._preemption.consume()}; rerun with the same "
                 "--output_dir to resume.")
        return TrainResult(step, _last_metrics(history), True, history)
    return TrainResult(step, _last_metrics(history), False, history)

  def _iterator(self, dataset_fn, start):
    """An iterator over the training data from its step `start` on (its
    first batch is step 0's); builds the inner loop on the first call."""
    skip = start * self.config.gradient_accumulation_steps

    def skipping_dataset_fn(input_context):
      # Deterministic, repeated data: skipping the consumed batches puts a
      # resumed run where an uninterrupted one would be.
      return dataset_fn(input_context).skip(skip)

    dataset = self.strategy.distribute_datasets_from_function(
        skipping_dataset_fn)
    if self._train_loop is None:  # a second train() call does not retrace
      self._train_loop = train_step.make_train_loop(
          self.strategy, self.model, self.optimizer, self.loss_fn,
          self.metric_fn, self.step, train_step.StepOptions(
              self.config.gradient_accumulation_steps,
              self.config.max_grad_norm, self.config.jit_compile,
              self.config.remove_padding, self.config.in_batch_loss),
          transform_gradients=self.transform_gradients)
    return iter(dataset)

  def _loop_length(self, step, end):
    """Steps of the next inner loop: up to steps_per_loop, ending at the next
    checkpoint step or `end`."""
    config = self.config
    next_save = (step // config.save_checkpoints_steps + 1) * (
        config.save_checkpoints_steps)
    length = min(config.steps_per_loop, end - step, next_save - step)
    if config.eval_every_steps:
      every = config.eval_every_steps
      length = min(length, (step // every + 1) * every - step)
    return length

  def _run_loop(self, iterator, num_steps, global_batch_size, warm_up=False):
    """Runs one inner loop; its mean losses, accuracies, learning rate, rate,
    `step`, `seconds` and `timed_steps`. With `warm_up` the first step runs
    untimed: tracing and compiling would make the first rate and ETA several
    times too pessimistic. Raises NonFiniteLossError on a NaN/Inf."""
    first = None
    if warm_up and num_steps > 1:
      first = self._train_loop(iterator, tf.constant(1, tf.int32))
    timed = num_steps - (first is not None)
    t0 = time.time()
    losses, sums = self._train_loop(iterator, tf.constant(timed, tf.int32))
    elapsed = time.time() - t0
    if first is not None:
      losses = {k: v + first[0][k] for k, v in losses.items()}
      sums = {k: v + first[1][k] for k, v in sums.items()}
    step = int(self.step.numpy())
    metrics = {k: float(v) / num_steps for k, v in losses.items()}
    metrics.update(accuracies({k: float(v) for k, v in sums.items()}))
    if not all(np.isfinite(v) for v in metrics.values()):
      raise NonFiniteLossError(
          f"training loss became non-finite ({_fmt(metrics)}) between steps "
          f"{step - num_steps} and {step}; stopped without saving, the last "
          f"good checkpoint is {self.checkpoints.latest()}"
          "; lower --learning_rate or check the data.")
    metrics["learning_rate"] = _learning_rate(self.optimizer)
    if global_batch_size:
      metrics["sequences_per_second"] = (
          global_batch_size * timed / max(elapsed, 1e-9))
    return dict(metrics, step=step, seconds=elapsed, timed_steps=timed)

  def _report(self, metrics, t_start, start, writer):
    """The progress line (losses, rate, ETA) and the TensorBoard scalars."""
    step, total = metrics["step"], self.config.num_train_steps
    eta = (time.time() - t_start) / (step - start) * (total - step)
    rate = metrics.get("sequences_per_second")
    shown = {k: v for k, v in _last_metrics([metrics]).items()
             if k != "sequences_per_second"}
    self.log(f"step {step}/{total} {_fmt(shown)} "
             f"{'' if rate is None else f'{rate:.1f} seq/s '}"
             f"ETA {_hms(eta)}")
    if writer is not None:
      with writer.as_default(step=step):
        for key, value in _last_metrics([metrics]).items():
          tf.summary.scalar(key, value)
      writer.flush()

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

  def _summary_writer(self, name):
    if not self.is_chief:
      return None
    return tf.summary.create_file_writer(
        os.path.join(self.config.output_dir, name))


def _last_metrics(history):
  """The last loop's metrics without its `step` and `seconds` ({} if none)."""
  if not history:
    return {}
  return {k: v for k, v in history[-1].items() if k not in ("step", "seconds")}


def _learning_rate(optimizer):
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  return float(np.asarray(inner.learning_rate))


def _fmt(metrics):
  return " ".join(f"{k} {v:.4g}" for k, v in metrics.items())


def _hms(seconds):
  seconds = int(max(0, seconds))
  return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
