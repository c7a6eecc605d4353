"""GLUE's metrics in numpy: accuracy, F1 and Matthews correlation for
classification, Pearson and Spearman correlation for regression.

    classification_metrics(labels=[0, 1, 1], predictions=[0, 1, 0])
    # {"accuracy": 0.667, "f1": 0.667, "matthews_corrcoef": 0.5, ...}

F1 is the positive class's (label id 1) for two classes, as GLUE reports for
MRPC and QQP, and the macro average over classes otherwise. Matthews
correlation is the multi-class generalisation (Gorodkin, 2004), equal to the
usual formula for two classes. Spearman is Pearson on average ranks (ties
share their mean rank).
"""

import numpy as np


def classification_metrics(labels, predictions, num_classes=None):
  labels = np.asarray(labels, np.int64)
  predictions = np.asarray(predictions, np.int64)
  if num_classes is None:
    num_classes = int(max(labels.max(initial=0), predictions.max(initial=0))) + 1
  confusion = np.zeros((num_classes, num_classes), np.int64)
  np.add.at(confusion, (labels, predictions), 1)
  per_class = [_f1(confusion, k) for k in range(num_classes)]
  f1 = per_class[1] if num_classes == 2 else float(np.mean(per_class))
  return {"accuracy": float(np.mean(labels == predictions)) if len(labels)
                      else 0.0,
          "f1": f1,
          "matthews_corrcoef": matthews_corrcoef(confusion),
          "num_examples": int(len(labels))}


def mean_cross_entropy(logits, labels):
  """The mean cross-entropy of `logits` [N, C] at int `labels` [N] (0.0 for
  no examples): the eval_loss of classification and NER."""
  if not len(labels):
    return 0.0
  shifted = logits - logits.max(-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


def regression_metrics(labels, predictions):
  labels = np.asarray(labels, np.float64)
  predictions = np.asarray(predictions, np.float64)
  return {"pearson": pearson(labels, predictions),
          "spearman": pearson(rank(labels), rank(predictions)),
          "mse": float(np.mean((labels - predictions) ** 2)),
          "num_examples": int(len(labels))}


def matthews_corrcoef(confusion):
  """Multi-class MCC from a [C, C] confusion matrix (rows: true labels)."""
  c = np.asarray(confusion, np.float64)
  total, correct = c.sum(), np.trace(c)
  true_counts, predicted_counts = c.sum(axis=1), c.sum(axis=0)
  numerator = correct * total - true_counts @ predicted_counts
  denominator = np.sqrt((total ** 2 - predicted_counts @ predicted_counts) *
                        (total ** 2 - true_counts @ true_counts))
  return float(numerator / denominator) if denominator > 0 else 0.0


def pearson(x, y):
  x = np.asarray(x, np.float64) - np.mean(x)
  y = np.asarray(y, np.float64) - np.mean(y)
  denominator = np.sqrt((x @ x) * (y @ y))
  return float(x @ y / denominator) if denominator > 0 else 0.0


def rank(values):
  """1-based ranks, ties getting the mean of the ranks they span."""
  values = np.asarray(values)
  order = np.argsort(values, kind="stable")
  sorted_values = values[order]
  ranks = np.empty(len(values), np.float64)
  start = 0
  while start < len(values):
    end = start
    while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
      end += 1
    ranks[order[start:end + 1]] = (start + end) / 2 + 1
    start = end + 1
  return ranks


def _f1(confusion, k):
  tp = confusion[k, k]
  fp = confusion[:, k].sum() - tp
  fn = confusion[k, :].sum() - tp
  return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0
