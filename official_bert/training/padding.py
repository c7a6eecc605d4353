"""Padding each batch only to what it needs, and length-grouped batching.

The fine-tuning programs encode every example to --max_seq_length (numpy,
zeros after the `input_mask`). Short sentences then cost as much as long
ones. `cut_batch` cuts a batch to its longest example rounded up to a
multiple of `multiple` (capped at the full length), in tf.data, so the model
sees [B, L] with L <= T:

    data = data.batch(32).map(lambda x, y: padding.cut_batch(x, y, 8))

Results are unchanged: the encoder masks padding out of attention, so an
example's outputs at its own positions do not depend on how much padding
follows it (tests/padding_test.py checks the logits, the loss and the
gradients). Token-level labels (integer [B, T], e.g. NER tags; -1 past the
tokens) are cut alike; per-example labels (classes, SQuAD's start/end
positions, which lie inside the example, a multi-label task's 0/1 float rows
[B, C] even where C = T) pass through.

Buckets, not exact lengths: without XLA the step is traced once with an
unknown length and any L costs no retrace; with XLA (--jit_compile) each
distinct L is one compilation, so multiples of `multiple` bound them to
T / multiple. `default_multiple` picks 8 without XLA (at most 7 padding
tokens per batch: ~7% of a 49-token batch) and 32 with it (4 compilations at
128, 12 at 384).

`length_grouped_order` is Hugging Face's `group_by_length`
(LengthGroupedSampler): shuffle, then sort within mega-batches of 50 batches
by length, so a batch holds examples of similar length and pads less.
"""

import numpy as np
import tensorflow as tf


def default_multiple(jit_compile):
  """The bucket width: 8, or 32 when XLA compiles each length (see above)."""
  return 32 if jit_compile else 8


def batch_length(mask, multiple):
  """The length a batch is cut to: its longest example (last non-zero of
  `mask` [B, T], + 1) rounded up to `multiple`, at most T (int32 scalar)."""
  full = tf.shape(mask)[1]
  positions = tf.range(1, full + 1)[tf.newaxis, :]                  # [1, T]
  longest = tf.reduce_max(tf.where(tf.not_equal(mask, 0), positions, 0))
  longest = tf.maximum(longest, 1)
  return tf.minimum((longest + multiple - 1) // multiple * multiple, full)


def cut_batch(inputs, labels=None, multiple=8):
  """(inputs, labels) of a batch cut to `batch_length`.

  Every input [B, T] is cut to [B, L]; a label is cut when it is integer
  with static shape [B, T, ...], the inputs' static T (token-level labels;
  multi-label rows are float, so C labels = T positions pass through). With
  `labels` None returns the inputs alone. Several texts per example (run
  embedding's `anchor_input_mask`, `positive_input_mask`, ...): L fits the
  longest text of every mask. Documents of windows (inputs [B, M, T],
  `--window_training=documents`): every window is cut to L, and M to the
  most windows a document of the batch has (a document's windows come
  first, all-zero ones after).
  """
  masks = [v for k, v in sorted(inputs.items()) if k.endswith("input_mask")]
  mask = masks[0] if len(masks) == 1 else tf.reduce_max(tf.stack(masks), 0)
  full = mask.shape[-1]
  if mask.shape.rank == 3:                                          # [B, M, T]
    present = tf.reduce_any(tf.not_equal(mask, 0), axis=-1)          # [B, M]
    windows = tf.maximum(tf.reduce_max(
        tf.reduce_sum(tf.cast(present, tf.int32), axis=1)), 1)
    length = batch_length(tf.reshape(mask, [-1, tf.shape(mask)[-1]]),
                          multiple)
    cut = {k: v[:, :windows, :length] for k, v in inputs.items()}
  else:
    length = batch_length(mask, multiple)
    cut = {k: v[:, :length] for k, v in inputs.items()}
  if labels is None:
    return cut

  def cut_label(label):
    if (label.dtype.is_integer and label.shape.rank >= 2
        and full is not None and label.shape[1] == full):
      return label[:, :length]
    return label
  return cut, tf.nest.map_structure(cut_label, labels)


def pad_outputs(outputs, length, full, fill=0.0):
  """Outputs of a cut batch padded back to `full` positions with `fill`.

  The outputs whose axis 1 had no static size when traced (an unknown
  length in, so a per-position output) are padded; the others (per-example
  logits) pass through.
  """
  def pad(t):
    if t.shape.rank >= 2 and t.shape[1] is None:
      paddings = [[0, 0], [0, full - length]] + [[0, 0]] * (t.shape.rank - 2)
      return tf.pad(t, paddings, constant_values=tf.cast(fill, t.dtype))
    return t
  return tf.nest.map_structure(pad, outputs)


def length_grouped_order(lengths, batch_size, seed, num_examples_needed):
  """Example indices in Hugging Face's `group_by_length` order, epoch after
  epoch until `num_examples_needed`: each epoch a seeded permutation, cut
  into mega-batches of 50 batches, each sorted longest first; the batch
  holding the longest example goes first (an out-of-memory shows at once).
  Deterministic for a seed, so a resumed run skips to the same place."""
  lengths = np.asarray(lengths)
  num = len(lengths)
  order, epoch = [], 0
  mega = 50 * batch_size
  while sum(len(o) for o in order) < num_examples_needed:
    rng = np.random.default_rng([seed, epoch])
    permutation = rng.permutation(num)
    groups = [permutation[i:i + mega] for i in range(0, num, mega)]
    groups = [g[np.argsort(-lengths[g], kind="stable")] for g in groups]
    epoch_order = np.concatenate(groups)
    longest = int(np.argmax(lengths[epoch_order]))
    first = longest // batch_size * batch_size
    if first and first + batch_size <= num:
      head = epoch_order[:batch_size].copy()
      epoch_order[:batch_size] = epoch_order[first:first + batch_size]
      epoch_order[first:first + batch_size] = head
    order.append(epoch_order)
    epoch += 1
  return np.concatenate(order).astype(np.int64)
