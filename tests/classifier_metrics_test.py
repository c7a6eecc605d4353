"""GLUE metrics against hand-computed values."""

import numpy as np
import pytest

from official_bert.training import classifier_metrics


def test_classification_metrics_match_hand_computation():
  labels = [1, 1, 1, 0, 0, 0, 0, 1]
  predictions = [1, 1, 0, 0, 0, 1, 0, 1]
  m = classifier_metrics.classification_metrics(labels, predictions)
  # tp=3 fp=1 fn=1 tn=3.
  assert m["accuracy"] == pytest.approx(6 / 8)
  assert m["f1"] == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
  assert m["matthews_corrcoef"] == pytest.approx((3 * 3 - 1 * 1) / np.sqrt(4 * 4 * 4 * 4))
  three = classifier_metrics.classification_metrics([0, 1, 2, 2], [0, 2, 2, 2], 3)
  # Per-class F1: 1, 0, 0.8 -> macro 0.6.
  assert three["f1"] == pytest.approx(0.6)
  assert classifier_metrics.classification_metrics(
      [0, 1, 0], [0, 0, 0])["matthews_corrcoef"] == 0.0


def test_regression_metrics_and_ranks_with_ties():
  np.testing.assert_allclose(classifier_metrics.rank([10, 20, 20, 5]),
                             [2, 3.5, 3.5, 1])
  m = classifier_metrics.regression_metrics([1, 2, 3, 4], [1, 4, 9, 16])
  assert m["spearman"] == pytest.approx(1.0)
  x, y = np.array([1, 2, 3, 4.]), np.array([1, 4, 9, 16.])
  expected = np.corrcoef(x, y)[0, 1]
  assert m["pearson"] == pytest.approx(expected) and m["pearson"] < 0.99
  assert classifier_metrics.regression_metrics(
      [1, 2, 3], [3, 2, 1])["spearman"] == pytest.approx(-1.0)


def test_binary_f1_and_mcc_on_an_asymmetric_confusion_matrix():
  """tp=3, fp=2, fn=1, tn=4: every count differs, so F1 of the wrong class
  (label 0's, 8/11), fp and fn swapped, or MCC with a swapped term cannot
  pass (the other test's matrix has tp = tn and fp = fn). The positive class
  is label id 1, as GLUE reports F1 for MRPC and QQP."""
  labels = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
  predictions = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
  m = classifier_metrics.classification_metrics(labels, predictions)
  tp, fp, fn, tn = 3, 2, 1, 4
  assert m["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))  # 6/9
  assert m["f1"] != pytest.approx(2 * tn / (2 * tn + fn + fp))  # label 0's
  assert m["matthews_corrcoef"] == pytest.approx(
      (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) *
                                    (tn + fn)))
  assert m["accuracy"] == pytest.approx(7 / 10)
  # Three classes, rows = true labels: per-class F1 0.8 (tp=2, fn=1), 2/3
  # (tp=1, fn=1) and 0.5 (tp=1, fp=2); transposed, the same mean from 0.8,
  # 0.5 and 2/3, so each class is checked too.
  three = classifier_metrics.classification_metrics(
      [0, 0, 0, 1, 1, 2], [0, 0, 2, 2, 1, 2], 3)
  assert three["f1"] == pytest.approx((0.8 + 2 / 3 + 0.5) / 3)
  confusion = np.zeros((3, 3), np.int64)
  np.add.at(confusion, ([0, 0, 0, 1, 1, 2], [0, 0, 2, 2, 1, 2]), 1)
  assert [classifier_metrics._f1(confusion, k) for k in range(3)] == (  # pylint: disable=protected-access
      pytest.approx([0.8, 2 / 3, 0.5]))
