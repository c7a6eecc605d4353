"""Masked-LM masks drawn while training (RoBERTa's dynamic masking), in-graph.

    options = dynamic_masking.options_from_vocab(
        "vocab.txt", masked_lm_prob=0.3, max_predictions_per_seq=40,
        whole_word=False, seed=12345)
    inputs, labels = dynamic_masking.mask_example(inputs, labels, key, options)

`input_pipeline.pretraining_dataset(..., masking=options)` calls
`mask_example` in its parallel `map`, once per record, with `key =
record_key(seed, epoch, file_index, record_index)`: the masks are a function of
the seed, the record (its file's index in the sorted input files and its
index in that file) and the epoch (passes over that file so far), so every
epoch masks a record afresh, and a resumed run (which skips the batches
already consumed) draws the same masks as an uninterrupted one.

What one record goes through (the rules of google-research/bert's
create_pretraining_data.py, on the record's tokens):

  1. the original tokens: `input_ids` with `masked_lm_ids` written back at
     `masked_lm_positions` (where `masked_lm_weights` > 0), so any TFRecord
     of the data job (ours, the original's, Model Garden's) serves;
  2. candidates: tokens under `input_mask` other than [CLS] and [SEP];
     with `whole_word`, a `##` piece joins the word of the candidate before
     it, and words are chosen whole;
  3. num_to_predict = min(max_predictions_per_seq,
     max(1, round(tokens * masked_lm_prob))), tokens counting [CLS]/[SEP];
  4. words in random order, each taken when it still fits (a word that would
     overshoot is skipped, as the original's loop does);
  5. each chosen position: 80% [MASK], 10% kept, 10% a random id drawn
     uniformly from the vocab's ids (as the original, specials included).

Draws use stateless Philox ops: the same on every machine and TF version
that keeps Philox, independent of the pipeline's parallelism and of the
batch size. One record costs about 30 small ops in the map (~0.2 ms of one
CPU core; benchmarks/pretraining_benchmark.py --configs=ours_static,
ours_dynamic measures the training rate with each).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from official_bert.data import tokenization


@dataclasses.dataclass(frozen=True)
class MaskingOptions:
  """What masking needs from the flags and the vocab.

  mask_id, cls_id, sep_id: the special ids ([CLS]/[SEP] are never masked).
  vocab_size: random replacements are drawn from [0, vocab_size).
  continuation: bool per id, True for `##` pieces (whole-word masking), or
    None for per-WordPiece masking.
  """
  mask_id: int
  cls_id: int
  sep_id: int
  vocab_size: int
  masked_lm_prob: float = 0.15
  max_predictions_per_seq: int = 20
  continuation: tuple = None
  seed: int = 12345

  def validate(self):
    """Raises ValueError naming the flag and its value when out of range."""
    if not 0.0 < self.masked_lm_prob <= 1.0:
      raise ValueError(f"--masked_lm_prob={self.masked_lm_prob} must be in "
                       "(0, 1].")
    if self.max_predictions_per_seq < 1:
      raise ValueError(f"--max_predictions_per_seq="
                       f"{self.max_predictions_per_seq} must be positive.")


def options_from_vocab(vocab_file, masked_lm_prob, max_predictions_per_seq,
                       whole_word, seed):
  """MaskingOptions with the special ids read from `vocab_file`.

  Raises ValueError (one sentence) when the vocab is unreadable or lacks
  [MASK], [CLS] or [SEP].
  """
  vocab = tokenization.load_vocab(vocab_file)
  ids = {token: i for i, token in enumerate(vocab)}  # last line wins
  options = MaskingOptions(
      mask_id=ids["[MASK]"], cls_id=ids["[CLS]"], sep_id=ids["[SEP]"],
      vocab_size=len(vocab), masked_lm_prob=masked_lm_prob,
      max_predictions_per_seq=max_predictions_per_seq,
      continuation=(tuple(token.startswith("##") for token in vocab)
                    if whole_word else None), seed=seed)
  options.validate()
  return options


def record_key(seed, epoch, file_index, record_index):
  """The stateless seed [2] of one record's masks in one epoch.

  Philox's key and counter come from these two words, so distinct (seed,
  epoch, file, record) give independent streams; the fields are packed
  without overlap for seed < 2^32 (it is taken mod 2^32), epoch < 2^31,
  file < 2^23 and record < 2^40.
  """
  seed, epoch, file_index, record_index = (
      tf.cast(v, tf.int64) for v in (seed, epoch, file_index, record_index))
  return tf.stack([
      tf.bitwise.bitwise_or(seed % (1 << 32), tf.bitwise.left_shift(epoch, 32)),
      tf.bitwise.bitwise_or(tf.bitwise.left_shift(file_index, 40),
                            record_index)])


def original_ids(input_ids, masked_lm_positions, masked_lm_ids,
                 masked_lm_weights):
  """The record's tokens before its static masks: [L] int32."""
  real = masked_lm_weights > 0
  positions = tf.boolean_mask(masked_lm_positions, real)
  return tf.tensor_scatter_nd_update(input_ids, positions[:, None],
                                     tf.boolean_mask(masked_lm_ids, real))


def _take_greedily(sizes, budget):
  """Whole words in their random order, each taken while it fits.

  sizes: int32 [G] word sizes in visiting order (0 = no word). Returns
  bool [G]. The original's loop, in rounds: a round takes the longest prefix
  (from the word after the last one that did not fit) whose total fits,
  the next round restarts after the word that overflowed. Without whole
  words every size is 1 and one round does it.
  """
  n = tf.shape(sizes)[0]
  index = tf.range(n)

  def body(taken, left, last):
    consider = (index > last) & (sizes > 0)
    total = tf.cumsum(tf.where(consider, sizes, 0))
    fits = consider & (total <= left)
    over = consider & (total > left)
    taken = taken | fits
    left -= tf.reduce_sum(tf.where(fits, sizes, 0))
    last = tf.where(tf.reduce_any(over),
                    tf.cast(tf.argmax(tf.cast(over, tf.int32)), tf.int32), n)
    return taken, left, last

  taken, _, _ = tf.while_loop(
      lambda taken, left, last: (last < n) & (left > 0), body,
      (tf.zeros([n], tf.bool), budget, tf.constant(-1, tf.int32)))
  return taken


def choose_positions(ids, input_mask, scores, options, continuation=None):
  """int32 [K]: the positions to predict for one record, ascending (steps
  2-4); `scores`: float32 [L] uniform draws (a word's rank is its first
  piece's score)."""
  length = tf.shape(ids)[0]
  real = input_mask > 0
  candidate = real & (ids != options.cls_id) & (ids != options.sep_id)
  n_tokens = tf.reduce_sum(tf.cast(real, tf.float64))
  budget = tf.cast(tf.round(n_tokens * options.masked_lm_prob), tf.int32)
  budget = tf.minimum(options.max_predictions_per_seq, tf.maximum(1, budget))
  if continuation is None:
    # Every piece is a word of its own: the `budget` candidates with the
    # smallest scores (what the words' loop below takes, in fewer ops).
    k = tf.minimum(budget, tf.reduce_sum(tf.cast(candidate, tf.int32)))
    _, lowest = tf.math.top_k(tf.where(candidate, -scores, -2.0),
                              k=tf.minimum(options.max_predictions_per_seq,
                                           length))
    return tf.sort(lowest[:k])
  # Words: a candidate starts one unless it is a `##` piece right after
  # another candidate.
  after_candidate = tf.concat([[False], candidate[:-1]], 0)
  joins = tf.gather(continuation, ids) & candidate & after_candidate
  starts = candidate & ~joins
  word = tf.cumsum(tf.cast(starts, tf.int32)) - 1  # [L] word of each piece
  word = tf.where(candidate, word, length)  # outside every word
  sizes = tf.math.unsorted_segment_sum(tf.ones([length], tf.int32), word,
                                       length + 1)[:length]  # [W=L]
  # Each word's random rank: the score drawn at its first piece; absent
  # words sort last.
  word_score = tf.tensor_scatter_nd_update(
      tf.fill([length], 2.0), tf.boolean_mask(word, starts)[:, None],
      tf.boolean_mask(scores, starts))
  order = tf.argsort(word_score, stable=True)  # [W] visiting order
  taken_sorted = _take_greedily(tf.gather(sizes, order), budget)
  taken = tf.scatter_nd(order[:, None], taken_sorted, [length])  # [W]
  chosen = candidate & tf.gather(tf.concat([taken, [False]], 0), word)
  return tf.cast(tf.where(chosen)[:, 0], tf.int32)


def mask_example(inputs, labels, key, options, continuation=None):
  """One decoded record (input_pipeline's dicts) with fresh masks.

  `continuation`: `tf.constant(options.continuation)` built once outside the
  map (None without whole-word masking). Returns new (inputs, labels) with
  the same keys, shapes and dtypes.
  """
  ids = original_ids(inputs["input_word_ids"], inputs["masked_lm_positions"],
                     labels["masked_lm_ids"], labels["masked_lm_weights"])
  # One draw per use and position: the words' ranks, the 80/10/10 choice,
  # the random replacement.
  uniform = tf.random.stateless_uniform([3, tf.shape(ids)[0]], key,
                                        alg="philox")
  positions = choose_positions(ids, inputs["input_mask"], uniform[0],
                               options=options, continuation=continuation)
  predictions = options.max_predictions_per_seq
  count = tf.shape(positions)[0]
  label_ids = tf.gather(ids, positions)
  # 80% [MASK], 10% kept, 10% a random id.
  action = tf.gather(uniform[1], positions)
  random_ids = tf.minimum(
      tf.cast(tf.gather(uniform[2], positions) * options.vocab_size, tf.int32),
      options.vocab_size - 1)
  shown = tf.where(action < 0.8, options.mask_id,
                   tf.where(action < 0.9, label_ids, random_ids))
  masked = tf.tensor_scatter_nd_update(ids, positions[:, None], shown)
  pad = [[0, predictions - count]]
  inputs = dict(inputs, input_word_ids=masked,
                masked_lm_positions=tf.ensure_shape(
                    tf.pad(positions, pad), [predictions]))
  labels = dict(labels,
                masked_lm_ids=tf.ensure_shape(tf.pad(label_ids, pad),
                                              [predictions]),
                masked_lm_weights=tf.ensure_shape(
                    tf.pad(tf.ones([count], tf.float32), pad), [predictions]))
  return inputs, labels


def continuation_table(options):
  """The bool [V] constant `mask_example` takes, or None."""
  if options.continuation is None:
    return None
  return tf.constant(np.asarray(options.continuation, bool))
