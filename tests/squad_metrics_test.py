"""The official SQuAD evaluation's numbers on hand-made predictions.

Every expected number below is worked out by hand from the official
scripts' definitions (evaluate-v1.1.py, evaluate-v2.0.py), in the comments.
"""


import pytest

from official_bert.tasks.squad import squad_metrics


def _data(questions):
  """A SQuAD `data` list: one paragraph holding `questions` (id -> golds)."""
  return [{"title": "t", "paragraphs": [{"context": "unused", "qas": [
      {"id": qid, "question": "?", "is_impossible": not golds,
       "answers": [{"text": g, "answer_start": 0} for g in golds]}
      for qid, golds in questions.items()]}]}]


# q1-q3 answerable, q4-q6 impossible.
DATA = _data({
    "q1": ["The Eiffel Tower", "Eiffel Tower!"],
    "q2": ["Denmark, Iceland and Norway"],
    "q3": ["an apple", "A"],          # "A" normalises to "" (ignored in v2.0)
    "q4": [], "q5": [], "q6": []})
PREDICTIONS = {
    "q1": "  eiffel   TOWER. ",   # case, punctuation, spaces: EM 1
    "q2": "Iceland and Norway",   # 3 of 4 gold tokens: P 1, R 3/4, F1 6/7
    "q3": "",                     # v2.0: 0; v1.1: EM 1 against "A" ("" == "")
    "q4": "",                     # impossible, empty: 1
    "q5": "the",                  # impossible, normalises to "": 1
    "q6": "Rollo"}                # impossible, an answer: 0
NA_PROBS = {"q1": 0.1, "q2": 0.2, "q5": 0.3, "q3": 0.5, "q4": 0.8, "q6": 2.0}


@pytest.mark.parametrize("text, normal", [
    ("The Eiffel Tower", "eiffel tower"),
    ("theory of an-apple", "theory of anapple"),  # articles as whole words only
    ("A  cat\tand\nthe dog.", "cat and dog"),
    ("“Curly” quotes", "“curly” quotes"),          # only ASCII punctuation goes
    ("", "")])
def test_normalize_answer(text, normal):
  assert squad_metrics.normalize_answer(text) == normal


def test_v2_without_no_answer_probabilities():
  result = squad_metrics.evaluate_v2(DATA, PREDICTIONS)
  # exact 1,0,0,1,1,0; F1 1, 6/7, 0, 1, 1, 0.
  assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1",
                          "HasAns_total", "NoAns_exact", "NoAns_f1",
                          "NoAns_total"]
  assert result["exact"] == pytest.approx(100 * 3 / 6)
  assert result["f1"] == pytest.approx(100 * (3 + 6 / 7) / 6)
  assert result["total"] == 6
  assert result["HasAns_exact"] == pytest.approx(100 / 3)
  assert result["HasAns_f1"] == pytest.approx(100 * (1 + 6 / 7) / 3)
  assert result["HasAns_total"] == 3
  assert result["NoAns_exact"] == pytest.approx(200 / 3)
  assert result["NoAns_f1"] == pytest.approx(200 / 3)
  assert result["NoAns_total"] == 3


def test_v2_with_no_answer_probabilities_and_best_thresholds():
  result = squad_metrics.evaluate_v2(DATA, PREDICTIONS, NA_PROBS)
  # na_prob_thresh 1.0: only q6 (2.0) counts as predicted unanswerable,
  # which is right for it: exact 1,0,0,1,1,1.
  assert result["exact"] == pytest.approx(100 * 4 / 6)
  assert result["f1"] == pytest.approx(100 * (4 + 6 / 7) / 6)
  assert result["NoAns_exact"] == pytest.approx(100.0)
  # Best threshold: start from 3 (all answered "no answer") and walk the
  # questions by rising probability: q1 +1 (4, at 0.1), q2 +6/7 for F1
  # (4 6/7, at 0.2) but +0 for exact, q5 -1 (a non-empty prediction "the"),
  # q3 +0, q4 +0 (empty), q6 -1.
  assert result["best_exact"] == pytest.approx(100 * 4 / 6)
  assert result["best_exact_thresh"] == 0.1
  assert result["best_f1"] == pytest.approx(100 * (4 + 6 / 7) / 6)
  assert result["best_f1_thresh"] == 0.2
  # A lower na_prob_thresh turns more questions into "no answer".
  low = squad_metrics.evaluate_v2(DATA, PREDICTIONS, NA_PROBS, 0.4)
  # q3 (0.5) -> 0, q4 (0.8) -> 1, q6 -> 1: exact 1,0,0,1,1,1.
  assert low["exact"] == pytest.approx(100 * 4 / 6)
  assert low["HasAns_f1"] == pytest.approx(100 * (1 + 6 / 7) / 3)
  # A probability equal to the threshold is not above it: q1 keeps its 1.
  at_q1 = squad_metrics.evaluate_v2(DATA, PREDICTIONS, NA_PROBS, 0.1)
  assert at_q1["HasAns_exact"] == pytest.approx(100 / 3)


def test_v2_counts_only_predicted_questions():
  result = squad_metrics.evaluate_v2(DATA, {"q1": "Eiffel Tower", "q4": "x"})
  assert result["total"] == 2 and result["exact"] == pytest.approx(50.0)
  assert result["HasAns_total"] == 1 and result["NoAns_total"] == 1


def test_v1():
  data = _data({"q1": ["The Eiffel Tower", "Eiffel Tower!"],
                "q2": ["Denmark, Iceland and Norway"],
                "q3": ["an apple", "A"], "q7": ["unanswered"]})
  result = squad_metrics.evaluate_v1(data, PREDICTIONS)
  # exact 1, 0, 1 (via "A"), 0 (no prediction still counts); F1 1, 6/7, 0
  # (v1.1: an empty prediction scores 0 even against ""), 0.
  assert result == {"exact_match": pytest.approx(100 * 2 / 4),
                    "f1": pytest.approx(100 * (1 + 6 / 7) / 4)}
