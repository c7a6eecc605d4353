"""The TFRecord schema: hand serialization, reader spec, length check."""

import numpy as np
import pytest
import tensorflow as tf

from official_bert.data import features
from tests import testing

# All-different sizes: 3 instances, max_seq_length 7, max_predictions 5.
N, L, P = 3, 7, 5

# The original reader's spec, independent of features.feature_spec.
ORIGINAL_SPEC = testing.original_feature_spec(L, P)


def _instances(seed=0, top=30522):
  rng = np.random.default_rng(seed)
  return features.Instances(
      input_ids=rng.integers(0, top, (N, L)),
      input_mask=rng.integers(0, 2, (N, L)),
      segment_ids=rng.integers(0, 2, (N, L)),
      masked_lm_positions=rng.integers(0, L, (N, P)),
      masked_lm_ids=rng.integers(0, top, (N, P)),
      masked_lm_weights=rng.random((N, P)).astype(np.float32),
      next_sentence_labels=rng.integers(0, 2, N))


def _reference_bytes(inst, row):
  example = tf.train.Example()
  for name, kind, _ in features.SCHEMA:
    values = np.asarray(getattr(inst, name)[row]).reshape(-1).tolist()
    feature = example.features.feature[name]
    (feature.float_list if kind == "float" else feature.int64_list).value.extend(values)
  return example.SerializeToString(deterministic=True)


@pytest.mark.parametrize("top", [2, 200, 30522, 1 << 22, 1 << 40])
def test_serialize_examples_equals_protobuf(top):
  # Varints of 1 to 6 bytes, and all-small fields (the fast path).
  inst = _instances(seed=top % 7, top=top)
  blob, lengths = features.serialize_examples(inst)
  records = features.split_blob(blob, lengths)
  assert len(records) == N and sum(lengths) == len(blob)
  for row in range(N):
    assert records[row] == _reference_bytes(inst, row)


def test_records_parse_with_the_original_reader_spec(tmp_path):
  inst = _instances(seed=3)
  blob, lengths = features.serialize_examples(inst)
  path = str(tmp_path / "x.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for record in features.split_blob(blob, lengths):
      writer.write(record)
  spec = features.feature_spec(L, P)
  assert {k: (v.shape, v.dtype) for k, v in spec.items()} == {
      k: (v.shape, v.dtype) for k, v in ORIGINAL_SPEC.items()}
  for row, record in enumerate(tf.data.TFRecordDataset(path)):
    parsed = tf.io.parse_single_example(record, ORIGINAL_SPEC)
    for name in ORIGINAL_SPEC:
      want = np.asarray(getattr(inst, name)[row]).reshape(-1)
      np.testing.assert_array_equal(parsed[name].numpy(), want)


def _write(path, inst, compression=""):
  blob, lengths = features.serialize_examples(inst)
  with tf.io.TFRecordWriter(path, compression) as writer:
    for record in features.split_blob(blob, lengths):
      writer.write(record)
  return path


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_check_record_lengths_accepts_matching_flags(tmp_path, compression):
  path = _write(str(tmp_path / "ok.tfrecord"), _instances(), compression)
  assert features.compression_of(path) == compression
  features.check_record_lengths(path, L, P)


@pytest.mark.parametrize("seq, pred, message", [
    (8, P, r"input_ids has length 7, expected 8 from --max_seq_length"),
    (L, 4, r"masked_lm_ids has length 5, expected 4 from --max_predictions_per_seq"),
])
def test_check_record_lengths_names_file_feature_and_lengths(tmp_path, seq, pred, message):
  path = _write(str(tmp_path / "data.tfrecord"), _instances())
  with pytest.raises(ValueError, match=message) as info:
    features.check_record_lengths(path, seq, pred)
  assert path in str(info.value)


def test_check_record_lengths_on_empty_and_foreign_files(tmp_path):
  empty = str(tmp_path / "empty.tfrecord")
  with tf.io.TFRecordWriter(empty):
    pass
  with pytest.raises(ValueError, match="holds no records"):
    features.check_record_lengths(empty, L, P)
  other = str(tmp_path / "other.tfrecord")
  with tf.io.TFRecordWriter(other) as writer:
    writer.write(tf.train.Example().SerializeToString())
  with pytest.raises(ValueError, match="lacks the feature input_ids"):
    features.check_record_lengths(other, L, P)
  text = tmp_path / "text.txt"
  text.write_text("not a tfrecord file at all\n")
  with pytest.raises(ValueError, match="Cannot read TFRecord file"):
    features.check_record_lengths(str(text), L, P)


def test_frame_records_equals_tfrecord_writer(tmp_path):
  inst = _instances(seed=5, top=1 << 30)
  blob, lengths = features.serialize_examples(inst)
  path = _write(str(tmp_path / "tf.tfrecord"), inst)
  with open(path, "rb") as f:
    assert features.frame_records(blob, lengths) == f.read()
