"""Named-entity recognition data: CoNLL files, word windows, entity F1.

Files are CoNLL-2003 style: one word per line with its tag in the last
column (`EU NNP B-NP B-ORG`, or just `EU B-ORG`), a blank line between
sentences, `-DOCSTART-` lines skipped. Tags are IOB1 (CoNLL-2003's own),
IOB2/BIO or IOBES: the entity metric reads all of them.

Model inputs (`encode_words`, TF ops, used both by run_ner.py on files and by
the served model on raw text, so both see the same windows):
  * each word is WordPiece-tokenized on its own; the first piece carries the
    word's label, the others are ignored by the loss and the prediction
    (a word that tokenizes to nothing becomes [UNK]; a word with more pieces
    than a window keeps the first `seq_length - 2`);
  * a sentence's words are packed greedily, in order, into windows of at
    most `seq_length - 2` pieces: `[CLS] pieces [SEP]`. A long sentence
    spans several windows; every word is in exactly one.

Entity metric (`entity_metrics`): conlleval's (the CoNLL shared tasks'
scorer; seqeval's default mode is the same): a chunk starts and ends by
conlleval's rules on (prefix, type) of neighbouring tags; precision, recall
and F1 count chunks whose type, first and last word all match.

Shape legend: B texts, W words, N words in total, R windows, T seq_length.
"""

import dataclasses
import functools

import numpy as np

from official_bert.data import text_files

DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class Sentence:
  words: tuple
  tags: tuple
  where: str  # "file:line" of the first word, for messages.


def read_conll(path):
  """The `Sentence`s of a CoNLL file; one ValueError sentence on a bad line."""
  with text_files.utf8_errors(path), open(path, encoding="utf-8") as f:
    lines = f.readlines()
  sentences, words, tags, first = [], [], [], None
  for line_number, line in enumerate(lines, 1):
    fields = line.split()
    if not fields or fields[0] == DOCSTART:
      if words:
        sentences.append(Sentence(tuple(words), tuple(tags), first))
      words, tags = [], []
      continue
    if len(fields) < 2:
      raise ValueError(
          f"{path}:{line_number}: the line {line.strip()!r} has no tag; "
          "each line must be `word ... tag` (e.g. `EU NNP B-NP B-ORG`), "
          "with a blank line between sentences")
    if not words:
      first = f"{path}:{line_number}"
    words.append(fields[0])
    tags.append(fields[-1])
  if words:
    sentences.append(Sentence(tuple(words), tuple(tags), first))
  if not sentences:
    raise ValueError(f"{path} has no sentences; it needs `word ... tag` "
                     "lines (CoNLL-2003 format)")
  return sentences


def label_list(sentences):
  """The sorted distinct tags of the training sentences."""
  return sorted({tag for sentence in sentences for tag in sentence.tags})


def tag_ids(sentences, labels):
  """Per sentence, the label ids of its words (int32 arrays)."""
  index = {label: i for i, label in enumerate(labels)}
  ids = []
  for sentence in sentences:
    for word, tag in zip(sentence.words, sentence.tags):
      if tag not in index:
        raise ValueError(f"{sentence.where} (sentence starting there): the "
                         f"tag {tag!r} of {word!r} is not among the training "
                         f"tags {labels}; fix the file or train on data that "
                         "has it")
    ids.append(np.array([index[tag] for tag in sentence.tags], np.int32))
  return ids


# ---------------------------------------------------------------- windows --
def encode_words(tokenizer, words, seq_length):
  """Packs words into windows of model inputs (TF ops; works in a graph).

  Args:
    tokenizer: a `tokenization.FullTokenizer`.
    words: string RaggedTensor [B, (W)], the words of each text.
    seq_length: the window length T (int).

  Returns:
    dict: `input_word_ids`, `input_mask`, `input_type_ids` int32 [R, T];
    `word_window` int64 [N] (the window of each word, in words' flat order)
    and `word_position` int64 [N] (the position of its first piece there).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_text as tf_text
  from official_bert.data import segments as segments_lib
  # pylint: enable=g-import-not-at-top
  budget = seq_length - 2
  if budget < 1:
    raise ValueError(f"seq_length={seq_length} leaves no room for words "
                     "besides [CLS] and [SEP]; use at least 3")
  pieces = tokenizer.tokenize(words.flat_values)                # [N, (P)]
  # A word with no pieces (only control characters) becomes [UNK].
  empty = tf.cast(tf.equal(pieces.row_lengths(), 0), tf.int64)  # [N]
  unk = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(empty)], tf.cast(tokenizer.unk_id, tf.int64)),
      empty)
  pieces = segments_lib.concat([pieces, unk])[:, :budget]       # [N, (P)]
  lengths = pieces.row_lengths()                                # [N]
  # First word of each text: starts a new window whatever is left.
  starts = tf.boolean_mask(words.row_starts(), words.row_lengths() > 0)
  first = tf.scatter_nd(tf.expand_dims(starts, 1), tf.ones_like(starts),
                        tf.shape(lengths, out_type=tf.int64)) > 0  # [N]

  def place(state, word):
    # Greedy packing: a word goes into the current window if it fits.
    window, used = state
    length, starts_text = word
    new = tf.logical_or(starts_text, used + length > budget)
    window = tf.where(new, window + 1, window)
    start = tf.where(new, tf.constant(0, tf.int64), used)
    return window, start + length

  window, end = tf.scan(place, (lengths, first),
                        initializer=(tf.constant(-1, tf.int64),
                                     tf.constant(0, tf.int64)))  # [N], [N]
  num_windows = tf.reduce_max(tf.concat([[-1], window], 0)) + 1
  rows = tf.RaggedTensor.from_value_rowids(
      pieces.flat_values, tf.repeat(window, lengths),
      nrows=num_windows)                                        # [R, (P)]
  ids, type_ids = segments_lib.combine_segments(
      [rows], tokenizer.cls_id, tokenizer.sep_id)
  word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length)
  type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length=seq_length)
  return {"input_word_ids": tf.cast(word_ids, tf.int32),
          "input_mask": tf.cast(mask, tf.int32),
          "input_type_ids": tf.cast(type_ids, tf.int32),
          "word_window": window,
          "word_position": end - lengths + 1}  # +1: after [CLS]


@functools.lru_cache(maxsize=2)
def _traced_encode_words(tokenizer, seq_length):
  """`encode_words` as one tf.function per tokenizer and window length, traced
  once for any number of texts (a run's train, dev and test files): its
  greedy packing loop runs eagerly ~10x slower, and tracing it costs ~1 s."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.function(
      lambda words: encode_words(tokenizer, words, seq_length),
      input_signature=[tf.RaggedTensorSpec([None, None], tf.string,
                                           row_splits_dtype=tf.int64)])


def encode(sentences, tokenizer, seq_length, ids=None):
  """Numpy model inputs of `sentences` (see `encode_words`).

  Returns (inputs dict [R, T], word_window [N], word_position [N], labels):
  labels int32 [R, T] hold each word's label id at its first piece and -1
  elsewhere (None without `ids`).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  words = tf.RaggedTensor.from_row_lengths(
      tf.constant([w for s in sentences for w in s.words] or [""])[
          :sum(len(s.words) for s in sentences)],
      tf.constant([len(s.words) for s in sentences], tf.int64))
  encoded = _traced_encode_words(tokenizer, seq_length)(words)
  encoded = {k: v.numpy() for k, v in encoded.items()}
  window = encoded.pop("word_window")
  position = encoded.pop("word_position")
  labels = None
  if ids is not None:
    labels = np.full(encoded["input_word_ids"].shape, -1, np.int32)
    labels[window, position] = np.concatenate(ids) if ids else []
  return encoded, window, position, labels


# ------------------------------------------------------------ the metric --
def _parse(tag):
  """(prefix, type): "B-PER" -> ("B", "PER"), "O" -> ("O", "")."""
  prefix, _, kind = tag.partition("-")
  return prefix, kind


def _chunk_ends(prev, cur):
  """conlleval's endOfChunk: does the chunk ending at `prev` end here?"""
  (p, p_type), (c, c_type) = prev, cur
  return (p in ("E", "S")
          or (p in ("B", "I") and c in ("B", "S", "O"))
          or (p not in ("O", ".") and p_type != c_type))


def _chunk_starts(prev, cur):
  """conlleval's startOfChunk: does a chunk start at `cur`?"""
  (p, p_type), (c, c_type) = prev, cur
  return (c in ("B", "S")
          or (p in ("E", "S", "O") and c in ("E", "I"))
          or (c not in ("O", ".") and p_type != c_type))


def entities(tags):
  """The chunks of one sentence's tags: a set of (type, first, last)."""
  found, start, prev = set(), None, ("O", "")
  for i, cur in enumerate([_parse(t) for t in tags] + [("O", "")]):
    if start is not None and _chunk_ends(prev, cur):
      found.add((prev[1], start, i - 1))
      start = None
    if _chunk_starts(prev, cur):
      start = i
    prev = cur
  return found


def entity_metrics(gold_sentences, predicted_sentences):
  """conlleval's figures over sentences of tags (lists of lists).

  Returns a dict: precision, recall, f1 (entity level), accuracy (tags),
  and per entity type `f1_<type>`, with the counts.
  """
  gold, predicted = set(), set()
  correct_tags = total_tags = 0
  pairs = zip(gold_sentences, predicted_sentences, strict=True)
  for i, (g, p) in enumerate(pairs):
    if len(g) != len(p):
      raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} "
                       "predicted")
    gold |= {(i,) + e for e in entities(g)}
    predicted |= {(i,) + e for e in entities(p)}
    correct_tags += sum(a == b for a, b in zip(g, p))
    total_tags += len(g)
  result = _prf(gold, predicted)
  result["accuracy"] = correct_tags / total_tags if total_tags else 0.0
  result["num_gold_entities"] = len(gold)
  result["num_predicted_entities"] = len(predicted)
  for kind in sorted({e[1] for e in gold | predicted}):
    result[f"f1_{kind}"] = _prf({e for e in gold if e[1] == kind},
                                {e for e in predicted if e[1] == kind})["f1"]
  return result


def _prf(gold, predicted):
  correct = len(gold & predicted)
  precision = correct / len(predicted) if predicted else 0.0
  recall = correct / len(gold) if gold else 0.0
  f1 = (2 * precision * recall / (precision + recall)
        if precision + recall else 0.0)
  return {"precision": precision, "recall": recall, "f1": f1}


def format_predictions(sentences, predicted):
  """CoNLL text: `word gold predicted` per line, a blank line after each
  sentence (conlleval's input)."""
  lines = []
  for sentence, tags in zip(sentences, predicted, strict=True):
    lines += [f"{w} {g} {p}\n" for w, g, p in zip(sentence.words,
                                                  sentence.tags, tags)]
    lines.append("\n")
  return "".join(lines)
