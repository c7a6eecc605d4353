"""tasks/squad/squad_task.py: the span loss against numpy, the official
evaluation's v1.1/v2.0 keys, and the reading checks (no training)."""

import json

import numpy as np
import pytest

from official_bert.tasks.squad import squad_task


def test_the_loss_is_the_mean_of_start_and_end_cross_entropies():
  start = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 3.0]], np.float32)
  end = np.array([[0.0, 1.0, 0.0], [1.0, 2.0, 0.5]], np.float32)
  labels = {"start_positions": np.array([0, 1], np.int32),
            "end_positions": np.array([1, 2], np.int32)}
  outputs = {"start_logits": start, "end_logits": end}

  def ce(logits, positions):
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -log_probs[np.arange(len(positions)), positions].mean()

  expected = (ce(start, labels["start_positions"])
              + ce(end, labels["end_positions"])) / 2
  loss = float(squad_task.squad_losses(labels, outputs)["loss"])
  assert loss == pytest.approx(expected, rel=1e-5)
  counts = squad_task.squad_metric_counts(labels, outputs)
  assert float(counts["start_correct"]) == 1  # argmax 0, 2 vs labels 0, 1
  assert float(counts["end_correct"]) == 1  # argmax 1, 1 vs labels 1, 2
  assert float(counts["start_total"]) == float(counts["end_total"]) == 2


DATA = [{"paragraphs": [{"context": "Paris is in France.", "qas": [
    {"id": "q1", "question": "Where is Paris?",
     "answers": [{"text": "France", "answer_start": 12}]},
    {"id": "q2", "question": "Where is Rome?", "answers": [],
     "is_impossible": True}]}]}]


def test_v1_leaves_impossible_questions_out_and_v2_has_exact_match():
  predictions = {"q1": "France", "q2": "Paris"}
  v1 = squad_task.evaluation(DATA, predictions, None, 3)
  assert v1["exact_match"] == pytest.approx(100.0)
  assert v1["f1"] == pytest.approx(100.0) and v1["global_step"] == 3
  v2 = squad_task.evaluation(
      DATA, {"q1": "France", "q2": ""}, {"q1": 0.0, "q2": 1.0}, 3,
      version_2_with_negative=True)
  assert v2["exact_match"] == v2["exact"] == pytest.approx(100.0)
  v2_wrong = squad_task.evaluation(
      DATA, predictions, {"q1": 0.0, "q2": 0.0}, 3,
      version_2_with_negative=True)
  assert v2_wrong["exact_match"] == pytest.approx(50.0)


def test_evaluating_while_training_needs_answers_before_tensorflow(tmp_path):
  path = tmp_path / "dev.json"
  path.write_text(json.dumps({"data": [{"paragraphs": [{
      "context": "Paris is in France.",
      "qas": [{"id": "q1", "question": "Where is Paris?",
               "answers": []}]}]}]}))
  train = tmp_path / "train.json"
  paragraph = dict(DATA[0]["paragraphs"][0], qas=DATA[0]["paragraphs"][0][
      "qas"][:1])
  train.write_text(json.dumps({"data": [{"paragraphs": [paragraph]}]}))
  config = squad_task.SquadConfig(
      train_file=str(train), predict_file=str(path), do_train=True,
      do_predict=True, eval_every_steps=10)
  with pytest.raises(ValueError, match="has no answers to evaluate with "
                     "--eval_every_steps"):
    squad_task.SquadTask(config).read()
  task = squad_task.SquadTask(
      squad_task.SquadConfig(predict_file=str(path),
                                          do_predict=True))
  task.read()
  assert task.gold is None and len(task.predict_examples) == 1
  assert task.num_train_examples == 0 and task.best_metric == "f1"
