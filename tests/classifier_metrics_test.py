"""GLUE metrics against hand-computed values."""

import numpy as np
import pytest

from official_bert.tasks import classifier_metrics


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
