"""Raw text to a served model in one command, on a corpus that needs no download.

    python -m official_bert.quickstart                    # Python's stdlib docstrings
    python -m official_bert.quickstart --corpus=my.txt    # your text, one sentence a line

Runs the real pipeline, each stage as the same command a user would type:

  1. corpus   the embedded default: docstrings of the running Python's standard
              library (or --corpus), one sentence per line
  2. vocab    tfrecords/learn_vocab.py              -> vocab.txt
  3. data     tfrecords/create_pretraining_data.py  -> data/train.tfrecord
  4. train    official_bert/run_pretraining.py      -> pretraining/ (checkpoints)
  5. hub      export/export_tfhub.py                -> hub/{encoder,preprocessor}
  6. serving  export/export_saved_model.py          -> serving/<version>/
  7. demo     reloads the exported modules in a fresh process: top-5 fill-mask
              predictions and sentence similarities
  with --export_huggingface, before the demo:
     huggingface  export/export_checkpoint.py --format=huggingface
                                                 -> huggingface/ (transformers'
                                                 BertForPreTraining + tokenizer)

Every stage writes its outputs atomically and records what it was made from
(the flags that matter and its inputs) in <output>.made_from.json beside
them. Run again, a stage whose record matches is skipped, so an interrupted
run continues where it stopped (the trainer itself resumes from its last
checkpoint); a stage whose flags or inputs changed is redone, with every stage
after it.
"""

import ctypes
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable

from absl import app
from absl import flags

from official_bert import cli

FLAGS = flags.FLAGS

flags.DEFINE_string("work_dir", "runs/quickstart",
                    "Where every artefact of the run is written.")
flags.DEFINE_string("corpus", None,
                    "A corpus of your own (one sentence per line, blank line "
                    "between documents). Default: Python's stdlib docstrings.")
flags.DEFINE_integer("max_documents", None,
                     "Use only the first N documents of the default corpus "
                     "(a quicker run).")
flags.DEFINE_integer("vocab_size", 8000, "WordPiece vocabulary size to learn.")
flags.DEFINE_integer("max_seq_length", 64, "Sequence length of the data.")
flags.DEFINE_integer("max_predictions_per_seq", 10,
                     "Masked positions per sequence.")
flags.DEFINE_integer("dupe_factor", 5, "Maskings of each document.")
flags.DEFINE_integer("num_train_steps", 2000, "Pretraining steps.")
flags.DEFINE_integer("train_batch_size", 32, "Pretraining batch size.")
flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate (tiny model).")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "keras_adamw", "lamb"],
                  "run_pretraining's --optimizer (adamw: the original's "
                  "update, without bias correction).")
flags.DEFINE_string("model", "L2_H128_A2",
                    "Model size as L<layers>_H<hidden>_A<heads>.")
flags.DEFINE_bool("export_huggingface", False,
                  "Also export the pretrained model for Hugging Face "
                  "transformers (<work_dir>/huggingface: model.safetensors, "
                  "config.json, tokenizer files).")
flags.DEFINE_bool("demo_only", False,
                  "Only reload the exported modules from --work_dir and show "
                  "predictions (what stage 7 runs in a fresh process).")

FILL_MASK = (
    "Return a new [MASK] containing the items of the iterable.",
    "Raise a [MASK] if the file does not exist.",
    "The default [MASK] is None.",
    "This function is deprecated and will be [MASK] in a future version.",
)
PAIRS = (
    ("Return the number of items in the list.",
     "Return the length of the sequence."),
    ("Open the file for reading.", "Read data from the open file."),
    ("Open the file for reading.",
     "The thread waits until the lock is released."),
)


def _log(message):
  print(f"[quickstart] {message}", flush=True)


# ------------------------------------------------------- child output ----
# Lines of a stage's program that say nothing to a quickstart user. Only
# these are dropped: every other line, warnings and errors included, is shown.
_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ (\S+?):\d+\] ?")
# TensorFlow's start-up lines (cli.STARTUP_NOISE, and the cuInit line after
# "no CUDA driver": cli.NO_DRIVER, cli.CUINIT), then:
_NOISE = tuple(re.compile(pattern) for pattern in (
    # The saver's and SavedModel writer's chatter.
    r"^I\d{4} .* functional_saver\.py:\d+\] Sharding callback",
    r"^Saved checkpoint ",
    r"^Trained steps \d+\.\.\d+: ",  # the last step line said it
    r"^(INFO:tensorflow:|I\d{4} .*\] )?Assets written to: ",
    r"^(I\d{4} .*\] )?Writing fingerprint to ",
    r"^([IW]\d{4} .*\] )?Function `\w+` contains input name\(s\) .* with "
    r"unsupported characters",
    # The decoded example instances (the first tokens: line is kept).
    r"^I\d{4} .* create_pretraining_data\.py:\d+\] (\*\*\* Example|"
    r"(input_ids|input_mask|segment_ids|masked_lm_\w+|next_sentence_labels): )",
))
_CHILD_ERROR = re.compile(r"^[\w.]+: error: ")


class _Filter:
  """Decides, line by line, what of a stage's output is shown."""

  def __init__(self):
    self.no_driver = False
    self.example_tokens_shown = False

  def shown(self, line):
    """The line to print (absl's prefix cut) or None."""
    if cli.NO_DRIVER.search(line):
      self.no_driver = True
    if self.no_driver and cli.CUINIT.match(line):
      return None
    if cli.STARTUP_NOISE.match(line) or any(
        pattern.match(line) for pattern in _NOISE):
      return None
    if re.match(r"^I\d{4} .* create_pretraining_data\.py:\d+\] tokens: ", line):
      if self.example_tokens_shown:
        return None
      self.example_tokens_shown = True
      line = _ABSL_PREFIX.sub("", line).replace("tokens: ",
                                                "an instance: ", 1)
      return line
    if line.startswith(("I", "W", "E", "F")):
      match = _ABSL_PREFIX.match(line)
      if match:  # absl's timestamp/thread prefix: keep the level and message
        level = {"I": "", "W": "warning: ", "E": "ERROR: ",
                 "F": "FATAL: "}[line[0]]
        return level + line[match.end():]
    return line


def _ends_with_this_process():
  """A stage's preexec_fn: on Linux, the stage is SIGKILLed when the
  quickstart ends, so a quickstart that is itself killed (SIGKILL cannot
  stop its children) leaves no stage running on, writing under --work_dir
  while the rerun writes the same files. Elsewhere it does nothing."""
  parent = os.getpid()

  def preexec():
    try:
      libc = ctypes.CDLL(None, use_errno=True)
      libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux
      return
    if os.getppid() != parent:  # it ended before prctl took effect
      os.kill(os.getpid(), signal.SIGKILL)

  return preexec if sys.platform.startswith("linux") else None


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _run(stage, args, indent="    "):
  """Runs `python -m <args>` from the repository root; shows its output
  without TensorFlow's start-up noise, indented under the stage."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ)
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # C++ INFO/WARNING; not errors
  env["PYTHONUNBUFFERED"] = "1"
  _log(f"{stage}: python -m {' '.join(args)}")
  started = time.time()
  line_filter = _Filter()
  child_error = None
  with subprocess.Popen([sys.executable, "-m"] + args, cwd=root, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, errors="replace", bufsize=1,
                        preexec_fn=_ends_with_this_process()) as proc:
    for line in proc.stdout:
      line = line.rstrip("\n")
      if _CHILD_ERROR.match(line):
        child_error = line  # said once, in the quickstart's own error
        continue
      shown = line_filter.shown(line)
      if shown is not None:
        print(f"{indent}{shown}" if shown else "", flush=True)
  if proc.returncode:
    if child_error:
      cause = _relayed(child_error)
    else:
      cause = f"exit status {proc.returncode}"
    raise cli.Error(f"the {stage} stage failed ({cause}); fix that and rerun "
                    "the same command: finished stages are kept.")
  _log(f"{stage}: done in {time.time() - started:.0f} s")


def _relayed(child_error):
  """A stage's last line, `program: error: sentence`, as the quickstart's
  own sentence quotes it. A full disk's advice names the stage's flag
  (--output_dir, --output_file, ...), which the quickstart sets to a path
  under --work_dir: the user's choice is --work_dir."""
  program, _, cause = child_error.partition(": error: ")
  cause = re.sub(r"point --\w+ at another disk",
                 "point --work_dir at another disk", cause.rstrip("."))
  return f"{program} says: {cause}"


# ------------------------------------------------------------ stages ----
# Each stage records what it was made from in <output>.made_from.json beside
# its output: the flags that change it and the identity of its inputs (a
# file's path, size and mtime; an earlier stage's record). A rerun compares:
# the same -> the stage is reused (or resumed); different -> the stage and
# every stage after it are redone (their outputs removed first).

def _identity(path):
  stat = os.stat(path)
  return {"path": os.path.abspath(path), "size": stat.st_size,
          "mtime_ns": stat.st_mtime_ns}


def _digest(record):
  return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass
class _Stage:
  """One stage, described once: what it writes, from what, and how."""
  name: str
  outputs: list  # the first names its record: <basename>.made_from.json
  made_from: dict  # the flags that change it, its inputs' identities/digests
  work: str  # --work_dir, where the record is
  done: Callable[[], bool] = None  # whether the outputs are complete
  run: list | Callable[[], None] = None  # _run's args, or a function to call
  before: Callable[[], None] = None  # what the program needs written first
  reused: Callable[[], str] = None  # words when reused (else: exists, reused)
  resumable: bool = False  # half done, it runs on (the trainer resumes)

  @property
  def record_path(self):
    name = os.path.basename(self.outputs[0]).split(".")[0]
    return os.path.join(self.work, name + ".made_from.json")

  @property
  def digest(self):
    return _digest(self.made_from)

  def _recorded(self):
    try:
      with open(self.record_path, encoding="utf-8") as f:
        return json.load(f)
    except (OSError, ValueError):
      return None

  def _difference(self, recorded):
    """The first difference, as words for the log."""
    for key, value in self.made_from.items():
      old = recorded.get(key)
      if old != value:
        if isinstance(value, str) and len(value) == 64:  # an earlier stage
          return f"{key} was redone"
        if isinstance(value, dict) and "mtime_ns" in value:
          return f"{key} {value['path']} changed or is another file"
        return f"{key} {old} -> {value}"
    return "made from other inputs"

  def prepare(self, done):
    """True when the outputs can be reused; else clears them for a (re)run.

    `done()` says whether the outputs are complete. A stage left half done
    by a killed run keeps its outputs when its record matches (the trainer
    resumes), unless it cannot resume (`done` is not true and the stage is
    not `resumable`).
    """
    exists = [p for p in self.outputs if os.path.exists(p)]
    recorded = self._recorded()
    if recorded == self.made_from:
      if done():
        return True
      if self.resumable:  # resumes from its last checkpoint
        return False
    elif exists:
      if recorded is None:
        raise cli.Error(
            f"--work_dir={os.path.dirname(self.record_path)} holds "
            f"{', '.join(exists)} but no record of what it was made from (an "
            "older quickstart or another program wrote it); remove it or "
            "pass a new --work_dir.")
      _log(f"{self.name}: {self._difference(recorded)}: redoing {self.name} "
           "and the stages after it")
    for path in exists:
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
      else:
        os.remove(path)
    cli.atomic_write(self.record_path,
                     json.dumps(self.made_from, indent=2, sort_keys=True) + "\n")
    return False


def _model_shape():
  match = re.fullmatch(r"L(\d+)_H(\d+)_A(\d+)", FLAGS.model)
  if not match:
    raise app.UsageError(f"--model={FLAGS.model} is not of the form "
                         "L<layers>_H<hidden>_A<heads>, e.g. L2_H128_A2")
  return tuple(int(group) for group in match.groups())


def _model_config(vocab_size):
  layers, hidden, heads = _model_shape()
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  return configs.BertConfig(
      vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
      num_attention_heads=heads, intermediate_size=4 * hidden,
      max_position_embeddings=max(512, FLAGS.max_seq_length))


def _check_flags(work):
  """Every path and number a user can get wrong, before any work."""
  _model_shape()
  cli.check_positive(FLAGS, (
      "vocab_size", "max_seq_length", "max_predictions_per_seq",
      "dupe_factor", "num_train_steps", "train_batch_size", "max_documents"))
  try:
    _model_config(FLAGS.vocab_size)
  except ValueError as e:
    raise app.UsageError(f"--model={FLAGS.model}: {e}") from None
  if FLAGS.corpus:
    cli.check_text_file("corpus", FLAGS.corpus)
    _check_corpus_text(FLAGS.corpus)
  cli.check_output_dir("work_dir", work, create=False)


def _check_corpus_text(path):
  """--corpus holds text the stages can use: else one sentence, before any
  stage writes its record (the vocab stage's own check would come after)."""
  total = undecodable = text = 0
  with open(path, "rb") as f:
    for raw in f:
      total += 1
      try:
        text += bool(raw.decode("utf-8").strip())
      except UnicodeDecodeError:
        undecodable += 1
  reason = cli.mostly_undecodable("corpus", path, undecodable, total)
  if reason:
    raise cli.Error(reason)
  if not text:
    raise cli.Error(f"--corpus={path} holds no text (it is empty or blank); "
                    "pass a corpus with one sentence per line.")


def _stages(work, paths):
  """Stages 1-6 (and huggingface) in order, each made from the flags that
  change it and the digests of the stages it reads."""
  p = paths
  stages = []

  def stage(name, outputs, made_from, **how):
    stages.append(_Stage(name, outputs, made_from, work, **how))
    return stages[-1].digest

  def exist(*files):
    return lambda: all(os.path.exists(f) for f in files)

  if FLAGS.corpus:
    corpus = _identity(p["corpus"])
    _log(f"corpus: {p['corpus']}")
  else:
    corpus = stage("corpus", [p["corpus"]],
                   {"max_documents": FLAGS.max_documents,
                    "python": sys.version.split()[0]},
                   done=exist(p["corpus"]),
                   run=lambda: _write_corpus(p["corpus"]))
  vocab = stage("vocab", [p["vocab"]],
                {"corpus": corpus, **_values("vocab_size")},
                done=exist(p["vocab"]),
                run=["tfrecords.learn_vocab", f"--input_file={p['corpus']}",
                     f"--output_file={p['vocab']}", *_passed("vocab_size")])
  data_flags = ("max_seq_length", "max_predictions_per_seq", "dupe_factor")
  data = stage("data", [os.path.dirname(p["data"])],
               {"vocab": vocab, **_values(*data_flags)},
               done=exist(p["data"]),
               reused=lambda: f"{p['data']} exists, reused",
               run=["tfrecords.create_pretraining_data",
                    f"--input_file={p['corpus']}",
                    f"--output_file={p['data']}",
                    f"--vocab_file={p['vocab']}", *_passed(*data_flags)])
  # bert_config.json belongs to the train stage: it is rewritten only when
  # the checkpoints beside it are removed (a new model, data or schedule).
  eval_results = os.path.join(p["pretraining"], "eval_results.txt")
  steps = FLAGS.num_train_steps
  # A checkpoint every 10% of the run, at each progress line: a killed
  # quickstart loses little.
  every = -(-steps // 10)
  train = stage(
      "train", [p["pretraining"], p["bert_config"]],
      {"data": data, **_values("model", "num_train_steps", "train_batch_size",
                               "learning_rate", "optimizer")},
      done=exist(eval_results), resumable=True,
      reused=lambda: _reused_training(eval_results),
      before=lambda: _write_bert_config(p),
      run=["official_bert.run_pretraining", "--do_train", "--do_eval",
           f"--input_file={p['data']}", f"--output_dir={p['pretraining']}",
           f"--bert_config_file={p['bert_config']}",
           *_passed("max_seq_length", "max_predictions_per_seq",
                    "train_batch_size", "num_train_steps"),
           f"--num_warmup_steps={steps // 10}",
           *_passed("learning_rate", "optimizer"),
           f"--save_checkpoints_steps={every}", f"--steps_per_loop={every}",
           "--max_eval_steps=20"])
  model = [f"--bert_config_file={p['bert_config']}",
           f"--init_checkpoint={p['pretraining']}",
           f"--vocab_file={p['vocab']}"]
  hub_dir = os.path.dirname(p["hub_encoder"])
  stage("hub", [hub_dir], {"train": train, **_values("max_seq_length")},
        done=exist(p["hub_encoder"], p["hub_preprocessor"]),
        run=["export.export_tfhub", *model, f"--export_dir={hub_dir}",
             f"--seq_length={FLAGS.max_seq_length}"])
  stage("serving", [p["serving"]],
        {"train": train, **_values("max_seq_length")},
        done=lambda: bool(glob.glob(
            os.path.join(p["serving"], "*", "saved_model.pb"))),
        run=["export.export_saved_model", *model,
             f"--export_dir={p['serving']}", *_passed("max_seq_length")])
  if FLAGS.export_huggingface:
    stage("huggingface", [p["huggingface"]], {"train": train},
          done=exist(os.path.join(p["huggingface"], "model.safetensors")),
          run=["export.export_checkpoint", *model, "--format=huggingface",
               f"--export_dir={p['huggingface']}"])
  return stages


def _values(*names):
  """{flag: value} of the quickstart's flags `names`."""
  return {name: FLAGS[name].value for name in names}


def _passed(*names):
  """The quickstart's flags `names`, passed on to a stage's program."""
  return [f"--{name}={value}" for name, value in _values(*names).items()]


def _write_corpus(path):
  from official_bert import stdlib_corpus  # pylint: disable=g-import-not-at-top
  started = time.time()
  docs, sentences = stdlib_corpus.write_corpus(
      path, max_documents=FLAGS.max_documents)
  _log(f"corpus: {docs} documents, {sentences} sentences of Python "
       f"standard-library docstrings in {time.time() - started:.0f} s")


def _write_bert_config(paths):
  """The model's config for the learned vocabulary, unless the one beside
  the checkpoints being resumed is there."""
  if not os.path.exists(paths["bert_config"]):
    with open(paths["vocab"], encoding="utf-8") as f:
      vocab_size = sum(1 for _ in f)
    _model_config(vocab_size).to_json_file(paths["bert_config"])


def _reused_training(eval_results):
  with open(eval_results, encoding="utf-8") as f:
    values = dict(line.strip().split(" = ") for line in f if " = " in line)
  return f"{eval_results} exists, reused: " + ", ".join(
      f"{k} {float(v):.4g}" for k, v in sorted(values.items()))


def run_pipeline(work):
  """Stages 1-7; returns {artefact: path}."""
  _check_flags(work)  # Bad flags fail before any work is done.
  os.makedirs(work, exist_ok=True)
  paths = {
      # Absolute: the stages run from the repository root.
      "corpus": os.path.abspath(FLAGS.corpus or os.path.join(work, "corpus.txt")),
      "vocab": os.path.join(work, "vocab.txt"),
      "data": os.path.join(work, "data", "train.tfrecord"),
      "bert_config": os.path.join(work, "bert_config.json"),
      "pretraining": os.path.join(work, "pretraining"),
      "hub_encoder": os.path.join(work, "hub", "encoder"),
      "hub_preprocessor": os.path.join(work, "hub", "preprocessor"),
      "serving": os.path.join(work, "serving"),
  }
  if FLAGS.export_huggingface:
    paths["huggingface"] = os.path.join(work, "huggingface")
  for stage in _stages(work, paths):
    if stage.prepare(stage.done):
      _log(f"{stage.name}: " + (stage.reused() if stage.reused else
                                f"{stage.outputs[0]} exists, reused"))
    elif callable(stage.run):
      stage.run()
    else:
      if stage.before:
        stage.before()
      _run(stage.name, stage.run)
  _run("demo", ["official_bert.quickstart", "--demo_only",
                f"--work_dir={work}"], indent="")
  return paths


def demo(work):
  """Reloads the exported TF-Hub modules and shows what the model learned."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import

  preprocessor = tf.saved_model.load(os.path.join(work, "hub", "preprocessor"))
  encoder = tf.saved_model.load(os.path.join(work, "hub", "encoder"))
  special = {k: int(v) for k, v in
             preprocessor.tokenize.get_special_tokens_dict().items()}
  with open(os.path.join(work, "vocab.txt"), encoding="utf-8") as f:
    vocab = [line.rstrip("\n") for line in f]

  print("\nFill-mask, top 5 (from the exported encoder's .mlm):")
  for sentence in FILL_MASK:
    left, right = sentence.split("[MASK]")
    pieces = preprocessor.tokenize(tf.constant([left, right]))
    ids = pieces.merge_dims(-2, -1) if pieces.shape.rank == 3 else pieces
    left_ids, right_ids = ids[0].numpy().tolist(), ids[1].numpy().tolist()
    tokens = ([special["start_of_sequence_id"]] + left_ids +
              [special["mask_id"]] + right_ids + [special["end_of_segment_id"]])
    length = len(tokens)
    inputs = {
        "input_word_ids": tf.constant([tokens], tf.int32),
        "input_mask": tf.ones((1, length), tf.int32),
        "input_type_ids": tf.zeros((1, length), tf.int32),
        "masked_lm_positions": tf.constant([[len(left_ids) + 1]], tf.int32),
    }
    logits = encoder.mlm(inputs)["mlm_logits"][0, 0].numpy()
    top = np.argsort(-logits)[:5]
    words = ", ".join(vocab[i] for i in top)
    print(f"  {sentence}\n    -> {words}")

  print("\nSentence similarity (cosine of mean-pooled sequence_output):")
  for a, b in PAIRS:
    out = encoder(preprocessor(tf.constant([a, b])))
    mask = tf.cast(preprocessor(tf.constant([a, b]))["input_mask"], tf.float32)
    seq = tf.cast(out["sequence_output"], tf.float32)
    mean = tf.reduce_sum(seq * mask[..., None], 1) / tf.reduce_sum(mask, 1,
                                                                   keepdims=True)
    mean = tf.math.l2_normalize(mean, axis=-1).numpy()
    print(f"  {float(mean[0] @ mean[1]):+.3f}  {a!r} ~ {b!r}")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  work = os.path.abspath(FLAGS.work_dir)
  if FLAGS.demo_only:
    for module in ("encoder", "preprocessor"):
      cli.check_input_dir("work_dir", os.path.join(work, "hub", module))
    demo(work)
    return
  started = time.time()
  paths = run_pipeline(work)
  _log(f"finished in {time.time() - started:.0f} s. Artefacts:")
  for name, path in paths.items():
    print(f"  {name:17s} {path}")


if __name__ == "__main__":
  cli.run(main)
