"""tf.data input for pretraining: the original's TFRecords as model inputs.

    files = input_pipeline.resolve_input_files("out/*.tfrecord,more.tfrecord")
    input_pipeline.check_input_files(files, max_seq_length=128,
                                     max_predictions_per_seq=20,
                                     vocab_size=30522)
    dataset_fn = input_pipeline.pretraining_dataset_fn(
        files, global_batch_size=256, max_seq_length=128,
        max_predictions_per_seq=20, is_training=True, seed=12345)
    dataset = strategy.distribute_datasets_from_function(dataset_fn)

Each element is `(inputs, labels)`:
  inputs  input_word_ids, input_mask, input_type_ids int32 [B, L] (TF-Hub
          names), masked_lm_positions int32 [B, P]
  labels  masked_lm_ids int32 [B, P], masked_lm_weights float32 [B, P],
          next_sentence_labels int32 [B]
with B the per-replica batch. Training shards files per input pipeline
(`InputContext`), interleaves them, shuffles, repeats; evaluation reads the
files in order, once.
"""

import tensorflow as tf

from official_bert import cli
from official_bert.data import features


def resolve_input_files(patterns):
  """Comma-separated globs -> sorted list of files; one sentence if none."""
  files = []
  for pattern in patterns.split(","):
    pattern = pattern.strip()
    if not pattern:
      continue
    matched = tf.io.gfile.glob(pattern)
    if not matched and "://" not in pattern and cli.blocked_by(pattern):
      raise ValueError(str(cli.missing("input_file", pattern)))
    if not matched:
      raise ValueError(f"--input_file pattern {pattern} matches no file; "
                       "pass TFRecords written by create_pretraining_data.py.")
    files.extend(matched)
  if not files:
    raise ValueError("--input_file is empty; pass TFRecord files or globs.")
  return sorted(set(files))


def check_input_files(files, max_seq_length, max_predictions_per_seq,
                      vocab_size=None):
  """Fails with one sentence when a file is cut short or corrupt in its
  framing, or its first records' lengths or token ids disagree with the
  flags and the model's `vocab_size`."""
  for path in files:
    features.check_framing(path)
    features.check_record_lengths(path, max_seq_length, max_predictions_per_seq,
                                  vocab_size=vocab_size)


def _decode(record, spec):
  example = tf.io.parse_single_example(record, spec)
  # int64 on disk; int32 is what the model and the TPU want.
  example = {name: tf.cast(value, tf.int32) if value.dtype == tf.int64
             else value for name, value in example.items()}
  inputs = {"input_word_ids": example["input_ids"],
            "input_mask": example["input_mask"],
            "input_type_ids": example["segment_ids"],
            "masked_lm_positions": example["masked_lm_positions"]}
  labels = {"masked_lm_ids": example["masked_lm_ids"],
            "masked_lm_weights": example["masked_lm_weights"],
            "next_sentence_labels": tf.reshape(
                example["next_sentence_labels"], [])}
  return inputs, labels


def pretraining_dataset(files, batch_size, max_seq_length,
                        max_predictions_per_seq, is_training,
                        input_context=None, seed=None, shuffle_buffer=1000):
  """The dataset of one input pipeline (see the module docstring).

  Args:
    files: TFRecord paths (all GZIP or all uncompressed).
    batch_size: batch size of this pipeline (per replica).
    max_seq_length, max_predictions_per_seq: the lengths written in the files.
    is_training: shard, shuffle and repeat (True) or read once in order.
    input_context: a `tf.distribute.InputContext`; training gives each input
      pipeline its own files when there are at least as many files as
      pipelines, else its own records.
    seed: shuffle seed (same seed -> same order).
    shuffle_buffer: records held for shuffling.
  """
  spec = features.feature_spec(max_seq_length, max_predictions_per_seq)
  compression = features.compression_of(files[0])
  dataset = tf.data.Dataset.from_tensor_slices(list(files))
  shard_records = False
  if input_context and input_context.num_input_pipelines > 1:
    if len(files) >= input_context.num_input_pipelines:
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    else:
      shard_records = True
  if is_training:
    dataset = dataset.shuffle(len(files), seed=seed).repeat()
    dataset = dataset.interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
        cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=seed is not None)
  else:
    dataset = dataset.flat_map(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression))
  if shard_records:
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed)
  dataset = dataset.map(lambda r: _decode(r, spec),
                        num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  # Fixed shapes (the TPU needs them, XLA prefers them): drop the remainder
  # in training; evaluation keeps every record.
  dataset = dataset.batch(batch_size, drop_remainder=is_training)
  return dataset.prefetch(tf.data.AUTOTUNE)


def pretraining_dataset_fn(files, global_batch_size, max_seq_length,
                           max_predictions_per_seq, is_training, seed=None):
  """A `dataset_fn(input_context)` for `distribute_datasets_from_function`."""

  def dataset_fn(input_context=None):
    batch = global_batch_size
    if input_context is not None:
      batch = input_context.get_per_replica_batch_size(global_batch_size)
    return pretraining_dataset(
        files, batch, max_seq_length, max_predictions_per_seq, is_training,
        input_context=input_context, seed=seed)

  return dataset_fn
