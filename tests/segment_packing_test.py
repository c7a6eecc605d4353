"""segment_packing (the classifier's one packing, training and serving)
against a transcription of google-research/bert's `convert_single_example`
and `_truncate_seq_pair` on random lengths."""

import numpy as np
import pytest
import tensorflow as tf

from official_bert.data import segment_packing

CLS, SEP = 2, 3


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
  """The original's, line for line (run_classifier.py)."""
  while True:
    total_length = len(tokens_a) + len(tokens_b)
    if total_length <= max_length:
      break
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def _convert_single_example(tokens_a, tokens_b, max_seq_length):
  """The original's packing (ids and segment ids, before padding)."""
  tokens_a, tokens_b = list(tokens_a), list(tokens_b or [])
  if tokens_b:
    _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  elif len(tokens_a) > max_seq_length - 2:
    tokens_a = tokens_a[0:(max_seq_length - 2)]
  ids = [CLS] + tokens_a + [SEP]
  segment_ids = [0] * len(ids)
  if tokens_b:
    ids += tokens_b + [SEP]
    segment_ids += [1] * (len(tokens_b) + 1)
  return ids, segment_ids


def _random_pieces(rng, rows, longest):
  # Lengths 0..longest, with ties and empty texts among them.
  return [list(rng.integers(10, 99, rng.integers(0, longest + 1)))
          for _ in range(rows)]


def _ragged(rows):
  return tf.ragged.constant(rows, tf.int64, ragged_rank=1,
                            row_splits_dtype=tf.int64)


@pytest.mark.parametrize("seq_length", [3, 4, 5, 8, 11, 16])
@pytest.mark.parametrize("pair", [False, True])
def test_packing_equals_the_originals(seq_length, pair):
  """Catches a trimmer that cuts `a` on ties (odd budgets keep one piece
  more of `b`), one that cuts the last text first (TF Text's
  WaterfallTrimmer), a [SEP] after an empty `b`, or type ids off by one."""
  rng = np.random.default_rng(seq_length + 100 * pair)
  rows = 97
  a = _random_pieces(rng, rows, seq_length + 3)
  b = _random_pieces(rng, rows, seq_length + 3) if pair else None
  segments = [_ragged(a)] + ([_ragged(b)] if pair else [])
  packed = {name: value.numpy() for name, value in
            segment_packing.pack_to_longest(
                segments, seq_length, CLS, SEP,
                pad_multiple=seq_length).items()}
  assert packed["input_word_ids"].shape == (rows, seq_length)
  for row in range(rows):
    ids, segment_ids = _convert_single_example(
        a[row], b[row] if pair else None, seq_length)
    padding = [0] * (seq_length - len(ids))
    assert packed["input_word_ids"][row].tolist() == ids + padding, row
    assert packed["input_type_ids"][row].tolist() == segment_ids + padding
    assert packed["input_mask"][row].tolist() == [1] * len(ids) + padding


def test_pad_to_longest_pads_to_the_longest_packed_row():
  rng = np.random.default_rng(7)
  a, b = _random_pieces(rng, 9, 6), _random_pieces(rng, 9, 6)
  for seq_length in (5, 9, 40):
    packed = segment_packing.pack_to_longest(
        [_ragged(a), _ragged(b)], seq_length, CLS, SEP)
    want = max(len(_convert_single_example(x, y, seq_length)[0])
               for x, y in zip(a, b))
    assert packed["input_word_ids"].shape == (9, want)
    fixed = segment_packing.pack_to_longest(
        [_ragged(a), _ragged(b)], seq_length, CLS, SEP,
        pad_multiple=seq_length)
    for name, value in packed.items():  # the same rows, less padding
      np.testing.assert_array_equal(fixed[name].numpy()[:, :want], value)
      assert not fixed[name].numpy()[:, want:].any()


def test_trim_pair_keeps_what_truncate_seq_pair_keeps():
  rng = np.random.default_rng(3)
  for budget in range(1, 12):
    a = _random_pieces(rng, 50, 14)
    b = [row or [5] for row in _random_pieces(rng, 50, 14)]  # b not empty
    kept_a, kept_b = segment_packing.trim_pair(_ragged(a), _ragged(b),
                                               budget + 3)
    for row, (x, y) in enumerate(zip(a, b)):
      x, y = list(x), list(y)
      _truncate_seq_pair(x, y, budget)
      assert kept_a[row].numpy().tolist() == x, (budget, row)
      assert kept_b[row].numpy().tolist() == y, (budget, row)
