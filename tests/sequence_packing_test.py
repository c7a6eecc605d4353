"""Packed rows and fused attention give the dense padded path's numbers.

Four sequences of 5, 7, 4 and 9 positions, each alone in a padded row of 16
(the dense path), or two to a row (the packed path, `input_sequence_ids`:
modeling/sequence_packing.py): each sequence's outputs at its positions, its
masked-LM logits, the masked-LM loss and every gradient agree within 1e-5
(float32), with the attention as the dense formula and as the fused op
(`fused_attention=True`). A row whose sequences see each other fails. The
same comparison runs on JAX in tests/jax_backend_test.py's child (one JAX
process for the whole file), from `packed_and_dense` here.
"""

import numpy as np
import pytest

from tests import testing

LENGTHS = (5, 7, 4, 9)
ROWS = ((0, 1), (2, 3))  # the packed rows: which sequences, in order
SEQ = 16
PREDS = 2  # masked positions per sequence


def packed_and_dense(seed=3):
  """(dense inputs, dense labels, packed inputs, packed labels, where): numpy
  pretraining batches of the same four sequences; `where[i]` = (packed row,
  first position) of sequence i (its dense row is i, position 0)."""
  rng = np.random.default_rng(seed)
  vocab = testing.VOCAB_SIZE
  sequences, types, masked = [], [], []
  for length in LENGTHS:
    ids = rng.integers(5, vocab, length)
    ids[0], ids[-1] = 1, 2  # [CLS] ... [SEP]
    sequences.append(ids)
    types.append((np.arange(length) >= length // 2).astype(np.int32))
    masked.append(np.sort(rng.choice(np.arange(1, length - 1), PREDS,
                                     replace=False)))
  lm_ids = rng.integers(5, vocab, (len(LENGTHS), PREDS))

  def batch(rows):
    n = len(rows)
    out = {"input_word_ids": np.zeros((n, SEQ), np.int32),
           "input_mask": np.zeros((n, SEQ), np.int32),
           "input_type_ids": np.zeros((n, SEQ), np.int32),
           "input_sequence_ids": np.zeros((n, SEQ), np.int32),
           "masked_lm_positions": np.zeros((n, PREDS * 2), np.int32)}
    labels = {"masked_lm_ids": np.zeros((n, PREDS * 2), np.int32),
              "masked_lm_weights": np.zeros((n, PREDS * 2), np.float32)}
    where = {}
    for r, members in enumerate(rows):
      start = 0
      for k, i in enumerate(members):
        end = start + LENGTHS[i]
        out["input_word_ids"][r, start:end] = sequences[i]
        out["input_type_ids"][r, start:end] = types[i]
        out["input_mask"][r, start:end] = 1
        out["input_sequence_ids"][r, start:end] = k + 1
        slots = slice(k * PREDS, (k + 1) * PREDS)
        out["masked_lm_positions"][r, slots] = masked[i] + start
        labels["masked_lm_ids"][r, slots] = lm_ids[i]
        labels["masked_lm_weights"][r, slots] = 1.0
        where[i] = (r, start)
        start = end
    return out, labels, where

  dense, dense_labels, _ = batch([(i,) for i in range(len(LENGTHS))])
  del dense["input_sequence_ids"]  # the plain inputs: TF-Hub's three
  packed, packed_labels, where = batch(ROWS)
  return dense, dense_labels, packed, packed_labels, where


def per_sequence(dense_out, packed_out, where, key_dense, key_packed=None):
  """Pairs (dense, packed) of each sequence's rows of an output [B, T, ...]
  (sequence_output) or, for the masked-LM logits [B, P, V], its slots."""
  pairs = []
  for i, (r, start) in where.items():
    if key_packed == "slots":
      k = ROWS[r].index(i)
      pairs.append((dense_out[i, :PREDS],
                    packed_out[r, k * PREDS:(k + 1) * PREDS]))
    else:
      pairs.append((dense_out[i, :LENGTHS[i]],
                    packed_out[r, start:start + LENGTHS[i]]))
  return pairs


def _tf_run(model, inputs, labels):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top
  with tf.GradientTape() as tape:
    outputs = model(inputs, training=False)
    loss = pretrainer_lib.pretraining_losses(labels, outputs)["loss"]
  grads = tape.gradient(loss, model.trainable_variables)
  encoder_inputs = {k: v for k, v in inputs.items()
                    if k != "masked_lm_positions"}
  sequence = model.encoder(encoder_inputs, training=False)["sequence_output"]
  return (np.asarray(sequence), np.asarray(outputs["mlm_logits"]),
          float(loss), [None if g is None else tf.convert_to_tensor(g).numpy()
                        for g in grads])


@pytest.fixture(scope="module")
def models():
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(11)
  config = testing.tiny_config()
  dense = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=False)
  fused = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=False, fused_attention=True)
  fused.set_weights(dense.get_weights())
  return {"dense": dense, "fused": fused}


def test_packed_rows_and_fused_attention_equal_the_dense_padded_path(models):
  dense_in, dense_labels, packed_in, packed_labels, where = packed_and_dense()
  want_seq, want_logits, want_loss, want_grads = _tf_run(
      models["dense"], dense_in, dense_labels)
  assert want_grads[0] is not None
  for attention, model in models.items():
    for name, (inputs, labels) in {"dense rows": (dense_in, dense_labels),
                                   "packed rows": (packed_in, packed_labels)
                                   }.items():
      seq, logits, loss, grads = _tf_run(model, inputs, labels)
      said = f"{attention} attention, {name}"
      if name == "packed rows":
        for want, got in per_sequence(want_seq, seq, where, None):
          np.testing.assert_allclose(got, want, atol=1e-5, err_msg=said)
        for want, got in per_sequence(want_logits, logits, where, None,
                                      "slots"):
          np.testing.assert_allclose(got, want, atol=1e-5, err_msg=said)
      else:
        np.testing.assert_allclose(seq, want_seq, atol=1e-5, err_msg=said)
      assert loss == pytest.approx(want_loss, abs=1e-5), said
      for variable, want, got in zip(models["dense"].trainable_variables,
                                     want_grads, grads):
        if want is None:  # the pooler: no loss reads it without NSP
          continue
        np.testing.assert_allclose(
            got, want, atol=1e-5 * max(np.abs(want).max(), 1e-3),
            err_msg=f"{said}: {variable.path}")


def test_a_sequence_does_not_see_its_row_neighbour(models):
  # Change every token of the second sequence of each packed row: the
  # first's outputs stay; the second's own change (the check can fail).
  from official_bert.modeling import sequence_packing  # pylint: disable=g-import-not-at-top
  _, _, packed_in, _, where = packed_and_dense()
  encoder = models["dense"].encoder
  inputs = {k: v for k, v in packed_in.items() if k != "masked_lm_positions"}
  changed = {k: v.copy() for k, v in inputs.items()}
  second = changed["input_sequence_ids"] == 2
  changed["input_word_ids"][second] = (changed["input_word_ids"][second] + 7
                                       ) % testing.VOCAB_SIZE
  before = np.asarray(encoder(inputs)["sequence_output"])
  after = np.asarray(encoder(changed)["sequence_output"])
  first = inputs["input_sequence_ids"] == 1
  np.testing.assert_allclose(after[first], before[first], atol=1e-6)
  assert np.abs(after[second] - before[second]).max() > 1e-3
  # The mask and positions themselves: block-diagonal, restarting.
  ids = np.array([[1, 1, 2, 2, 2, 0]])
  mask = np.asarray(sequence_packing.attention_mask(ids))[0]
  np.testing.assert_array_equal(mask, [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0],
                                       [0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 0],
                                       [0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 0]])
  np.testing.assert_array_equal(
      np.asarray(sequence_packing.position_ids(ids))[0], [0, 1, 0, 1, 2, 5])
