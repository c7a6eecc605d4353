"""The official SQuAD evaluation: exact match and token F1 (v1.1 and v2.0).

The semantics of the official `evaluate-v1.1.py` and `evaluate-v2.0.py`
(Rajpurkar et al.), written out here so run_squad.py and squad_evaluate.py
need no download:

  normalize_answer: lower-case, drop ASCII punctuation, drop the articles
    a/an/the (whole words), collapse whitespace.
  exact: normalised prediction == normalised gold answer.
  F1: over the normalised answers' whitespace tokens (bag of tokens).
  Each question scores the maximum over its gold answers; totals are means
  in percent.

v1.1 (`evaluate_v1`): every question of the data file counts; one without a
prediction scores 0; an empty prediction has F1 0 even against an empty
gold answer. Keys `exact_match`, `f1`.

v2.0 (`evaluate_v2`): only questions with a prediction count (`total`); a
question without gold answers (impossible) has the gold answer "" and
scores 1 only for an empty prediction; gold answers that normalise to ""
are ignored. With no-answer probabilities (run_squad's null_odds.json, or
0 for all), a question whose probability exceeds `na_prob_thresh` (default
1.0) counts as predicted unanswerable. Keys `exact`, `f1`, `total`, then
`HasAns_*` and `NoAns_*` over the (un)answerable questions, and with
no-answer probabilities given `best_exact`, `best_exact_thresh`, `best_f1`,
`best_f1_thresh`: the best scores over all thresholds on those
probabilities.
"""

import collections
import re
import string

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text):
  """Lower text and remove punctuation, articles and extra whitespace."""
  text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def exact_score(prediction, gold):
  return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction, gold, empty_matches_empty=True):
  """Token F1; with `empty_matches_empty` (v2.0) two empty answers score 1."""
  pred_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(gold).split()
  if empty_matches_empty and (not pred_tokens or not gold_tokens):
    return float(pred_tokens == gold_tokens)
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  same = sum(common.values())
  if same == 0:
    return 0.0
  precision = same / len(pred_tokens)
  recall = same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def questions(dataset):
  """(id, gold answer texts) of every question of the `data` list, in order."""
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield qa["id"], [answer["text"] for answer in qa["answers"]]


def evaluate_v1(dataset, predictions):
  """evaluate-v1.1.py's {"exact_match", "f1"} (percent)."""
  total = exact = f1 = 0.0
  for qid, golds in questions(dataset):
    total += 1
    if qid not in predictions:
      continue  # Unanswered: scores 0, as the official script.
    prediction = predictions[qid]
    exact += max(exact_score(prediction, g) for g in golds)
    f1 += max(f1_score(prediction, g, empty_matches_empty=False)
              for g in golds)
  total = max(total, 1.0)
  return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def raw_scores_v2(dataset, predictions):
  """Per question id with a prediction: exact and F1 before any threshold."""
  exact, f1 = {}, {}
  for qid, golds in questions(dataset):
    golds = [g for g in golds if normalize_answer(g)] or [""]
    if qid not in predictions:
      continue
    prediction = predictions[qid]
    exact[qid] = max(exact_score(prediction, g) for g in golds)
    f1[qid] = max(f1_score(prediction, g) for g in golds)
  return exact, f1


def _apply_threshold(scores, na_probs, has_answer, thresh):
  return {qid: float(not has_answer[qid]) if na_probs[qid] > thresh else s
          for qid, s in scores.items()}


def _means(exact, f1, qids=None):
  qids = list(exact) if qids is None else qids
  total = len(qids)
  return collections.OrderedDict([
      ("exact", 100.0 * sum(exact[q] for q in qids) / total),
      ("f1", 100.0 * sum(f1[q] for q in qids) / total),
      ("total", total)])


def _best_threshold(predictions, scores, na_probs, has_answer):
  """The best score over thresholds on na_probs, and that threshold."""
  score = best = sum(1 for qid in has_answer if not has_answer[qid])
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      score += scores[qid]
    elif predictions[qid]:
      score -= 1
    if score > best:
      best, best_thresh = score, na_probs[qid]
  return 100.0 * best / len(scores), best_thresh


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0):
  """evaluate-v2.0.py's output dict (see the module docstring)."""
  has_answer = {qid: bool(golds) for qid, golds in questions(dataset)}
  given_na_probs = na_probs is not None
  if na_probs is None:
    na_probs = {qid: 0.0 for qid in predictions}
  exact_raw, f1_raw = raw_scores_v2(dataset, predictions)
  if not exact_raw:
    raise ValueError("no question of the data file has a prediction")
  exact = _apply_threshold(exact_raw, na_probs, has_answer, na_prob_thresh)
  f1 = _apply_threshold(f1_raw, na_probs, has_answer, na_prob_thresh)
  result = _means(exact, f1)
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    # (The official script fails when one of them has no prediction.)
    qids = [qid for qid, has in has_answer.items()
            if has == wanted and qid in exact]
    if qids:
      for key, value in _means(exact, f1, qids).items():
        result[f"{prefix}_{key}"] = value
  if given_na_probs:
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
      best, thresh = _best_threshold(predictions, raw, na_probs, has_answer)
      result[f"best_{name}"] = best
      result[f"best_{name}_thresh"] = thresh
  return result


def precision_recall_curve(scores, na_probs, has_answer):
  """evaluate-v2.0.py's precision-recall curve over thresholds on na_probs.

  Questions in order of rising no-answer probability; answering the first i
  of them gives precision (score of the answerable ones among them) / i and
  recall over all answerable questions of the data file. A point is taken
  where a threshold can fall (between two different probabilities).

  Returns:
    (precisions, recalls, average precision in percent), as
    make_precision_recall_eval; None when no question is answerable.
  """
  num_true_pos = sum(1 for has in has_answer.values() if has)
  if num_true_pos == 0:
    return None
  qids = sorted(na_probs, key=lambda q: na_probs[q])
  true_pos, avg_prec = 0.0, 0.0
  precisions, recalls = [1.0], [0.0]
  for i, qid in enumerate(qids):
    if has_answer[qid]:
      true_pos += scores[qid]
    precision = true_pos / float(i + 1)
    recall = true_pos / float(num_true_pos)
    if i == len(qids) - 1 or na_probs[qid] != na_probs[qids[i + 1]]:
      avg_prec += precision * (recall - recalls[-1])
      precisions.append(precision)
      recalls.append(recall)
  return precisions, recalls, 100.0 * avg_prec
