"""squad_windows.windows (run_squad's features and the exported model's
windows) against a transcription of google-research/bert's run_squad.py:
its doc spans, `_check_is_max_context` and the feature's tokens, segment
ids and token_to_orig_map, on random lengths."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from official_bert.tasks.squad import squad_windows

CLS, SEP = 2, 3
_DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def _check_is_max_context(doc_spans, cur_span_index, position):
  """The original's, line for line."""
  best_score = None
  best_span_index = None
  for (span_index, doc_span) in enumerate(doc_spans):
    end = doc_span.start + doc_span.length - 1
    if position < doc_span.start:
      continue
    if position > end:
      continue
    num_left_context = position - doc_span.start
    num_right_context = end - position
    score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
    if best_score is None or score > best_score:
      best_score = score
      best_span_index = span_index
  return cur_span_index == best_span_index


def _original_features(query, word_pieces, max_seq_length, doc_stride):
  """convert_examples_to_features's windows of one example (no answers)."""
  tok_to_orig_index, all_doc_tokens = [], []
  for i, pieces in enumerate(word_pieces):
    for piece in pieces:
      tok_to_orig_index.append(i)
      all_doc_tokens.append(piece)
  max_tokens_for_doc = max_seq_length - len(query) - 3
  doc_spans = []
  start_offset = 0
  while start_offset < len(all_doc_tokens):
    length = len(all_doc_tokens) - start_offset
    if length > max_tokens_for_doc:
      length = max_tokens_for_doc
    doc_spans.append(_DocSpan(start=start_offset, length=length))
    if start_offset + length == len(all_doc_tokens):
      break
    start_offset += min(length, doc_stride)
  features = []
  for (doc_span_index, doc_span) in enumerate(doc_spans):
    tokens = [CLS] + query + [SEP]
    segment_ids = [0] * len(tokens)
    token_to_orig_map, token_is_max_context = {}, {}
    for i in range(doc_span.length):
      split_token_index = doc_span.start + i
      token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
      token_is_max_context[len(tokens)] = _check_is_max_context(
          doc_spans, doc_span_index, split_token_index)
      tokens.append(all_doc_tokens[split_token_index])
      segment_ids.append(1)
    tokens.append(SEP)
    segment_ids.append(1)
    features.append((doc_span.start, doc_span.length, tokens, segment_ids,
                     token_to_orig_map, token_is_max_context))
  return features


def _case(rng, longest_context):
  query = list(rng.integers(10, 99, rng.integers(0, 6)))
  # Words of 0 to 3 pieces (a word of control characters has none).
  words = [list(rng.integers(10, 99, rng.integers(0, 4)))
           for _ in range(rng.integers(0, longest_context))]
  return query, words


@pytest.mark.parametrize("seq_length,doc_stride", [
    (9, 1), (12, 3), (16, 128), (20, 7), (64, 16),
    # Windows of more than 100 pieces: 0.01 * length ties scores across
    # whole pieces, and Python's floats break some of them.
    (130, 16), (160, 37),
    # Room 119 and a last window of 19 (the 126-piece case): piece 113
    # scores 5 + 0.01 * 119 in window 0 and 6 + 0.01 * 19 in window 1,
    # equal in decimals; the second is the larger Python float.
    (124, 107)])
def test_windows_equal_the_originals(seq_length, doc_stride):
  """Catches a window start off by one, a last window that does not end at
  the context's end, max context by another tie rule (the last window, or
  the earlier window on near-ties as `- 1e-6 * window` does: the original
  compares Python floats, where 6 + 0.01 * 19 > 5 + 0.01 * 119), a word map
  shifted by a word with no pieces, and type ids or padding off by one."""
  rng = np.random.default_rng(seq_length)
  longest = 3 * seq_length
  cases = [_case(rng, longest) for _ in range(40)] + [
      ([5], []), ([], [[7]]), ([5, 6], [[11]] * 126)]
  query = tf.ragged.constant([q for q, _ in cases], tf.int64,
                             ragged_rank=1, row_splits_dtype=tf.int64)
  context = tf.ragged.constant([w for _, w in cases], tf.int64,
                               ragged_rank=2, row_splits_dtype=tf.int64)
  got = {name: value.numpy() for name, value in squad_windows.windows(
      query, context, seq_length, doc_stride, CLS, SEP).items()}
  n = 0
  for text, (q, words) in enumerate(cases):
    want = _original_features(q, words, seq_length, doc_stride)
    if not want:  # no pieces: one empty window, which run_squad drops
      assert got["text"][n] == text and got["doc_length"][n] == 0
      assert got["input_mask"][n].sum() == len(q) + 3
      n += 1
      continue
    for span_index, (start, length, tokens, segment_ids, to_word,
                     max_context) in enumerate(want):
      assert (got["text"][n], got["span_index"][n]) == (text, span_index)
      assert (got["doc_start"][n], got["doc_length"][n]) == (start, length)
      padding = [0] * (seq_length - len(tokens))
      assert got["input_word_ids"][n].tolist() == tokens + padding
      assert got["input_type_ids"][n].tolist() == segment_ids + padding
      assert got["input_mask"][n].tolist() == [1] * len(tokens) + padding
      at = np.flatnonzero(got["word"][n] >= 0)
      assert dict(zip(at.tolist(), got["word"][n][at].tolist())) == to_word
      assert dict(zip(at.tolist(), got["is_max_context"][n][at].tolist())
                  ) == max_context, (text, span_index)
      assert not got["is_max_context"][n][got["word"][n] < 0].any()
      assert got["piece"][n][at].tolist() == list(range(start,
                                                        start + length))
      n += 1
  assert n == len(got["text"])


def _get_best_indexes(logits, n_best_size):
  """The original's (run_squad.py), line for line."""
  index_and_score = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
  best_indexes = []
  for i in range(len(index_and_score)):  # pylint: disable=consider-using-enumerate
    if i >= n_best_size:
      break
    best_indexes.append(index_and_score[i][0])
  return best_indexes


def _original_candidates(start_logits, end_logits, token_to_orig_map,
                         token_is_max_context, n_best_size, max_answer_length):
  """write_predictions' loops over one feature: (start, end) in order."""
  out = []
  for start_index in _get_best_indexes(start_logits, n_best_size):
    for end_index in _get_best_indexes(end_logits, n_best_size):
      if start_index not in token_to_orig_map:
        continue
      if end_index not in token_to_orig_map:
        continue
      if not token_is_max_context.get(start_index, False):
        continue
      if end_index < start_index:
        continue
      length = end_index - start_index + 1
      if length > max_answer_length:
        continue
      out.append((start_index, end_index))
  return out


@pytest.mark.parametrize("n_best_size,max_answer_length", [
    (20, 30), (5, 2), (3, 1), (40, 4)])
def test_span_candidates_equal_the_originals(n_best_size, max_answer_length):
  """Catches top-k that puts the later position first on ties (logits of
  0, 1 and 2 tie often), a length limit off by one, an end required to be
  a max-context piece, or a start allowed outside the context."""
  rng = np.random.default_rng(n_best_size + max_answer_length)
  rows, width = 60, 24
  start_logits = rng.integers(0, 3, (rows, width)).astype(np.float64)
  end_logits = rng.integers(0, 3, (rows, width)).astype(np.float64)
  end_logits[::2] += rng.normal(0, 0.1, (rows // 2, width))  # some distinct
  in_doc = np.zeros((rows, width), bool)
  for row in range(rows):  # the context part: a random run of positions
    first = rng.integers(1, width)
    in_doc[row, first:rng.integers(first, width + 1)] = True
  max_context = in_doc & (rng.random((rows, width)) < 0.7)
  # Most top starts and ends in the context, so that spans are compared.
  start_logits += 3 * max_context
  end_logits += 3 * in_doc
  starts, ends, valid = (value.numpy() for value in
                         squad_windows.span_candidates(
                             tf.constant(start_logits),
                             tf.constant(end_logits), tf.constant(in_doc),
                             tf.constant(max_context), n_best_size,
                             max_answer_length))
  total = 0
  for row in range(rows):
    positions = np.flatnonzero(in_doc[row]).tolist()
    want = _original_candidates(
        start_logits[row].tolist(), end_logits[row].tolist(),
        dict.fromkeys(positions, 0),
        {p: bool(max_context[row, p]) for p in positions}, n_best_size,
        max_answer_length)
    s, e = np.nonzero(valid[row])
    assert list(zip(starts[row][s].tolist(), ends[row][e].tolist())) == want
    total += len(want)
  assert total >= rows // 2  # spans compared, not only empty lists


@pytest.mark.parametrize("is_training", [False, True])
def test_features_do_not_depend_on_the_batch_size(is_training):
  """run_squad's features come from `windows` in batches of examples.
  Catches a batch's example indices or unique ids restarting at 0, and an
  answer mapped in the wrong example's windows."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_data  # pylint: disable=g-import-not-at-top
  from tests import testing  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)
  examples = squad_data.read_squad_examples(
      os.path.join(testing.SHARED_DATA, "squad_v2_sample.json"), is_training,
      True)
  one = squad_data.convert_examples_to_features(examples, tokenizer, 48, 16, 12,
                                           is_training)
  assert len(one) > 2 * len(examples)  # several windows per context
  assert sum(not f.is_impossible for f in one) > 3 or not is_training
  batched = squad_data.convert_examples_to_features(
      examples, tokenizer, 48, 16, 12, is_training, batch_size=3)
  assert batched == one
