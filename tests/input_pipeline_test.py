"""Tests for official_bert/training/input_pipeline.py on real TFRecord files."""

import numpy as np
import pytest
import tensorflow as tf

from official_bert.training import input_pipeline
from tests import testing
from tools import tiny_fixtures

SEQ, PREDS = testing.SEQ, tiny_fixtures.PREDS
# Random instances and their TFRecord file (other tests take them from here).
make_instances = tiny_fixtures.make_instances  # (n, seq, preds, vocab, seed)
write_records = tiny_fixtures.write_records  # (path, instances) -> path


def test_eval_dataset_returns_records_in_order_with_model_names(tmp_path):
  instances = make_instances(5)
  path = write_records(tmp_path / "a.tfrecord", instances)
  dataset = input_pipeline.pretraining_dataset(
      [path], batch_size=2, max_seq_length=SEQ, max_predictions_per_seq=PREDS,
      is_training=False)
  batches = list(dataset)
  assert [b[0]["input_word_ids"].shape[0] for b in batches] == [2, 2, 1]
  inputs = {k: np.concatenate([b[0][k] for b in batches]) for k in batches[0][0]}
  labels = {k: np.concatenate([b[1][k] for b in batches]) for k in batches[0][1]}
  np.testing.assert_array_equal(inputs["input_word_ids"], instances.input_ids)
  np.testing.assert_array_equal(inputs["input_type_ids"], instances.segment_ids)
  np.testing.assert_array_equal(inputs["masked_lm_positions"],
                                instances.masked_lm_positions)
  np.testing.assert_array_equal(labels["masked_lm_ids"], instances.masked_lm_ids)
  np.testing.assert_array_equal(labels["masked_lm_weights"],
                                instances.masked_lm_weights)
  np.testing.assert_array_equal(labels["next_sentence_labels"],
                                instances.next_sentence_labels)
  assert inputs["input_word_ids"].dtype == np.int32
  assert labels["masked_lm_weights"].dtype == np.float32


def _first_ids(dataset, batches):
  return [tuple(row) for b in dataset.take(batches)
          for row in b[0]["input_word_ids"].numpy()[:, :3]]


def test_training_shards_files_per_pipeline_and_is_seeded(tmp_path):
  per_file = [make_instances(6, seed=i) for i in range(4)]
  files = [write_records(tmp_path / f"{i}.tfrecord", instances)
           for i, instances in enumerate(per_file)]
  file_rows = [{tuple(row) for row in instances.input_ids[:, :3]}
               for instances in per_file]
  for pipeline in range(2):
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=pipeline,
        num_replicas_in_sync=2)
    dataset = input_pipeline.pretraining_dataset(
        files, 3, SEQ, PREDS, is_training=True, input_context=context, seed=7)
    # 120 rows = 10 passes over the pipeline's 12 records. The record shuffle
    # buffer spans pass boundaries, so a short prefix need not hold them all.
    first = _first_ids(dataset, 40)
    # Each pipeline reads exactly its own files (file-level sharding).
    assert set(first) == file_rows[pipeline] | file_rows[pipeline + 2]
    # A new dataset with the same seed yields the same order (resume needs it).
    again = input_pipeline.pretraining_dataset(
        files, 3, SEQ, PREDS, is_training=True, input_context=context, seed=7)
    assert _first_ids(again, 40) == first


def test_single_file_is_sharded_by_record(tmp_path):
  path = write_records(tmp_path / "a.tfrecord", make_instances(8))
  seen = []
  for pipeline in range(2):
    context = tf.distribute.InputContext(2, pipeline, 2)
    dataset = input_pipeline.pretraining_dataset(
        [path], 2, SEQ, PREDS, is_training=True, input_context=context, seed=3)
    seen.append(set(_first_ids(dataset, 4)))
  assert len(seen[0]) == len(seen[1]) == 4 and not seen[0] & seen[1]


def test_length_mismatch_is_one_sentence_naming_file_feature_lengths(tmp_path):
  path = write_records(tmp_path / "a.tfrecord", make_instances(2))
  with pytest.raises(ValueError) as error:
    input_pipeline.check_input_files([path], max_seq_length=SEQ + 1,
                                     max_predictions_per_seq=PREDS)
  message = str(error.value)
  assert path in message and "input_ids" in message
  assert f"length {SEQ}" in message and f"expected {SEQ + 1}" in message


def test_resolve_input_files_globs_and_errors(tmp_path):
  for name in ("b.tfrecord", "a.tfrecord", "c.txt"):
    (tmp_path / name).write_bytes(b"")
  found = input_pipeline.resolve_input_files(
      f"{tmp_path}/*.tfrecord, {tmp_path}/a.tfrecord")
  assert found == [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
  with pytest.raises(ValueError, match="matches no file"):
    input_pipeline.resolve_input_files(f"{tmp_path}/*.gz")
