"""run_classifier --doc_stride (tasks/classification/classifier_windows.py): the windows'
starts and pieces for known piece counts, the max/mean combination against
numpy, and the program: on tools/long_document_task.py's task (the label is
one sentence anywhere in the document) a small BERT reading every window
beats the truncated document, and the export's one row per text equals
test_results.tsv for texts of 1 piece to 4,000 pieces."""

import dataclasses
import os
import re

import numpy as np
import pytest

from official_bert.modeling import finetuning_models
from official_bert.tasks.classification import classifier_windows
from tests import testing
from tools import long_document_task

CLS, SEP = 1, 2


@pytest.mark.parametrize("num_pieces, starts, lengths", [
    (1, [0], [1]),
    (8, [0], [8]),            # exactly seq_length - 2: one window
    (9, [0, 3], [8, 6]),      # one piece more: a second window
    (20, [0, 3, 6, 9, 12], [8, 8, 8, 8, 8]),  # the last ends at the end
    (21, [0, 3, 6, 9, 12, 15], [8, 8, 8, 8, 8, 6]),
])
def test_window_starts_and_pieces_for_known_counts(num_pieces, starts,
                                                   lengths):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  windowing = classifier_windows.Windowing(seq_length=10, doc_stride=3)
  ids = [100 + i for i in range(num_pieces)]
  # A short text before it: the windows' starts count in their own text.
  pieces = tf.ragged.constant([[7, 8], ids], tf.int64)
  text, start, length = windowing.starts(pieces)
  assert text.numpy().tolist() == [0] + [1] * len(starts)
  assert start.numpy().tolist() == [0] + starts
  assert length.numpy().tolist() == [2] + lengths
  inputs, window_text = windowing.pack(pieces, CLS, SEP)
  assert window_text.numpy().tolist() == [0] + [1] * len(starts)
  word_ids = inputs["input_word_ids"].numpy()
  assert word_ids.shape == (1 + len(starts), 10)
  assert word_ids[0].tolist() == [CLS, 7, 8, SEP] + [0] * 6
  for row, s, n in zip(word_ids[1:], starts, lengths):
    assert row.tolist() == [CLS] + ids[s:s + n] + [SEP] + [0] * (8 - n)
  mask = inputs["input_mask"].numpy()
  assert mask.sum(1).tolist() == [4] + [n + 2 for n in lengths]
  assert not inputs["input_type_ids"].numpy().any()


@pytest.mark.parametrize("stride, message", [
    (0, "between 1 and --max_seq_length - 2 = 8"),
    (9, "would skip pieces between windows"),
])
def test_a_stride_that_skips_pieces_is_refused(stride, message):
  with pytest.raises(ValueError, match=message):
    classifier_windows.Windowing(seq_length=10, doc_stride=stride)


@pytest.mark.parametrize("aggregation", ["max", "mean"])
def test_combine_is_each_texts_windows_max_or_mean(aggregation):
  rng = np.random.default_rng(0)
  text = np.array([0, 0, 0, 1, 2, 2], np.int32)  # 3 texts, 6 windows
  logits = rng.normal(size=(6, 4)).astype(np.float32)
  combined = classifier_windows.Windowing(
      10, 3, aggregation).combine(logits, text, 3).numpy()
  reduce = np.max if aggregation == "max" else np.mean
  expected = [reduce(logits[text == t], axis=0) for t in range(3)]
  np.testing.assert_allclose(combined, expected, rtol=1e-6)


def test_the_flags_aggregations_are_the_models():
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  assert (classifier_windows.AGGREGATIONS
          == finetuning_models.WINDOW_AGGREGATIONS)


def _config(tmp_path):
  path = str(tmp_path / "bert_config.json")
  testing.tiny_config(vocab_size=30522,
                      max_position_embeddings=32).to_json_file(path)
  return path


def _flags(task, out, config, *extra):
  return [f"--task_data_dir={task}", f"--bert_config_file={config}",
          f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
          "--max_seq_length=16", *extra]


def _accuracy(path):
  with open(path) as f:
    return float(dict(line.strip().split(" = ") for line in f)[
        "eval_accuracy"])


@pytest.mark.parametrize("training, batch", [("windows", 16),
                                             ("documents", 8)])
def test_windows_learn_beat_truncation_and_export_one_row_per_text(
    tmp_path, training, batch):
  """Either --window_training learns; documents: 8 texts of 1-3 windows a
  step, about the windows' 16. The export and the predictions do not
  depend on how training batched: checked once (windows)."""
  testing.require_shared_data()
  task, out = tmp_path / "task", tmp_path / "out"
  # Documents of 18 to 30 pieces, windows of 14 pieces every 7: one to
  # three windows each (from random weights, this small model learns the
  # key sentence only where most windows hold it).
  rows = long_document_task.write_task(str(task), train=240, dev=80, test=0,
                                       pieces=24)
  # Test texts of 1 piece (each word is one) to 4,000 (~570 windows).
  dev_texts = [text for text, _ in rows["dev"]]
  words = " ".join(dev_texts[:3]).split()
  assert len(words) > 60
  tests = ["red", " ".join(words[:10]), " ".join(words[:14]),
           " ".join(words[:15]), " ".join(words[:30]), dev_texts[3],
           " ".join(words), " ".join((words * 100)[:4000])]
  (task / "test.tsv").write_text("sentence\n" + "".join(
      t + "\n" for t in tests))
  config = _config(tmp_path)
  exporting = training == "windows"
  proc = testing.run_program("official_bert.run_classifier", _flags(
      task, out, config, "--doc_stride=7", "--do_train", "--do_eval",
      f"--train_batch_size={batch}", "--learning_rate=1e-3",
      f"--window_training={training}", "--num_train_epochs=6",
      *(["--do_predict", f"--export_dir={tmp_path / 'serving'}"]
        if exporting else [])))
  assert re.search(r"train 240 examples \(\d+ windows\)", proc.stdout)
  if training == "documents":  # a step is 8 texts with all their windows
    assert "(180 = 240 documents x 6.0 epochs / batch 8)" in proc.stdout
  windows = _accuracy(out / "eval_results.txt")
  # The same checkpoint on the documents' first 14 pieces only.
  testing.run_program("official_bert.run_classifier", _flags(
      task, out, config, "--do_eval"))
  truncated = _accuracy(out / "eval_results.txt")
  assert windows >= 0.8 and windows > truncated + 0.1, (windows, truncated)
  if not exporting:
    return

  # The export's TF Text ops are registered: the run imported them
  # (segment_packing).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  served = tf.saved_model.load(str(tmp_path / "serving" / "1")).signatures[
      "serving_default"]
  answer = served(text=tf.constant(tests))
  with open(out / "test_results.tsv") as f:
    predicted = np.array([[float(p) for p in line.split("\t")] for line in f])
  assert predicted.shape == (len(tests), 2)  # one row per text
  np.testing.assert_allclose(answer["probabilities"].numpy(), predicted,
                             atol=1e-5)
  # The served dev answers give eval's accuracy (windows combined alike).
  dev = served(text=tf.constant(dev_texts))["label"].numpy().astype(str)
  assert np.mean(dev == [label for _, label in rows["dev"]]) == (
      pytest.approx(windows))


@pytest.mark.parametrize("train, flags_, match", [
    ("sentence\tlabel\nthe red\tred\n\tblue\n", ["--doc_stride=4"],
     r"train.tsv:3: the text is empty \(no WordPieces\); --doc_stride needs"),
    ("sentence\tb\tlabel\nthe red\tx\tred\nblue\ty\tblue\n",
     ["--doc_stride=4", "--text_b_column=b"],
     r"--doc_stride windows single texts only"),
    ("sentence\tlabel\nthe red\tred\nblue\tblue\n", ["--doc_stride=15"],
     r"--doc_stride=15 must be between 1 and --max_seq_length - 2 = 14"),
])
def test_bad_input_is_one_sentence(tmp_path, train, flags_, match):
  testing.require_shared_data()
  task = tmp_path / "task"
  os.makedirs(task)
  (task / "train.tsv").write_text(train)
  proc = testing.run_program("official_bert.run_classifier", _flags(
      task, tmp_path / "out", _config(tmp_path), "--do_train", "--nodo_eval",
      *flags_), check=False, merge_stderr=True)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(proc.returncode, lines, "run_classifier",
                                   "")
  assert re.search(match, lines[-1]), lines[-1]
  assert not os.path.exists(tmp_path / "out" / "ckpt-1.index")


def test_multi_label_windows_train_per_window_and_predict_per_text(tmp_path):
  """MultiLabelTask with doc_stride: each window gets its text's label row,
  and evaluation combines each text's windows (a fake model here: a label's
  logit is 1 in a window holding its word, else -1)."""
  testing.require_shared_data()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.classification import classification_task  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.classification import multi_label_task  # pylint: disable=g-import-not-at-top
  filler = " ".join(["the"] * 20)
  (tmp_path / "train.tsv").write_text(
      f"sentence\ttags\nbread {filler}\tfood\n{filler} piano\tmusic\n"
      f"{filler} bread {filler} piano\tfood|music\nthe\t\n")
  (tmp_path / "dev.tsv").write_text(
      f"sentence\ttags\n{filler} {filler} piano\tmusic\nbread\tfood\n")
  task = multi_label_task.MultiLabelTask(
      classification_task.ClassificationConfig(
          data_dir=str(tmp_path), output_dir=str(tmp_path / "out"),
          label_column="tags", task_type="multi_label", do_train=True,
          do_eval=True, doc_stride=5))
  task.read()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB)
  task.encode(tokenizer, max_seq_length=10)
  inputs, labels = task.train_data()
  windows = task.window_text["train"]
  # 21 and 41-piece texts: 1 + ceil((21 - 8) / 5) = 4 and 8 windows.
  assert np.bincount(windows).tolist() == [4, 4, 8, 1]
  assert task.num_train_examples == 17 and task.example_name == "windows"
  expected = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], np.float32)
  np.testing.assert_array_equal(labels, expected[windows])
  ids = tokenizer.convert_tokens_to_ids(["bread", "piano"])

  def predict(batch):
    holds = [(batch["input_word_ids"] == i).any(1) for i in ids]
    return np.stack(holds, 1).astype(np.float32) * 2 - 1  # [W, 2]

  result = task.evaluate(predict, step=3)
  # max: each dev text's word is in one of its windows -> both right.
  assert result["eval_subset_accuracy"] == 1.0

  # --window_training=documents: a training example is a text's windows
  # [D, M, T] (its own first, then empty ones), with its own label row.
  task = multi_label_task.MultiLabelTask(dataclasses.replace(
      task.config, window_training="documents"))
  task.read()
  task.encode(tokenizer, max_seq_length=10)
  documents, labels = task.train_data()
  assert documents["input_mask"].shape == (4, 8, 10)
  assert task.num_train_examples == 4 and task.example_name == "documents"
  np.testing.assert_array_equal(labels, expected)
  for name, value in inputs.items():
    for text in range(4):
      own = value[windows == text]
      np.testing.assert_array_equal(documents[name][text, :len(own)], own)
      assert not documents[name][text, len(own):].any()
  assert isinstance(task.build_model(testing.tiny_config(), "keras"),
                    finetuning_models.BertDocumentClassifier)
  assert result["eval_micro_f1"] == 1.0
  assert task.split_logits("dev", predict).tolist() == [[-1, 1], [1, -1]]
