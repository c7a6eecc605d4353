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
import functools

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
    word_tokens = None  # the example's words' basic tokens, when needed
    for pred in prelim:
      if len(nbest) >= n_best_size:
        break
      if pred.start_index > 0:
        if word_tokens is None:
          word_tokens = basic_tokenize(example.doc_tokens, do_lower_case)
        text = span_text(example, features[pred.feature_index],
                         pred.start_index, pred.end_index, vocab,
                         do_lower_case, log, word_tokens)
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
              log=None, word_tokens=None):
  """The original text of the pieces start_index..end_index of `feature`;
  `word_tokens`: the basic tokens of each of the example's words
  (`basic_tokenize(example.doc_tokens)`, computed here when None)."""
  pieces = " ".join(vocab[i] for i in feature.tokens[start_index:end_index + 1])
  pieces = pieces.replace(" ##", "").replace("##", "")
  tok_text = " ".join(pieces.strip().split())
  orig_start = feature.token_to_orig_map[start_index]
  orig_end = feature.token_to_orig_map[end_index]
  orig_text = " ".join(example.doc_tokens[orig_start:orig_end + 1])
  if word_tokens is None:
    word_tokens = basic_tokenize(example.doc_tokens, do_lower_case)
  # Words hold no whitespace, so the span's basic tokens are its words'.
  orig_tokens = " ".join(token for word in word_tokens[orig_start:orig_end + 1]
                         for token in word)
  return get_final_text(tok_text, orig_text, do_lower_case, log, orig_tokens)


def get_final_text(pred_text, orig_text, do_lower_case, log=None,
                   orig_tokens=None):
  """The part of `orig_text` that `pred_text` (normalised pieces) covers.

  The pieces lack the original's case, accents and spacing; aligning the
  basic tokenization of `orig_text` with `orig_text` itself character by
  character (spaces ignored) maps the prediction back. Falls back to
  `orig_text` whole when the alignment fails (as the original; `log` is told
  why).
  """
  log = log or (lambda message: None)
  tok_text = orig_tokens
  if tok_text is None:  # `orig_text`'s basic tokens, space-separated
    tok_text = " ".join(basic_tokenize([orig_text], do_lower_case)[0])
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


def basic_tokenize(texts, do_lower_case=True):
  """Each text's basic tokens (a list of str lists): the graph tokenizer's
  cleaning, lower-casing, accent stripping and splitting
  (data/tokenization.py `normalize` and `split_words`, the one basic
  tokenizer: the original's rules on Unicode 15's tables)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not texts:
    return []
  words = _basic_tokenizer(bool(do_lower_case))(
      tf.constant([t.encode("utf-8", "surrogatepass") for t in texts]))
  return [[w.decode("utf-8") for w in row] for row in words.to_list()]


@functools.lru_cache(maxsize=2)
def _basic_tokenizer(do_lower_case):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def words(texts):
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8",
                                         errors="ignore")
    return tokenization.split_words(tokenization.normalize(texts,
                                                           do_lower_case))
  return words
