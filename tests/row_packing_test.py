"""Packing records into rows of several sequences (data/row_packing.py and
the pipeline's `pack_rows`): every sequence arrives whole, with its masked
positions pointing at its own tokens, in fewer rows."""

import dataclasses

import numpy as np
import pytest

from official_bert.data import row_packing
from tools import tiny_fixtures

SEQ, PREDS = 16, 3


def _varied(n, seed=0):
  """Instances of 4..16 tokens (padding after), masks inside each."""
  rng = np.random.default_rng(seed)
  rows = tiny_fixtures.make_instances(n, seq=SEQ, preds=PREDS, seed=seed)
  lengths = rng.integers(4, SEQ + 1, n)
  mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
  ids = np.where(mask > 0, rows.input_ids, 0)
  positions = np.stack([np.sort(rng.choice(np.arange(1, length), PREDS,
                                           replace=False))
                        for length in lengths])
  weights = rows.masked_lm_weights.copy()
  weights[lengths < 8, 1:] = 0.0  # short ones: fewer masks
  positions = np.where(weights > 0, positions, 0)
  return dataclasses.replace(
      rows, input_ids=ids, input_mask=mask, segment_ids=rows.segment_ids * mask,
      masked_lm_positions=positions,
      masked_lm_ids=np.where(weights > 0,
                             np.take_along_axis(ids, positions, 1), 0),
      masked_lm_weights=weights)


def _as_pipeline(rows):
  inputs = {"input_word_ids": rows.input_ids, "input_mask": rows.input_mask,
            "input_type_ids": rows.segment_ids,
            "masked_lm_positions": rows.masked_lm_positions}
  labels = {"masked_lm_ids": rows.masked_lm_ids,
            "masked_lm_weights": rows.masked_lm_weights}
  return ({k: v.astype(np.int32) for k, v in inputs.items()},
          {k: v for k, v in labels.items()})


def _check(inputs, labels, packed, packed_labels, row_predictions):
  """Every example appears once, whole, with its masks; returns the rows'
  count."""
  lengths = inputs["input_mask"].sum(1)
  seen = []
  for r in range(len(packed["input_word_ids"])):
    ids = packed["input_sequence_ids"][r]
    assert (packed["input_mask"][r] == (ids > 0)).all()
    assert packed_labels["masked_lm_weights"][r].sum() <= row_predictions
    for k in range(1, ids.max() + 1):
      where = np.flatnonzero(ids == k)
      assert (np.diff(where) == 1).all()  # one contiguous span
      start, length = where[0], len(where)
      tokens = packed["input_word_ids"][r, where]
      # Which example: the one with these tokens (random ids: unique).
      match = [i for i in range(len(lengths)) if lengths[i] == length and (
          inputs["input_word_ids"][i, :length] == tokens).all()]
      assert len(match) == 1
      i = match[0]
      seen.append(i)
      np.testing.assert_array_equal(packed["input_type_ids"][r, where],
                                    inputs["input_type_ids"][i, :length])
      slots = ((packed["masked_lm_positions"][r] >= start)
               & (packed["masked_lm_positions"][r] < start + length)
               & (packed_labels["masked_lm_weights"][r] > 0))
      real = labels["masked_lm_weights"][i] > 0
      np.testing.assert_array_equal(
          packed["masked_lm_positions"][r][slots] - start,
          inputs["masked_lm_positions"][i][real])
      np.testing.assert_array_equal(packed_labels["masked_lm_ids"][r][slots],
                                    labels["masked_lm_ids"][i][real])
      # The masked ids are the row's own tokens at those positions.
      np.testing.assert_array_equal(
          packed["input_word_ids"][r][packed["masked_lm_positions"][r][slots]],
          labels["masked_lm_ids"][i][real])
  assert sorted(seen) == list(range(len(lengths)))
  return len(packed["input_word_ids"])


def test_pack_keeps_every_sequence_whole_in_fewer_rows():
  inputs, labels = _as_pipeline(_varied(60))
  q = row_packing.default_row_predictions(PREDS, 4)
  packed, packed_labels = row_packing.pack(inputs, labels, SEQ, q,
                                           max_sequences_per_row=4)
  rows = _check(inputs, labels, packed, packed_labels, q)
  assert (packed["input_sequence_ids"].max(1) <= 4).all()
  # First fit decreasing: few rows, far less padding.
  tokens = inputs["input_mask"].sum()
  assert rows <= int(np.ceil(tokens / SEQ)) + 3, rows
  before = row_packing.padding_share(inputs["input_mask"].sum(1), SEQ)
  after = 1 - tokens / (rows * SEQ)
  assert before > 0.3 and after < 0.1, (before, after)
  with pytest.raises(ValueError, match="does not fit a row of 16 tokens"):
    row_packing.pack(inputs, labels, SEQ, 0)


def test_pipeline_packs_written_records_as_numpy_does(tmp_path):
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  rows = _varied(40, seed=4)
  path = tiny_fixtures.write_records(tmp_path / "varied.tfrecord", rows)
  q = row_packing.default_row_predictions(PREDS,
                                          row_packing.MAX_SEQUENCES_PER_ROW)
  dataset = input_pipeline.pretraining_dataset(
      [path], batch_size=4, max_seq_length=SEQ, max_predictions_per_seq=PREDS,
      is_training=False, row_predictions=q)
  batches = list(dataset)
  got = {k: np.concatenate([b[0][k].numpy() for b in batches])
         for k in batches[0][0]}
  got_labels = {k: np.concatenate([b[1][k].numpy() for b in batches])
                for k in batches[0][1]}
  assert got["input_sequence_ids"].dtype == np.int32
  assert batches[0][0]["input_word_ids"].shape[1:] == (SEQ,)
  assert batches[0][0]["masked_lm_positions"].shape[1:] == (q,)
  inputs, labels = _as_pipeline(rows)
  want, want_labels = row_packing.pack(inputs, labels, SEQ, q)
  for key, value in want.items():
    np.testing.assert_array_equal(got[key], value, err_msg=key)
  for key, value in want_labels.items():
    np.testing.assert_array_equal(got_labels[key], value, err_msg=key)
  assert _check(inputs, labels, got, got_labels, q) < 40
