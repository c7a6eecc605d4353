"""The fine-tuning programs' flags: definitions, checks, the driver's config.

The fine-tuning programs (run_classifier.py, run_ner.py, run_squad.py,
run_embedding.py, and any task program) define their own data flags and
then:

    finetuning_flags.define_flags(max_seq_length=128, learning_rate=5e-5)
    ...
    def main(argv):
      preemption.install()
      cpu_allocator.use_bfc()
      finetuning_flags.check_flags(FLAGS, data_paths={"task_data_dir": "dir"})
      task = ner_task.NerTask(ner_task.NerConfig(...))   # from the flags
      finetuning_flags.run(FLAGS, task, "run_ner", export)

`run` hands the task and the flags' values to `finetuner.read_and_run`,
the flow in the training code: the task reads its files (no TensorFlow
yet), the config and vocab are loaded, the task encodes its splits, then
`finetuner.run_task`. Paths are checked by cli's `check_*`, as in every
program.

The flags are google-research/bert's (same names and defaults: the
program passes its own defaults, as run_squad's max_seq_length=384), plus the
trainer's (trainer_flags.py): --distribution_strategy, --mixed_precision,
--jit_compile, resume from --output_dir (see training/trainer.py), and
padding and evaluation while training (training/finetuner.py). Every bad
value is an `app.UsageError` sentence naming the flag and the fix. Each
function takes the program's FlagValues; the library (training/) sees only
the DriverConfig built here.
"""

import os

from absl import app
from absl import flags

from export import quantize_flag
from official_bert import cli
from official_bert import tpu_flags
from official_bert import trainer_flags
from official_bert.training import finetuner


def define_flags(max_seq_length=128, learning_rate=5e-5, train_batch_size=32,
                 predict_batch_size=8, do_eval=True, export_help=None,
                 task_data_dir_help=None, max_quantization_drop=0.005):
  """The original's fine-tuning flags and the trainer's, with per-program
  defaults (defined only when a program runs); --task_data_dir with
  `task_data_dir_help`, what the program reads there."""
  trainer_flags.define_run(max_seq_length, learning_rate, train_batch_size,
                           do_eval)
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased "
                    "models).")
  flags.DEFINE_bool("do_predict", False, "Whether to predict on test.")
  flags.DEFINE_integer("predict_batch_size", predict_batch_size, "Batch size "
                       "for predict.")
  if task_data_dir_help:
    flags.DEFINE_string("task_data_dir", None, task_data_dir_help)
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training "
                     "file.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the steps with "
                     "linear learning-rate warmup.")
  flags.DEFINE_list("student_layers", None, "Fine-tune a smaller student: "
                    "keep only these layers (increasing indices, e.g. "
                    "0,2,4) of the encoder --init_checkpoint names, with "
                    "its embeddings and pooler, as DistilBERT and "
                    "sentence-transformers' layer reduction do; the run's "
                    "bert_config.json says the student's "
                    "num_hidden_layers.")
  # ---- distillation (training/distillation.py, docs/distillation.md)
  flags.DEFINE_string("teacher", None, "Distil: fit the outputs of this "
                      "fine-tuned run (its --output_dir; its best/ "
                      "checkpoint when it kept one), or of its export "
                      "(--export_dir; run_classifier, run_embedding); "
                      "run_embedding: also a checkpoint folder "
                      "--init_checkpoint takes. Computed once before "
                      "training and cached in --output_dir.")
  flags.DEFINE_float("distill_alpha", 0.5, "With --teacher: the weight of "
                     "the distillation loss; the label loss gets 1 - alpha.")
  flags.DEFINE_float("distill_temperature", 2.0, "With --teacher: the "
                     "temperature T of the softened distributions (the "
                     "soft loss is multiplied by T^2).")
  flags.DEFINE_string("distill_data", None, "With --teacher: unlabelled "
                      "texts the teacher labels, trained on with the "
                      "distillation loss only (run_classifier: the training "
                      "file's layout without the label column; "
                      "run_embedding: one text per line).")
  # ---- shared with run_pretraining.py: distribution, precision, loop
  trainer_flags.define(steps_per_loop=100, keep_checkpoint_max=2)
  flags.DEFINE_string("export_dir", None, export_help or "If set, export the "
                      "fine-tuned model for TF Serving here.")
  quantize_flag.define("int8: with --export_dir, also write "
                       "<version>/model.tflite, the model with int8 weights "
                       "(LiteRT, ids in; TF Serving --prefer_tflite_model="
                       "true), when its dev metric passes "
                       "--max_quantization_drop (else nothing is "
                       "exported).")
  flags.DEFINE_bool("litert", False, "With --export_dir: also write "
                    "<version>/model.tflite, the serving_ids signature as a "
                    "LiteRT model (ids in; TF Serving --prefer_tflite_model="
                    "true): float32 (XNNPACK: one text's fastest float32 "
                    "path on a CPU), or its int8 weights with "
                    "--quantize=int8 (which writes it anyway).")
  flags.DEFINE_bool("xla_single_text", False, "With --export_dir: a "
                    "request of one text runs the model XLA-compiled, its "
                    "length padded to a multiple of 16 (TF Serving: "
                    "--xla_cpu_compilation_enabled); one text's latency, "
                    "same outputs.")
  flags.DEFINE_float("max_quantization_drop", max_quantization_drop,
                     "With --quantize=int8: the largest drop of "
                     "--best_metric on dev, int8 against float32, as a "
                     "fraction of the metric's range (F1 in percent: /100).")
  # ---- padding (training/padding.py) and evaluation while training
  flags.DEFINE_bool("dynamic_padding", True, "Pad each batch only to its "
                    "longest example (rounded up to --pad_to_multiple_of) "
                    "instead of --max_seq_length; results are the same.")
  flags.DEFINE_integer("pad_to_multiple_of", None, "Bucket width of "
                       "--dynamic_padding (default 8, 32 with --jit_compile: "
                       "one XLA compilation per bucket).")
  flags.DEFINE_bool("remove_padding", True, "Run the dense layers, "
                    "LayerNorm and feed-forward networks on the tokens "
                    "only, not on padding positions (modeling/packing.py); "
                    "results are the same. Off with --jit_compile and on "
                    "TPUs (data-dependent shapes).")
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


def splits(fv):
  """The task files a run reads: train with --do_train, dev with --do_eval
  or evaluation while training, test with --do_predict."""
  evaluating = fv.do_eval or (fv.do_train and fv.eval_every_steps)
  return tuple(split for split, wanted in (
      ("train", fv.do_train), ("dev", evaluating),
      ("test", fv.do_predict)) if wanted)


def _modes(fv):
  return [m for m in ("do_train", "do_eval", "do_predict") if m in fv]


def check_flags(fv, data_paths=None, mode_paths=None):
  """The flag errors one sentence can explain, before TensorFlow starts.

  Args:
    fv: the program's FlagValues.
    data_paths: {flag name: "dir" or "file"} of the program's own input
      paths (required, and must be that kind).
    mode_paths: {mode flag: (flag name, "dir" or "file")}: input paths
      required only when their mode is set (run_squad's --do_train needs
      --train_file).
  """
  tpu_flags.apply(fv)
  modes = _modes(fv)
  if not any(getattr(fv, m) for m in modes):
    raise app.UsageError("At least one of "
                         + ", ".join(f"--{m}" for m in modes)
                         + " must be set.")
  kinds = dict(data_paths or {})
  for mode, (name, kind) in (mode_paths or {}).items():
    if getattr(fv, mode):
      if not getattr(fv, name):
        raise app.UsageError(f"--{mode} needs --{name}.")
      kinds[name] = kind
  kinds.update(bert_config_file="file", vocab_file="file")
  for name in list(kinds) + ["output_dir"]:
    if not getattr(fv, name):
      raise app.UsageError(f"--{name} is required.")
  for name, kind in kinds.items():
    check = cli.check_input_dir if kind == "dir" else cli.check_input_file
    check(name, getattr(fv, name))
  # Made only when the run starts writing: bad input leaves nothing behind.
  cli.check_output_dir("output_dir", fv.output_dir, create=False)
  if fv.init_checkpoint and cli.blocked_by(fv.init_checkpoint):
    raise cli.missing("init_checkpoint", fv.init_checkpoint)
  student_layers(fv)
  check_distillation(fv)
  if fv.quantize == "int8" and not fv.export_dir:
    raise app.UsageError("--quantize=int8 quantizes the export: pass "
                         "--export_dir.")
  if fv.quantize == "int8" and not getattr(fv, "do_eval", fv.do_predict):
    raise app.UsageError("--quantize=int8 is checked on the dev set: pass "
                         "--do_eval.")
  if fv.litert and not fv.export_dir:
    raise app.UsageError("--litert writes model.tflite into the export: "
                         "pass --export_dir.")
  if fv.xla_single_text and not fv.export_dir:
    raise app.UsageError("--xla_single_text is a setting of the export: "
                         "pass --export_dir.")
  if fv.max_quantization_drop < 0:
    raise app.UsageError(f"--max_quantization_drop must be 0 or more, got "
                         f"{fv.max_quantization_drop}.")
  if fv.export_dir and os.path.isfile(fv.export_dir):
    raise app.UsageError(f"--export_dir {fv.export_dir} is a file; pass "
                         "a directory (the model's base path).")
  for name in ("eval_every_steps", "early_stopping_patience"):
    if getattr(fv, name) < 0:
      raise app.UsageError(f"--{name} must be 0 or more, got "
                           f"{getattr(fv, name)}.")
  if fv.early_stopping_patience and not fv.eval_every_steps:
    raise app.UsageError("--early_stopping_patience needs --eval_every_steps "
                         "(the evaluations it counts).")
  cli.check_positive(fv, ["train_batch_size", "predict_batch_size",
                          "save_checkpoints_steps", "steps_per_loop",
                          "max_seq_length", "num_cpu_devices",
                          "pad_to_multiple_of"]
                     + (["eval_batch_size"] if "eval_batch_size" in fv
                        else []))
  if fv.num_train_epochs <= 0:
    raise app.UsageError("--num_train_epochs must be positive, got "
                         f"{fv.num_train_epochs}.")
  if not 0 <= fv.warmup_proportion < 1:
    raise app.UsageError("--warmup_proportion must be in [0, 1), got "
                         f"{fv.warmup_proportion}.")


def student_layers(fv):
  """--student_layers as a tuple of ints (None when unset); a value that is
  not a list of layer indices, or given without --init_checkpoint, is an
  app.UsageError (the range is checked against bert_config.json by
  finetuner.load_config_and_vocab)."""
  if fv.student_layers is None:
    return None
  try:
    layers = tuple(int(index) for index in fv.student_layers)
  except ValueError:
    layers = ()
  if not layers:
    raise app.UsageError(f"--student_layers={','.join(fv.student_layers)} "
                         "is not a list of layer indices; pass the teacher's "
                         "layers to keep, such as 0,2,4.")
  if not fv.init_checkpoint:
    raise app.UsageError("--student_layers keeps layers of the encoder that "
                         "--init_checkpoint names; pass --init_checkpoint.")
  return layers


def check_distillation(fv):
  """--teacher and --distill_*: app.UsageError sentences, before
  TensorFlow starts (the labels are compared once the task has read its
  files: finetuner.read_and_run)."""
  from official_bert.training import distillation  # pylint: disable=g-import-not-at-top
  if not fv.teacher:
    for name in ("distill_alpha", "distill_temperature", "distill_data"):
      if fv[name].present:
        raise app.UsageError(f"--{name} sets how a student fits its "
                             "teacher: pass --teacher.")
    return
  if not 0 <= fv.distill_alpha <= 1:
    raise app.UsageError(f"--distill_alpha must be in [0, 1], got "
                         f"{fv.distill_alpha}.")
  if fv.distill_temperature <= 0:
    raise app.UsageError(f"--distill_temperature must be positive, got "
                         f"{fv.distill_temperature}.")
  if not fv.do_train:
    raise app.UsageError("--teacher is what training fits: pass --do_train.")
  if "mini_batch_size" in fv and fv.mini_batch_size:
    raise app.UsageError("--teacher with --mini_batch_size is not "
                         "supported yet (the two are not tested together); "
                         "drop one of them.")
  if fv.distill_data:
    cli.check_input_file("distill_data", fv.distill_data)
  which = distillation.kind(fv.teacher)
  accepted = ("a fine-tuned run's --output_dir (flags.json, "
              "bert_config.json and its checkpoint) or its export "
              "(--export_dir)")
  if "pooling" in fv:  # run_embedding
    accepted += (" or a checkpoint folder with its bert_config.json (what "
                 "--init_checkpoint takes)")
  if which is None or (which == "checkpoint" and "pooling" not in fv):
    raise app.UsageError(f"--teacher {fv.teacher} is neither a run, a "
                         f"checkpoint folder nor an export; pass {accepted}.")
  try:
    vocab = distillation.vocab_file(fv.teacher, which)
    settings = distillation.run_flags(fv.teacher) if which == "run" else {}
  except (OSError, ValueError) as e:
    raise app.UsageError(f"--teacher {fv.teacher}: its flags.json cannot be "
                         f"read ({e}); pass a run's --output_dir.")
  for name in ("do_lower_case", "task_type"):  # what its outputs mean
    if name in settings and name in fv and settings[name] != fv[name].value:
      raise app.UsageError(
          f"--teacher {fv.teacher} was trained with --{name}="
          f"{settings[name]}, this run has --{name}={fv[name].value}; a "
          f"student fits the teacher's outputs, so pass its --{name}.")
  if vocab is not None:
    try:
      with open(vocab, "rb") as f:
        theirs = f.read()
      with open(fv.vocab_file, "rb") as f:
        ours = f.read()
    except OSError as e:
      raise app.UsageError(f"--teacher {fv.teacher}: its vocabulary {vocab} "
                           f"cannot be read ({e.strerror}).")
    if theirs != ours:
      raise app.UsageError(
          f"--teacher {fv.teacher} was trained with the vocabulary {vocab}, "
          f"which differs from --vocab_file {fv.vocab_file}; a student "
          "reads the teacher's ids, so pass the teacher's vocab.txt.")


def distill_config(fv, program):
  """The run's distillation.DistillConfig (None without --teacher);
  --distill_data where the program has none is a cli.Error."""
  from official_bert.training import distillation  # pylint: disable=g-import-not-at-top
  if not fv.teacher:
    return None
  if fv.distill_data and program in ("run_ner", "run_squad"):
    raise cli.Error(f"--distill_data adds unlabelled texts, which {program} "
                    "cannot take (its examples are tagged words or answered "
                    "questions); drop --distill_data.")
  export = None
  if distillation.kind(fv.teacher) == "export":
    if program in ("run_ner", "run_squad"):
      raise cli.Error(f"--teacher {fv.teacher} is an export of {program}, "
                      "which answers with tags or spans, not the logits a "
                      "student fits; pass the run's --output_dir.")
    export = distillation.export_version(fv.teacher)
  return distillation.DistillConfig(
      teacher=fv.teacher,
      bert_config_file=(None if export else
                        os.path.join(fv.teacher, "bert_config.json")),
      alpha=fv.distill_alpha, temperature=fv.distill_temperature,
      distill_data=fv.distill_data, export=export)


def driver_config(fv, num_train_examples):
  """The DriverConfig of a fine-tuning run: the trainer's flags, the steps
  of --num_train_epochs over `num_train_examples` (at least one), padding
  and evaluation while training; flags.json holds this module's flags and
  the program's."""
  num_train_steps = max(1, int(num_train_examples / fv.train_batch_size *
                               fv.num_train_epochs))
  return trainer_flags.driver_config(
      fv, trainer_flags.program_values(fv, [__name__]),
      num_train_steps=num_train_steps,
      num_warmup_steps=int(num_train_steps * fv.warmup_proportion),
      num_train_epochs=fv.num_train_epochs,
      student_layers=student_layers(fv),
      dynamic_padding=fv.dynamic_padding,
      pad_to_multiple_of=fv.pad_to_multiple_of,
      group_by_length=fv.group_by_length,
      remove_padding=fv.remove_padding,
      eval_every_steps=fv.eval_every_steps, best_metric=fv.best_metric,
      early_stopping_patience=fv.early_stopping_patience)


def run(fv, task, program, export=None):
  """A fine-tuning program's run once its flags are checked and its task
  built: `finetuner.read_and_run` with the flags' values (the task reads
  its files before TensorFlow starts, then the config and vocabulary, the
  encoding, training, evaluation, prediction and the export). `export`,
  `(model, int8_content) -> path`, publishes the version whole when
  --export_dir is set; with --quantize=int8 the int8 model
  (`serving.int8_predictor`, answering with the task's
  `export_spec().int8_outputs`) is built and checked on dev before anything
  is exported; with --litert alone, the float32 LiteRT model is built at
  export and published with it. Returns run_task's answer."""
  # run_squad evaluates on its --predict_file, with its batch size.
  evaluating = "do_eval" in fv

  def int8(model):
    from export import serving  # pylint: disable=g-import-not-at-top
    return serving.int8_predictor(model, task.export_spec().int8_outputs,
                                  fv.vocab_file, fv.do_lower_case,
                                  fv.max_seq_length)

  if fv.litert and fv.quantize != "int8" and export is not None:
    plain_export = export

    def export(model, int8_content=None):  # pylint: disable=function-redefined
      del int8_content  # None: no --quantize=int8
      from export import serving  # pylint: disable=g-import-not-at-top
      return plain_export(model, serving.litert_model(
          model, task.export_spec().int8_outputs, fv.vocab_file,
          fv.do_lower_case, fv.max_seq_length, int8=False))

  return finetuner.read_and_run(
      task, lambda num_train_examples: driver_config(fv, num_train_examples),
      bert_config_file=fv.bert_config_file, vocab_file=fv.vocab_file,
      do_lower_case=fv.do_lower_case, max_seq_length=fv.max_seq_length,
      student_layers=student_layers(fv), program=program,
      do_eval=evaluating and fv.do_eval, do_predict=fv.do_predict,
      eval_batch_size=(fv.eval_batch_size if evaluating
                       else fv.predict_batch_size),
      predict_batch_size=fv.predict_batch_size,
      export=export if fv.export_dir else None,
      int8=int8 if fv.quantize == "int8" else None,
      max_quantization_drop=fv.max_quantization_drop,
      distill=distill_config(fv, program))
