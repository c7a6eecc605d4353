"""The driver's fine-tuning layer: padding, evaluation while training, predict.

The fine-tuning programs (run_classifier, run_ner, run_squad,
run_embedding) build a task (official_bert/tasks/<task>/) and call
`read_and_run` (through finetuning_flags.run) with their flags' values: the
task reads and encodes its files, a `DriverConfig` is built for its
examples, and `run_task` does:

    run = Finetuner(config, task, bert_config)  # Driver.build_task
    run.write_run_files(bert_config, files=task.run_files())
    run.restore_or_warm_start()         # resume, or --init_checkpoint
    task.prepare_training(predict, ...)  # mined hard negatives: their files
    if config.do_train and not run.train(inputs, labels,
                                         evaluate):  # dev metrics of a step
      return                            # SIGTERM: saved, rerun resumes
    task.tune(predict)                  # on dev: thresholds.json
    run.write_eval_results(task.evaluate(predict, run.step))
    task.predict(...)                   # test_results.tsv
    int8(model), _int8_gate(...)        # --quantize=int8: checked first
    export(model, int8_content)         # then published whole, once

Each batch is padded only to its longest example (dynamic_padding,
training/padding.py); with eval_every_steps the best checkpoint by
best_metric is kept in output_dir/best (training/best_checkpoint.py) and
used for evaluation, prediction and export once training ends.
"""

import math
import os
import time

from official_bert import cli
from official_bert.training import driver


class Finetuner(driver.Driver):
  """A fine-tuning run of `config` (a DriverConfig).

  Args:
    config: the run's DriverConfig.
    task: a FinetuningTask (training/task.py): its model for `bert_config`,
      losses and metric counts; num_train_examples and example_name for the
      log; best_metric, when config.best_metric is unset.
    bert_config: the model's BertConfig.
    distill: a distillation.DistillConfig (training fits the teacher's
      outputs too: `teacher_labels`), or None.
  """

  def __init__(self, config, task, bert_config, distill=None):
    from official_bert.training import best_checkpoint  # pylint: disable=g-import-not-at-top
    from official_bert.training import padding  # pylint: disable=g-import-not-at-top
    super().__init__(config)
    # Made once the strategy is (a TPU that cannot be reached leaves none);
    # removed again when a bad --init_checkpoint stops the run.
    self.make_output_dir()
    self.num_train_examples = task.num_train_examples
    self.init_head = task.init_head
    self.train_order = task.train_order
    self.in_batch_loss = task.in_batch_loss()  # how the train step builds it
    self.example_name = task.example_name
    # Each batch cut to its longest example (training/padding.py); TPUs
    # compile the whole loop for one shape, so they keep max_seq_length.
    self.pad_multiple = None
    if config.dynamic_padding and not self.is_tpu():
      self.pad_multiple = (config.pad_to_multiple_of
                           or padding.default_multiple(config.jit_compile))
    # The position-wise work on the tokens only (modeling/packing.py), in
    # training, evaluation and prediction: shapes that depend on the data,
    # which XLA cannot compile.
    self.remove_padding = (config.remove_padding and not config.jit_compile
                           and not self.is_tpu())
    if distill is None:
      self.build_task(task, bert_config, remove_padding=self.remove_padding)
    else:  # labels {"labels", "teacher", "labelled"}: distillation.py
      from official_bert.training import distillation  # pylint: disable=g-import-not-at-top
      self.build(lambda kernels: task.build_model(bert_config, kernels),
                 *distillation.mixed_losses(task, distill.alpha,
                                            distill.temperature,
                                            task.num_distill_texts > 0),
                 remove_padding=self.remove_padding)
    self.best = best_checkpoint.BestCheckpoint(
        os.path.join(config.output_dir, "best"), self.model,
        config.best_metric or task.best_metric, self.is_chief,
        None if self.is_chief else self.strategy.cluster_resolver.task_id)
    self._predict_steps = {}
    self._after_loop = None  # `train`'s evaluations, the run's best
    self.early_stopped = False

  def write_run_files(self, bert_config, extra_flags=None, files=None):
    """flags.json (with the step counts), bert_config.json, `files`."""
    super().write_run_files(
        bert_config, dict(num_train_steps=self.config.num_train_steps,
                          num_warmup_steps=self.config.num_warmup_steps,
                          **(extra_flags or {})), files)

  def restore_or_warm_start(self):
    """Resumes from output_dir, else loads init_checkpoint's encoder."""
    try:
      self.restore_or_init(self.warm_start_encoder)
    except cli.Error:
      self.remove_run_files()
      raise
    if not self.config.do_train and self.start == 0:
      print("Warning: no fine-tuned checkpoint in --output_dir; the task "
            "head is untrained.", flush=True)
    if not self.config.do_train:
      self._use_best()
    return self.start

  def warm_start_encoder(self):
    """The encoder from init_checkpoint (a student: its student_layers,
    with the embeddings and pooler); the task head starts fresh, as the
    task's init_head sets it."""
    from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
    self.init_head(self.model)
    if not self.config.init_checkpoint:
      if self.config.do_train:
        print("No --init_checkpoint: fine-tuning from random weights.",
              flush=True)
      return
    layers = self.config.student_layers
    try:
      prefix = checkpoints.restore_encoder(self.model.encoder,
                                           self.config.init_checkpoint, layers)
    except ValueError as e:
      raise cli.Error(f"--init_checkpoint: {e}") from None
    kept = (f" (a student of its layers {','.join(map(str, layers))})"
            if layers else "")
    print(f"Initialised the encoder from {prefix}{kept}", flush=True)

  def _use_best(self):
    """Loads output_dir/best (when there is one) into the model: evaluation,
    prediction and export then use the best checkpoint, and its step."""
    state = self.best.load_weights()
    if state:
      self.step = state["step"]
      print(f"Using the best checkpoint {state['checkpoint']}: step "
            f"{state['step']}, {state['metric']} {state['value']:.4g}",
            flush=True)

  def train(self, inputs, labels, evaluate=None, part=None):
    """Trains on numpy `inputs` (dict) and `labels` to num_train_steps, or,
    with `part` = (index, first step, end step) (`epoch_parts`), that part
    of the run: its rows read from `first step` on, in an order seeded by
    seed + index, to `end step` (with a checkpoint).

    `evaluate(step)` -> the dev set's eval_results (a dict) is called every
    eval_every_steps and at the end; the best by best_metric is kept in
    output_dir/best and loaded into the model when training ends (or stops
    early: `early_stopped`). Returns False when SIGTERM stopped it (the
    checkpoint is saved and the program should return), True when done.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from official_bert.training import padding  # pylint: disable=g-import-not-at-top
    config = self.config
    index, first, end = part or (0, 0, config.num_train_steps)
    batch_size, seed = config.train_batch_size, config.seed + index
    num = len(next(iter(inputs.values())))
    multiple = self.pad_multiple
    try:  # the task's (embedding: no text twice in a batch), or None
      order = self.train_order(batch_size, seed, (end - first) * batch_size)
    except ValueError as e:
      raise cli.Error(str(e)) from None
    if order is None and config.group_by_length:
      order = padding.length_grouped_order(
          inputs["input_mask"].reshape(num, -1).sum(1), batch_size, seed,
          (end - first) * batch_size)

    def dataset_fn(input_context):
      batch = input_context.get_per_replica_batch_size(batch_size)
      if order is None:
        data = tf.data.Dataset.from_tensor_slices((inputs, labels))
        data = data.shard(input_context.num_input_pipelines,
                          input_context.input_pipeline_id)
        # Seeded and repeated: a resumed run sees what an uninterrupted one
        # would.
        data = data.shuffle(num, seed=seed).repeat()
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
      return without_autotune(data.prefetch(2))

    if (config.eval_every_steps and evaluate is not None
        and self._after_loop is None):  # one for the run's parts
      if self.start == 0:
        self.best.clear()  # a fresh run: an old run's best is not ours
      self._after_loop = self._evaluator(evaluate)
    t0 = time.time()

    def details(result):
      return (f" ({config.num_train_steps} = {self.num_train_examples} "
              f"{self.example_name} x {config.num_train_epochs} epochs / "
              f"batch {batch_size}"
              f"{'; stopped early' if result.early_stopped else ''}) in "
              f"{time.time() - t0:.1f} s")

    result = self.train_steps(dataset_fn, self._after_loop, details, first,
                              end)
    if result is None:
      return False
    self.early_stopped = result.early_stopped
    if self._after_loop is not None and (
        end >= config.num_train_steps or self.early_stopped):
      self._use_best()
    return True

  def _evaluator(self, evaluate):
    """The trainer's `after_loop(step) -> (shown metrics, stop)`: evaluates,
    keeps the best checkpoint, counts evaluations without improvement."""
    every = self.config.eval_every_steps
    patience = self.config.early_stopping_patience
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
        raise cli.Error(f"--best_metric={best.metric} is not among the "
                        f"evaluation's metrics {names}; pass one of them.")
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
      self._predict_steps[key] = predict_step(
          self.model, inputs, self.pad_multiple, fill, self.remove_padding)
    return predict(self.model, inputs, batch_size, self.pad_multiple,
                   step=self._predict_steps[key])

  def write_eval_results(self, result):
    """eval_results.txt (on the chief) and the "Eval:" line."""
    super().write_eval_results(result)
    print("Eval: " + " ".join(f"{k} {v:.4g}" for k, v in sorted(
        result.items()) if isinstance(v, (int, float))), flush=True)


def without_autotune(dataset):
  """`dataset` without tf.data's autotuning. Fine-tuning's pipelines have
  nothing to tune (no parallel map, a fixed prefetch), and deleting an
  autotuned prediction iterator waited ~2 s for the tuning thread in about
  half the calls (2 cores; docs/performance.md)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def predict_step(model, inputs, multiple=None, fill=0.0, remove_padding=False):
  """A tf.function batch -> model outputs (training=False) for batches like
  `inputs` (numpy). With `multiple`, each batch is cut to its longest
  example rounded up to it (training/padding.py) and the per-position
  outputs are padded back to the full length with `fill`; traced once, for
  any batch and length. `remove_padding`: the model is called with
  `remove_padding=True` (its position-wise work on the tokens only)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.training import padding  # pylint: disable=g-import-not-at-top
  call_kwargs = {"remove_padding": True} if remove_padding else {}
  if not multiple:
    return tf.function(lambda batch: model(batch, training=False,
                                           **call_kwargs))
  signature = {k: tf.TensorSpec([None, None], tf.as_dtype(v.dtype))
               for k, v in inputs.items()}

  @tf.function(input_signature=[signature])
  def step(batch):
    full = tf.shape(batch["input_mask"])[1]
    cut = padding.cut_batch(batch, multiple=multiple)
    length = tf.shape(cut["input_mask"])[1]
    return padding.pad_outputs(model(cut, training=False, **call_kwargs),
                               length, full, fill)
  return step


def predict(model, inputs, batch_size, multiple=None, fill=0.0, step=None,
            by_length=None):
  """The model's outputs (numpy, float32; one array, or a dict of them as
  the model returns) on numpy encoder inputs; with `multiple`, each batch
  padded only to its longest example (see `predict_step`).

  `by_length` (default: with `multiple`): the examples are batched in order
  of length, so a batch's longest is near each of its examples' length
  (attention's work grows with its square); the outputs come back in the
  inputs' order. Per-position outputs are `fill` past the cut of the batch
  an example ran in."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  order = None
  if by_length is None:
    by_length = multiple is not None
  if by_length:
    order = np.argsort(inputs["input_mask"].sum(1), kind="stable")
    inputs = {k: v[order] for k, v in inputs.items()}
  dataset = without_autotune(
      tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size))
  step = step or predict_step(model, inputs, multiple, fill)
  out = [tf.nest.map_structure(lambda t: t.numpy(), step(batch))
         for batch in dataset]
  if out:
    out = tf.nest.map_structure(lambda *parts: np.concatenate(parts), *out)
    if order is not None:
      unsorted = np.argsort(order)  # the inverse permutation
      out = tf.nest.map_structure(lambda t: t[unsorted], out)
    return out
  # No examples: empty arrays of the outputs' shapes.
  probe = {k: np.zeros((1,) + v.shape[1:], v.dtype) for k, v in inputs.items()}
  return tf.nest.map_structure(
      lambda t: np.zeros((0,) + tuple(t.shape[1:]), np.float32),
      model(probe, training=False))


def load_config_and_vocab(bert_config_file, vocab_file, do_lower_case,
                          max_seq_length, student_layers=None,
                          num_cpu_devices=1):
  """(BertConfig, FullTokenizer) of `bert_config_file` and `vocab_file`,
  checked against each other and `max_seq_length` (cli.Error: one sentence
  naming the flag); with `student_layers`, the config is the student's
  (`student_config`). The config is read first, then TensorFlow starts
  (`cli.start_tensorflow`: without its start-up lines; the tokenizer needs
  it), so a program calls it after checking its data files. TensorFlow
  loads with its oneDNN rewrites on (`cpu_allocator.use_onednn`) unless the
  user said otherwise; with `num_cpu_devices` > 1 the CPU is split into
  that many logical devices first (`distribution.split_cpu`: after the
  tokenizer's first op TensorFlow refuses)."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  try:
    config = configs.BertConfig.from_json_file(bert_config_file,
                                               "--bert_config_file")
  except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
    raise cli.Error(str(e)) from None
  if max_seq_length > config.max_position_embeddings:
    raise cli.Error(
        f"--max_seq_length={max_seq_length} exceeds max_position_"
        f"embeddings={config.max_position_embeddings} of "
        f"{bert_config_file}; lower --max_seq_length.")
  if student_layers:
    config = student_config(config, student_layers, bert_config_file)
  cpu_allocator.use_onednn()
  cli.start_tensorflow()
  if num_cpu_devices > 1:  # before the tokenizer starts TensorFlow's runtime
    from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
    distribution.split_cpu(num_cpu_devices)
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  try:
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
  except (ValueError, UnicodeDecodeError) as e:
    raise cli.Error(f"--vocab_file {vocab_file}: {e}") from None
  if tokenizer.vocab_size > config.vocab_size:
    raise cli.Error(
        f"--vocab_file {vocab_file} has {tokenizer.vocab_size} tokens, "
        f"more than vocab_size={config.vocab_size} of "
        f"{bert_config_file}; pass the model's own vocab.txt.")
  return config, tokenizer


def student_config(config, layers, bert_config_file):
  """The BertConfig of a student keeping the teacher's `layers` of
  `config` (the teacher's): its num_hidden_layers is their count. Indices
  out of range, repeated or unsorted are one sentence (cli.Error) naming
  --student_layers and the range."""
  last = config.num_hidden_layers - 1
  if any(not 0 <= index <= last for index in layers) or any(
      a >= b for a, b in zip(layers, layers[1:])):
    raise cli.Error(
        f"--student_layers={','.join(map(str, layers))} must be increasing "
        f"layer indices from 0 to {last} (num_hidden_layers="
        f"{config.num_hidden_layers} of {bert_config_file}); pass the "
        "teacher's layers to keep, such as 0,2,4.")
  return config.replace(num_hidden_layers=len(layers))


def read_and_run(task, driver_config, *, bert_config_file, vocab_file,
                 do_lower_case, max_seq_length, student_layers=None,
                 **run_task_args):
  """A fine-tuning program's flow: the task reads every split it needs
  (before TensorFlow starts: a bad file fails at once, not after training),
  the model's config and vocabulary are loaded (`load_config_and_vocab`;
  a student's config with `student_layers`),
  the task encodes its splits, and `run_task` (with `run_task_args`) trains,
  evaluates, predicts and exports. `driver_config(num_train_examples)` ->
  the run's DriverConfig (its steps count the task's examples). Bad input
  is a cli.Error sentence naming the file."""
  try:
    task.read()
    if run_task_args.get("distill") is not None:  # its labels are ours
      from official_bert.training import distillation  # pylint: disable=g-import-not-at-top
      distillation.check_run_files(run_task_args["distill"].teacher,
                                   task.run_files())
  except (ValueError, UnicodeDecodeError, OSError) as e:
    raise cli.Error(data_error(e)) from None
  bert_config, tokenizer = load_config_and_vocab(
      bert_config_file, vocab_file, do_lower_case, max_seq_length,
      student_layers, driver_config(0).num_cpu_devices)
  try:
    task.encode(tokenizer, max_seq_length)
  except ValueError as e:
    raise cli.Error(str(e)) from None
  return run_task(task, driver_config(task.num_train_examples), bert_config,
                  **run_task_args)


def data_error(error):
  """One sentence for a ValueError/OSError met reading the task's files."""
  if isinstance(error, OSError):
    return (f"cannot read {error.filename}: {error.strerror}; fix the path "
            "or its permissions.")
  return str(error)


def run_task(task, config, bert_config, *, program, do_eval, do_predict,
             eval_batch_size, predict_batch_size, export=None, int8=None,
             max_quantization_drop=None, distill=None):
  """A fine-tuning program's flow once its task is read and encoded: train
  (evaluating every eval_every_steps), tune on dev, evaluate, predict,
  check the int8 model, export.

  `task` is one of tasks/*_task.py's, a `FinetuningTask` (training/task.py:
  the members this function and `Finetuner` use, what each returns). With
  `do_eval`, `task.tune` chooses on dev what the final evaluation and the
  export use (multi-label thresholds) from the final float32 model, once,
  and its files are written; evaluations while training ran before it.
  `export(model, int8_content)` -> the exported path (the program's: the
  exporters sit above the library) publishes the export whole, with
  `int8_content` (bytes or None) as its int8 model. `int8(model)` ->
  `(predict, content, file_name)`: the int8 model's `predict(inputs,
  batch_size)` (the model's outputs), its bytes and their file name in the
  export. It is built and evaluated like the model (eval_results.txt gets
  `int8_` keys) before anything is exported; when its best_metric is more
  than `max_quantization_drop` worse (see `quantization_drop`), or anything
  in that step fails, the run ends (cli.Error) and nothing is exported.
  With `distill` (a distillation.DistillConfig), training fits the
  teacher's outputs too (`teacher_labels`: computed once, cached in
  output_dir) and eval_results.txt gets the teacher's dev metrics as
  `teacher_` keys.
  Returns False when SIGTERM stopped training (the checkpoint is saved; a
  rerun resumes), True when done.
  """
  run = Finetuner(config, task, bert_config, distill)
  run.write_run_files(bert_config, files=task.run_files())
  task.log_start(run.describe())

  def predictor(batch_size):
    return lambda inputs, fill=0.0: run.predict(inputs, batch_size, fill)

  def evaluate(step, predict=None):
    return task.evaluate(predict or predictor(eval_batch_size), step)

  run.restore_or_warm_start()
  teacher_eval = {}
  if config.do_train:
    if task.prepares_every_epoch and distill is not None:
      raise cli.Error("A teacher's outputs are computed once for the "
                      "training rows, which this task prepares anew every "
                      "epoch; train without the teacher or prepare once.")
    # One part, the whole run, unless the task prepares every epoch.
    parts = epoch_parts(config.num_train_steps, config.num_train_epochs
                        if task.prepares_every_epoch else 1)
    for part in parts:
      index, first, end = part
      if run.step >= end and end < config.num_train_steps:
        continue  # trained before this run resumed
      try:  # from the weights this part starts from, before it reads data
        prepared = task.prepare_training(
            predictor(eval_batch_size), run.model, run.start > first, index)
      except ValueError as e:
        raise cli.Error(str(e)) from None
      if run.is_chief:
        for name, text in prepared.items():
          run.write(name, text)
      inputs, labels = task.train_data()
      if distill is not None:
        labels, teacher_eval = teacher_labels(
            run, task, distill, inputs, labels, eval_batch_size, do_eval)
      if not run.train(inputs, labels, evaluate, part):
        return False
      if run.early_stopped:
        break
  summary = []
  result = dev = None
  if do_eval:
    # Chosen on the final (or best) float32 model, before the evaluation
    # that reports at it; the int8 model is then evaluated at it too.
    tuned = task.tune(predictor(eval_batch_size))
    if run.is_chief:
      for name, text in tuned.items():
        run.write(name, text)
    result = evaluate(run.step)
    if config.do_train and distill is not None:
      result.update({f"teacher_{k}": v for k, v in teacher_eval.items()})
    run.write_eval_results(result)
    summary.append(task.eval_summary(result))
    dev = evaluate
  if do_predict:
    files, said, predicted = task.predict(predictor(predict_batch_size),
                                          run.step)
    if run.is_chief:
      for name, text in files.items():
        run.write(name, text)
    summary.append(said)
    if predicted is not None:  # a prediction file with answers: evaluated
      result = predicted
      run.write_eval_results(result)
      summary.append(task.eval_summary(result))
      dev = lambda step, predict: task.predict(predict, step)[2]
  if export is not None and run.is_chief:
    model = run.export_model(task.example_inputs())
    content = gated = None
    if int8 is not None:  # built and checked before anything is published
      predict, content, file_name = int8(model)
      gated = _int8_gate(run, task, predict, result, dev, eval_batch_size,
                         max_quantization_drop)
    path = export(model, content)
    summary.append(f"exported {path}")
    if gated is not None:
      summary.append(f"int8 {os.path.join(path, file_name)} ({gated})")
  print(f"{program} done at step {run.step}: " + "; ".join(summary)
        + f"; output in {config.output_dir}", flush=True)
  return True


def epoch_parts(num_train_steps, num_train_epochs):
  """[(index, first step, end step)]: the run's steps cut where each of its
  `num_train_epochs` epochs ends (the last, a fraction of one, too), for a
  task that prepares every epoch; one part, the whole run, for 1."""
  ends = [round(num_train_steps * e / num_train_epochs)
          for e in range(1, math.ceil(num_train_epochs))] + [num_train_steps]
  parts, first = [], 0
  for end in ends:
    if first < end <= num_train_steps:
      parts.append((len(parts), first, end))
      first = end
  return parts


def teacher_labels(run, task, distill, inputs, labels, batch_size,
                   evaluating):
  """(labels with the teacher's outputs, the teacher's dev eval_results):
  the teacher (the task's model for its bert_config.json, restored from
  distill.teacher: `_run_teacher`; or an export's serving_ids signature:
  `_export_teacher`) predicts over the training `inputs` once, batched as
  `predict` is, and evaluates on dev (when `evaluating`); both are cached
  in output_dir (distillation.py) and reused while the teacher and the
  inputs are unchanged. cli.Error: one sentence naming --teacher."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.training import distillation  # pylint: disable=g-import-not-at-top
  if distill.export:
    prefix, weights, predict_teacher = _export_teacher(
        task, distill.export, batch_size)
  else:
    prefix, weights, predict_teacher = _run_teacher(
        run, task, distill, inputs, batch_size)
  made_from = distillation.record(prefix, weights, inputs,
                                  distill.distill_data)
  path = os.path.join(run.config.output_dir, distillation.FILE)
  outputs, teacher_eval, why = distillation.reusable(run.config.output_dir,
                                                     made_from)
  if outputs is not None:
    print(f"teacher outputs: reused {path} (made by the same teacher from "
          "the same training inputs)", flush=True)
  else:
    if why:
      print(f"teacher outputs: {path}: {why}; computing them again",
            flush=True)
    t0 = time.time()
    try:
      outputs = task.teacher_outputs(predict_teacher)
    except ValueError as e:
      raise cli.Error(str(e)) from None
    teacher_eval = {}
    if evaluating:
      teacher_eval = {k: float(v) for k, v in task.evaluate(
          predict_teacher, 0).items() if k != "global_step" and
                      isinstance(v, (int, float, np.floating))}
    if run.is_chief:
      distillation.write(run.config.output_dir, outputs, made_from,
                         teacher_eval)
    print(f"teacher outputs: {len(next(iter(inputs.values())))} rows "
          f"by {prefix} in {time.time() - t0:.1f} s, written to {path}",
          flush=True)
  return (distillation.with_teacher(labels, outputs,
                                    task.num_distill_texts), teacher_eval)


def _run_teacher(run, task, distill, inputs, batch_size):
  """(checkpoint prefix, weights, predict) of a teacher run or checkpoint
  folder: the task's model for its bert_config.json, restored, predicting
  as the student's `predict` does."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  try:
    teacher_config = configs.BertConfig.from_json_file(
        distill.bert_config_file, "--teacher")
    length = max(v.shape[-1] for v in inputs.values())
    if length > teacher_config.max_position_embeddings:
      raise ValueError(
          f"the training inputs have {length} positions, more than "
          f"max_position_embeddings={teacher_config.max_position_embeddings} "
          f"of its bert_config.json; lower --max_seq_length")
    model = task.build_model(teacher_config, "keras")
    model(task.example_inputs(), training=False)
    prefix = checkpoints.restore_model(model, distill.teacher)
  except (ValueError, TypeError, KeyError) as e:
    raise cli.Error(f"--teacher {distill.teacher}: {e}") from None
  steps = {}

  def predict_teacher(batch, fill=0.0):
    if fill not in steps:
      steps[fill] = predict_step(model, batch, run.pad_multiple, fill,
                                 run.remove_padding)
    return predict(model, batch, batch_size, run.pad_multiple,
                   step=steps[fill])
  return prefix, model.get_weights(), predict_teacher


def _export_teacher(task, version, batch_size):
  """(version, its files' digest, predict) of a teacher export: its
  serving_ids signature on each batch cut to its longest row, the outputs
  as the model's (distillation.export_outputs). An export without them,
  or with other label names than this run's, is a cli.Error."""
  import json  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  from official_bert import derived_files  # pylint: disable=g-import-not-at-top
  from official_bert.training import distillation  # pylint: disable=g-import-not-at-top
  signature = tf.saved_model.load(version).signatures["serving_ids"]

  def named(batch):
    length = max(int(batch["input_mask"].sum(1).max()), 1)
    out = signature(**{k: tf.constant(v[:, :length], tf.int32)
                       for k, v in batch.items()})
    return {k: v.numpy() for k, v in out.items()}

  probe = named(task.example_inputs())
  if distillation.export_outputs(probe) is None:
    raise cli.Error(f"--teacher {version} answers with {sorted(probe)}, "
                    "not the logits or embeddings a student fits; pass the "
                    "run's --output_dir.")
  ours = task.run_files().get("label_list.json")
  if "label_names" in probe and ours is not None:
    theirs = [n.decode("utf-8") for n in probe["label_names"][0]]
    if theirs != json.loads(ours):
      raise cli.Error(f"--teacher {version}: its labels {theirs} differ "
                      f"from this run's label_list.json {json.loads(ours)}; "
                      "a student learns the teacher's outputs, so train it "
                      "on data with the teacher's labels.")

  def predict_teacher(batch, fill=0.0):
    del fill  # per-example outputs only (classification, embeddings)
    n = len(batch["input_mask"])
    parts = [distillation.export_outputs(named(
        {k: v[i:i + batch_size] for k, v in batch.items()}))
             for i in range(0, n, batch_size)]
    return np.concatenate(parts).astype(np.float32)
  return version, derived_files.folder_digest(version), predict_teacher


def quantization_drop(metric, value, int8_value, metric_range=1.0):
  """How much worse `int8_value` is than `value`, as a fraction of the
  metric's range (`metric_range` 100 for a percentage): positive when
  worse, lower being better for names ending in loss or mse."""
  from official_bert.training import best_checkpoint  # pylint: disable=g-import-not-at-top
  drop = (value - int8_value) / metric_range
  return -drop if best_checkpoint.lower_is_better(metric) else drop


def _int8_gate(run, task, predict, result, dev, batch_size, max_drop):
  """Evaluates the int8 model's `predict(inputs, batch_size)` on the dev
  set as `dev(step, predict)` did the float32 one and writes both to
  eval_results.txt; returns the two best_metric values in words when it
  drops by at most `max_drop`, else raises one sentence (a cli.Error): the
  caller has exported nothing yet, and then exports nothing."""
  if dev is None:
    raise cli.Error("--quantize=int8 is checked on the dev metric, and this "
                    "run measured none: pass --do_eval (run_squad: a "
                    "--predict_file with answers)")
  metric = run.config.best_metric or task.best_metric
  int8_result = dev(run.step, lambda inputs, fill=0.0: predict(inputs,
                                                                batch_size))
  both = dict(result)
  both.update({f"int8_{key}": value for key, value in int8_result.items()})
  run.write_eval_results(both)
  drop = quantization_drop(metric, result[metric], int8_result[metric],
                           task.metric_range)
  said = (f"{metric} float32 {result[metric]:.4f}, int8 "
          f"{int8_result[metric]:.4f}")
  if drop > max_drop + 1e-9:  # 0.825 - 0.82 is 0.0050000000000000044
    raise cli.Error(f"the int8 model's {said}: a drop of {drop:.4f} of the "
                    f"metric's range exceeds --max_quantization_drop="
                    f"{max_drop}, so nothing was exported; raise "
                    f"--max_quantization_drop or export without "
                    f"--quantize=int8")
  return said
