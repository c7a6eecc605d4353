"""Joining ragged token rows side by side: `concat` and `combine_segments`.

Same results as `tf.concat(parts, axis=1)` on [B, (N)] RaggedTensors and
`tensorflow_text.combine_segments`, written with gathers only. Theirs
transpose int64 row partitions, and with oneDNN on (TensorFlow's default on
CPUs with AVX-512) every graph holding an integer Transpose prints `ERROR:
oneDNN supports DT_INT64 only on platforms with AVX-512` once per process
before Eigen runs it correctly. The exports, the fine-tuning readers and the
data job call these instead, so a healthy run prints no ERROR line.
"""

import tensorflow as tf


def concat(parts):
  """[B, (N_k)] RaggedTensors -> [B, (sum N_k)]: row b is part 0's row b,
  then part 1's, ... (`tf.concat(parts, axis=1)`). All parts share B and a
  dtype; row partitions are int64."""
  parts = [part.with_row_splits_dtype(tf.int64) for part in parts]
  lengths = [part.row_lengths() for part in parts]              # K x [B]
  total = tf.add_n(lengths) if len(lengths) > 1 else lengths[0]
  splits = tf.concat([[0], tf.cumsum(total)], axis=0)           # [B + 1]
  # Where each part's row b starts in the output's flat values.
  start = splits[:-1]                                           # [B]
  destinations = []
  for part, length in zip(parts, lengths):
    row = value_rowids(part)                                    # [n_k]
    within = (tf.range(tf.size(row, out_type=tf.int64)) -
              tf.gather(part.row_splits, row))                  # [n_k]
    destinations.append(tf.gather(start, row) + within)
    start += length
  # Every output slot is some part's value: invert the placement.
  order = tf.math.invert_permutation(tf.concat(destinations, axis=0))
  values = tf.gather(tf.concat([part.values for part in parts], axis=0),
                     order)
  return tf.RaggedTensor.from_row_splits(values, splits, validate=False)


def value_rowids(part):
  """`part.value_rowids()` in one op: the row of each value, found in the
  row splits (TensorFlow's repeats the row ids, ~20 ops and asserts)."""
  splits = part.row_splits
  return tf.searchsorted(splits[1:], tf.range(splits[-1], dtype=splits.dtype),
                         side="right", out_type=splits.dtype)


def combine_segments(segments, start_of_sequence_id, end_of_segment_id):
  """`[CLS] a [SEP] (b [SEP] ...)` as `tensorflow_text.combine_segments`.

  Args:
    segments: list of int RaggedTensors [B, (N_k)], one dtype.
    start_of_sequence_id, end_of_segment_id: the [CLS] and [SEP] ids.

  Returns:
    (ids, type_ids): RaggedTensors [B, (1 + sum (N_k + 1))]; type id k for
    segment k and its [SEP], 0 for [CLS].
  """
  dtype = segments[0].dtype
  rows = segments[0].nrows(out_type=tf.int64)

  def column(value):  # [B, (1)]
    return tf.RaggedTensor.from_row_lengths(
        tf.fill([rows], tf.cast(value, dtype)), tf.ones([rows], tf.int64),
        validate=False)

  ids, type_ids = [column(start_of_sequence_id)], [column(0)]
  for k, segment in enumerate(segments):
    ids += [segment, column(end_of_segment_id)]
    type_ids += [tf.ones_like(segment) * k, column(k)]
  return concat(ids), concat(type_ids)
