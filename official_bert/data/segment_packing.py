"""`[CLS] a [SEP] (b [SEP])` model inputs from WordPieces, in TF ops.

The one packing of single texts and text pairs: run_classifier's training,
evaluation and prediction (`data/text_files.encode`, every row padded
to `seq_length`) and the exported text signatures (`export/serving.py`,
padded to the longest row of the request) both call `pack_to_longest`, so
they cannot disagree on truncation.

The rule is google-research/bert's `convert_single_example`:
  * a pair is truncated to `seq_length - 3` pieces by `_truncate_seq_pair`,
    one piece at a time from the end of the longer text, `b` on ties. Round
    robin (a piece to `a`, then one to `b`, until the budget is spent or a
    text runs out) keeps exactly those pieces: both end within one piece
    of each other, `a` the longer when the budget is odd;
  * a second text without WordPieces (empty, whitespace, control
    characters) packs as a single text (the original's `if tokens_b:`);
    so does a pair that keeps none of `b` (only at seq_length 3 or 4: the
    original asks `if tokens_b:` again after truncating);
  * a single text keeps its first `seq_length - 2` pieces.
"""

import tensorflow as tf

from official_bert.data import segments as segments_lib


def trim_pair(a, b, seq_length):
  """The pieces of `a` and `b` that a pair packing keeps.

  Args:
    a, b: int RaggedTensors [B, (A)], [B, (B)].
    seq_length: the packed length (an int; the pair keeps seq_length - 3).

  Returns:
    (a, b) RaggedTensors: rows with pieces in `b` trimmed round-robin
    (what the original's `_truncate_seq_pair` keeps); rows whose `b` is
    empty keep the first `seq_length - 2` pieces of `a`.
  """
  length_a = tf.cast(a.row_lengths(), tf.int64)                      # [B]
  length_b = tf.cast(b.row_lengths(), tf.int64)                      # [B]
  # Round robin in a budget of m pieces (a piece to a, then one to b) keeps
  # all of a text that needs no more than its share, and gives the rest to
  # the other: a keeps min(|a|, max(ceil(m / 2), m - |b|)), b the budget
  # left. Arithmetic on the lengths (TF Text's RoundRobinTrimmer keeps the
  # same pieces with ~10x the graph: its trace cost every export and
  # reader).
  budget = seq_length - 3
  pair_a = tf.minimum(length_a, tf.maximum(tf.constant((budget + 1) // 2,
                                                       tf.int64),
                                           budget - length_b))
  keep_b = tf.minimum(length_b, budget - pair_a)
  keep_a = tf.where(length_b > 0, pair_a,
                    tf.minimum(length_a, seq_length - 2))            # [B]
  return first_pieces(a, keep_a), first_pieces(b, keep_b)


def first_pieces(pieces, counts):
  """Row b's first `counts[b]` pieces (at most its length) of a
  RaggedTensor [B, (N)]: one gather (ragged slicing and boolean masks
  build graphs of hundreds of ops)."""
  starts = pieces.row_splits[:-1]                                   # [B]
  index = tf.ragged.range(starts, starts + tf.cast(counts, starts.dtype),
                          row_splits_dtype=pieces.row_splits.dtype)
  return tf.RaggedTensor.from_row_splits(
      tf.gather(pieces.values, index.values), index.row_splits,
      validate=False)


def pack_to_longest(segments, seq_length, cls_id, sep_id, pad_multiple=1):
  """`[CLS] a [SEP] (b [SEP])`, trimmed to seq_length, padded to the longest.

  The batch is padded only to its longest packed row, rounded up to a
  multiple of `pad_multiple` and at most `seq_length`
  (`pad_multiple=seq_length`: every row padded to `seq_length`, the fixed
  shape of training). Truncation as the module docstring says.

  Args:
    segments: list of 1 or 2 int RaggedTensors [B, (pieces)].
    seq_length: the longest packed length (an int).
    cls_id, sep_id: the special ids.
    pad_multiple: round the padded length up to a multiple of this.

  Returns:
    dict of int32 [B, T] `input_word_ids`, `input_mask`, `input_type_ids`.
  """
  flat = [tf.cast(segment, tf.int32) for segment in segments]
  if len(flat) == 1:
    trimmed = [first_pieces(flat[0], tf.minimum(
        flat[0].row_lengths(), seq_length - 2))]
    ids, type_ids = segments_lib.combine_segments(trimmed, cls_id, sep_id)
  else:
    ids, type_ids = _pack_pair(flat, seq_length, cls_id, sep_id)
  lengths = tf.cast(ids.row_lengths(), tf.int32)  # [B]
  longest = tf.reduce_max(tf.concat([lengths, [1]], axis=0))
  length = tf.minimum((longest + pad_multiple - 1) // pad_multiple *
                      pad_multiple, seq_length)
  shape = tf.stack([tf.size(lengths), length])
  return {"input_word_ids": tf.cast(ids.to_tensor(shape=shape), tf.int32),
          "input_mask": tf.sequence_mask(lengths, length, dtype=tf.int32),
          "input_type_ids": tf.cast(type_ids.to_tensor(shape=shape),
                                    tf.int32)}


def _pack_pair(flat, seq_length, cls_id, sep_id):
  """Pairs [B, (A)], [B, (B)] -> (ids, type_ids) RaggedTensors; rows with an
  empty b packed as single texts."""
  a, b = trim_pair(flat[0], flat[1], seq_length)
  rows = a.nrows()

  def column(value, row_lengths):  # [B, (0 or 1)]
    return tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(row_lengths)], tf.constant(value, tf.int32)),
        row_lengths, validate=False)

  one = tf.ones([rows], tf.int64)
  # The second [SEP] only after pieces of b: as the original's second
  # `if tokens_b:`, asked after truncation (at seq_length 3 or 4 a pair
  # can keep none of b).
  b_sep = tf.cast(b.row_lengths() > 0, tf.int64)
  ids = segments_lib.concat([column(cls_id, one), a, column(sep_id, one),
                             b, column(sep_id, b_sep)])
  type_ids = segments_lib.concat([
      column(0, one), tf.zeros_like(a), column(0, one), tf.ones_like(b),
      column(1, b_sep)])
  return ids, type_ids
