"""SQuAD v1.1 / v2.0 question answering: run_squad's task.

Reading the questions and cutting contexts into windows (tasks/squad/squad_data.py, the
original's algorithm), the model (`BertSpanLabeler`), the start/end loss,
predictions.json (best-span decoding, tasks/squad/squad_answers.py),
eval_results.txt (the official evaluation, tasks/squad/squad_metrics.py) and the
best metric. The program builds
a `SquadConfig` from its flags; training/finetuner.py's `run_task` runs it:

    task = SquadTask(SquadConfig(train_file="train-v1.1.json",
                                 predict_file="dev-v1.1.json",
                                 do_train=True, do_predict=True))
    task.read()                  # both files checked, no TensorFlow yet
    task.encode(tokenizer, max_seq_length=384)
"""

import dataclasses
import json
import random
import time
from typing import Optional

from official_bert.tasks.squad import squad_data
from official_bert.tasks.squad import squad_answers
from official_bert.tasks.squad import squad_metrics
from official_bert.training import distillation
from official_bert.training import task as task_lib


@dataclasses.dataclass(frozen=True)
class SquadConfig:
  """A SQuAD run's files, windows and decoding, with the flags' names (as
  google-research/bert's run_squad.py; seed shuffles the training questions
  once, as the original's)."""
  train_file: Optional[str] = None
  predict_file: Optional[str] = None
  do_train: bool = False
  do_predict: bool = False
  eval_every_steps: int = 0
  doc_stride: int = 128
  max_query_length: int = 64
  n_best_size: int = 20
  max_answer_length: int = 30
  do_lower_case: bool = True
  version_2_with_negative: bool = False
  null_score_diff_threshold: float = 0.0
  verbose_logging: bool = False
  seed: int = 12345


def squad_losses(labels, outputs):
  """{"loss": the mean of the start and end positions' cross-entropies}."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  losses = [ops.mean(keras.losses.sparse_categorical_crossentropy(
      labels[f"{side}_positions"], outputs[f"{side}_logits"], from_logits=True))
            for side in ("start", "end")]
  return {"loss": (losses[0] + losses[1]) / 2.0}


def squad_metric_counts(labels, outputs):
  """Correct/total sums of the argmax start and end (start_accuracy, ...)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  counts = {}
  for side in ("start", "end"):
    predicted = ops.cast(ops.argmax(outputs[f"{side}_logits"], -1), "int32")
    correct = ops.cast(ops.equal(predicted, ops.cast(
        labels[f"{side}_positions"], "int32")), "float32")
    counts[f"{side}_correct"] = ops.sum(correct)
    counts[f"{side}_total"] = ops.cast(ops.shape(correct)[0], "float32")
  return counts


def evaluation(data, predictions, null_odds, step,
               version_2_with_negative=False):
  """eval_results.txt's values: the official evaluation of the predictions."""
  if version_2_with_negative:
    result = dict(squad_metrics.evaluate_v2(data, predictions, null_odds))
    result["exact_match"] = result["exact"]
  else:
    # A v2.0 file predicted as v1.1: its impossible questions (no gold
    # answer) cannot be scored by evaluate-v1.1.py, so they are left out.
    data = [{"paragraphs": [
        {"qas": [qa for qa in paragraph["qas"] if qa.get("answers")]}
        for paragraph in article["paragraphs"]]} for article in data]
    result = squad_metrics.evaluate_v1(data, predictions)
  result["global_step"] = step
  return result


def read_questions(path, is_training, version_2_with_negative):
  """The file's `SquadExample`s; the training questions the original skips
  (answer text not at its answer_start) are logged, as it does."""
  skipped = []
  examples = squad_data.read_squad_examples(path, is_training,
                                       version_2_with_negative, skipped)
  if skipped:  # The original logs "Could not find answer" for each.
    print(f"{path}: skipped {len(skipped)} training question"
          f"{'s' if len(skipped) > 1 else ''} whose answer text is not at "
          f"its answer_start (as the original): {', '.join(skipped[:5])}"
          f"{', ...' if len(skipped) > 5 else ''}", flush=True)
  return examples


class SquadTask:
  """run_squad's task: `read`, `encode`, then what `run_task` calls (a
  training/task.py `FinetuningTask`; tests/task_test.py checks it)."""

  example_name = "questions"
  best_metric = "f1"
  metric_range = 100.0  # f1 and exact_match are percentages
  prepares_every_epoch = False  # nothing to prepare
  num_distill_texts = 0  # run_squad takes no --distill_data

  def __init__(self, config):
    self.config = config
    self.train_examples, self.predict_examples = [], []
    self.train_features, self.predict_features = [], []
    self.gold = None  # the predict file's data, when it has answers
    self.tokenizer = self.max_seq_length = None

  # ---------------------------------------------------- preprocessing ----
  def read(self):
    """Reads and checks both files (ValueError: one sentence)."""
    config = self.config
    v2 = config.version_2_with_negative
    if config.do_train:
      self.train_examples = read_questions(config.train_file, True, v2)
    if config.do_predict:
      self.predict_examples = read_questions(config.predict_file, False, v2)
      data = squad_data.load_squad_json(config.predict_file)
      if any(golds for _, golds in squad_metrics.questions(data)):
        self.gold = data
    if config.eval_every_steps and config.do_train and self.gold is None:
      raise ValueError(f"--predict_file {config.predict_file} has no "
                       "answers to evaluate with --eval_every_steps; pass "
                       "a dev file with answers.")

  def encode(self, tokenizer, max_seq_length):
    """The windows of each question's context (squad_data.py, as the
    original's), training questions shuffled once first, as the original."""
    config = self.config
    self.tokenizer, self.max_seq_length = tokenizer, max_seq_length

    def features(examples, is_training):
      return squad_data.convert_examples_to_features(
          examples, tokenizer, max_seq_length, config.doc_stride,
          config.max_query_length, is_training)

    t0 = time.time()
    random.Random(config.seed).shuffle(self.train_examples)
    self.train_features = features(self.train_examples, True)
    self.predict_features = features(self.predict_examples, False)
    print(f"Features in {time.time() - t0:.1f} s: train "
          f"{len(self.train_examples)} questions -> "
          f"{len(self.train_features)} windows, predict "
          f"{len(self.predict_examples)} questions -> "
          f"{len(self.predict_features)} windows", flush=True)

  @property
  def num_train_examples(self):
    """Questions, not windows, as the original counts its steps."""
    return len(self.train_examples)

  def run_files(self):
    return {}

  def log_start(self, run_description):
    """The run and a few decoded windows, for the log."""
    print(run_description, flush=True)
    examples = self.train_examples or self.predict_examples
    for feature in (self.train_features or self.predict_features)[:2]:
      n = sum(feature.input_mask)
      example = examples[feature.example_index]
      print(f"question {example.qas_id} window {feature.doc_span_index}: "
            + " ".join(self.tokenizer.convert_ids_to_tokens(
                feature.input_ids[:n]))
            + (f" (answer {feature.start_position}..{feature.end_position})"
               if self.train_features else ""), flush=True)

  # ------------------------------------------------- model and losses ----
  def build_model(self, bert_config, kernels):
    """The span head never reads the pooler: it gets no gradient and stays
    as loaded (train_step.py skips it, as the original's optimizer does)."""
    from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
    return finetuning_models.BertSpanLabeler.from_bert_config(
        bert_config, kernels=kernels)

  def losses(self, labels, outputs):
    return squad_losses(labels, outputs)

  def metric_counts(self, labels, outputs):
    return squad_metric_counts(labels, outputs)

  def train_data(self):
    return squad_data.feature_arrays(self.train_features, True)

  def teacher_outputs(self, predict):
    """The teacher's start and end logits [N, T] over the training
    windows (past a window's batch: -1e4, as in prediction)."""
    return predict(self.train_data()[0], fill=-1e4)

  def distill_losses(self, labels, teacher, outputs, temperature, labelled):
    """The mean of the start and end losses: cross-entropy to the
    positions (labelled rows), T^2 KL to the teacher's softened start and
    end distributions."""
    import keras  # pylint: disable=g-import-not-at-top
    from keras import ops  # pylint: disable=g-import-not-at-top
    label = distill = 0.0
    for side in ("start", "end"):
      logits = outputs[f"{side}_logits"]
      label += distillation.weighted_mean(
          keras.losses.sparse_categorical_crossentropy(
              labels[f"{side}_positions"], logits, from_logits=True),
          labelled) / 2.0
      distill += ops.mean(distillation.soft_cross_entropy(
          distillation.cut_like(teacher[f"{side}_logits"], logits), logits,
          temperature)) / 2.0
    return {"label_loss": label, "distill_loss": distill}

  def prepare_training(self, predict, model, resumed, epoch):
    # The answered questions are all it needs.
    del predict, model, resumed, epoch
    return {}

  def train_order(self, batch_size, seed, num_examples):
    del batch_size, seed, num_examples  # each window's loss is its own
    return None

  def in_batch_loss(self):
    """None: each window's loss reads its own logits alone."""
    return None

  def init_head(self, model):
    """Nothing: the head keeps its initializers, as the original's."""

  def example_inputs(self):
    """One all-zero window (builds the model for export)."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    return {k: np.zeros((1, self.max_seq_length), np.int32) for k in
            ("input_word_ids", "input_mask", "input_type_ids")}

  # ------------------------------------------ evaluation and prediction ----
  def _answers(self, predict, log=None):
    """(predictions, nbest, null_odds) of the predict file's questions."""
    config = self.config
    # Padding positions get very low logits, so no span starts or ends
    # there (with fixed padding they are filtered out by the map instead).
    logits = predict(squad_data.feature_arrays(self.predict_features), fill=-1e4)
    return squad_answers.postprocess(
        self.predict_examples, self.predict_features,
        logits["start_logits"].tolist(), logits["end_logits"].tolist(),
        self.tokenizer.vocab, n_best_size=config.n_best_size,
        max_answer_length=config.max_answer_length,
        do_lower_case=config.do_lower_case,
        version_2_with_negative=config.version_2_with_negative,
        null_score_diff_threshold=config.null_score_diff_threshold, log=log)

  def evaluate(self, predict, step):
    predictions, _, null_odds = self._answers(predict)
    return evaluation(self.gold, predictions, null_odds, step,
                      self.config.version_2_with_negative)

  def eval_summary(self, result):
    return f"exact_match {result['exact_match']:.2f} f1 {result['f1']:.2f}"

  def predict(self, predict, step):
    """(predictions.json, nbest_predictions.json, v2.0's null_odds.json; the
    summary's words; eval_results when the predict file has answers)."""
    t0 = time.time()
    log = print if self.config.verbose_logging else None
    predictions, nbest, null_odds = self._answers(predict, log)
    outputs = {"predictions.json": predictions,
               "nbest_predictions.json": nbest}
    if self.config.version_2_with_negative:
      outputs["null_odds.json"] = null_odds
    files = {name: json.dumps(value, indent=4) + "\n"
             for name, value in outputs.items()}
    said = f"{len(predictions)} predictions in {time.time() - t0:.1f} s"
    result = None
    if self.gold is not None:
      result = evaluation(self.gold, predictions, null_odds, step,
                          self.config.version_2_with_negative)
    return files, said, result

  def tune(self, predict):
    del predict  # nothing to choose on dev: --null_score_diff_threshold is the user's
    return {}

  # ----------------------------------------------------------- export ----
  def export_spec(self):
    """Nothing beyond the defaults: export/squad_serving.py's outputs are
    the answer's text and character offsets."""
    return task_lib.ExportSpec()
