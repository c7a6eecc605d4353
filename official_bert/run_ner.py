"""Fine-tunes BERT for named-entity recognition on CoNLL-2003-style files.

    python -m official_bert.run_ner --task_data_dir=conll2003 \\
      --bert_config_file=bert_base/bert_config.json \\
      --vocab_file=bert_base/vocab.txt --init_checkpoint=bert_base \\
      --do_train --do_eval --do_predict --max_seq_length=128 \\
      --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=3 \\
      --output_dir=/tmp/ner --export_dir=/tmp/ner_serving

--task_data_dir holds `train`, `dev` (or `valid`) and `test` files (no
extension, `.txt` or `.conll`): one word per line with its tag in the last
column, a blank line between sentences, `-DOCSTART-` lines skipped (see
tasks/ner.py). Tags are the training file's (label_list.json); the loss and
the prediction use each word's first WordPiece; long sentences are split into
windows of --max_seq_length. The flags and the loop are run_classifier's
(finetuning_flags.py, training/finetuner.py: strategy, mixed precision, XLA,
resume from --output_dir).

Writes to --output_dir: ckpt-<step>, flags.json, bert_config.json,
label_list.json, eval_results.txt (entity-level eval_precision, eval_recall,
eval_f1 as conlleval, eval_accuracy over words, eval_loss, eval_f1_<TYPE>,
global_step, loss), test_predictions.txt (`word gold predicted` per line,
a blank line between sentences: conlleval's input). With --export_dir, a TF
Serving SavedModel: raw text in, words, tags and offsets out
(export/ner_serving.py).
"""

import json
import os

from absl import app
from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert.training import cpu_allocator
from official_bert.training import finetuner
from official_bert.training import preemption

FLAGS = flags.FLAGS

SPLIT_NAMES = {"train": ("train",), "dev": ("dev", "valid"), "test": ("test",)}
EXTENSIONS = ("", ".txt", ".conll")


def define_flags():
  finetuning_flags.define_flags(
      max_seq_length=128, learning_rate=5e-5, export_help="If set, export "
      "the fine-tuned model for TF Serving (raw text in, words, tags and "
      "character offsets out) here.")
  flags.DEFINE_string("task_data_dir", None, "Directory with the train, dev "
                      "(or valid) and test CoNLL files.")


def split_file(data_dir, split):
  """The one CoNLL file of `split` in `data_dir`."""
  candidates = [name + ext for name in SPLIT_NAMES[split] for ext in EXTENSIONS]
  found = [c for c in candidates if os.path.isfile(os.path.join(data_dir, c))]
  if not found:
    raise ValueError(f"--task_data_dir {data_dir} has no {split} file; "
                     f"expected one of {candidates}")
  if len(found) > 1:
    raise ValueError(f"--task_data_dir {data_dir} has several {split} files "
                     f"{found}; keep one")
  return os.path.join(data_dir, found[0])


def token_losses(labels, logits):
  """{"loss": mean cross-entropy over the labelled positions (labels >= 0)}."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  weights = ops.cast(ops.greater_equal(labels, 0), "float32")       # [B, T]
  per_token = keras.losses.sparse_categorical_crossentropy(
      ops.maximum(labels, 0), logits, from_logits=True)             # [B, T]
  return {"loss": ops.sum(per_token * weights) /
                  ops.maximum(ops.sum(weights), 1.0)}


def token_metric_counts(labels, logits):
  """Correct/total over labelled positions (logged as label_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  weights = ops.cast(ops.greater_equal(labels, 0), "float32")
  predicted = ops.cast(ops.argmax(logits, -1), "int32")
  correct = ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")
  return {"label_correct": ops.sum(correct * weights),
          "label_total": ops.sum(weights)}


def word_logits(logits, window, position):
  """Each word's logits [N, C] from the windows' [R, T, C]."""
  return logits[window, position]


def _labels(data_dir):
  """The training file's tags, or a previous run's label_list.json."""
  from official_bert.tasks import ner  # pylint: disable=g-import-not-at-top
  saved = os.path.join(FLAGS.output_dir, "label_list.json")
  if os.path.exists(saved) and not FLAGS.do_train:
    with open(saved, encoding="utf-8") as f:
      return json.load(f)
  try:
    train = split_file(data_dir, "train")
  except ValueError:
    raise ValueError(f"--task_data_dir {data_dir} has no train file and "
                     f"{saved} does not exist: the tags are unknown; run "
                     "--do_train first or add the train file") from None
  return ner.label_list(ner.read_conll(train))


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  finetuning_flags.check_flags(FLAGS, data_paths={"task_data_dir": "dir"})
  from official_bert.tasks import ner  # pylint: disable=g-import-not-at-top
  data_dir = FLAGS.task_data_dir
  # Every file is read and checked before TensorFlow starts.
  try:
    labels = _labels(data_dir)
    splits = {}
    evaluating = FLAGS.do_eval or (FLAGS.do_train and FLAGS.eval_every_steps)
    for split, wanted in (("train", FLAGS.do_train), ("dev", evaluating),
                          ("test", FLAGS.do_predict)):
      if wanted:
        sentences = ner.read_conll(split_file(data_dir, split))
        splits[split] = (sentences, ner.tag_ids(sentences, labels))
  except (ValueError, UnicodeDecodeError, OSError) as e:
    raise app.UsageError(finetuning_flags.data_error(e))
  if len(labels) < 2:
    raise app.UsageError(f"the train file has only the tag {labels}; NER "
                         "needs at least two.")

  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  config, tokenizer = finetuning_flags.load_config_and_vocab(FLAGS)
  encoded = {}
  for split, (sentences, ids) in splits.items():
    inputs, window, position, window_labels = ner.encode(
        sentences, tokenizer, FLAGS.max_seq_length, ids)
    encoded[split] = (sentences, inputs, window, position, window_labels)

  # The loss never reaches the pooler: it gets no gradient and stays as
  # loaded (train_step.py skips it, as the original's optimizer skips
  # variables without a gradient), and is saved and exported with the rest.
  num_train = len(encoded["train"][4]) if FLAGS.do_train else 0
  run = finetuner.Finetuner(
      finetuning_flags.driver_config(FLAGS, num_train),
      lambda kernels: finetuning_models.BertTokenClassifier.from_bert_config(
          config, len(labels), kernels=kernels),
      token_losses, token_metric_counts, num_train_examples=num_train,
      best_metric="eval_f1")
  run.write_run_files(
      config, files={"label_list.json": json.dumps(labels) + "\n"})
  print(f"NER: tags {labels}, "
        + ", ".join(f"{split} {len(e[0])} sentences in {len(e[4])} windows"
                    for split, e in encoded.items())
        + f"; {run.describe()}", flush=True)
  for split, (sentences, inputs, _, _, window_labels) in list(
      encoded.items())[:1]:
    n = int(inputs["input_mask"][0].sum())
    print(f"{split} window 0 ({sentences[0].where}): " + " ".join(
        token + (f"/{labels[label]}" if label >= 0 else "")
        for token, label in zip(tokenizer.convert_ids_to_tokens(
            inputs["input_word_ids"][0][:n]), window_labels[0][:n])),
          flush=True)

  def predict(split, batch_size):
    sentences, inputs, window, position, window_labels = encoded[split]
    logits = word_logits(run.predict(inputs, batch_size),
                         window, position)                     # [N, C]
    flat = np.argmax(logits, -1)
    tags, start = [], 0
    for sentence in sentences:
      tags.append([labels[i] for i in flat[start:start + len(sentence.words)]])
      start += len(sentence.words)
    gold = window_labels[window, position]
    return sentences, tags, _mean_cross_entropy(logits, gold)

  def evaluate(step):
    sentences, tags, loss = predict("dev", FLAGS.eval_batch_size)
    metrics = ner.entity_metrics([s.tags for s in sentences], tags)
    result = {f"eval_{k}": v for k, v in metrics.items()}
    result.update(eval_loss=loss, loss=loss, global_step=step)
    return result

  run.restore_or_warm_start()
  if FLAGS.do_train:
    _, inputs, _, _, window_labels = encoded["train"]
    if not run.train(inputs, window_labels, evaluate):
      return  # SIGTERM: checkpoint saved, rerun resumes.

  summary = []
  if FLAGS.do_eval:
    result = evaluate(run.step)
    run.write_eval_results(result)
    summary.append(f"entity F1 {result['eval_f1']:.4f}")
  if FLAGS.do_predict:
    sentences, tags, _ = predict("test", FLAGS.predict_batch_size)
    if run.is_chief:
      run.write("test_predictions.txt",
                ner.format_predictions(sentences, tags))
    summary.append(f"{len(sentences)} test sentences tagged")
  if FLAGS.export_dir and run.is_chief:
    from export import ner_serving  # pylint: disable=g-import-not-at-top
    path = ner_serving.export_ner_model(
        FLAGS.export_dir, run.export_model(
            {k: v[:1] for k, v in next(iter(encoded.values()))[1].items()}),
        labels, FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length)
    summary.append(f"exported {path}")
  print(f"run_ner done at step {run.step}: " + "; ".join(summary)
        + f"; output in {FLAGS.output_dir}", flush=True)


def _mean_cross_entropy(logits, labels):
  import numpy as np  # pylint: disable=g-import-not-at-top
  if not len(labels):
    return 0.0
  shifted = logits - logits.max(-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
