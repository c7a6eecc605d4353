"""SQuAD's windows over a context and the answer spans they offer, in TF
ops: run_squad (features, predictions) and the exported question-answering
model build them with these functions.

google-research/bert's run_squad.py: the context's WordPieces are covered by
windows of at most `seq_length - len(query) - 3` pieces, each starting
`min(length, doc_stride)` after the previous one, the last ending at the
context's last piece; a window is `[CLS] query [SEP] pieces [SEP]`, type ids
0 then 1, padded to `seq_length`. A piece in several windows is predicted
only from the one where it has the most context: the largest
`min(pieces left, pieces right) + 0.01 * window length`, the first window on
ties (`_check_is_max_context`). A window's candidate answers pair its
n_best_size best start and end logits (`span_candidates`).

Shape legend: B texts, Q query pieces, W words, P pieces, N windows,
T seq_length.
"""

import tensorflow as tf

from official_bert.data import segments as segments_lib


def windows(query, context_ids, seq_length, doc_stride, cls_id, sep_id):
  """The windows of each (question, context) pair.

  Args:
    query: int RaggedTensor [B, (Q)], the question's pieces already cut to
      max_query_length.
    context_ids: int RaggedTensor [B, (W), (P)], each context's pieces by
      word (`squad.context_pieces(...)["ids"]`).
    seq_length, doc_stride: ints; `seq_length - Q - 3` must be at least 1
      for every question (the callers check it).
    cls_id, sep_id: the special ids.

  Returns:
    dict of Tensors over the N windows, in text order then window order:
      `input_word_ids`, `input_mask`, `input_type_ids` int32 [N, T];
      `text` int64 [N], the pair it belongs to; `span_index` int64 [N], its
      number among that pair's windows (the original's doc_span_index);
      `doc_start`, `doc_length` int64 [N], its first context piece (counted
      in its context) and how many it holds; `piece` and `word` int64 [N, T],
      the context piece and word (counted in its context) at each position,
      -1 outside the window's context part; `is_max_context` bool [N, T].
    A context without pieces gets one window holding none of them
    (`doc_length` 0), so that every pair has a window.
  """
  query = query.with_row_splits_dtype(tf.int64)
  context_ids = context_ids.with_row_splits_dtype(tf.int64)
  doc = context_ids.merge_dims(1, 2)                              # [B, (P)]
  num_texts = doc.nrows()
  num_pieces = doc.row_lengths()                                  # [B]
  room = seq_length - query.row_lengths() - 3                     # [B]
  # Windows start k * step apart; step = doc_stride, or the window's
  # length if that is shorter (only the last window can be).
  step = tf.minimum(room, doc_stride)
  count = 1 + (tf.maximum(num_pieces - room, 0) + step - 1) // step
  text = tf.repeat(tf.range(num_texts), count)                    # [N]
  span_index = tf.ragged.range(count).flat_values                 # [N]
  start = span_index * tf.gather(step, text)                      # [N]
  length = tf.minimum(tf.gather(room, text),
                      tf.gather(num_pieces, text) - start)        # [N]
  base = tf.gather(doc.row_splits[:-1], text) + start             # [N]
  window = tf.gather(doc.flat_values,
                     tf.ragged.range(base, base + length))        # [N, (len)]
  window_query = tf.gather(query, text)                           # [N, (Q)]
  num_windows = tf.size(text, out_type=tf.int64)
  ones = tf.ones([num_windows], tf.int64)

  def column(value):  # [N, (1)]
    return tf.RaggedTensor.from_row_lengths(
        tf.fill([num_windows], tf.cast(value, doc.dtype)), ones)
  cls, sep = column(cls_id), column(sep_id)
  ids = segments_lib.concat([cls, tf.cast(window_query, doc.dtype), sep,
                             window, sep])
  type_ids = segments_lib.concat([
      tf.zeros_like(cls), tf.zeros_like(window_query, doc.dtype),
      tf.zeros_like(sep), tf.ones_like(window), tf.ones_like(sep)])
  shape = tf.stack([num_windows, seq_length])

  # ---- the context part: which piece sits at each window position
  offset = tf.gather(query.row_lengths(), text) + 2               # [N]
  rel = tf.range(seq_length, dtype=tf.int64)[None, :] - offset[:, None]
  in_doc = (rel >= 0) & (rel < length[:, None])                   # [N, T]
  piece = tf.where(in_doc, start[:, None] + rel, -1)              # [N, T]
  # Each piece's word, counted in its context.
  word_of = context_ids.values.value_rowids()                     # [Pt]
  word_of -= tf.gather(context_ids.row_splits,
                       tf.gather(context_ids.value_rowids(), word_of))
  flat_piece = tf.gather(doc.row_splits[:-1], text)[:, None] + piece
  word = tf.where(in_doc, tf.gather(word_of, tf.maximum(flat_piece, 0)), -1)

  # ---- max context: the original's score, in float64 as Python's floats;
  # the first window with the best score (a strict > in the original).
  score = (tf.cast(tf.minimum(rel, length[:, None] - 1 - rel), tf.float64)
           + 0.01 * tf.cast(length[:, None], tf.float64))         # [N, T]
  total = tf.size(doc.flat_values, out_type=tf.int64)
  segment = tf.reshape(tf.where(in_doc, flat_piece, total), [-1])  # [N*T]
  best = tf.math.unsorted_segment_max(
      tf.reshape(tf.where(in_doc, score, -1.0), [-1]), segment, total + 1)
  best_here = tf.reshape(tf.equal(tf.reshape(score, [-1]),
                                  tf.gather(best, segment)), tf.shape(score))
  window_index = tf.broadcast_to(tf.range(num_windows)[:, None],
                                 tf.shape(score))
  first = tf.math.unsorted_segment_min(
      tf.reshape(tf.where(in_doc & best_here, window_index, num_windows),
                 [-1]), segment, total + 1)
  is_max_context = in_doc & tf.equal(
      window_index, tf.reshape(tf.gather(first, segment), tf.shape(score)))
  return {
      "input_word_ids": tf.cast(ids.to_tensor(0, shape=shape), tf.int32),
      "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0, shape=shape),
                            tf.int32),
      "input_type_ids": tf.cast(type_ids.to_tensor(0, shape=shape),
                                tf.int32),
      "text": text, "span_index": span_index, "doc_start": start,
      "doc_length": length, "piece": piece, "word": word,
      "is_max_context": is_max_context}


def span_candidates(start_logits, end_logits, in_doc, is_max_context,
                    n_best_size, max_answer_length):
  """Each window's candidate answer spans, as the original's
  `write_predictions` enumerates them.

  Args:
    start_logits, end_logits: float [N, T].
    in_doc, is_max_context: bool [N, T], the positions holding context
      pieces, and those whose window gives them the most context
      (`windows`' `piece >= 0` and `is_max_context`).
    n_best_size, max_answer_length: ints.

  Returns:
    (starts, ends, valid): `starts`, `ends` int32 [N, K], the positions of
    the K = min(n_best_size, T) largest start and end logits, largest first
    (the earlier position on ties, as the original's stable sort);
    `valid` bool [N, K, K], whether span (starts[:, i], ends[:, j]) is a
    candidate: its start at a max-context piece, its end in the context, at
    most `max_answer_length` pieces and not reversed. The original lists
    candidates in this order: start rank, then end rank.
  """
  width = start_logits.shape[1]
  k = (min(n_best_size, width) if width is not None else
       tf.minimum(n_best_size, tf.shape(start_logits)[1]))
  starts = tf.math.top_k(start_logits, k).indices                 # [N, K]
  ends = tf.math.top_k(end_logits, k).indices
  start_ok = tf.gather(is_max_context, starts, batch_dims=1)      # [N, K]
  end_ok = tf.gather(in_doc, ends, batch_dims=1)
  length = ends[:, None, :] - starts[:, :, None] + 1              # [N, K, K]
  valid = (start_ok[:, :, None] & end_ok[:, None, :] & (length >= 1)
           & (length <= max_answer_length))
  return starts, ends, valid
