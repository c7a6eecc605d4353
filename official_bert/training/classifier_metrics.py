"""GLUE's metrics in numpy: accuracy, F1 and Matthews correlation for
classification, Pearson and Spearman correlation for regression.

    classification_metrics(labels=[0, 1, 1], predictions=[0, 1, 0])
    # {"accuracy": 0.667, "f1": 0.667, "matthews_corrcoef": 0.5, ...}

F1 is the positive class's (label id 1) for two classes, as GLUE reports for
MRPC and QQP, and the macro average over classes otherwise. Matthews
correlation is the multi-class generalisation (Gorodkin, 2004), equal to the
usual formula for two classes. Spearman is Pearson on average ranks (ties
share their mean rank).

Multi-label classification (one yes/no per label): micro F1 (over every
example's every label), macro F1 (the labels' mean), each label's F1 and
subset accuracy (the examples whose every label is right);
`tune_thresholds` picks each label's threshold by its F1:

    multi_label_metrics(labels=[[1, 0], [1, 1]], predicted=[[1, 0], [0, 1]],
                        label_names=["a", "b"])
    # {"micro_f1": 0.8, "macro_f1": 0.833, "f1_a": 0.667, "f1_b": 1.0,
    #  "subset_accuracy": 0.5, ...}
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


def multi_label_metrics(labels, predicted, label_names):
  """Micro/macro F1, `f1_<label>` and subset accuracy of `predicted` (bool
  [N, C]) against 0/1 `labels` [N, C] (a label never gold nor predicted
  has F1 0, as the others without a true positive)."""
  labels = np.asarray(labels).astype(bool)
  predicted = np.asarray(predicted).astype(bool)
  tp = (labels & predicted).sum(0)                                  # [C]
  fp = (~labels & predicted).sum(0)
  fn = (labels & ~predicted).sum(0)
  per_label = [_f1_of(*counts) for counts in zip(tp, fp, fn)]
  result = {"micro_f1": _f1_of(tp.sum(), fp.sum(), fn.sum()),
            "macro_f1": float(np.mean(per_label)) if per_label else 0.0,
            "subset_accuracy": float(np.mean(np.all(labels == predicted, 1)))
                               if len(labels) else 0.0,
            "num_examples": int(len(labels))}
  result.update({f"f1_{name}": f1 for name, f1 in zip(label_names,
                                                      per_label)})
  return result


def mean_binary_cross_entropy(logits, labels):
  """The mean over examples and labels of the sigmoid cross-entropy of
  `logits` [N, C] at 0/1 `labels` [N, C] (0.0 for no examples)."""
  if not np.size(labels):
    return 0.0
  logits = np.asarray(logits, np.float64)
  labels = np.asarray(labels, np.float64)
  # log(1 + e^x) - y x, computed without overflow.
  return float(np.mean(np.logaddexp(0.0, logits) - labels * logits))


def tune_thresholds(probabilities, labels, default=0.5):
  """Each label's threshold (predict the label where probability >=
  threshold) that maximises its F1 on `probabilities` [N, C] with 0/1
  `labels` [N, C]. The thresholds tried lie halfway between neighbouring
  distinct probabilities (and beyond both ends); among equal F1s the one
  nearest `default` wins. A label without a positive example keeps
  `default`. Returns float [C]."""
  probabilities = np.asarray(probabilities, np.float64)
  labels = np.asarray(labels).astype(bool)
  thresholds = np.full(probabilities.shape[1], default, np.float64)
  for c in range(probabilities.shape[1]):
    positives = labels[:, c].sum()
    if not positives:
      continue
    order = np.argsort(-probabilities[:, c], kind="stable")
    p = probabilities[order, c]                      # descending
    tp = np.concatenate([[0], np.cumsum(labels[order, c])])  # [N + 1]
    k = np.arange(len(p) + 1)                        # the top k predicted
    f1 = 2 * tp / np.maximum(k + positives, 1)       # 2tp / (2tp+fp+fn)
    # A cut between two equal probabilities is no threshold.
    valid = np.ones(len(p) + 1, bool)
    valid[1:-1] = p[:-1] > p[1:]
    # The threshold of each k (k = 0, none, never wins: a positive exists).
    cut = np.concatenate([[(1.0 + p[0]) / 2], (p[:-1] + p[1:]) / 2,
                          [p[-1] / 2]])
    best = f1[valid].max()
    candidates = cut[valid & (f1 >= best - 1e-12)]
    thresholds[c] = candidates[np.argmin(np.abs(candidates - default))]
  return thresholds


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
  return _f1_of(tp, confusion[:, k].sum() - tp, confusion[k, :].sum() - tp)


def _f1_of(tp, fp, fn):
  return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0
