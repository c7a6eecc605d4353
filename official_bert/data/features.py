"""The pretraining TFRecord schema: names, dtypes and lengths, writer and reader.

One `tf.train.Example` per instance, with the features of google-research/bert's
create_pretraining_data.py (L = max_seq_length, P = max_predictions_per_seq):

  input_ids             int64 [L]  [CLS] A [SEP] B [SEP], masked, 0-padded
  input_mask            int64 [L]  1 on real tokens, 0 on padding
  segment_ids           int64 [L]  0 for [CLS] A [SEP], 1 for B [SEP]
  masked_lm_positions   int64 [P]  sorted positions of the predictions, 0-padded
  masked_lm_ids         int64 [P]  original ids at those positions, 0-padded
  masked_lm_weights     float [P]  1.0 per real prediction, 0.0 padding
  next_sentence_labels  int64 [1]  1 = B is a random segment, 0 = actual next

Packed records (the data job's --pack_sequences: several sequences in a row,
masked-LM only) add one feature, and their masked_lm_* hold the row's slots:

  sequence_ids          int64 [L]  1, 2, ... per sequence of the row, 0 padding

The writer side (`serialize_examples`, `frame_records`) is numpy and
google-crc32c only: it hand-encodes the protobuf wire format for a whole batch
of instances at once and frames the records as TFRecord files do, so the data
job's worker processes never import TensorFlow. Its bytes equal
`tf.train.Example.SerializeToString(deterministic=True)` (features in key
order). The reader side (`feature_spec`, `check_record_lengths`) imports
TensorFlow when called.
"""

import dataclasses
import os
import struct

import google_crc32c
import numpy as np

# (name, kind, length key): length key "seq" = max_seq_length,
# "pred" = max_predictions_per_seq, an int = that length. Key order = the
# order of the protobuf map on the wire.
SCHEMA = (
    ("input_ids", "int64", "seq"),
    ("input_mask", "int64", "seq"),
    ("masked_lm_ids", "int64", "pred"),
    ("masked_lm_positions", "int64", "pred"),
    ("masked_lm_weights", "float", "pred"),
    ("next_sentence_labels", "int64", 1),
    ("segment_ids", "int64", "seq"),
)
FEATURE_NAMES = tuple(name for name, _, _ in SCHEMA)
# Packed records only; last in key order ("segment_ids" < "sequence_ids").
PACKED_FEATURE = ("sequence_ids", "int64", "seq")


def _schema(packed):
  return SCHEMA + ((PACKED_FEATURE,) if packed else ())


def feature_lengths(max_seq_length, max_predictions_per_seq, packed=False):
  """{feature name: fixed length} for these flags (`packed`: with
  sequence_ids)."""
  sizes = {"seq": max_seq_length, "pred": max_predictions_per_seq}
  return {name: sizes.get(length, length)
          for name, _, length in _schema(packed)}


def feature_spec(max_seq_length, max_predictions_per_seq, packed=False):
  """{name: tf.io.FixedLenFeature}, the original reader's parsing spec
  (`packed`: packed records' too)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  lengths = feature_lengths(max_seq_length, max_predictions_per_seq, packed)
  return {
      name: tf.io.FixedLenFeature(
          [lengths[name]], tf.float32 if kind == "float" else tf.int64)
      for name, kind, _ in _schema(packed)
  }


@dataclasses.dataclass
class Instances:
  """A batch of N finished instances as arrays (the rows of the TFRecords).

  input_ids, input_mask, segment_ids: int [N, L]; masked_lm_positions,
  masked_lm_ids: int [N, P]; masked_lm_weights: float [N, P];
  next_sentence_labels: int [N].
  """
  input_ids: np.ndarray
  input_mask: np.ndarray
  segment_ids: np.ndarray
  masked_lm_positions: np.ndarray
  masked_lm_ids: np.ndarray
  masked_lm_weights: np.ndarray
  next_sentence_labels: np.ndarray
  sequence_ids: np.ndarray = None  # int [N, L], packed rows only

  def __len__(self):
    return len(self.input_ids)

  def take(self, rows):
    return Instances(**{f.name: None if getattr(self, f.name) is None
                        else getattr(self, f.name)[rows]
                        for f in dataclasses.fields(self)})


# ------------------------------------------------------------- writer ----
# Protobuf wire format: a length-delimited field is tag byte, varint length,
# payload. Tags used (field number << 3 | 2):
#   Example.features = 1, Features.feature (map entry) = 1, entry key = 1,
#   entry value = 2, Feature.float_list = 2, Feature.int64_list = 3,
#   Int64List.value / FloatList.value (packed) = 1.
_TAG1, _TAG2, _TAG3 = 0x0A, 0x12, 0x1A


def _varint_bytes(values):
  """Non-negative ints [N, M] -> (bytes [N, M*K] uint8, valid mask, bytes per row).

  Each value gets K = the most bytes any value needs; the slots past a
  value's own varint length are marked invalid and dropped when the rows are
  packed. All values below 128 (masks, labels, short positions) take a fast
  path with no mask.
  """
  values = np.asarray(values)
  n, m = values.shape
  if values.size and values.min() < 0:
    raise ValueError("serialize_examples writes non-negative ints only, got "
                     f"{values.min()}")
  top = int(values.max()) if values.size else 0
  if top < 0x80:
    return values.astype(np.uint8), None, np.full(n, m, np.int64)
  k = (top.bit_length() + 6) // 7
  values = values.astype(np.uint64 if k > 4 else np.uint32)
  data = np.empty((n, m, k), np.uint8)
  valid = np.empty((n, m, k), bool)
  valid[..., 0] = True
  for i in range(k):
    group = (values >> (7 * i)) & 0x7F
    if i + 1 < k:
      more = values >= (1 << (7 * (i + 1)))  # a byte follows this one
      valid[..., i + 1] = more
      group |= more.astype(values.dtype) << 7
    data[..., i] = group
  nbytes = valid.sum(axis=(1, 2))
  return data.reshape(n, -1), valid.reshape(n, -1), nbytes


def _const(n, byte_values):
  row = np.asarray(bytearray(byte_values), np.uint8)
  return np.broadcast_to(row, (n, len(row))), None


def _prefixed(n, tag, payload_len):
  """Pieces for `tag varint(payload_len)`, and that header's length [N]."""
  data, valid, size = _varint_bytes(np.asarray(payload_len)[:, None])
  return [_const(n, [tag]), (data, valid)], 1 + size


def serialize_examples(instances):
  """Instances -> (blob bytes, lengths int64 [N]): the N serialized Examples.

  Record i is blob[offsets[i]:offsets[i] + lengths[i]] with offsets the
  exclusive cumulative sum of lengths. Numpy only (no TensorFlow).
  """
  n = len(instances)
  entries = []  # per feature: (pieces, entry length [N])
  for name, kind, _ in _schema(instances.sequence_ids is not None):
    value = np.asarray(getattr(instances, name))
    value = value.reshape(n, -1)
    if kind == "float":
      data = value.astype("<f4").view(np.uint8).reshape(n, -1)
      packed = [(data, None)]
      packed_len = np.full(n, data.shape[1], np.int64)
      list_tag = _TAG2
    else:
      data, valid, packed_len = _varint_bytes(value)
      packed = [(data, valid)]
      list_tag = _TAG3
    value_head, value_head_len = _prefixed(n, _TAG1, packed_len)
    list_len = value_head_len + packed_len                  # Int64List/FloatList
    list_head, list_head_len = _prefixed(n, list_tag, list_len)
    feature_len = list_head_len + list_len                   # Feature
    key = name.encode()
    key_piece = _const(n, [_TAG1, len(key)] + list(key))
    feature_head, feature_head_len = _prefixed(n, _TAG2, feature_len)
    entry_len = len(key) + 2 + feature_head_len + feature_len  # map entry
    entry_head, entry_head_len = _prefixed(n, _TAG1, entry_len)
    pieces = (entry_head + [key_piece] + feature_head + list_head +
              value_head + packed)
    entries.append((pieces, entry_head_len + entry_len))
  features_len = sum(length for _, length in entries)
  pieces, _ = _prefixed(n, _TAG1, features_len)
  for entry_pieces, _ in entries:
    pieces += entry_pieces
  # Lay the pieces side by side, then keep the valid bytes row by row.
  width = sum(p.shape[1] for p, _ in pieces)
  data = np.empty((n, width), np.uint8)
  valid = np.ones((n, width), bool)
  at = 0
  for piece, piece_valid in pieces:
    data[:, at:at + piece.shape[1]] = piece
    if piece_valid is not None:
      valid[:, at:at + piece.shape[1]] = piece_valid
    at += piece.shape[1]
  return data[valid].tobytes(), valid.sum(axis=1, dtype=np.int64)


def split_blob(blob, lengths):
  """(blob, lengths) from serialize_examples -> list of record bytes."""
  ends = np.cumsum(lengths)
  starts = ends - lengths
  view = memoryview(blob)
  return [view[s:e].tobytes() for s, e in zip(starts.tolist(), ends.tolist())]


def _masked_crcs(crcs):
  """TFRecord's masking of CRC-32C values (uint32 array)."""
  crcs = np.asarray(crcs, np.uint32)
  return ((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(0xA282EAD8)


def frame_records(blob, lengths):
  """(blob, lengths) from serialize_examples -> the bytes of a TFRecord file.

  Each record is framed as TFRecord files are: uint64 length, masked CRC-32C
  of the length, the data, masked CRC-32C of the data (little-endian). So a
  worker process hands the writer bytes ready to append to a file.
  """
  n = len(lengths)
  ends = np.cumsum(lengths).tolist()
  records = [blob[s:e] for s, e in zip([0] + ends[:-1], ends)]
  footers = _masked_crcs(
      np.fromiter(map(google_crc32c.value, records), np.uint32, n)
  ).astype("<u4").tobytes()
  headers = {}
  for size in set(lengths.tolist()):
    packed = struct.pack("<Q", size)
    headers[size] = packed + _masked_crcs(
        [google_crc32c.value(packed)]).astype("<u4").tobytes()
  parts = [None] * (3 * n)
  parts[0::3] = [headers[size] for size in lengths.tolist()]
  parts[1::3] = records
  parts[2::3] = [footers[i:i + 4] for i in range(0, 4 * n, 4)]
  return b"".join(parts)


def unframe_records(data):
  """The bytes of an uncompressed TFRecord file -> its records (no CRC check)."""
  records, at = [], 0
  while at + 12 <= len(data):
    n = int.from_bytes(data[at:at + 8], "little")
    records.append(bytes(data[at + 12:at + 12 + n]))
    at += n + 16
  return records


# ------------------------------------------------------------- reader ----
def compression_of(path):
  """"GZIP" when the file starts with the gzip magic bytes, else ""."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path, "rb") as f:
    return "GZIP" if f.read(2) == b"\x1f\x8b" else ""


def _first_examples(path, num_records=1):
  """The first `num_records` records of a TFRecord file as
  tf.train.Examples; ValueError (one sentence) when the file is unreadable
  or empty."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    records = tf.data.TFRecordDataset(
        path, compression_type=compression_of(path)).take(num_records)
    first = [r.numpy() for r in records]
  except (tf.errors.OpError, OSError) as e:
    raise ValueError(f"Cannot read TFRecord file {path} ({type(e).__name__}); "
                     "pass a file written by create_pretraining_data.py.") from None
  if not first:
    raise ValueError(f"TFRecord file {path} holds no records; regenerate it "
                     "with create_pretraining_data.py.")
  return [tf.train.Example.FromString(record) for record in first]


def is_packed(path):
  """Whether a TFRecord file holds packed rows (its first record has
  sequence_ids)."""
  return PACKED_FEATURE[0] in _first_examples(path)[0].features.feature


def record_predictions(path):
  """max_predictions_per_seq of a TFRecord file (its first record's
  masked_lm_positions length); ValueError when it has none."""
  feature = _first_examples(path)[0].features.feature
  if "masked_lm_positions" not in feature:
    raise ValueError(f"TFRecord file {path} lacks the feature "
                     "masked_lm_positions; pass a file written by "
                     "create_pretraining_data.py.")
  return len(feature["masked_lm_positions"].int64_list.value)


def check_framing(path):
  """Walks an uncompressed local TFRecord file's frames (headers only).

  TensorFlow's reader takes a file cut inside a record's 12-byte header for
  a shorter, valid file and trains on; this finds the cut. It reads 12 bytes
  a record (checking the length's checksum) and seeks past the data;
  GZIP files are skipped (their reader reports a cut itself), as are remote
  paths.

  Raises:
    ValueError: one sentence naming the file and where its framing ends.
  """
  if "://" in path or compression_of(path):
    return
  size = os.path.getsize(path)
  at = 0
  with open(path, "rb", buffering=1 << 16) as f:
    while at < size:
      header = f.read(12)
      if len(header) < 12:
        break
      crc = google_crc32c.value(header[:8])
      masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
      if masked != int.from_bytes(header[8:], "little"):
        raise ValueError(
            f"TFRecord file {path} is corrupt: the record header at byte {at} "
            "fails its checksum; regenerate it with create_pretraining_data.py "
            "or copy it again.")
      end = at + 16 + int.from_bytes(header[:8], "little")
      if end > size:
        break
      at = end
      f.seek(at)
  if at != size:
    raise ValueError(
        f"TFRecord file {path} is cut short: it ends {size - at} bytes into "
        f"the record at byte {at} (copied or written only in part?); "
        "regenerate it with create_pretraining_data.py or copy it again.")


def check_record_lengths(path, max_seq_length, max_predictions_per_seq,
                         vocab_size=None, num_records=100):
  """Checks the first records of a TFRecord file against the flags.

  Reads `num_records` records (GZIP or not, detected from the file) and
  compares every feature's length with what `max_seq_length` and
  `max_predictions_per_seq` imply, and (given `vocab_size`) every token id
  with the model's vocabulary, so a trainer fails at start-up with a clear
  sentence rather than deep inside tf.data (a vocabulary/config mismatch
  shows in the first records).

  Raises:
    ValueError: one sentence naming the file, the feature, the found and the
      expected length (or the missing feature, an id out of the vocabulary,
      or an empty/unreadable file).
  """
  examples = _first_examples(path, num_records)
  example = examples[0]
  packed = PACKED_FEATURE[0] in example.features.feature
  expected = feature_lengths(max_seq_length, max_predictions_per_seq, packed)
  flag_of = {"seq": "--max_seq_length", "pred": "--max_predictions_per_seq"}
  for name, kind, length_key in _schema(packed):
    if name not in example.features.feature:
      raise ValueError(f"TFRecord file {path} lacks the feature {name}; "
                       "pass a file written by create_pretraining_data.py.")
    feature = example.features.feature[name]
    values = (feature.float_list if kind == "float" else feature.int64_list).value
    if len(values) != expected[name]:
      flag = flag_of.get(length_key, "the schema")
      raise ValueError(
          f"TFRecord file {path}: feature {name} has length {len(values)}, "
          f"expected {expected[name]} from {flag}; set {flag} to match the "
          "data or regenerate the data with these flags.")
  if vocab_size is None:
    return
  largest = max(
      max(e.features.feature[name].int64_list.value, default=0)
      for e in examples for name in ("input_ids", "masked_lm_ids"))
  if largest >= vocab_size:
    raise ValueError(
        f"TFRecord file {path} holds token id {largest}, but the model's "
        f"vocab_size is {vocab_size}: the records were written with another "
        "vocab.txt; regenerate them with the model's vocab.txt or pass the "
        "bert_config.json of their vocabulary.")
