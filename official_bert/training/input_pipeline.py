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
from official_bert.training import dynamic_masking


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
  if "sequence_ids" in example:  # packed records (features.PACKED_FEATURE)
    inputs["input_sequence_ids"] = example["sequence_ids"]
  labels = {"masked_lm_ids": example["masked_lm_ids"],
            "masked_lm_weights": example["masked_lm_weights"],
            "next_sentence_labels": tf.reshape(
                example["next_sentence_labels"], [])}
  return inputs, labels


def pack_rows(dataset, max_seq_length, row_predictions, window=1000,
              max_sequences_per_row=None):
  """A dataset of decoded examples `(inputs, labels)` -> packed rows, several
  sequences each (data/row_packing.py: first-fit decreasing over `window`
  examples at a time; `input_sequence_ids` numbers a row's sequences);
  masked-LM only. For records already written one sequence per row."""
  from official_bert.data import row_packing  # pylint: disable=g-import-not-at-top
  input_keys = row_packing.INPUT_KEYS + ("masked_lm_positions",)
  out_input_keys = input_keys + (row_packing.SEQUENCE_IDS,)
  label_keys = row_packing.LABEL_KEYS + ("next_sentence_labels",)

  def pack_numpy(*arrays):
    inputs = dict(zip(input_keys, arrays[:len(input_keys)]))
    labels = dict(zip(row_packing.LABEL_KEYS, arrays[len(input_keys):]))
    rows, row_labels = row_packing.pack(
        inputs, labels, max_seq_length, row_predictions,
        max_sequences_per_row or row_packing.MAX_SEQUENCES_PER_ROW)
    return ([rows[k] for k in out_input_keys]
            + [row_labels[k] for k in label_keys])

  def pack_window(inputs, labels):
    arrays = tf.numpy_function(
        pack_numpy, [inputs[k] for k in input_keys]
        + [labels[k] for k in row_packing.LABEL_KEYS],
        [tf.int32] * (len(out_input_keys) + 1) + [tf.float32, tf.int32],
        stateful=False)
    for key, array in zip(out_input_keys + label_keys, arrays):
      if key == "next_sentence_labels":
        array.set_shape([None])
      else:
        array.set_shape([None, max_seq_length if key in (
            row_packing.INPUT_KEYS + (row_packing.SEQUENCE_IDS,))
                         else row_predictions])
    rows = dict(zip(out_input_keys, arrays[:len(out_input_keys)]))
    row_labels = dict(zip(label_keys, arrays[len(out_input_keys):]))
    return tf.data.Dataset.from_tensor_slices((rows, row_labels))

  return dataset.batch(window).flat_map(pack_window)


def pretraining_dataset(files, batch_size, max_seq_length,
                        max_predictions_per_seq, is_training,
                        input_context=None, seed=None, shuffle_buffer=1000,
                        masking=None, row_predictions=None,
                        packed_records=False):
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
    masking: `dynamic_masking.MaskingOptions` to draw fresh masks in training
      (keyed by its seed, the record and the epoch); None reads the records'
      masks. Evaluation always reads the records' masks. The record order
      is the same either way.
    row_predictions: None reads one record per row; a number packs the
      records into rows of several sequences with that many masked slots
      (`pack_rows`; masked-LM only).
    packed_records: the files hold rows packed by the data job
      (--pack_sequences: `sequence_ids`, read as input_sequence_ids).
  """
  spec = features.feature_spec(max_seq_length, max_predictions_per_seq,
                               packed=packed_records)
  compression = features.compression_of(files[0])
  dynamic = masking is not None and is_training
  # (file, its index in `files`): the index is part of a record's mask key.
  dataset = tf.data.Dataset.from_tensor_slices(
      (list(files), tf.range(len(files), dtype=tf.int64)))
  shard_records = False
  pipeline_files = len(files)
  if input_context and input_context.num_input_pipelines > 1:
    if len(files) >= input_context.num_input_pipelines:
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
      pipeline_files = len(files[input_context.input_pipeline_id::
                                 input_context.num_input_pipelines])
    else:
      shard_records = True

  def read(file, file_index, epoch):
    records = tf.data.TFRecordDataset(file, compression_type=compression)
    if not dynamic:
      return records
    # (record, file index, record index in the file, epoch)
    return records.enumerate().map(
        lambda index, record: (record, file_index, index, epoch))

  if is_training:
    dataset = dataset.shuffle(pipeline_files, seed=seed).repeat()
    # The n-th file read is in pass n // files over this pipeline's files.
    dataset = dataset.enumerate().map(
        lambda n, pair: (pair[0], pair[1], n // pipeline_files))
    dataset = dataset.interleave(
        read, cycle_length=min(4, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
  else:
    dataset = dataset.flat_map(lambda file, index: read(file, index, 0))
  if shard_records:
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
  if is_training:
    dataset = dataset.shuffle(shuffle_buffer, seed=seed)
  if dynamic:
    continuation = dynamic_masking.continuation_table(masking)

    def decode(record, file_index, record_index, epoch):
      inputs, labels = _decode(record, spec)
      key = dynamic_masking.record_key(masking.seed, epoch, file_index,
                                       record_index)
      return dynamic_masking.mask_example(inputs, labels, key, masking,
                                          continuation)
  else:
    decode = lambda r: _decode(r, spec)  # pylint: disable=unnecessary-lambda-assignment
  dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True)
  if row_predictions:
    dataset = pack_rows(dataset, max_seq_length, row_predictions)
  # Fixed shapes (the TPU needs them, XLA prefers them): drop the remainder
  # in training; evaluation keeps every record.
  dataset = dataset.batch(batch_size, drop_remainder=is_training)
  return dataset.prefetch(tf.data.AUTOTUNE)


def pretraining_dataset_fn(files, global_batch_size, max_seq_length,
                           max_predictions_per_seq, is_training, seed=None,
                           masking=None, row_predictions=None,
                           packed_records=False):
  """A `dataset_fn(input_context)` for `distribute_datasets_from_function`."""

  def dataset_fn(input_context=None):
    batch = global_batch_size
    if input_context is not None:
      batch = input_context.get_per_replica_batch_size(global_batch_size)
    return pretraining_dataset(
        files, batch, max_seq_length, max_predictions_per_seq, is_training,
        input_context=input_context, seed=seed, masking=masking,
        row_predictions=row_predictions, packed_records=packed_records)

  return dataset_fn
