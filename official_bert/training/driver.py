"""The driver every training program shares: strategy to checkpoints.

A program parses its flags, builds one frozen `DriverConfig` from them
(`trainer_flags.driver_config`) and hands it here; nothing below reads
absl flags, so the same run can be built from Python:

    config = DriverConfig(output_dir="/tmp/run", num_train_steps=1000,
                          num_warmup_steps=100, train_batch_size=32)
    driver = Driver(config)                 # the tf.distribute strategy
    driver.build_task(task, bert_config)    # a Task (training/task.py)
    start = driver.restore_or_init()        # resume, or --init_checkpoint
    driver.write_run_files(bert_config)     # flags.json, bert_config.json
    driver.train_steps(dataset_fn)          # None when SIGTERM stopped it
    driver.write_eval_results({"global_step": driver.step, ...})

The set-up, in the order it runs: CPU split into logical devices, the
strategy (and whether XLA can run on it), the batch's split over replicas
and accumulation steps, the seed, the precision policy, the model's kernels,
the model and the optimizer in the strategy's scope, the `Trainer`
(training/trainer.py). Fine-tuning adds its padding, evaluation while
training and prediction on top (training/finetuner.py). Both
pretraining_task.run and finetuner.run_task build their task's model with
`build_task`, train with `train_steps` and write eval_results.txt with
`write_eval_results`.

Errors a user can fix are `cli.Error`s: one sentence naming the flag.
"""

import dataclasses
import json
import os
from typing import Any, Mapping, Optional, Tuple

from official_bert import cli


@dataclasses.dataclass(frozen=True)
class DriverConfig:
  """Everything a training run's set-up needs, with the flags' names.

  output_dir: checkpoints, summaries, flags.json, bert_config.json.
  num_train_steps, num_warmup_steps: the optimizer's schedule (optimizer
    steps; one step = one global batch of train_batch_size examples).
  train_batch_size: the global batch (all replicas and accumulation steps).
  do_train: whether this run trains (the batch's split is checked only then).
  distribution_strategy, num_gpus, num_cpu_devices, tpu, tpu_zone,
    gcp_project: the tf.distribute strategy (training/distribution.py).
  mixed_precision, jit_compile, kernels, seed: precision policy, XLA, the
    model's kernels (modeling/kernels.py), the weights' and data's seed.
  optimizer, learning_rate, weight_decay, adam_epsilon, max_grad_norm: the
    update (training/optimization.py; max_grad_norm 0 = no clipping).
  steps_per_loop, save_checkpoints_steps, keep_checkpoint_max,
    gradient_accumulation_steps: the loop (training/trainer.py).
  init_checkpoint: warm-start weights, when output_dir holds no checkpoint.
  student_layers: fine-tuning a student: the init_checkpoint encoder's
    layers (increasing indices) that the model's smaller encoder keeps, with
    its embeddings and pooler (training/finetuner.py); None: all of them.
  best_metric, eval_every_steps, early_stopping_patience, num_train_epochs,
    dynamic_padding, pad_to_multiple_of, group_by_length, remove_padding:
    fine-tuning's (training/finetuner.py).
  flags: the program's resolved flags, written to flags.json.
  """
  output_dir: str
  num_train_steps: int = 1
  num_warmup_steps: int = 0
  train_batch_size: int = 32
  do_train: bool = True
  # ---- distribution
  distribution_strategy: str = "default"
  num_gpus: Optional[int] = None
  num_cpu_devices: int = 1
  tpu: Optional[str] = None
  tpu_zone: Optional[str] = None
  gcp_project: Optional[str] = None
  # ---- precision, compilation, randomness
  mixed_precision: str = "float32"
  jit_compile: bool = False
  kernels: str = "auto"
  seed: int = 12345
  # ---- the update
  optimizer: str = "adamw"
  learning_rate: float = 5e-5
  weight_decay: float = 0.01
  adam_epsilon: float = 1e-6
  max_grad_norm: float = 1.0
  # ---- where the loop starts, its length and its checkpoints
  init_checkpoint: Optional[str] = None
  student_layers: Optional[Tuple[int, ...]] = None
  steps_per_loop: int = 1000
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  gradient_accumulation_steps: int = 1
  # ---- fine-tuning (training/finetuner.py)
  best_metric: Optional[str] = None
  eval_every_steps: int = 0
  early_stopping_patience: int = 0
  num_train_epochs: float = 1.0
  dynamic_padding: bool = True
  pad_to_multiple_of: Optional[int] = None
  group_by_length: bool = False
  remove_padding: bool = True
  # ---- what flags.json records
  flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def tpu_resolver_args(self):
    """The TPU cluster resolver's zone and project ({} when not given)."""
    return {key: value for key, value in (("zone", self.tpu_zone),
                                          ("project", self.gcp_project))
            if value}


class Driver:
  """A training run's strategy, model, optimizer and trainer (see above).

  Attributes, once `build` ran: strategy, replicas, kernels, model,
  optimizer, trainer, is_chief; start and step, once `restore_or_init` ran:
  the step training starts from, and the model's.
  """

  def __init__(self, config):
    from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
    self.config = config
    if config.num_cpu_devices > 1:
      distribution.split_cpu(config.num_cpu_devices)
    try:
      # Before TensorFlow runs any op: multi-worker collectives must be
      # configured first.
      self.strategy = distribution.get_strategy(
          config.distribution_strategy, config.num_gpus, config.tpu,
          config.tpu_resolver_args())
      distribution.check_jit_compile(self.strategy, config.jit_compile)
    except ValueError as e:
      raise cli.Error(str(e)) from None
    self.replicas = self.strategy.num_replicas_in_sync
    self.model = self.trainer = self.kernels = None
    # A training/task.py InBatchLoss (set by a fine-tuning task whose loss
    # reads the whole batch, before `build`), or None.
    self.in_batch_loss = None
    self.step = self.start = 0
    self._made_dirs = []  # what make_output_dir made, deepest first
    self._written = []

  def is_tpu(self):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return isinstance(self.strategy, tf.distribute.TPUStrategy)

  def build(self, build_model, loss_fn, metric_fn=None,
            transform_gradients=None, remove_padding=False):
    """The model (`build_model(kernels)`), in the strategy's scope, its
    optimizer and the Trainer; `transform_gradients(model)` -> the trainer's
    gradient transform, or None; `remove_padding`: the trainer calls the
    model with `remove_padding=True` (a fine-tuning model's)."""
    import keras  # pylint: disable=g-import-not-at-top
    from official_bert.modeling import kernels as kernels_lib  # pylint: disable=g-import-not-at-top
    from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
    from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
    from official_bert.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    config = self.config
    micro = self.replicas * config.gradient_accumulation_steps
    if config.do_train and config.train_batch_size % micro:
      split = f"{self.replicas} replicas" + (
          f" x --gradient_accumulation_steps="
          f"{config.gradient_accumulation_steps}"
          if config.gradient_accumulation_steps > 1 else "")
      raise cli.Error(f"--train_batch_size={config.train_batch_size} is not "
                      f"divisible by {split}; use a multiple of {micro}.")
    mini = self.in_batch_loss.mini_batch_size if self.in_batch_loss else 0
    if config.do_train and mini and (config.train_batch_size // micro) % mini:
      raise cli.Error(
          f"--mini_batch_size={mini} does not divide the batch each replica "
          f"computes, {config.train_batch_size // micro} (--train_batch_size="
          f"{config.train_batch_size} / {micro}); pass a divisor of it.")
    keras.utils.set_random_seed(config.seed)
    distribution.set_mixed_precision(config.mixed_precision)
    # One model, so training, evaluation and prediction run the same kernels.
    self.kernels = kernels_lib.resolve(config.kernels, config.jit_compile,
                                       self.is_tpu())
    self._build_model = build_model
    with self.strategy.scope():
      self.model = build_model(self.kernels)
      self.optimizer = optimization.create_optimizer(
          config.optimizer, config.learning_rate, config.num_train_steps,
          config.num_warmup_steps, weight_decay=config.weight_decay,
          epsilon=config.adam_epsilon,
          mixed_precision=config.mixed_precision)
    self.trainer = trainer_lib.Trainer(
        self.strategy, self.model, self.optimizer, loss_fn,
        trainer_lib.TrainConfig(
            output_dir=config.output_dir,
            num_train_steps=config.num_train_steps,
            steps_per_loop=config.steps_per_loop,
            save_checkpoints_steps=config.save_checkpoints_steps,
            max_grad_norm=config.max_grad_norm,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            jit_compile=config.jit_compile,
            keep_checkpoints=config.keep_checkpoint_max,
            eval_every_steps=config.eval_every_steps,
            remove_padding=remove_padding,
            in_batch_loss=self.in_batch_loss),
        metric_fn=metric_fn,
        transform_gradients=(transform_gradients(self.model)
                             if transform_gradients else None))
    self.is_chief = self.trainer.is_chief
    return self.model

  def build_task(self, task, bert_config, transform_gradients=None,
                 remove_padding=False):
    """`build` for a task (training/task.py's Task): its model for
    `bert_config`, its losses and its metric counts."""
    return self.build(lambda kernels: task.build_model(bert_config, kernels),
                      task.losses, task.metric_counts,
                      transform_gradients=transform_gradients,
                      remove_padding=remove_padding)

  def describe(self):
    """"R replicas (strategy), precision, P parameters", for the log."""
    return (f"{self.replicas} replicas ({self.config.distribution_strategy}), "
            f"{self.config.mixed_precision}, {self.model.count_params():,} "
            "parameters")

  # ------------------------------------------------ resume or warm start ----
  def resuming(self):
    """The latest checkpoint in output_dir (a rerun resumes it), or None."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.train.latest_checkpoint(self.config.output_dir)

  def check_init_checkpoint(self):
    """--init_checkpoint must resolve when it will be used (not resuming)."""
    from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
    if self.config.init_checkpoint and not self.resuming():
      try:
        checkpoints.resolve(self.config.init_checkpoint)
      except ValueError as e:
        raise cli.Error(f"--init_checkpoint: {e}") from None

  def restore_or_init(self, init_fn=None):
    """Resumes from output_dir, else calls `init_fn()` (default:
    `warm_start`). Returns the step training starts from (also `start`)."""
    self.step = self.start = self.trainer.restore_or_init(
        init_fn=init_fn or self.warm_start)
    return self.start

  def warm_start(self):
    """Loads all of the model's weights from --init_checkpoint (not the
    optimizer, not the step)."""
    from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
    if not self.config.init_checkpoint:
      return
    try:
      prefix = checkpoints.restore_model(self.model,
                                         self.config.init_checkpoint)
    except ValueError as e:
      raise cli.Error(f"--init_checkpoint: {e}") from None
    kind = (" (a TF1 checkpoint with the original variable names)"
            if checkpoints.is_original(prefix) else "")
    print(f"Warm-started the weights from {prefix}{kind}; step 0, fresh "
          "optimizer", flush=True)

  # ------------------------------------------------------------ training ----
  def train_steps(self, dataset_fn, after_loop=None, details=None,
                  first_step=0, stop_at=None):
    """Trains from the current step to num_train_steps (or `stop_at`, a
    part of the run whose data, `dataset_fn`, starts at `first_step`: the
    trainer's `train`) on `dataset_fn` (the trainer's, batches of the
    global train_batch_size) and prints "Trained steps
    START..STEP{details(result)}: " and the training metrics.
    `after_loop`: the trainer's (training/trainer.py). Returns the trainer's
    result, or None when SIGTERM stopped it (the checkpoint is saved: the
    program returns, a rerun resumes)."""
    begin = self.step
    result = self.trainer.train_or_exit(
        dataset_fn, global_batch_size=self.config.train_batch_size,
        after_loop=after_loop, first_step=first_step, stop_at=stop_at)
    self.step = result.step
    if result.preempted:
      return None
    print(f"Trained steps {begin}..{self.step}"
          f"{details(result) if details else ''}: "
          + " ".join(f"{k} {v:.4g}" for k, v in result.metrics.items()),
          flush=True)
    return result

  def write_eval_results(self, result):
    """eval_results.txt on the chief: `key = value` lines, sorted, as the
    original writes them."""
    if self.is_chief:
      self.write("eval_results.txt",
                 "".join(f"{k} = {result[k]}\n" for k in sorted(result)))

  # ----------------------------------------------------------- run files ----
  def make_output_dir(self):
    """Makes output_dir, remembering what it made for `remove_run_files`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    output_dir = self.config.output_dir
    path = os.path.abspath(output_dir)
    while "://" not in output_dir and not os.path.exists(path):
      self._made_dirs.append(path)  # deepest first
      path = os.path.dirname(path)
    tf.io.gfile.makedirs(output_dir)

  def write_run_files(self, bert_config, extra_flags=None, files=None):
    """On the chief: flags.json (the config's flags, num_replicas and
    `extra_flags`), bert_config.json and the program's own `files`
    ({name: text}), in output_dir (made if missing)."""
    self.make_output_dir()
    if not self.is_chief:
      return
    resolved = dict(self.config.flags)
    resolved.update(num_replicas=self.replicas, **(extra_flags or {}))
    self.write("flags.json",
               json.dumps(resolved, indent=2, sort_keys=True) + "\n")
    bert_config.to_json_file(os.path.join(self.config.output_dir,
                                          "bert_config.json"))
    for name, text in (files or {}).items():
      self.write(name, text)
    self._written += ["flags.json", "bert_config.json"] + list(files or {})

  def remove_run_files(self):
    """Undoes write_run_files (and the output_dir it made) unless the
    directory holds checkpoints (a run to resume keeps its files): a run
    stopped by bad input before training leaves nothing behind."""
    if self.resuming():
      return
    for name in self._written:
      path = os.path.join(self.config.output_dir, name)
      if os.path.exists(path):
        os.remove(path)
    for path in self._made_dirs:
      if os.listdir(path):
        break
      os.rmdir(path)

  def write(self, name, text):
    """Writes output_dir/name whole (cli.atomic_write)."""
    cli.atomic_write(os.path.join(self.config.output_dir, name), text)

  def export_model(self, example_inputs):
    """The trained model with kernels="keras", for exports: the fast kernels
    are for training (their forward re-scales the feed-forward kernels on
    every call) and a server may compile the export with XLA. The same
    variables, so the weights are copied; `example_inputs` builds it."""
    if self.kernels == "keras":
      return self.model
    twin = self._build_model("keras")
    twin(example_inputs, training=False)
    twin.set_weights(self.model.get_weights())
    return twin
