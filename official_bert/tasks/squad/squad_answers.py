"""SQuAD predictions for run_squad.py: the answers, from a model's start and
end logits over the windows (squad.py's features).

The algorithm of google-research/bert's run_squad.py (write_predictions):
per question, the n_best_size best start and end logits of each window give
candidate spans (inside the window's context part, at most
max_answer_length pieces, starting at a max-context piece), best start + end
logit first; a span's text is its pieces mapped back onto the original words
(`get_final_text`, which drops the punctuation and case the pieces lack).
v2.0 adds the null answer (the smallest [CLS] start + end logit over the
windows); the question is unanswered when the null score exceeds the best
span's by more than null_score_diff_threshold.

The candidate spans come from `squad_windows.span_candidates`, the TF ops
the exported model (export/squad_serving.py) runs too; the texts are found
in Python here.
"""

import collections
import math
import unicodedata

import numpy as np

_Prelim = collections.namedtuple(
    "_Prelim", ["feature_index", "start_index", "end_index", "start_logit",
                "end_logit"])


def softmax(scores):
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


def postprocess(examples, features, start_logits, end_logits, vocab, *,
                n_best_size=20, max_answer_length=30, do_lower_case=True,
                version_2_with_negative=False, null_score_diff_threshold=0.0,
                log=None):
  """predictions, nbest and null_odds dicts (by question id), as the
  original's write_predictions. `start_logits`/`end_logits` are per feature
  (in `features` order), `vocab` the id -> token list."""
  by_example = collections.defaultdict(list)
  for index, feature in enumerate(features):
    by_example[feature.example_index].append(index)
  candidates = _span_candidates(features, start_logits, end_logits,
                                n_best_size, max_answer_length)
  predictions = collections.OrderedDict()
  nbest_json = collections.OrderedDict()
  null_odds = collections.OrderedDict()
  for example_index, example in enumerate(examples):
    prelim = []
    score_null, null_feature = math.inf, None
    for index in by_example[example_index]:
      starts, ends = start_logits[index], end_logits[index]
      if version_2_with_negative and starts[0] + ends[0] < score_null:
        score_null, null_feature = starts[0] + ends[0], index
      for s, e in candidates[index]:
        prelim.append(_Prelim(index, s, e, starts[s], ends[e]))
    if version_2_with_negative and null_feature is not None:
      prelim.append(_Prelim(null_feature, 0, 0, start_logits[null_feature][0],
                            end_logits[null_feature][0]))
    prelim.sort(key=lambda p: p.start_logit + p.end_logit, reverse=True)
    nbest, seen = [], set()
    for pred in prelim:
      if len(nbest) >= n_best_size:
        break
      if pred.start_index > 0:
        text = span_text(example, features[pred.feature_index],
                         pred.start_index, pred.end_index, vocab,
                         do_lower_case, log)
      else:
        text = ""
      if text in seen:
        continue
      seen.add(text)
      nbest.append((text, pred.start_logit, pred.end_logit))
    if version_2_with_negative and "" not in seen and null_feature is not None:
      nbest.append(("", start_logits[null_feature][0],
                    end_logits[null_feature][0]))
    if not nbest:
      nbest.append(("empty", 0.0, 0.0))
    probabilities = softmax([s + e for _, s, e in nbest])
    nbest_json[example.qas_id] = [
        collections.OrderedDict(text=text, probability=p,
                                start_logit=float(s), end_logit=float(e))
        for (text, s, e), p in zip(nbest, probabilities)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0][0]
      continue
    best = next((entry for entry in nbest if entry[0]), None)
    if best is None:  # Only the null answer survived.
      null_odds[example.qas_id] = 0.0
      predictions[example.qas_id] = ""
      continue
    score_diff = float(score_null - best[1] - best[2])
    null_odds[example.qas_id] = score_diff
    predictions[example.qas_id] = (
        "" if score_diff > null_score_diff_threshold else best[0])
  return predictions, nbest_json, null_odds


def _span_candidates(features, start_logits, end_logits, n_best_size,
                     max_answer_length, batch_size=1024):
  """Per feature, its candidate spans [(start, end)] in the original's
  order, from `squad_windows.span_candidates` (the exported model's)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_windows  # pylint: disable=g-import-not-at-top
  out = []
  for first in range(0, len(features), batch_size):
    batch = range(first, min(first + batch_size, len(features)))
    # Rows padded with -inf outside the context: never candidates, and
    # ranked after every logit of the row.
    width = max(len(start_logits[i]) for i in batch)
    logits = np.full((2, len(batch), width), -np.inf)
    in_doc = np.zeros((len(batch), width), bool)
    max_context = np.zeros((len(batch), width), bool)
    for row, i in enumerate(batch):
      logits[0, row, :len(start_logits[i])] = start_logits[i]
      logits[1, row, :len(end_logits[i])] = end_logits[i]
      for position, best in features[i].token_is_max_context.items():
        max_context[row, position] = best
      in_doc[row, list(features[i].token_to_orig_map)] = True
    starts, ends, valid = (value.numpy() for value in
                           squad_windows.span_candidates(
                               tf.constant(logits[0]), tf.constant(logits[1]),
                               tf.constant(in_doc),
                               tf.constant(max_context & in_doc),
                               n_best_size, max_answer_length))
    for row in range(len(batch)):
      s, e = np.nonzero(valid[row])  # start rank, then end rank
      out.append(list(zip(starts[row][s].tolist(), ends[row][e].tolist())))
  return out


def span_text(example, feature, start_index, end_index, vocab, do_lower_case,
              log=None):
  """The original text of the pieces start_index..end_index of `feature`."""
  pieces = " ".join(vocab[i] for i in feature.tokens[start_index:end_index + 1])
  pieces = pieces.replace(" ##", "").replace("##", "")
  tok_text = " ".join(pieces.strip().split())
  orig_start = feature.token_to_orig_map[start_index]
  orig_end = feature.token_to_orig_map[end_index]
  orig_text = " ".join(example.doc_tokens[orig_start:orig_end + 1])
  return get_final_text(tok_text, orig_text, do_lower_case, log)


def get_final_text(pred_text, orig_text, do_lower_case, log=None):
  """The part of `orig_text` that `pred_text` (normalised pieces) covers.

  The pieces lack the original's case, accents and spacing; aligning the
  basic tokenization of `orig_text` with `orig_text` itself character by
  character (spaces ignored) maps the prediction back. Falls back to
  `orig_text` whole when the alignment fails (as the original; `log` is told
  why).
  """
  log = log or (lambda message: None)
  tok_text = " ".join(basic_tokenize(orig_text, do_lower_case))
  start = tok_text.find(pred_text)
  if start == -1:
    log(f"Unable to find text: {pred_text!r} in {orig_text!r}")
    return orig_text
  end = start + len(pred_text) - 1
  orig_ns, orig_ns_to_s = _strip_spaces(orig_text)
  tok_ns, tok_ns_to_s = _strip_spaces(tok_text)
  if len(orig_ns) != len(tok_ns):
    log(f"Length not equal after stripping spaces: {orig_ns!r} vs {tok_ns!r}")
    return orig_text
  tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}
  orig_start = orig_ns_to_s.get(tok_s_to_ns.get(start))
  orig_end = orig_ns_to_s.get(tok_s_to_ns.get(end))
  if orig_start is None or orig_end is None:
    log("Couldn't map the start or end position")
    return orig_text
  return orig_text[orig_start:orig_end + 1]


def _strip_spaces(text):
  chars, ns_to_s = [], {}
  for i, c in enumerate(text):
    if c == " ":
      continue
    ns_to_s[len(chars)] = i
    chars.append(c)
  return "".join(chars), ns_to_s


def basic_tokenize(text, do_lower_case=True):
  """The original's BasicTokenizer in Python (the rules of tokenization.py
  steps 1-3), used by get_final_text."""
  cleaned = []
  for c in text:
    cp = ord(c)
    if cp == 0 or cp == 0xFFFD or _is_control(c):
      continue
    cleaned.append(" " if _is_whitespace(c) else
                   f" {c} " if _is_cjk(cp) else c)
  tokens = []
  for token in "".join(cleaned).split():
    if do_lower_case:
      token = unicodedata.normalize("NFD", token.lower())
      token = "".join(c for c in token if unicodedata.category(c) != "Mn")
    current = []
    for c in token:
      if _is_punctuation(c):
        tokens.extend(["".join(current)] if current else [])
        tokens.append(c)
        current = []
      else:
        current.append(c)
    tokens.extend(["".join(current)] if current else [])
  return tokens


def _is_whitespace(c):
  return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c):
  return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _is_punctuation(c):
  cp = ord(c)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(c).startswith("P")


def _is_cjk(cp):
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF
          or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
          or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
          or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)
