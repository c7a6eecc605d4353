"""Sentence (pair) classification and regression: run_classifier's task.

Everything about the task in one place: reading the splits (a GLUE task by
name, tasks/classification/glue.py, or files named by their columns, data/text_files.py),
encoding them, the model (`BertClassifier`), its loss and training metric,
eval_results.txt's values, test_results.tsv and the best metric. The program
builds a `ClassificationConfig` from its flags; training/finetuner.py's
`run_task` runs it:

    task = ClassificationTask(ClassificationConfig(
        data_dir="glue_data/MRPC", output_dir="/tmp/mrpc", task_name="MRPC",
        do_train=True, do_eval=True))
    task.read()                  # every split checked, no TensorFlow yet
    task.encode(tokenizer, max_seq_length=128)
    finetuner.run_task(task, driver_config, bert_config, program=..., ...)
"""

import dataclasses
import json
import os
import time
from typing import Optional

import numpy as np

from official_bert.data import text_files
from official_bert.training import classifier_metrics
from official_bert.training import distillation
from official_bert.training import task as task_lib
from official_bert.tasks.classification import classifier_windows
from official_bert.tasks.classification import glue


@dataclasses.dataclass(frozen=True)
class ClassificationConfig:
  """A classification run's data and modes, with the flags' names.

  data_dir: the task's directory.
  task_name, xnli_language: a GLUE task read in its download's layout;
    else text_column, text_b_column, label_column, task_type name the
    fields of `train`, `dev` and `test` files.
  output_dir: where a previous run's label_list.json is read from when
    this run does not train.
  doc_stride, window_aggregation: None (texts longer than max_seq_length
    are truncated), or windows every doc_stride pieces whose logits are
    combined by "max" or "mean" (classifier_windows.py; single texts only).
  window_training: with doc_stride, "windows" (each window fitted to its
    text's label) or "documents" (each text's windows' combined logits
    fitted to its label: finetuning_models.BertDocumentClassifier).
  label_separator, tune_thresholds: task_type "multi_label"'s
    (multi_label_task.py).
  distill_data: with do_train, a file of unlabelled texts (the training
    file's layout without its label column) added to the training rows
    for distillation (training/distillation.py).
  """
  data_dir: str
  output_dir: str
  task_name: Optional[str] = None
  xnli_language: str = "zh"
  text_column: str = "sentence"
  text_b_column: Optional[str] = None
  label_column: str = "label"
  task_type: str = "classification"
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  eval_every_steps: int = 0
  doc_stride: Optional[int] = None
  window_aggregation: str = "max"
  window_training: str = "windows"
  label_separator: str = "|"
  tune_thresholds: bool = False
  distill_data: Optional[str] = None


def classifier_losses(labels, logits, regression=False):
  """{"loss": mean cross-entropy (or squared error for regression)}."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  if regression:
    loss = ops.mean(ops.square(logits[:, 0] - ops.cast(labels, "float32")))
  else:
    loss = ops.mean(keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True))
  return {"loss": loss}


def classifier_metric_counts(labels, logits):
  """Correct/total sums (the trainer logs them as label_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  predicted = ops.cast(ops.argmax(logits, -1), "int32")
  correct = ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")
  return {"label_correct": ops.sum(correct),
          "label_total": ops.cast(ops.shape(correct)[0], "float32")}


def eval_results(logits, labels, regression, step):
  """The eval_results.txt values (all prefixed eval_, as the original)."""
  if regression:
    predictions = logits[:, 0]
    metrics = classifier_metrics.regression_metrics(labels, predictions)
    metrics["loss"] = metrics["mse"]
  else:
    metrics = classifier_metrics.classification_metrics(
        labels, np.argmax(logits, -1), num_classes=logits.shape[-1])
    metrics["loss"] = classifier_metrics.mean_cross_entropy(logits, labels)
  result = {f"eval_{k}": v for k, v in metrics.items()}
  # The original's Estimator also reports the mean loss as plain "loss".
  result["loss"] = result["eval_loss"]
  result["global_step"] = step
  return result


def test_results_rows(logits, regression):
  """test_results.tsv's lines: str() of each float32, as the original writes
  its probabilities (the shortest text that reads back to the same float32):
  the class probabilities tab-separated, or the predicted value."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if regression:
    return [str(value) for value in logits[:, 0]]
  probabilities = tf.nn.softmax(logits, axis=-1).numpy()
  return ["\t".join(str(p) for p in row) for row in probabilities]


class ClassificationTask:
  """run_classifier's task: `read`, `encode`, then what `run_task` calls (a
  training/task.py `FinetuningTask`; tests/task_test.py checks it).

  With config.doc_stride, each split's inputs are its texts' windows
  (classifier_windows.py): training fits each window to its text's label
  (window_training "windows") or each text's combined windows
  ("documents"), and evaluation and prediction combine a text's windows'
  logits."""

  # The fewest labels the training file may have.
  min_labels = 2
  metric_range = 1.0
  prepares_every_epoch = False  # nothing to prepare

  def __init__(self, config):
    self.config = config
    self.glue = self.labels = self.read_split = self.tokenizer = None
    self.regression = config.task_type == "regression"
    self.text_pair = config.text_b_column is not None
    self.splits = {}  # split -> (examples, inputs or None, label ids)
    self.windowing = None  # a classifier_windows.Windowing, with doc_stride
    self.window_text = {}  # split -> int32 [W]: each window's example
    self.distill = None  # --distill_data's (examples, inputs or None)

  @property
  def trains_documents(self):
    """Whether a training example is a text's windows, combined."""
    return bool(self.config.doc_stride
                and self.config.window_training == "documents")

  @property
  def example_name(self):
    """What num_train_examples counts: windows with doc_stride (unless it
    trains on documents)."""
    if self.trains_documents:
      return "documents"
    return "windows" if self.config.doc_stride else "examples"

  @property
  def best_metric(self):
    return "eval_pearson" if self.regression else "eval_accuracy"

  # ---------------------------------------------------- preprocessing ----
  def read(self):
    """Reads and checks every split the run needs (ValueError, OSError or
    UnicodeDecodeError: one sentence naming the file)."""
    config = self.config
    if config.task_name:
      self.glue = glue.get_task(config.task_name)
      self.regression = self.glue.regression
      self.text_pair = self.glue.text_pair
      self.labels = None if self.regression else list(self.glue.labels)
      self.read_split = lambda split: glue.read_split(
          self.glue, config.data_dir, split, config.xnli_language)
    else:
      self.read_split = self._read_file
      self.labels = None if self.regression else self._file_labels()
    if self.text_pair and config.doc_stride:
      raise ValueError("--doc_stride windows single texts only, and this "
                       "task has text pairs; drop --doc_stride (pairs are "
                       "truncated) or --text_b_column")
    if not self.regression and len(self.labels) < self.min_labels:
      raise ValueError(f"the train file has only the label {self.labels}; "
                       "classification needs at least two")
    evaluating = config.do_eval or (config.do_train and config.eval_every_steps)
    for split, wanted in (("train", config.do_train), ("dev", evaluating),
                          ("test", config.do_predict)):
      if wanted:
        examples = self.read_split(split)
        ids = None if split == "test" else self.label_ids(examples)
        self.splits[split] = (examples, None, ids)
    if config.distill_data and config.do_train:
      self.distill = (self._read_distill_data(), None)

  def _read_distill_data(self):
    """--distill_data's texts: the training file's layout without labels."""
    config = self.config
    if config.task_name or config.doc_stride:
      raise ValueError(
          "--distill_data adds texts in the layout of --text_column"
          + (" and --text_b_column" if config.text_b_column else "")
          + ", one example each: drop "
          + ("--task_name (name the columns instead)" if config.task_name
             else "--doc_stride (windows are not distilled from it)"))
    columns = text_files.Columns(config.text_column, config.text_b_column,
                                 config.label_column)
    return text_files.read_examples(config.distill_data, columns,
                                    require_label=False)

  def _read_file(self, split):
    config = self.config
    columns = text_files.Columns(config.text_column, config.text_b_column,
                                      config.label_column)
    path = text_files.find_split_file(config.data_dir, split)
    return text_files.read_examples(path, columns,
                                         require_label=split != "test")

  def _file_labels(self):
    """The training file's labels, or a fine-tuned model's own (in its
    order) when this run evaluates or predicts without training."""
    saved = os.path.join(self.config.output_dir, "label_list.json")
    data_dir = self.config.data_dir
    if os.path.exists(saved) and not self.config.do_train:
      with open(saved, encoding="utf-8") as f:
        return json.load(f)
    if any(os.path.exists(os.path.join(data_dir, "train" + e))
           for e in text_files.EXTENSIONS):
      return self.label_list(self.read_split("train"))
    raise ValueError(f"--task_data_dir {data_dir} has no train file and "
                     f"{saved} does not exist: the labels are unknown; run "
                     "--do_train first or add the train file.")

  def label_list(self, examples):
    """The labels of the training examples, in the model's order."""
    return text_files.label_list(examples)

  def label_ids(self, examples):
    """The labels of a split's examples as the loss reads them."""
    return text_files.label_ids(examples, self.labels, self.regression)

  def encode(self, tokenizer, max_seq_length):
    """Packs each split's texts (text_files.encode), or with
    doc_stride their windows (classifier_windows.encode)."""
    self.tokenizer = tokenizer
    config = self.config
    if config.doc_stride:
      self.windowing = classifier_windows.Windowing(
          max_seq_length, config.doc_stride, config.window_aggregation)
    for split, (examples, _, ids) in list(self.splits.items()):
      if self.windowing is None:
        inputs = text_files.encode(examples, tokenizer, max_seq_length)
      else:
        inputs, self.window_text[split] = classifier_windows.encode(
            examples, tokenizer, self.windowing)
      self.splits[split] = (examples, inputs, ids)
    if self.distill is not None:
      self.distill = (self.distill[0], text_files.encode(
          self.distill[0], tokenizer, max_seq_length))

  @property
  def num_train_examples(self):
    """Training examples, or with doc_stride their windows (unless it
    trains on documents)."""
    if "train" not in self.splits:
      return 0
    if self.trains_documents:
      return len(self.splits["train"][0])
    return (len(self.splits["train"][1]["input_mask"])
            + self.num_distill_texts)

  @property
  def num_distill_texts(self):
    """--distill_data's texts: train_data's last rows."""
    return 0 if self.distill is None else len(self.distill[0])

  def run_files(self):
    """Files written beside flags.json: the labels, in their order."""
    return {} if self.labels is None else {
        "label_list.json": json.dumps(self.labels) + "\n"}

  def log_start(self, run_description):
    """The task, its splits and a few decoded examples, for the log."""
    if self.glue:
      kind = "regression" if self.regression else "classification"
      what = f"{self.glue.name} ({kind}, metric {self.glue.metric})"
    else:
      what = self.config.task_type
    windows = {split: f" ({len(text)} windows)"
               for split, text in self.window_text.items()}
    print(f"{what}: labels {self.labels}, "
          + ", ".join(f"{split} {len(s[0])} examples{windows.get(split, '')}"
                      for split, s in self.splits.items())
          + f"; {run_description}", flush=True)
    if self.distill is not None:
      print(f"distill_data: {self.num_distill_texts} texts from "
            f"{self.config.distill_data}", flush=True)
    for split, (examples, inputs, _) in list(self.splits.items())[:1]:
      for i in range(min(2, len(examples))):
        # The example's row, or with doc_stride its first window.
        row = (i if self.windowing is None
               else int(np.searchsorted(self.window_text[split], i)))
        n = int(inputs["input_mask"][row].sum())
        print(f"{split} example {examples[i].where}: label "
              f"{examples[i].label!r} tokens "
              + " ".join(self.tokenizer.convert_ids_to_tokens(
                  inputs["input_word_ids"][row][:n])), flush=True)

  # ------------------------------------------------- model and losses ----
  def build_model(self, bert_config, kernels):
    return self.classifier_model(
        bert_config, 1 if self.regression else len(self.labels), kernels)

  def classifier_model(self, bert_config, num_classes, kernels):
    """BertClassifier, or BertDocumentClassifier when it trains on
    documents (the same variables)."""
    from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
    if self.trains_documents:
      return finetuning_models.BertDocumentClassifier.from_bert_config(
          bert_config, num_classes, kernels=kernels,
          aggregation=self.config.window_aggregation)
    return finetuning_models.BertClassifier.from_bert_config(
        bert_config, num_classes, kernels=kernels)

  def losses(self, labels, logits):
    return classifier_losses(labels, logits, self.regression)

  def metric_counts(self, labels, logits):
    return {} if self.regression else classifier_metric_counts(labels,
                                                               logits)

  def train_data(self):
    """(inputs, labels); with doc_stride each window has its text's label,
    or (trains_documents) each text is its windows [D, M, T]; then
    --distill_data's texts, with placeholder labels (0)."""
    examples, inputs, labels = self.splits["train"]
    if self.trains_documents:
      return classifier_windows.documents(
          inputs, self.window_text["train"], len(examples)), labels
    if self.windowing is not None:
      labels = labels[self.window_text["train"]]
    if self.distill is not None:
      extra = self.distill[1]
      inputs = {k: np.concatenate([v, extra[k]]) for k, v in inputs.items()}
      labels = np.concatenate([labels, np.zeros(
          (self.num_distill_texts,) + labels.shape[1:], labels.dtype)])
    return inputs, labels

  def teacher_outputs(self, predict):
    """The teacher's logits [N, C] over the training rows (with doc_stride:
    each window's own, fitted per window as its label is)."""
    if self.trains_documents:
      raise ValueError("--teacher fits each training window's logits: "
                       "pass --window_training=windows")
    return predict(self.train_data()[0])

  def distill_losses(self, labels, teacher, logits, temperature, labelled):
    """The label loss (cross-entropy, or squared error for regression)
    over the labelled rows; to the teacher: T^2 KL between the softened
    distributions (regression: the squared error to its value)."""
    import keras  # pylint: disable=g-import-not-at-top
    from keras import ops  # pylint: disable=g-import-not-at-top
    if self.regression:
      label = ops.square(logits[:, 0] - ops.cast(labels, "float32"))
      distill = ops.mean(ops.square(logits[:, 0] - teacher[:, 0]))
    else:
      label = keras.losses.sparse_categorical_crossentropy(
          labels, logits, from_logits=True)
      distill = ops.mean(distillation.soft_cross_entropy(
          teacher, logits, temperature))
    return {"label_loss": distillation.weighted_mean(label, labelled),
            "distill_loss": distill}

  def prepare_training(self, predict, model, resumed, epoch):
    # The labelled texts are all it trains on.
    del predict, model, resumed, epoch
    return {}

  def train_order(self, batch_size, seed, num_examples):
    del batch_size, seed, num_examples  # any batch of labelled texts will do
    return None

  def in_batch_loss(self):
    """None: each example's loss reads its own logits alone."""
    return None

  def init_head(self, model):
    """Nothing: the head keeps its initializers, as the original's."""

  def example_inputs(self):
    """One encoded example (builds the model for export)."""
    return {k: v[:1] for k, v in next(iter(self.splits.values()))[1].items()}

  # ------------------------------------------ evaluation and prediction ----
  def split_logits(self, split, predict):
    """The model's logits [N, C] for `split`'s examples (`predict(inputs)`
    -> logits); with doc_stride each example's windows' combined."""
    examples, inputs, _ = self.splits[split]
    logits = predict(inputs)
    if self.windowing is None:
      return logits
    return self.windowing.combine(logits, self.window_text[split],
                                  len(examples)).numpy()

  def evaluate(self, predict, step):
    """eval_results on dev; `predict(inputs)` -> the model's logits."""
    ids = self.splits["dev"][2]
    return eval_results(self.split_logits("dev", predict), ids,
                        self.regression, step)

  def eval_summary(self, result):
    return f"{self.best_metric} {result[self.best_metric]:.4f}"

  def predict(self, predict, step):
    """({"test_results.tsv": text}, the summary's words, no eval result)."""
    del step
    t0 = time.time()
    logits = self.split_logits("test", predict)
    seconds = time.time() - t0
    rows = test_results_rows(logits, self.regression)
    return ({"test_results.tsv": "".join(row + "\n" for row in rows)},
            f"{len(rows)} test predictions in {seconds:.1f} s", None)

  def tune(self, predict):
    del predict  # nothing to choose on dev: the most probable class is the prediction
    return {}

  # ----------------------------------------------------------- export ----
  def export_spec(self):
    """Raw text (pairs with text_pair) in; the probabilities and label
    names, or the value for regression, out; with doc_stride each text's
    windows combined."""
    # TensorFlow's (the serving signatures'): loaded at export, not with
    # the program's flags.
    from official_bert.tasks.classification import classifier_outputs  # pylint: disable=g-import-not-at-top
    return task_lib.ExportSpec(
        outputs=(classifier_outputs.regression_outputs if self.regression
                 else classifier_outputs.classifier_outputs_with_labels(
                     self.labels)),
        text_pair=self.text_pair, windowing=self.windowing)
