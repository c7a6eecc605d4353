"""What the fine-tuning programs share: flags, checks, model set-up, the loop.

`run_classifier.py`, `run_ner.py` and `run_squad.py` (and any task program)
define their own data flags and then:

    finetuning.define_flags(max_seq_length=128, learning_rate=5e-5)
    ...
    def main(argv):
      preemption.install()
      cpu_allocator.use_bfc()
      finetuning.check_flags(data_paths={"task_data_dir": "dir"})
      ... read and check the task's files (no TensorFlow yet) ...
      config, tokenizer = finetuning.load_config_and_vocab()
      run = finetuning.Run(
          lambda kernels: Model.from_bert_config(config, n, kernels=kernels),
                           loss_fn, metric_fn, num_train_examples)
      run.write_run_files(config, {"label_list.json": "..."})
      run.restore_or_warm_start()         # resume, or --init_checkpoint
      if FLAGS.do_train and not run.train(train_inputs, train_labels,
                                          evaluate):  # dev metrics of a step
        return                            # SIGTERM: saved, rerun resumes
      logits = run.predict(dev_inputs, batch_size)
      run.write_eval_results({...})       # eval_results.txt

Each batch is padded only to its longest example (--dynamic_padding,
training/padding.py); with --eval_every_steps the best checkpoint by
--best_metric is kept in output_dir/best (training/best_checkpoint.py) and
used for evaluation, prediction and export once training ends.

The flags are google-research/bert's (same names and defaults: the
program passes its own defaults, as run_squad's max_seq_length=384), plus the
pretraining trainer's: --distribution_strategy, --mixed_precision,
--jit_compile, resume from --output_dir (see training/trainer.py).
Every bad value is an `app.UsageError` sentence naming the flag and the fix.
"""

import json
import os
import sys
import time

from absl import app
from absl import flags

from official_bert import cli
from official_bert import tpu_flags
from official_bert import trainer_flags

FLAGS = flags.FLAGS


def define_flags(max_seq_length=128, learning_rate=5e-5, train_batch_size=32,
                 predict_batch_size=8, do_eval=True, export_help=None):
  """The original's fine-tuning flags and the trainer's, with per-program
  defaults (defined only when a program runs)."""
  flags.DEFINE_string("bert_config_file", None, "The bert_config.json of the "
                      "pretrained model.")
  flags.DEFINE_string("vocab_file", None, "The vocab.txt of the pretrained "
                      "model.")
  flags.DEFINE_string("output_dir", None, "Where checkpoints and results go.")
  flags.DEFINE_string("init_checkpoint", None, "Pretrained (or converted) "
                      "checkpoint, a prefix or a directory; its encoder is "
                      "loaded, the task head starts fresh.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased "
                    "models).")
  flags.DEFINE_integer("max_seq_length", max_seq_length, "Tokens per packed "
                       "example; longer ones are truncated or windowed.")
  flags.DEFINE_bool("do_train", False, "Whether to fine-tune on train.")
  if do_eval:
    flags.DEFINE_bool("do_eval", False, "Whether to evaluate on dev.")
  flags.DEFINE_bool("do_predict", False, "Whether to predict on test.")
  flags.DEFINE_integer("train_batch_size", train_batch_size, "Global "
                       "training batch size.")
  if do_eval:
    flags.DEFINE_integer("eval_batch_size", 8, "Batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", predict_batch_size, "Batch size "
                       "for predict.")
  flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training "
                     "file.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the steps with "
                     "linear learning-rate warmup.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval.")
  # ---- shared with run_pretraining.py: distribution, precision, loop
  trainer_flags.define(steps_per_loop=100, keep_checkpoint_max=2)
  flags.DEFINE_string("export_dir", None, export_help or "If set, export the "
                      "fine-tuned model for TF Serving here.")
  # ---- padding (training/padding.py) and evaluation while training
  flags.DEFINE_bool("dynamic_padding", True, "Pad each batch only to its "
                    "longest example (rounded up to --pad_to_multiple_of) "
                    "instead of --max_seq_length; results are the same.")
  flags.DEFINE_integer("pad_to_multiple_of", None, "Bucket width of "
                       "--dynamic_padding (default 8, 32 with --jit_compile: "
                       "one XLA compilation per bucket).")
  flags.DEFINE_bool("group_by_length", False, "Batch examples of similar "
                    "length together (Hugging Face's group_by_length): less "
                    "padding, less random batches.")
  flags.DEFINE_integer("eval_every_steps", 0, "Evaluate on the dev set every "
                       "this many steps and keep the best checkpoint in "
                       "output_dir/best (0: evaluate only at the end).")
  flags.DEFINE_string("best_metric", None, "The eval_results.txt metric that "
                      "picks the best checkpoint (default the task's: "
                      "eval_accuracy, eval_pearson, f1); lower is better "
                      "for names ending in loss or mse.")
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop after this many "
                       "evaluations without a better --best_metric (0: "
                       "never).")


def _modes():
  return [m for m in ("do_train", "do_eval", "do_predict") if m in FLAGS]


def check_flags(data_paths=None, mode_paths=None):
  """The flag errors one sentence can explain, before TensorFlow starts.

  Args:
    data_paths: {flag name: "dir" or "file"} of the program's own input
      paths (required, and must be that kind).
    mode_paths: {mode flag: (flag name, "dir" or "file")}: input paths
      required only when their mode is set (run_squad's --do_train needs
      --train_file).
  """
  tpu_flags.apply(FLAGS)
  modes = _modes()
  if not any(getattr(FLAGS, m) for m in modes):
    raise app.UsageError("At least one of "
                         + ", ".join(f"--{m}" for m in modes)
                         + " must be set.")
  kinds = dict(data_paths or {})
  for mode, (name, kind) in (mode_paths or {}).items():
    if getattr(FLAGS, mode):
      if not getattr(FLAGS, name):
        raise app.UsageError(f"--{mode} needs --{name}.")
      kinds[name] = kind
  kinds.update(bert_config_file="file", vocab_file="file")
  for name in list(kinds) + ["output_dir"]:
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  for name, kind in kinds.items():
    check_path(f"--{name}", getattr(FLAGS, name), kind)
  check_output_dir("--output_dir", FLAGS.output_dir)
  if FLAGS.init_checkpoint and cli.blocked_by(FLAGS.init_checkpoint):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  if FLAGS.export_dir and os.path.isfile(FLAGS.export_dir):
    raise app.UsageError(f"--export_dir {FLAGS.export_dir} is a file; pass "
                         "a directory (the model's base path).")
  sizes = ["train_batch_size", "predict_batch_size", "save_checkpoints_steps",
           "steps_per_loop", "max_seq_length", "num_cpu_devices"]
  if FLAGS.pad_to_multiple_of is not None:
    sizes.append("pad_to_multiple_of")
  for name in ("eval_every_steps", "early_stopping_patience"):
    if getattr(FLAGS, name) < 0:
      raise app.UsageError(f"--{name} must be 0 or more, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.early_stopping_patience and not FLAGS.eval_every_steps:
    raise app.UsageError("--early_stopping_patience needs --eval_every_steps "
                         "(the evaluations it counts).")
  for name in sizes + (["eval_batch_size"] if "eval_batch_size" in FLAGS
                       else []):
    if getattr(FLAGS, name) <= 0:
      raise app.UsageError(f"--{name} must be positive, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.num_train_epochs <= 0:
    raise app.UsageError("--num_train_epochs must be positive, got "
                         f"{FLAGS.num_train_epochs}.")
  if not 0 <= FLAGS.warmup_proportion < 1:
    raise app.UsageError("--warmup_proportion must be in [0, 1), got "
                         f"{FLAGS.warmup_proportion}.")


def check_path(flag, path, kind):
  """`path` exists, is a `kind` ("file" or "dir") and is readable."""
  if not os.path.exists(path):
    blocked = cli.blocked_by(path)
    if blocked:
      raise app.UsageError(f"{flag} {path} cannot be reached: {blocked} is "
                           "not readable; fix its permissions.")
    raise app.UsageError(f"{flag} {path} does not exist.")
  if kind == "dir" and not os.path.isdir(path):
    raise app.UsageError(f"{flag} {path} is a file; pass the directory that "
                         "holds the task's files.")
  if kind == "file" and os.path.isdir(path):
    raise app.UsageError(f"{flag} {path} is a directory; pass the file.")
  if not os.access(path, os.R_OK | (os.X_OK if kind == "dir" else 0)):
    raise app.UsageError(f"{flag} {path} is not readable; fix its "
                         "permissions.")


def check_output_dir(flag, path):
  """`path` is, or can be made as, a directory we can write to (it is made
  only when the run starts writing, so bad input leaves nothing behind)."""
  if os.path.exists(path) and not os.path.isdir(path):
    raise app.UsageError(f"{flag} {path} is a file; pass a directory.")
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise app.UsageError(f"{flag} {path} cannot be made: {existing} is a "
                         "file; pass a directory path.")
  if not os.access(existing, os.W_OK | os.X_OK):
    raise app.UsageError(f"{flag} {path} is not writable ({existing}); pass "
                         "a writable directory.")


def load_config_and_vocab():
  """(BertConfig, FullTokenizer) of --bert_config_file and --vocab_file,
  checked against each other and --max_seq_length. Imports TensorFlow
  (`cli.start_tensorflow`: without its start-up lines), so the programs call
  it after checking their data files."""
  cli.start_tensorflow()
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  try:
    config = configs.BertConfig.from_json_file(FLAGS.bert_config_file,
                                               "--bert_config_file")
  except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
    raise app.UsageError(str(e))
  try:
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file,
                                           FLAGS.do_lower_case)
  except (ValueError, UnicodeDecodeError) as e:
    raise app.UsageError(f"--vocab_file {FLAGS.vocab_file}: {e}")
  if tokenizer.vocab_size > config.vocab_size:
    raise app.UsageError(
        f"--vocab_file {FLAGS.vocab_file} has {tokenizer.vocab_size} tokens, "
        f"more than vocab_size={config.vocab_size} of "
        f"{FLAGS.bert_config_file}; pass the model's own vocab.txt.")
  if FLAGS.max_seq_length > config.max_position_embeddings:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} exceeds max_position_"
        f"embeddings={config.max_position_embeddings} of "
        f"{FLAGS.bert_config_file}; lower --max_seq_length.")
  return config, tokenizer


class Run:
  """A fine-tuning run: strategy, model, optimizer and trainer from FLAGS."""

  def __init__(self, build_model, loss_fn, metric_fn, num_train_examples,
               example_name="examples", best_metric="eval_accuracy"):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from official_bert.modeling import kernels as kernels_lib  # pylint: disable=g-import-not-at-top
    from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
    from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
    from official_bert.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
    if FLAGS.num_cpu_devices > 1:
      distribution.split_cpu(FLAGS.num_cpu_devices)
    try:
      strategy = distribution.get_strategy(
          FLAGS.distribution_strategy, FLAGS.num_gpus, FLAGS.tpu,
          tpu_flags.resolver_args(FLAGS))
      distribution.check_jit_compile(strategy, FLAGS.jit_compile)
    except ValueError as e:
      raise app.UsageError(str(e))
    # What this run adds to --output_dir, removed again when a bad
    # --init_checkpoint stops it before any training (nothing left behind);
    # made once the strategy is (a TPU that cannot be reached leaves none).
    self._made_dirs, path = [], os.path.abspath(FLAGS.output_dir)
    while "://" not in FLAGS.output_dir and not os.path.exists(path):
      self._made_dirs.append(path)  # deepest first
      path = os.path.dirname(path)
    self._written = []
    tf.io.gfile.makedirs(FLAGS.output_dir)
    self.replicas = strategy.num_replicas_in_sync
    if FLAGS.do_train and FLAGS.train_batch_size % self.replicas:
      raise app.UsageError(
          f"--train_batch_size={FLAGS.train_batch_size} is not divisible by "
          f"{self.replicas} replicas; use a multiple of {self.replicas}.")
    self.num_train_examples = num_train_examples
    self.example_name = example_name  # what the steps count, for the log
    self.num_train_steps = max(1, int(num_train_examples /
                                      FLAGS.train_batch_size *
                                      FLAGS.num_train_epochs))
    self.num_warmup_steps = int(self.num_train_steps *
                                FLAGS.warmup_proportion)
    keras.utils.set_random_seed(FLAGS.seed)
    distribution.set_mixed_precision(FLAGS.mixed_precision)
    # One model, so training, evaluation and prediction run the same kernels.
    self.kernels = kernels_lib.resolve(
        FLAGS.kernels, FLAGS.jit_compile,
        isinstance(strategy, tf.distribute.TPUStrategy))
    self._build_model = build_model
    with strategy.scope():
      self.model = build_model(self.kernels)
      optimizer = optimization.create_optimizer(
          FLAGS.optimizer, FLAGS.learning_rate, self.num_train_steps,
          self.num_warmup_steps, weight_decay=FLAGS.weight_decay,
          mixed_precision=FLAGS.mixed_precision)
    self.trainer = trainer_lib.Trainer(
        strategy, self.model, optimizer, loss_fn,
        trainer_lib.TrainConfig(
            output_dir=FLAGS.output_dir,
            num_train_steps=self.num_train_steps,
            steps_per_loop=FLAGS.steps_per_loop,
            save_checkpoints_steps=FLAGS.save_checkpoints_steps,
            max_grad_norm=FLAGS.max_grad_norm, jit_compile=FLAGS.jit_compile,
            keep_checkpoints=FLAGS.keep_checkpoint_max,
            eval_every_steps=FLAGS.eval_every_steps),
        metric_fn=metric_fn)
    self.is_chief = self.trainer.is_chief
    self.step = 0
    # Each batch cut to its longest example (training/padding.py); TPUs
    # compile the whole loop for one shape, so they keep --max_seq_length.
    self.pad_multiple = None
    if FLAGS.dynamic_padding and not isinstance(
        strategy, tf.distribute.TPUStrategy):
      self.pad_multiple = FLAGS.pad_to_multiple_of or (
          padding_multiple(FLAGS.jit_compile))
    from official_bert.training import best_checkpoint  # pylint: disable=g-import-not-at-top
    self.best = best_checkpoint.BestCheckpoint(
        os.path.join(FLAGS.output_dir, "best"), self.model,
        FLAGS.best_metric or best_metric, self.is_chief,
        None if self.is_chief else strategy.cluster_resolver.task_id)
    self._predict_steps = {}

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

  def write_run_files(self, config, files=None):
    """flags.json (resolved flags and step counts), bert_config.json and
    the program's own `files` ({name: text}), on the chief."""
    if not self.is_chief:
      return
    resolved = {}
    program = os.path.abspath(sys.argv[0]) if sys.argv else ""
    for module, module_flags in FLAGS.flags_by_module_dict().items():
      if module in (__name__, sys.argv[0]) or (
          program and os.path.abspath(module) == program):
        resolved.update({f.name: f.value for f in module_flags})
    resolved.update(trainer_flags.shared_values(FLAGS))
    resolved.update(num_replicas=self.replicas,
                    num_train_steps=self.num_train_steps,
                    num_warmup_steps=self.num_warmup_steps)
    write(FLAGS.output_dir, "flags.json",
          json.dumps(resolved, indent=2, sort_keys=True) + "\n")
    config.to_json_file(os.path.join(FLAGS.output_dir, "bert_config.json"))
    for name, text in (files or {}).items():
      write(FLAGS.output_dir, name, text)
    self._written += ["flags.json", "bert_config.json"] + list(files or {})

  def _remove_run_files(self):
    """Undoes write_run_files (and the --output_dir this run made), unless
    the directory holds checkpoints (a run to resume keeps its files)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if tf.train.latest_checkpoint(FLAGS.output_dir):
      return
    for name in self._written:
      path = os.path.join(FLAGS.output_dir, name)
      if os.path.exists(path):
        os.remove(path)
    for path in self._made_dirs:
      if os.listdir(path):
        break
      os.rmdir(path)

  def restore_or_warm_start(self):
    """Resumes from --output_dir, else loads --init_checkpoint's encoder."""
    from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top

    def warm_start():
      if not FLAGS.init_checkpoint:
        if FLAGS.do_train:
          print("No --init_checkpoint: fine-tuning from random weights.",
                flush=True)
        return
      try:
        prefix = checkpoints.restore_encoder(self.model.encoder,
                                             FLAGS.init_checkpoint)
      except ValueError as e:
        raise app.UsageError(f"--init_checkpoint: {e}")
      print(f"Initialised the encoder from {prefix}", flush=True)

    try:
      self.step = self.start = self.trainer.restore_or_init(
          init_fn=warm_start)
    except app.UsageError:
      self._remove_run_files()
      raise
    if not FLAGS.do_train and self.start == 0:
      print("Warning: no fine-tuned checkpoint in --output_dir; the task "
            "head is untrained.", flush=True)
    if not FLAGS.do_train:
      self._use_best()
    return self.start

  def _use_best(self):
    """Loads output_dir/best (when there is one) into the model: evaluation,
    prediction and export then use the best checkpoint, and its step."""
    state = self.best.load_weights()
    if state:
      self.step = state["step"]
      print(f"Using the best checkpoint {state['checkpoint']}: step "
            f"{state['step']}, {state['metric']} {state['value']:.4g}",
            flush=True)

  def train(self, inputs, labels, evaluate=None):
    """Trains on numpy `inputs` (dict) and `labels` to num_train_steps.

    `evaluate(step)` -> the dev set's eval_results (a dict) is called every
    --eval_every_steps and at the end; the best by --best_metric is kept in
    output_dir/best and loaded into the model when training ends. Returns
    False when SIGTERM stopped it (the checkpoint is saved and the program
    should return), True when done.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from official_bert.training import padding  # pylint: disable=g-import-not-at-top
    num = len(next(iter(inputs.values())))
    multiple = self.pad_multiple
    order = None
    if FLAGS.group_by_length:
      order = padding.length_grouped_order(
          inputs["input_mask"].sum(1), FLAGS.train_batch_size, FLAGS.seed,
          self.num_train_steps * FLAGS.train_batch_size)

    def dataset_fn(input_context):
      batch = input_context.get_per_replica_batch_size(FLAGS.train_batch_size)
      if order is None:
        data = tf.data.Dataset.from_tensor_slices((inputs, labels))
        data = data.shard(input_context.num_input_pipelines,
                          input_context.input_pipeline_id)
        # Seeded and repeated: a resumed run sees what an uninterrupted one
        # would.
        data = data.shuffle(num, seed=FLAGS.seed).repeat()
        data = data.batch(batch, drop_remainder=True)
      else:  # the same order on every run: resumable too
        tensors = tf.nest.map_structure(tf.constant, (inputs, labels))
        data = tf.data.Dataset.from_tensor_slices(order).shard(
            input_context.num_input_pipelines,
            input_context.input_pipeline_id).repeat()
        data = data.batch(batch, drop_remainder=True).map(
            lambda i: tf.nest.map_structure(
                lambda t: tf.gather(t, i), tensors))
      if multiple:
        data = data.map(lambda x, y: padding.cut_batch(x, y, multiple))
      return data.prefetch(2)

    after_loop = None
    if FLAGS.eval_every_steps and evaluate is not None:
      if self.start == 0:
        self.best.clear()  # a fresh run: an old run's best is not ours
      after_loop = self._evaluator(evaluate)
    t0 = time.time()
    result = self.trainer.train_or_exit(
        dataset_fn, global_batch_size=FLAGS.train_batch_size,
        after_loop=after_loop)
    self.step = result.step
    if result.preempted:
      return False
    print(f"Trained steps {self.start}..{self.step} ({self.num_train_steps} "
          f"= {self.num_train_examples} {self.example_name} x "
          f"{FLAGS.num_train_epochs} "
          f"epochs / batch {FLAGS.train_batch_size}"
          f"{'; stopped early' if result.early_stopped else ''}) in "
          f"{time.time() - t0:.1f} s: "
          + " ".join(f"{k} {v:.4g}" for k, v in result.metrics.items()),
          flush=True)
    if after_loop is not None:
      self._use_best()
    return True

  def _evaluator(self, evaluate):
    """The trainer's `after_loop(step) -> (shown metrics, stop)`: evaluates,
    keeps the best checkpoint, counts evaluations without improvement."""
    every, patience = FLAGS.eval_every_steps, FLAGS.early_stopping_patience
    best = self.best
    state = best.state() if self.start else None

    def after_loop(step):
      nonlocal state
      if state and step <= state["step"]:
        return {}, False  # evaluated before this run resumed
      result = evaluate(step)
      if best.resolve_metric(result) is None:
        names = sorted(k for k, v in result.items()
                       if isinstance(v, (int, float)))
        raise app.UsageError(f"--best_metric={best.metric} is not among the "
                             f"evaluation's metrics {names}; pass one of "
                             "them.")
      value = float(result[best.metric])
      if state is None or best.better(value, state["value"]):
        state = best.save(step, value, result)
      shown = {best.metric: value}
      if state["step"] != step:
        shown[f"best_{best.metric}"] = state["value"]
      # Evaluations since the best one (deterministic, so a resumed run
      # counts what an uninterrupted one would).
      waited = step // every - state["step"] // every
      stop = bool(patience) and waited >= patience
      if stop:
        print(f"Early stopping at step {step}: {waited} evaluations without "
              f"a better {best.metric} than {state['value']:.4g} (step "
              f"{state['step']}).", flush=True)
      return shown, stop
    return after_loop

  def predict(self, inputs, batch_size, fill=0.0):
    """`predict` with the run's padding (and the step traced once)."""
    key = (batch_size, fill)
    if key not in self._predict_steps:
      self._predict_steps[key] = predict_step(self.model, inputs,
                                              self.pad_multiple, fill)
    return predict(self.model, inputs, batch_size,
                   step=self._predict_steps[key])

  def write_eval_results(self, result):
    """eval_results.txt: `key = value` lines, sorted, as the original."""
    if self.is_chief:
      write(FLAGS.output_dir, "eval_results.txt",
            "".join(f"{k} = {result[k]}\n" for k in sorted(result)))
    print("Eval: " + " ".join(f"{k} {v:.4g}" for k, v in sorted(
        result.items()) if isinstance(v, (int, float))), flush=True)


def predict_step(model, inputs, multiple=None, fill=0.0):
  """A tf.function batch -> model outputs (training=False) for batches like
  `inputs` (numpy). With `multiple`, each batch is cut to its longest
  example rounded up to it (training/padding.py) and the per-position
  outputs are padded back to the full length with `fill`; traced once, for
  any batch and length."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.training import padding  # pylint: disable=g-import-not-at-top
  if not multiple:
    return tf.function(lambda batch: model(batch, training=False))
  signature = {k: tf.TensorSpec([None, None], tf.as_dtype(v.dtype))
               for k, v in inputs.items()}

  @tf.function(input_signature=[signature])
  def step(batch):
    full = tf.shape(batch["input_mask"])[1]
    cut = padding.cut_batch(batch, multiple=multiple)
    length = tf.shape(cut["input_mask"])[1]
    return padding.pad_outputs(model(cut, training=False), length, full, fill)
  return step


def predict(model, inputs, batch_size, multiple=None, fill=0.0, step=None):
  """The model's outputs (numpy, float32; one array, or a dict of them as
  the model returns) on numpy encoder inputs; with `multiple`, each batch
  padded only to its longest example (see `predict_step`)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size)
  step = step or predict_step(model, inputs, multiple, fill)
  out = [tf.nest.map_structure(lambda t: t.numpy(), step(batch))
         for batch in dataset]
  if out:
    return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *out)
  # No examples: empty arrays of the outputs' shapes.
  probe = {k: np.zeros((1,) + v.shape[1:], v.dtype) for k, v in inputs.items()}
  return tf.nest.map_structure(
      lambda t: np.zeros((0,) + tuple(t.shape[1:]), np.float32),
      model(probe, training=False))


def padding_multiple(jit_compile):
  from official_bert.training import padding  # pylint: disable=g-import-not-at-top
  return padding.default_multiple(jit_compile)


def data_error(error):
  """One sentence for a ValueError/OSError met reading the task's files."""
  if isinstance(error, OSError):
    return (f"cannot read {error.filename}: {error.strerror}; fix the path "
            "or its permissions.")
  return str(error)


def write(directory, name, text):
  cli.atomic_write(os.path.join(directory, name), text)
