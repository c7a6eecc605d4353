"""The fine-tuning programs' flags: definitions, checks, the driver's config.

`run_classifier.py`, `run_ner.py` and `run_squad.py` (and any task program)
define their own data flags and then:

    finetuning_flags.define_flags(max_seq_length=128, learning_rate=5e-5)
    ...
    def main(argv):
      preemption.install()
      cpu_allocator.use_bfc()
      finetuning_flags.check_flags(FLAGS, data_paths={"task_data_dir": "dir"})
      task = ner_task.NerTask(ner_task.NerConfig(...))   # from the flags
      finetuning_flags.run(FLAGS, task, "run_ner", export)

`run` has the task read its files (no TensorFlow yet), loads the config and
vocab, has the task encode them and hands it to `finetuner.run_task`.

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
from official_bert.training import cpu_allocator
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
    check_path(f"--{name}", getattr(fv, name), kind)
  check_output_dir("--output_dir", fv.output_dir)
  if fv.init_checkpoint and cli.blocked_by(fv.init_checkpoint):
    raise cli.missing("init_checkpoint", fv.init_checkpoint)
  if fv.quantize == "int8" and not fv.export_dir:
    raise app.UsageError("--quantize=int8 quantizes the export: pass "
                         "--export_dir.")
  if fv.quantize == "int8" and not getattr(fv, "do_eval", fv.do_predict):
    raise app.UsageError("--quantize=int8 is checked on the dev set: pass "
                         "--do_eval.")
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


def load_config_and_vocab(fv):
  """(BertConfig, FullTokenizer) of --bert_config_file and --vocab_file,
  checked against each other and --max_seq_length. The config is read
  first, then TensorFlow starts (`cli.start_tensorflow`: without its
  start-up lines; the tokenizer needs it), so the programs call it after
  checking their data files. TensorFlow loads with its oneDNN rewrites on
  (`cpu_allocator.use_onednn`) unless the user said otherwise."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  try:
    config = configs.BertConfig.from_json_file(fv.bert_config_file,
                                               "--bert_config_file")
  except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
    raise app.UsageError(str(e))
  if fv.max_seq_length > config.max_position_embeddings:
    raise app.UsageError(
        f"--max_seq_length={fv.max_seq_length} exceeds max_position_"
        f"embeddings={config.max_position_embeddings} of "
        f"{fv.bert_config_file}; lower --max_seq_length.")
  cpu_allocator.use_onednn()
  cli.start_tensorflow()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  try:
    tokenizer = tokenization.FullTokenizer(fv.vocab_file,
                                           fv.do_lower_case)
  except (ValueError, UnicodeDecodeError) as e:
    raise app.UsageError(f"--vocab_file {fv.vocab_file}: {e}")
  if tokenizer.vocab_size > config.vocab_size:
    raise app.UsageError(
        f"--vocab_file {fv.vocab_file} has {tokenizer.vocab_size} tokens, "
        f"more than vocab_size={config.vocab_size} of "
        f"{fv.bert_config_file}; pass the model's own vocab.txt.")
  return config, tokenizer


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
      dynamic_padding=fv.dynamic_padding,
      pad_to_multiple_of=fv.pad_to_multiple_of,
      group_by_length=fv.group_by_length,
      remove_padding=fv.remove_padding,
      eval_every_steps=fv.eval_every_steps, best_metric=fv.best_metric,
      early_stopping_patience=fv.early_stopping_patience)


def run(fv, task, program, export=None):
  """A fine-tuning program's run once its flags are checked and its task
  built: the task reads every split it needs (before TensorFlow starts: a
  bad file fails at once, not after training), the model's config and
  vocabulary are loaded, the task encodes its splits, and
  `finetuner.run_task` trains, evaluates, predicts and exports (`export`,
  `(model, int8_content) -> path`, when --export_dir is set: it publishes
  the version whole, with int8_content, LiteRT bytes or None, as its
  model.tflite). With --quantize=int8 the int8 model (`int8_model`, answering
  with the task's `export_spec().int8_outputs`) is built and checked on dev
  before anything is exported, and passed to `export` when it passes.
  Returns run_task's answer."""
  try:
    task.read()
  except (ValueError, UnicodeDecodeError, OSError) as e:
    raise app.UsageError(data_error(e))
  bert_config, tokenizer = load_config_and_vocab(fv)
  try:
    task.encode(tokenizer, fv.max_seq_length)
  except ValueError as e:
    raise app.UsageError(str(e))
  # run_squad evaluates on its --predict_file, with its batch size.
  evaluating = "do_eval" in fv
  return finetuner.run_task(
      task, driver_config(fv, task.num_train_examples), bert_config,
      program=program, do_eval=evaluating and fv.do_eval,
      do_predict=fv.do_predict,
      eval_batch_size=(fv.eval_batch_size if evaluating
                       else fv.predict_batch_size),
      predict_batch_size=fv.predict_batch_size,
      export=export if fv.export_dir else None,
      int8=(lambda model: int8_model(fv, model,
                                     task.export_spec().int8_outputs))
      if fv.quantize == "int8" else None,
      max_quantization_drop=fv.max_quantization_drop)


def int8_model(fv, model, outputs=None):
  """`(predict, content, file_name)` of `model` with int8 weights
  (export/litert_int8.py): `predict(inputs, batch_size)` -> the model's
  outputs, its LiteRT bytes (what `export(model, int8_content)` publishes)
  and their file name in the export. Its outputs: `outputs(model outputs)`
  -> {name: Tensor}, the export's own names (so model.tflite answers as
  the SavedModel's serving_ids: run_embedding's `sentence_embedding`);
  default a model's dict as it is, its one array as `logits`."""
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  from export import serving  # pylint: disable=g-import-not-at-top
  try:
    content = serving.int8_model(model, outputs or litert_int8.model_outputs,
                                 fv.vocab_file, fv.do_lower_case,
                                 fv.max_seq_length)
  except ValueError as e:
    raise cli.Error(f"nothing was exported: {e}") from None
  lite = litert_int8.Int8Model(content)
  names = lite.signature["outputs"]

  def predict(inputs, batch_size):
    # One output is the model's one array (logits, sentence_embedding).
    found = lite.predict(inputs, batch_size)
    return found[names[0]] if len(names) == 1 else found

  return predict, content, litert_int8.LITERT_FILE


def data_error(error):
  """One sentence for a ValueError/OSError met reading the task's files."""
  if isinstance(error, OSError):
    return (f"cannot read {error.filename}: {error.strerror}; fix the path "
            "or its permissions.")
  return str(error)
