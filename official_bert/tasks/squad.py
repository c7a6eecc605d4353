"""SQuAD v1.1 / v2.0 for run_squad.py: reader, features, predictions.

The algorithm of google-research/bert's run_squad.py:

  reader      the context split on whitespace into words (`doc_tokens`), each
              answer's character offset mapped to words (`char_to_word_offset`).
  features    the question's WordPieces cut to `max_query_length`; the
              context's WordPieces (per word, so each piece knows its word)
              cut into windows of at most `max_seq_length - len(query) - 3`
              pieces, each starting `doc_stride` after the previous one:
              [CLS] query [SEP] window [SEP], padded. A piece in several
              windows is predicted only from the window where it has the most
              context on its shorter side (`is_max_context`). Training
              answers are narrowed to the pieces that spell the answer
              (`improve_answer_span`); an impossible question (v2.0), or an
              answer outside the window, points at [CLS] (position 0).
  predictions per question, the n_best_size best start and end logits of each
              window give candidate spans (inside the window's context part,
              at most max_answer_length pieces, starting at a max-context
              piece), best start + end logit first; a span's text is its
              pieces mapped back onto the original words (`get_final_text`,
              which drops the punctuation and case the pieces lack). v2.0
              adds the null answer (the smallest [CLS] start + end logit over
              the windows); the question is unanswered when the null score
              exceeds the best span's by more than null_score_diff_threshold.

A file that is not SQuAD is one `ValueError` sentence naming the file and the
question id: not JSON, no `data` list, a question without id or text, for
training an answer without text or integer answer_start. As the original's
reader, a training answer whose text is not found in the words at its
answer_start is skipped (and reported to the caller), prediction never reads
answers, and without version_2_with_negative a v2.0 file is predicted as
v1.1 (no question impossible).

The context's WordPieces come from `context_pieces`, TF ops that also give
each piece's byte range in the context, and the windows (inputs, token ->
word map, max-context flags) from `squad_windows.windows`: run_squad and
the exported model (export/squad_serving.py) run the same functions.
Training answers are mapped onto the windows, and predictions decoded, in
Python here.
"""

import collections
import dataclasses
import json
import math
import unicodedata

import numpy as np

# Words of the context, as the original's is_whitespace (U+202F included).
_SQUAD_WHITESPACE = " \t\r\n\u202f"
WORD_SPLIT = r"[ \t\r\n\x{202f}]+"
# run_squad's first feature id, as the original's unique_id counter.
FIRST_UNIQUE_ID = 1000000000


@dataclasses.dataclass
class SquadExample:
  """One question; positions are word indices into `doc_tokens`."""
  qas_id: str
  question_text: str
  context: str
  doc_tokens: list
  orig_answer_text: str = ""
  start_position: int = -1
  end_position: int = -1
  is_impossible: bool = False


@dataclasses.dataclass
class SquadFeature:
  """One window of one example (the original's InputFeatures)."""
  unique_id: int
  example_index: int
  doc_span_index: int
  tokens: list               # WordPiece ids, unpadded
  token_to_orig_map: dict    # window position -> word index
  token_is_max_context: dict  # window position -> bool
  input_ids: list
  input_mask: list
  segment_ids: list
  start_position: int = 0
  end_position: int = 0
  is_impossible: bool = False


def split_words(text):
  """(doc_tokens, char_to_word_offset) as the original's reader."""
  doc_tokens, char_to_word_offset = [], []
  previous_is_whitespace = True
  for c in text:
    if c in _SQUAD_WHITESPACE:
      previous_is_whitespace = True
    else:
      if previous_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      previous_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def load_squad_json(path):
  """The `data` list of a SQuAD file, or one ValueError sentence."""
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except OSError as e:
    raise ValueError(f"{path} cannot be read ({e.strerror}); pass a SQuAD "
                     "JSON file.") from None
  except UnicodeDecodeError:
    raise ValueError(f"{path} is not UTF-8 text; pass a SQuAD JSON "
                     "file.") from None
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not JSON (line {e.lineno}: {e.msg}); pass "
                     "a SQuAD file like train-v1.1.json.") from None
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise ValueError(f"{path} has no \"data\" list; a SQuAD file is "
                     "{\"version\": ..., \"data\": [{\"paragraphs\": "
                     "[{\"context\": ..., \"qas\": [...]}]}]}.")
  return data["data"]


def read_squad_examples(path, is_training, version_2_with_negative,
                        skipped=None):
  """`SquadExample`s of a SQuAD file, read as the original's reader.

  For training, each answerable question needs exactly one answer (as the
  original) and impossible questions need `version_2_with_negative`; a
  question whose answer text is not in the context's words at its
  answer_start is left out (the original's "Could not find answer"), its id
  appended to `skipped` when a list is given. Prediction reads no answers
  and, without `version_2_with_negative`, no `is_impossible`.
  """
  examples = []
  skipped = [] if skipped is None else skipped
  for a, article in enumerate(load_squad_json(path)):
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
      raise ValueError(f"{path}: data[{a}] has no \"paragraphs\" list.")
    for p, paragraph in enumerate(paragraphs):
      where = f"{path}: data[{a}].paragraphs[{p}]"
      if not (isinstance(paragraph, dict)
              and isinstance(paragraph.get("context"), str)
              and isinstance(paragraph.get("qas"), list)):
        raise ValueError(f"{where} needs a \"context\" string and a \"qas\" "
                         "list.")
      context = paragraph["context"]
      doc_tokens, char_to_word_offset = split_words(context)
      for qa in paragraph["qas"]:
        example = _read_question(
            qa, where, path, context, doc_tokens, char_to_word_offset,
            is_training, version_2_with_negative)
        if example is None:
          skipped.append(qa["id"])
        else:
          examples.append(example)
  if not examples and skipped:
    raise ValueError(
        f"{path} has no training question whose answer text is at its "
        f"answer_start ({len(skipped)} skipped: {', '.join(skipped[:5])}); "
        "fix answer_start or the text.")
  if not examples:
    raise ValueError(f"{path} has no questions.")
  return examples


def _read_question(qa, where, path, context, doc_tokens, char_to_word_offset,
                   is_training, version_2_with_negative):
  """The question's SquadExample, or None for a training answer that is not
  where answer_start says (the original skips it)."""
  if not (isinstance(qa, dict) and isinstance(qa.get("id"), str)
          and isinstance(qa.get("question"), str)):
    raise ValueError(f"{where} has a question without an \"id\" or "
                     "\"question\" string.")
  qid = qa["id"]
  if not is_training:
    # As the original: no answers read, and is_impossible only for v2.0.
    return SquadExample(qid, qa["question"], context, doc_tokens,
                        is_impossible=(version_2_with_negative and
                                       bool(qa.get("is_impossible", False))))
  answers = qa.get("answers", [])
  is_impossible = bool(qa.get("is_impossible", False))
  if not isinstance(answers, list):
    raise ValueError(f"{path}: question {qid}: \"answers\" is not a list.")
  if is_impossible and not version_2_with_negative:
    raise ValueError(f"{path}: question {qid} is impossible (SQuAD v2.0); "
                     "pass --version_2_with_negative.")
  example = SquadExample(qid, qa["question"], context, doc_tokens,
                         is_impossible=is_impossible)
  if is_impossible:
    return example
  if len(answers) != 1:
    raise ValueError(f"{path}: question {qid} has {len(answers)} answers; "
                     "for training each question needs exactly one.")
  answer = answers[0]
  if not (isinstance(answer, dict) and isinstance(answer.get("text"), str)
          and isinstance(answer.get("answer_start"), int)):
    raise ValueError(f"{path}: question {qid}: an answer needs \"text\" "
                     "and an integer \"answer_start\".")
  start, text = answer["answer_start"], answer["text"]
  end = start + len(text) - 1
  if not text.strip() or start < 0 or end >= len(context):
    return None  # (The original fails on these with an IndexError.)
  start_word, end_word = char_to_word_offset[start], char_to_word_offset[end]
  # The original's check: the answer's words contain its text (whitespace
  # collapsed); an answer_start a few characters off inside a word passes.
  actual_text = " ".join(doc_tokens[max(start_word, 0):end_word + 1])
  if actual_text.find(" ".join(text.split())) == -1:
    return None
  example.orig_answer_text = text
  example.start_position = start_word
  example.end_position = end_word
  return example


# ------------------------------------------------------------- tokenizing --
def context_pieces(tokenizer, texts):
  """The context's words and WordPieces, with each piece's byte range.

  As the original: the words are the reader's (split on whitespace), and each
  word is tokenized on its own (basic tokenization, then WordPiece).

  Args:
    tokenizer: a `tokenization.FullTokenizer`.
    texts: string Tensor [B].

  Returns:
    dict of RaggedTensors: `words` [B, (W)] strings, `word_start` and
    `word_end` [B, (W)] byte offsets, `ids` [B, (W), (P)] WordPiece ids,
    `piece_start` and `piece_end` [B, (W), (P)] byte offsets of each piece in
    its text. A piece of a basic token whose normalised form changes length
    (accents, [UNK] for long words) spans the whole basic token.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  texts = tf.convert_to_tensor(texts, tf.string)
  words, word_start, word_end = tf_text.regex_split_with_offsets(
      texts, WORD_SPLIT)                                        # [B, (W)]
  # Basic tokens of each word: split on (Unicode) whitespace, punctuation
  # and CJK characters kept as tokens of their own (tokenization.py step 3).
  # pylint: disable=protected-access
  basic, basic_start, basic_end = tf_text.regex_split_with_offsets(
      words.flat_values,
      tokenization._WHITESPACE + "|" + tokenization._DELIMITERS,
      tokenization._KEEP_DELIMITERS)                            # [Wt, (S)]
  normal = tokenization.normalize(basic.flat_values,
                                  tokenizer.do_lower_case)      # [St]
  too_long = tf.strings.length(normal, unit="UTF8_CHAR") > (
      tokenization.MAX_CHARS_PER_WORD)
  # pylint: enable=protected-access
  normal = tf.where(too_long, "[UNK]", normal)
  ids, start, end = tokenizer.wordpiece_with_offsets(normal)    # [St, (P)]
  raw_length = basic_end.flat_values - basic_start.flat_values  # [St]
  same_length = tf.equal(tf.cast(tf.strings.length(normal), tf.int64),
                         raw_length)
  # Byte offset of each basic token in its text.
  base = (tf.gather(word_start.flat_values, basic.value_rowids())
          + basic_start.flat_values)                             # [St]
  row = ids.value_rowids()                                       # [Pt]
  exact = tf.gather(same_length, row)
  piece_start = tf.gather(base, row) + tf.where(exact, start.flat_values, 0)
  piece_end = tf.gather(base, row) + tf.where(
      exact, end.flat_values, tf.gather(raw_length, row))
  # Basic tokens that normalise to nothing (control characters, lone
  # accents) have no pieces, as the original drops them.
  keep = tf.gather(tf.strings.length(normal) > 0, row)

  def nest(flat):  # [Pt] -> [B, (W), (P)], empty basic tokens dropped
    per_basic = ids.with_flat_values(flat)
    per_word = tf.RaggedTensor.from_row_splits(
        per_basic, basic.row_splits, validate=False).merge_dims(1, 2)
    return tf.RaggedTensor.from_row_splits(per_word, words.row_splits,
                                           validate=False)

  mask = nest(keep)
  return {"words": words, "word_start": word_start, "word_end": word_end,
          **{name: tf.ragged.boolean_mask(nest(flat), mask) for name, flat in
             (("ids", ids.flat_values), ("piece_start", piece_start),
              ("piece_end", piece_end))}}


def _to_lists(ragged):
  """Nested Python lists of a RaggedTensor (RaggedTensor.to_list slices
  row by row in eager mode, ~100x slower)."""
  values = ragged.flat_values.numpy().tolist()
  for splits in reversed(ragged.nested_row_splits):
    splits = splits.numpy().tolist()
    values = [values[a:b] for a, b in zip(splits[:-1], splits[1:])]
  return values


def _tokenize_lists(tokenizer, texts, batch_size=512):
  """Python lists of WordPiece ids of `texts` (FullTokenizer.tokenize)."""
  out = []
  for i in range(0, len(texts), batch_size):
    out.extend(_to_lists(tokenizer.tokenize(texts[i:i + batch_size])))
  return out


def _context_piece_lists(tokenizer, contexts, batch_size=256):
  """Per context: per word, its WordPiece ids (Python lists)."""
  out = []
  for i in range(0, len(contexts), batch_size):
    pieces = context_pieces(tokenizer, contexts[i:i + batch_size])
    out.extend(_to_lists(pieces["ids"]))
  return out


# ------------------------------------------------------------- features ----
def doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """(start, length) of the windows over `num_tokens` context pieces."""
  spans, start = [], 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def is_max_context(spans, span_index, position):
  """Whether window `span_index` gives piece `position` its most context:
  the largest min(left, right) + 0.01 * window length, the first on ties."""
  best_score, best_index = None, None
  for index, (start, length) in enumerate(spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return span_index == best_index


def max_context_windows(spans, num_tokens):
  """For each piece, the window `is_max_context` picks (one pass)."""
  best_score, best_index = [None] * num_tokens, [None] * num_tokens
  for index, (start, length) in enumerate(spans):
    end = start + length - 1
    for position in range(start, end + 1):
      score = min(position - start, end - position) + 0.01 * length
      if best_score[position] is None or score > best_score[position]:
        best_score[position], best_index[position] = score, index
  return best_index


def improve_answer_span(doc_pieces, start, end, answer_pieces):
  """The sub-span of [start, end] whose pieces equal the answer's pieces
  (e.g. "1895" in the word "(1895-1943)."), else [start, end]."""
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if doc_pieces[new_start:new_end + 1] == answer_pieces:
        return new_start, new_end
  return start, end


def convert_examples_to_features(examples, tokenizer, max_seq_length,
                                 doc_stride, max_query_length, is_training,
                                 batch_size=2048):
  """The windows of every example, as the original's features.

  The windows, their inputs and maps come from `squad_windows.windows` (TF
  ops, the exported model's own); training answers are mapped onto them
  here.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import squad_windows  # pylint: disable=g-import-not-at-top
  contexts = sorted({e.context for e in examples})
  context_index = {context: i for i, context in enumerate(contexts)}
  word_pieces = _context_piece_lists(tokenizer, contexts)
  queries = [q[:max_query_length] for q in _tokenize_lists(
      tokenizer, [e.question_text for e in examples])]
  answers = (_tokenize_lists(tokenizer, [e.orig_answer_text for e in examples])
             if is_training else [None] * len(examples))
  for example, query in zip(examples, queries):
    if len(word_pieces[context_index[example.context]]) != len(
        example.doc_tokens):  # cannot happen
      raise AssertionError(f"question {example.qas_id}: the tokenizer split "
                           "the context into different words")
    if max_seq_length - len(query) - 3 < 1:
      raise ValueError(f"--max_seq_length={max_seq_length} leaves no room "
                       f"for the context after a {len(query)}-piece question; "
                       "raise it or lower --max_query_length.")
  all_contexts = _ragged(
      [p for pieces in word_pieces for word in pieces for p in word],
      [len(word) for pieces in word_pieces for word in pieces],
      [len(pieces) for pieces in word_pieces])             # [C, (W), (P)]
  features = []
  for first in range(0, len(examples), batch_size):
    batch = range(first, min(first + batch_size, len(examples)))
    windows = squad_windows.windows(
        _ragged([p for i in batch for p in queries[i]],
                [len(queries[i]) for i in batch]),
        tf.gather(all_contexts, [context_index[examples[i].context]
                                 for i in batch]),
        max_seq_length, doc_stride, tokenizer.cls_id, tokenizer.sep_id)
    windows = {name: value.numpy() for name, value in windows.items()}
    answer_span = None
    # A context without pieces has one empty window: the original has none.
    for n in np.flatnonzero(windows["doc_length"] > 0):
      example_index = first + int(windows["text"][n])
      example = examples[example_index]
      if windows["span_index"][n] == 0 and is_training:
        answer_span = _answer_pieces(
            example, word_pieces[context_index[example.context]],
            answers[example_index])
      features.append(_feature(windows, n, example_index, example,
                               len(queries[example_index]), answer_span))
  for unique_id, feature in enumerate(features, FIRST_UNIQUE_ID):
    feature.unique_id = unique_id
  return features


def _ragged(values, *row_lengths):
  """An int64 RaggedTensor: flat `values`, then the row lengths of each
  ragged dimension, innermost first."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ragged = tf.constant(values, tf.int64, shape=[len(values)])
  for lengths in row_lengths:
    ragged = tf.RaggedTensor.from_row_lengths(
        ragged, tf.constant(lengths, tf.int64, shape=[len(lengths)]),
        validate=False)
  return ragged


def _feature(windows, n, example_index, example, query_length, answer_span):
  """The SquadFeature of window `n`; a training answer `(first piece, last
  piece)` of the context mapped into it."""
  length = int(windows["input_mask"][n].sum())
  input_ids = windows["input_word_ids"][n].tolist()
  word = windows["word"][n]
  positions = np.flatnonzero(word >= 0)
  at = positions.tolist()
  feature = SquadFeature(
      0, example_index, int(windows["span_index"][n]), input_ids[:length],
      dict(zip(at, word[positions].tolist())),
      dict(zip(at, windows["is_max_context"][n][positions].tolist())),
      input_ids, windows["input_mask"][n].tolist(),
      windows["input_type_ids"][n].tolist(),
      is_impossible=example.is_impossible)
  if answer_span is not None and not example.is_impossible:
    tok_start, tok_end = answer_span
    start = int(windows["doc_start"][n])
    if start <= tok_start and tok_end < start + int(windows["doc_length"][n]):
      offset = query_length + 2
      feature.start_position = tok_start - start + offset
      feature.end_position = tok_end - start + offset
    else:  # The answer is not (wholly) in this window: [CLS].
      feature.is_impossible = True
  return feature


def _answer_pieces(example, word_pieces, answer_pieces):
  """(first, last) context piece of a training answer, narrowed to the
  answer's own pieces; None for an impossible question."""
  if example.is_impossible:
    return None
  orig_to_tok_index, all_doc_pieces = [], []
  for pieces in word_pieces:
    orig_to_tok_index.append(len(all_doc_pieces))
    all_doc_pieces.extend(pieces)
  tok_start = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    tok_end = orig_to_tok_index[example.end_position + 1] - 1
  else:
    tok_end = len(all_doc_pieces) - 1
  return improve_answer_span(all_doc_pieces, tok_start, tok_end,
                             answer_pieces)


def feature_arrays(features, with_positions=False):
  """Model inputs (TF-Hub names, int32 numpy [N, T]) and, for training,
  labels `start_positions`, `end_positions` (int32 [N])."""
  inputs = {
      "input_word_ids": np.array([f.input_ids for f in features], np.int32),
      "input_mask": np.array([f.input_mask for f in features], np.int32),
      "input_type_ids": np.array([f.segment_ids for f in features], np.int32)}
  if not with_positions:
    return inputs
  labels = {
      "start_positions": np.array([f.start_position for f in features],
                                  np.int32),
      "end_positions": np.array([f.end_position for f in features], np.int32)}
  return inputs, labels


# ----------------------------------------------------------- predictions ---
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
  from official_bert.tasks import squad_windows  # pylint: disable=g-import-not-at-top
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
