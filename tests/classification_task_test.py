"""tasks/classification/classification_task.py: eval_results, the loss, the labels' order
and test_results.tsv, on hand-computed numbers (no training)."""

import json

import numpy as np
import pytest

from official_bert.tasks.classification import classification_task
from tests import testing


def _log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  top = logits.max(-1, keepdims=True)
  return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def test_eval_results_against_numpy_on_large_logits():
  # Logits near 1000: a softmax taken without shifting overflows to nan.
  logits = np.array([[1000.0, 998.0, 990.0], [0.5, 3.0, 1.0],
                     [2.0, 0.0, 2.5], [1001.0, 1000.0, 999.0]], np.float32)
  labels = np.array([0, 1, 0, 2])
  result = classification_task.eval_results(logits, labels, False, 11)
  expected = -_log_softmax(logits)[np.arange(4), labels].mean()
  assert result["eval_loss"] == pytest.approx(expected, rel=1e-5)
  assert result["loss"] == result["eval_loss"]
  assert result["eval_accuracy"] == pytest.approx(2 / 4)
  assert result["global_step"] == 11
  assert result["eval_num_examples"] == 4


def test_the_training_loss_is_numpys_cross_entropy_and_mse():
  logits = np.array([[0.3, -1.2, 2.0], [1.5, 0.0, -0.5]], np.float32)
  labels = np.array([2, 1], np.int32)
  loss = classification_task.classifier_losses(labels, logits)["loss"]
  expected = -_log_softmax(logits)[[0, 1], labels].mean()
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  mse = classification_task.classifier_losses(
      np.array([1.0, -2.0], np.float32), np.array([[0.5], [1.0]], np.float32),
      regression=True)["loss"]
  assert float(mse) == pytest.approx((0.25 + 9.0) / 2)


def test_test_results_rows_are_probabilities_in_label_order():
  logits = np.array([[0.0, np.log(3.0)], [np.log(4.0), 0.0]], np.float32)
  rows = classification_task.test_results_rows(logits, regression=False)
  values = [[float(v) for v in row.split("\t")] for row in rows]
  np.testing.assert_allclose(values, [[0.25, 0.75], [0.8, 0.2]], rtol=1e-6)
  assert classification_task.test_results_rows(
      np.array([[1.5], [-2.0]], np.float32), regression=True) == ["1.5", "-2.0"]


def _task(tmp_path, **modes):
  data = tmp_path / "data"
  data.mkdir(exist_ok=True)
  (data / "train.tsv").write_text(
      "sentence\tpart\nthe c api\tc_api\nnew in 3.9\twhatsnew\n"
      "object pointer\tc_api\n")
  (data / "dev.tsv").write_text(
      "sentence\tpart\nreference counts\tc_api\nnew in 3.12\twhatsnew\n"
      "added a module\twhatsnew\n")
  (data / "test.tsv").write_text("sentence\nfoo\nbar\n")
  return classification_task.ClassificationTask(
      classification_task.ClassificationConfig(
          data_dir=str(data), output_dir=str(tmp_path / "out"),
          label_column="part", **modes))


def test_labels_are_the_fine_tuned_models_own_when_not_training(tmp_path):
  # A fine-tuned model's classes are in its label_list.json order; reading
  # them sorted from train instead would swap its classes.
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "label_list.json").write_text(
      json.dumps(["whatsnew", "c_api"]))
  task = _task(tmp_path, do_eval=True)
  task.read()
  assert task.labels == ["whatsnew", "c_api"]
  assert list(task.splits["dev"][2]) == [1, 0, 0]
  assert set(task.splits) == {"dev"}
  training = _task(tmp_path, do_train=True, do_predict=True)
  training.read()
  assert training.labels == ["c_api", "whatsnew"]
  assert set(training.splits) == {"train", "test"}
  assert training.run_files() == {
      "label_list.json": '["c_api", "whatsnew"]\n'}


def test_a_single_label_is_one_sentence(tmp_path):
  task = _task(tmp_path, do_train=True)
  (tmp_path / "data" / "train.tsv").write_text("sentence\tpart\na\tx\nb\tx\n")
  with pytest.raises(ValueError, match=r"only the label \['x'\]"):
    task.read()


def test_evaluate_and_predict_read_their_own_split(tmp_path):
  testing.require_shared_data()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  task = _task(tmp_path, do_train=True, do_eval=True, do_predict=True)
  task.read()
  task.encode(tokenization.FullTokenizer(testing.VOCAB), max_seq_length=16)
  seen = []

  def predict(inputs, fill=0.0):
    del fill
    seen.append(len(inputs["input_word_ids"]))
    # dev: c_api, whatsnew, whatsnew -> predicted c_api, whatsnew, c_api.
    return np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]][:seen[-1]],
                    np.float32)

  result = task.evaluate(predict, step=5)
  assert seen == [3] and result["eval_accuracy"] == pytest.approx(2 / 3)
  files, said, evaluated = task.predict(predict, step=5)
  assert seen == [3, 2] and evaluated is None
  assert files["test_results.tsv"].count("\n") == 2
  assert said.startswith("2 test predictions in ")
  assert task.eval_summary(result) == "eval_accuracy 0.6667"
  labels, logits = np.array([0, 1]), np.array([[2.0, 1.0], [3.0, 0.0]])
  counts = task.metric_counts(labels, logits)
  assert {k: float(v) for k, v in counts.items()} == {
      "label_correct": 1.0, "label_total": 2.0}


def test_regression_has_no_labels_and_its_own_metric(tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.tsv").write_text("sentence\tscore\na\t1.5\nb\t2\n")
  task = classification_task.ClassificationTask(
      classification_task.ClassificationConfig(
          data_dir=str(data), output_dir=str(tmp_path / "out"),
          label_column="score", task_type="regression", do_train=True))
  task.read()
  assert task.labels is None and task.run_files() == {}
  assert task.best_metric == "eval_pearson"
  assert task.metric_counts(np.array([1.5]), np.array([[1.0]])) == {}
  np.testing.assert_array_equal(task.splits["train"][2], [1.5, 2.0])
