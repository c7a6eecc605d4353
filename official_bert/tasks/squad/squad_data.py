"""SQuAD v1.1 / v2.0 for run_squad.py: reader and features (the windows).

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
Training answers are mapped onto the windows in Python here. The answers
predicted from the windows' logits: squad_answers.py.
"""

import dataclasses
import json

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
  from official_bert.tasks.squad import squad_windows  # pylint: disable=g-import-not-at-top
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
