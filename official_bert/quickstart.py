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

Every stage writes its outputs atomically and is skipped when they exist, so
an interrupted run, run again, continues where it stopped (the trainer itself
resumes from its last checkpoint).
"""

import glob
import os
import re
import subprocess
import sys
import time

from absl import app
from absl import flags

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
flags.DEFINE_string("model", "L2_H128_A2",
                    "Model size as L<layers>_H<hidden>_A<heads>.")
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


def _run(stage, args):
  """Runs `python -m <args>` from the repository root, streaming its output."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ)
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  _log(f"{stage}: python -m {' '.join(args)}")
  started = time.time()
  result = subprocess.run([sys.executable, "-m"] + args, cwd=root, env=env,
                          check=False)
  if result.returncode:
    raise SystemExit(f"[quickstart] stage '{stage}' failed (exit "
                     f"{result.returncode}); fix the error above and rerun: "
                     "finished stages are kept")
  _log(f"{stage}: done in {time.time() - started:.0f} s")


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


def run_pipeline(work):
  """Stages 1-7; returns {artefact: path}."""
  _model_shape()  # Bad flags fail before any work is done.
  if FLAGS.corpus and not os.path.isfile(FLAGS.corpus):
    raise app.UsageError(f"--corpus {FLAGS.corpus} does not exist; pass a text "
                         "file with one sentence per line")
  os.makedirs(work, exist_ok=True)
  paths = {
      "corpus": FLAGS.corpus or os.path.join(work, "corpus.txt"),
      "vocab": os.path.join(work, "vocab.txt"),
      "data": os.path.join(work, "data", "train.tfrecord"),
      "bert_config": os.path.join(work, "bert_config.json"),
      "pretraining": os.path.join(work, "pretraining"),
      "hub_encoder": os.path.join(work, "hub", "encoder"),
      "hub_preprocessor": os.path.join(work, "hub", "preprocessor"),
      "serving": os.path.join(work, "serving"),
  }
  if FLAGS.corpus:
    _log(f"corpus: {FLAGS.corpus}")
  elif os.path.exists(paths["corpus"]):
    _log(f"corpus: {paths['corpus']} exists, reused")
  else:
    from official_bert import stdlib_corpus  # pylint: disable=g-import-not-at-top
    started = time.time()
    docs, sentences = stdlib_corpus.write_corpus(
        paths["corpus"], max_documents=FLAGS.max_documents)
    _log(f"corpus: {docs} documents, {sentences} sentences of Python "
         f"standard-library docstrings in {time.time() - started:.0f} s")

  if os.path.exists(paths["vocab"]):
    _log(f"vocab: {paths['vocab']} exists, reused")
  else:
    _run("vocab", ["tfrecords.learn_vocab", f"--input_file={paths['corpus']}",
                   f"--output_file={paths['vocab']}",
                   f"--vocab_size={FLAGS.vocab_size}"])

  if os.path.exists(paths["data"]):
    _log(f"data: {paths['data']} exists, reused")
  else:
    os.makedirs(os.path.dirname(paths["data"]), exist_ok=True)
    _run("data", ["tfrecords.create_pretraining_data",
                  f"--input_file={paths['corpus']}",
                  f"--output_file={paths['data']}",
                  f"--vocab_file={paths['vocab']}",
                  f"--max_seq_length={FLAGS.max_seq_length}",
                  f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
                  f"--dupe_factor={FLAGS.dupe_factor}"])

  with open(paths["vocab"], encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  _model_config(vocab_size).to_json_file(paths["bert_config"])

  eval_results = os.path.join(paths["pretraining"], "eval_results.txt")
  if os.path.exists(eval_results):
    _log(f"train: {eval_results} exists, reused")
  else:
    _run("train", ["official_bert.run_pretraining", "--do_train", "--do_eval",
                   f"--input_file={paths['data']}",
                   f"--output_dir={paths['pretraining']}",
                   f"--bert_config_file={paths['bert_config']}",
                   f"--max_seq_length={FLAGS.max_seq_length}",
                   f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
                   f"--train_batch_size={FLAGS.train_batch_size}",
                   f"--num_train_steps={FLAGS.num_train_steps}",
                   f"--num_warmup_steps={FLAGS.num_train_steps // 10}",
                   f"--learning_rate={FLAGS.learning_rate}",
                   f"--save_checkpoints_steps={max(1, FLAGS.num_train_steps // 5)}",
                   f"--steps_per_loop={max(1, min(100, FLAGS.num_train_steps // 10))}",
                   "--max_eval_steps=20"])
  with open(eval_results) as f:
    _log("train: " + ", ".join(line.strip() for line in f if line.strip()))

  common = [f"--bert_config_file={paths['bert_config']}",
            f"--init_checkpoint={paths['pretraining']}",
            f"--vocab_file={paths['vocab']}"]
  hub_dir = os.path.dirname(paths["hub_encoder"])
  if os.path.exists(paths["hub_encoder"]) and os.path.exists(
      paths["hub_preprocessor"]):
    _log(f"hub: {hub_dir} exists, reused")
  else:
    _run("hub", ["export.export_tfhub", *common, f"--export_dir={hub_dir}",
                 f"--seq_length={FLAGS.max_seq_length}"])
  if glob.glob(os.path.join(paths["serving"], "*", "saved_model.pb")):
    _log(f"serving: {paths['serving']} exists, reused")
  else:
    _run("serving", ["export.export_saved_model", *common,
                     f"--export_dir={paths['serving']}",
                     f"--max_seq_length={FLAGS.max_seq_length}"])

  _run("demo", ["official_bert.quickstart", "--demo_only",
                f"--work_dir={work}"])
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
    demo(work)
    return
  started = time.time()
  paths = run_pipeline(work)
  _log(f"finished in {time.time() - started:.0f} s. Artefacts:")
  for name, path in paths.items():
    print(f"  {name:17s} {path}")


if __name__ == "__main__":
  app.run(main)
