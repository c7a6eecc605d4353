"""Multi-label classification: run_classifier's `--task_type=multi_label`.

Each example has zero or more labels, joined in the label column by
`label_separator` (`a|b`; an empty cell: no label). The model
(`BertClassifier`) has one output per label, each a sigmoid, trained with
binary cross-entropy. Labels are the training file's, sorted
(label_list.json). Reading, packing, windows (doc_stride) and the export's
preprocessing are classification_task.py's; this module changes what a
label is, the loss, the metrics and the outputs:

  eval_results.txt  eval_micro_f1 (the best metric), eval_macro_f1,
                    eval_f1_<label>, eval_subset_accuracy, eval_loss (mean
                    binary cross-entropy), at each label's threshold;
  test_results.tsv  a header of the label names, then one probability per
                    label for each test example;
  serving_outputs   probabilities [B, C], predicted [B, C] (bool, at the
                    thresholds), label_names [B, C].

Thresholds are 0.5, or with `tune_thresholds` each label's that maximises
its F1 on dev (`tune`: `classifier_metrics.tune_thresholds`, once training
ends, before the final evaluation), kept in output_dir/thresholds.json and
used by the export and by later runs on that output_dir.

    task = MultiLabelTask(ClassificationConfig(
        data_dir="my_task", output_dir="/tmp/tags", task_type="multi_label",
        label_column="tags", do_train=True, do_eval=True))
    task.read(); task.encode(tokenizer, max_seq_length=128)
    finetuner.run_task(task, driver_config, bert_config, program=..., ...)
"""

import dataclasses
import json
import os
import time

import numpy as np

from official_bert.tasks.classification import classification_task
from official_bert.training import classifier_metrics
from official_bert.training import distillation

THRESHOLDS_FILE = "thresholds.json"


def split_labels(example, separator):
  """An example's labels: its label cell split on `separator`, each label
  stripped of white space, empty ones dropped ([] for an empty cell)."""
  cell = example.label or ""
  return [label.strip() for label in cell.split(separator) if label.strip()]


def sigmoid(logits):
  """The probabilities of `logits` (numpy float64; no overflow)."""
  return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, np.float64)))


def prior_bias(labels):
  """float32 [C]: each label's log-odds log(p / (1 - p)) in 0/1 rows
  `labels` [..., C], p = (positives + 0.5) / (rows + 1) (finite when a
  label is in every row or none).

  The multi-label head starts there, so its first sigmoids are the labels'
  frequencies rather than 0.5 (the prior init of Lin et al., 2017, section
  4.1) where Hugging Face and the original start at 0 (every sigmoid 0.5).
  From 0.5 every label first has to fall to its frequency, and that first,
  uniform gradient reaches the encoder through every example
  (docs/classification.md#multi-label-classification has the measurements).
  """
  labels = np.asarray(labels, np.float64)
  labels = labels.reshape(-1, labels.shape[-1])
  p = (labels.sum(0) + 0.5) / (len(labels) + 1.0)
  return np.log(p / (1.0 - p)).astype(np.float32)


def multi_label_losses(labels, logits):
  """{"loss": the mean binary cross-entropy over examples and labels}."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  return {"loss": ops.mean(keras.losses.binary_crossentropy(
      ops.cast(labels, "float32"), logits, from_logits=True))}


def multi_label_metric_counts(labels, logits):
  """Right yes/no decisions at 0.5 over all labels (the trainer logs them
  as label_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  predicted = ops.cast(ops.greater(logits, 0.0), "float32")
  right = ops.cast(ops.equal(predicted, ops.cast(labels, "float32")),
                   "float32")
  return {"label_correct": ops.sum(right),
          "label_total": ops.cast(ops.size(right), "float32")}


def eval_results(logits, labels, label_names, thresholds, step):
  """The eval_results.txt values (prefixed eval_) at `thresholds` [C]."""
  probabilities = sigmoid(logits)
  metrics = classifier_metrics.multi_label_metrics(
      labels, probabilities >= thresholds, label_names)
  metrics["loss"] = classifier_metrics.mean_binary_cross_entropy(logits,
                                                                 labels)
  result = {f"eval_{k}": v for k, v in metrics.items()}
  result["loss"] = result["eval_loss"]
  result["global_step"] = step
  return result


def serving_outputs(label_names, thresholds):
  """The export's outputs from logits [B, C]: `logits`, `probabilities`
  (sigmoid), `predicted` (bool, probability >= the label's threshold) and
  `label_names` [B, C] string (per row, as TF Serving's row format needs
  every output batched)."""
  names = [str(name) for name in label_names]
  limits = [float(t) for t in thresholds]

  def outputs(model_outputs):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if isinstance(model_outputs, dict):
      model_outputs = model_outputs["logits"]
    logits = tf.cast(model_outputs, tf.float32)
    if logits.shape[-1] not in (None, len(names)):
      raise ValueError(f"the classifier has {logits.shape[-1]} outputs but "
                       f"{len(names)} label names")
    probabilities = tf.sigmoid(logits)
    return {"logits": logits, "probabilities": probabilities,
            "predicted": probabilities >= tf.constant(limits, tf.float32),
            "label_names": tf.tile(tf.constant(names)[tf.newaxis],
                                   [tf.shape(logits)[0], 1])}

  return outputs


class MultiLabelTask(classification_task.ClassificationTask):
  """run_classifier's multi-label task: ClassificationTask's reading,
  packing, windows and flow, with 0/1 label rows [N, C], sigmoid outputs
  and multi-label metrics (a training/task.py `FinetuningTask`)."""

  min_labels = 1
  best_metric = "eval_micro_f1"

  def __init__(self, config):
    super().__init__(config)
    self.thresholds = None  # float [C], once the labels are known

  def label_list(self, examples):
    return sorted({label for example in examples
                   for label in split_labels(example,
                                             self.config.label_separator)})

  def label_ids(self, examples):
    """0/1 float32 [N, C]: which of the labels each example has."""
    index = {label: i for i, label in enumerate(self.labels)}
    rows = np.zeros((len(examples), len(self.labels)), np.float32)
    for n, example in enumerate(examples):
      for label in split_labels(example, self.config.label_separator):
        if label not in index:
          raise ValueError(f"{example.where}: label {label!r} is not among "
                           f"the training labels {self.labels}; fix the "
                           "file or train on data that has it")
        rows[n, index[label]] = 1.0
    return rows

  def read(self):
    """ClassificationTask's read, then the thresholds: 0.5, or those a
    previous run tuned (output_dir/thresholds.json) when this run does not
    tune them."""
    super().read()
    self.thresholds = np.full(len(self.labels), 0.5)
    saved = os.path.join(self.config.output_dir, THRESHOLDS_FILE)
    if not self.config.tune_thresholds and os.path.exists(saved):
      with open(saved, encoding="utf-8") as f:
        tuned = json.load(f)
      if sorted(tuned) != sorted(self.labels):
        raise ValueError(f"{saved} has thresholds for {sorted(tuned)}, not "
                         f"for the labels {self.labels}; delete it or pass "
                         "--tune_thresholds")
      self.thresholds = np.array([tuned[label] for label in self.labels])

  def build_model(self, bert_config, kernels):
    return self.classifier_model(bert_config, len(self.labels), kernels)

  def init_head(self, model):
    """Each label's output bias at the log-odds of its training frequency
    (`prior_bias`), when the run has training data."""
    if "train" in self.splits:
      model.classifier.bias.assign(prior_bias(self.splits["train"][2]))

  def losses(self, labels, logits):
    return multi_label_losses(labels, logits)

  def metric_counts(self, labels, logits):
    return multi_label_metric_counts(labels, logits)

  def distill_losses(self, labels, teacher, logits, temperature, labelled):
    """The label loss (binary cross-entropy) over the labelled rows; to the
    teacher: each label's sigmoid at temperature T, T^2 times its KL
    (distillation.sigmoid_cross_entropy)."""
    import keras  # pylint: disable=g-import-not-at-top
    from keras import ops  # pylint: disable=g-import-not-at-top
    label = keras.losses.binary_crossentropy(
        ops.cast(labels, "float32"), logits, from_logits=True)      # [B]
    return {"label_loss": distillation.weighted_mean(label, labelled),
            "distill_loss": ops.mean(distillation.sigmoid_cross_entropy(
                teacher, logits, temperature))}

  def evaluate(self, predict, step):
    """eval_results on dev at the current thresholds; it only reports.
    Those are 0.5 or a previous run's thresholds.json until `tune` chooses
    them, so evaluations while training (eval_every_steps), and the best
    checkpoint they pick, are at those; the final one is at `tune`'s."""
    return eval_results(self.split_logits("dev", predict),
                        self.splits["dev"][2], self.labels, self.thresholds,
                        step)

  def tune(self, predict):
    """With tune_thresholds: each label's threshold that maximises its F1
    on the dev predictions of `predict` (the final float32 model's), kept
    for the final evaluation (the int8 model's too) and the export;
    returns {"thresholds.json": the thresholds by label}. {} without."""
    if not self.config.tune_thresholds:
      return {}
    logits = self.split_logits("dev", predict)
    self.thresholds = classifier_metrics.tune_thresholds(
        sigmoid(logits), self.splits["dev"][2])
    return {THRESHOLDS_FILE: json.dumps(
        dict(zip(self.labels, self.thresholds.tolist())), indent=1) + "\n"}

  def predict(self, predict, step):
    """({"test_results.tsv": a header of the labels, then one probability
    per label for each example}, the summary's words, no eval result)."""
    del step
    t0 = time.time()
    logits = self.split_logits("test", predict)
    seconds = time.time() - t0
    probabilities = sigmoid(logits).astype(np.float32)
    rows = ["\t".join(self.labels)] + [
        "\t".join(str(p) for p in row) for row in probabilities]
    return ({"test_results.tsv": "".join(row + "\n" for row in rows)},
            f"{len(probabilities)} test predictions in {seconds:.1f} s",
            None)

  def export_spec(self):
    """ClassificationTask's, with the per-label outputs at the thresholds
    (serving_outputs)."""
    return dataclasses.replace(
        super().export_spec(),
        outputs=serving_outputs(self.labels, self.thresholds))
