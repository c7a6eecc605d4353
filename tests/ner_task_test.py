"""tasks/ner/ner_task.py: each word's tag read at its first piece across
windows, the loss over labelled positions only, eval_results' entity
figures, and the tags' checks (no training)."""

import numpy as np
import pytest

from official_bert.tasks.ner import ner_data
from official_bert.tasks.ner import ner_task


def _sentence(words, tags):
  return ner_data.Sentence(tuple(words), tuple(tags), "x:1")


def test_word_tags_read_each_words_first_piece_across_windows():
  # Two windows [R=2, T=5, C=3]; sentence 0 has two words (window 0, at
  # positions 1 and 3), sentence 1 one word in window 1 at position 2.
  logits = np.zeros((2, 5, 3), np.float32)
  logits[0, 1, 2] = logits[0, 3, 0] = logits[1, 2, 1] = 5.0
  logits[1, 1, 2] = logits[0, 2, 1] = 9.0  # not first pieces: never read
  sentences = [_sentence(["a", "b"], ["O", "O"]), _sentence(["c"], ["O"])]
  tags = ner_task.word_tags(logits, np.array([0, 0, 1]), np.array([1, 3, 2]),
                            sentences, ["B-X", "I-X", "O"])
  assert tags == [["O", "B-X"], ["I-X"]]


def test_token_loss_counts_only_labelled_positions():
  logits = np.array([[[2.0, 0.0], [0.0, 3.0], [5.0, -5.0]],
                     [[1.0, 1.0], [0.5, 0.0], [-1.0, 1.0]]], np.float32)
  labels = np.array([[0, -1, 1], [-1, -1, 1]], np.int32)
  loss = float(ner_task.token_losses(labels, logits)["loss"])
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  expected = -np.mean([log_probs[0, 0, 0], log_probs[0, 2, 1],
                       log_probs[1, 2, 1]])
  assert loss == pytest.approx(expected, rel=1e-5)
  counts = ner_task.token_metric_counts(labels, logits)
  assert float(counts["label_correct"]) == 2
  assert float(counts["label_total"]) == 3


def test_eval_results_are_entity_level():
  gold = [_sentence(["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
          _sentence(["Peter", "Blackburn"], ["B-PER", "I-PER"])]
  # One of three entities found, one spurious: P 1/2, R 1/3.
  predicted = [["B-ORG", "O", "O"], ["B-PER", "O"]]
  result = ner_task.eval_results(gold, predicted, 0.25, step=9)
  assert result["eval_precision"] == pytest.approx(1 / 2)
  assert result["eval_recall"] == pytest.approx(1 / 3)
  assert result["eval_f1"] == pytest.approx(0.4)
  assert result["eval_accuracy"] == pytest.approx(3 / 5)
  assert result["eval_loss"] == result["loss"] == 0.25
  assert result["global_step"] == 9


def test_one_tag_and_a_missing_train_file_are_one_sentence(tmp_path):
  (tmp_path / "train.txt").write_text("EU O\nrejects O\n")
  task = ner_task.NerTask(ner_task.NerConfig(
      data_dir=str(tmp_path), output_dir=str(tmp_path / "out"),
      do_train=True))
  with pytest.raises(ValueError, match=r"only the tag \['O'\]; NER needs "
                     "at least two."):
    task.read()
  (tmp_path / "train.txt").unlink()
  (tmp_path / "test.txt").write_text("EU B-ORG\n")
  task = ner_task.NerTask(ner_task.NerConfig(
      data_dir=str(tmp_path), output_dir=str(tmp_path / "out"),
      do_predict=True))
  with pytest.raises(ValueError, match="has no train file and .*label_list"):
    task.read()


def test_split_files_accept_the_conll_names(tmp_path):
  (tmp_path / "valid.conll").write_text("a O\n")
  assert ner_task.split_file(str(tmp_path), "dev").endswith("valid.conll")
  (tmp_path / "dev.txt").write_text("a O\n")
  with pytest.raises(ValueError, match="several dev files"):
    ner_task.split_file(str(tmp_path), "dev")
