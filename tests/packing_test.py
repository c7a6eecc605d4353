"""The encoder's remove_padding path: tokens packed [N, H], same outputs.

`BertEncoder(..., remove_padding=True)` must equal the padded path at every
token position (sequence_output, each layer's output, pooled_output), give
zeros at padding positions, and work for any mask pattern. The rows have
very different lengths (7, 2, 4 of 7), so a gather or scatter that mixes
rows or positions cannot pass.
"""

import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import packing
from tests import testing


def test_pack_indices_point_both_ways():
  mask = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1]], np.int32)
  tokens, slots = packing.pack_indices(mask)
  np.testing.assert_array_equal(tokens, [0, 1, 3, 6, 7, 8])
  # Padding points at row N = 6, the zero row `unpack` appends.
  np.testing.assert_array_equal(slots, [0, 1, 6, 2, 6, 6, 3, 4, 5])
  x = np.random.default_rng(0).normal(size=(3, 3, 5)).astype(np.float32)
  packed = packing.pack(x, (tokens, slots))
  np.testing.assert_array_equal(packed, x[mask == 1])
  np.testing.assert_array_equal(packing.unpack(packed, (tokens, slots), mask),
                                x * mask[:, :, None])
  # Without the zero row (attention's keys and queries, masked later):
  # the tokens in place, padding some token's row.
  rows = np.asarray(packing.unpack(packed, (tokens, slots), mask,
                                   zero_padding=False))
  np.testing.assert_array_equal(rows[mask == 1], x[mask == 1])
  for row in rows[mask == 0]:
    assert any((row == token).all() for token in x[mask == 1])


@pytest.fixture(scope="module")
def encoder():
  return encoder_lib.BertEncoder.from_bert_config(testing.tiny_config())


def _compare(encoder, inputs):
  # (The serving tests run it traced with [None, None] inputs.)
  want = encoder(inputs, training=False)
  got = encoder(inputs, training=False, remove_padding=True)
  tokens = inputs["input_mask"] != 0
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"],
                             atol=1e-6)
  for got_layer, want_layer in zip(
      got["encoder_outputs"] + [got["sequence_output"]],
      want["encoder_outputs"] + [want["sequence_output"]]):
    got_layer, want_layer = np.asarray(got_layer), np.asarray(want_layer)
    np.testing.assert_allclose(got_layer[tokens], want_layer[tokens],
                               atol=1e-6)
    assert not got_layer[~tokens].any()


def test_remove_padding_equals_the_padded_path_at_the_tokens(encoder):
  inputs = testing.random_inputs(lengths=[7, 2, 4])
  _compare(encoder, inputs)
  # A mask that is not a prefix (position 0 kept: the pooler reads it).
  inputs["input_mask"] = np.array([[1, 0, 1, 1, 0, 1, 0],
                                   [1, 1, 1, 1, 1, 1, 1],
                                   [1, 0, 0, 0, 0, 0, 1]], np.int32)
  _compare(encoder, inputs)


def test_remove_padding_with_output_positions(encoder):
  # The last block at a few positions (the classifier: [CLS] alone, the
  # masked-LM: its positions) on packed tokens equals the padded path's.
  inputs = testing.random_inputs(lengths=[7, 2, 4])
  for positions in (np.zeros((3, 0), np.int32),
                    np.array([[3, 6], [1, 0], [2, 3]], np.int32)):
    want = encoder(inputs, training=False, output_positions=positions)
    got = encoder(inputs, training=False, output_positions=positions,
                  remove_padding=True)
    for key in ("pooled_output", "sequence_output"):
      np.testing.assert_allclose(got[key], want[key], atol=1e-6)
    assert got["sequence_output"].shape == (3, positions.shape[1], 32)


def _gradient(f, x, upstream):
  x = tf.constant(x)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = f(x)
  return tf.convert_to_tensor(tape.gradient(
      y, x, output_gradients=tf.constant(upstream))).numpy()


def test_fast_gradients_are_gathers_with_autodiffs_values():
  # kernels="fast": pack's and unpack's gradients are gathers through the
  # other index, not autodiff's scatter-adds; the same values.
  rng = np.random.default_rng(1)
  mask = np.array([[1, 0, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.int32)
  packing_ = packing.pack_indices(mask)
  x = rng.normal(size=(3, 4, 5)).astype(np.float32)
  packed = x[mask == 1]
  up_packed = rng.normal(size=packed.shape).astype(np.float32)
  up_rows = rng.normal(size=x.shape).astype(np.float32)
  cases = {
      "pack": (lambda x, k: packing.pack(x, packing_, kernels=k), x,
               up_packed),
      "unpack": (lambda p, k: packing.unpack(p, packing_, mask, kernels=k),
                 packed, up_rows),
      # Without the zero row the padding positions hold copies of a token's
      # row; the fast gradient leaves them out, so its caller gives them
      # none (attention: probability 0 at masked keys).
      "unpack_masked": (lambda p, k: packing.unpack(
          p, packing_, mask, zero_padding=False, kernels=k), packed,
                        up_rows * mask[:, :, None]),
  }
  for name, (f, value, upstream) in cases.items():
    want = _gradient(lambda v, f=f: f(v, "keras"), value, upstream)
    got = _gradient(lambda v, f=f: f(v, "fast"), value, upstream)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6,
                               err_msg=name)
  # What the condition is about: gradient at padding is not passed on.
  f = cases["unpack_masked"][0]
  assert not np.allclose(_gradient(lambda v: f(v, "fast"), packed, up_rows),
                         _gradient(lambda v: f(v, "keras"), packed, up_rows))


def test_encoder_trains_the_same_with_fast_packing_gradients():
  # The whole packed encoder in training (dropout on: both kernels draw the
  # same masks): the same gradients for every weight with either kernels,
  # so attention gives the padding copies nothing, as `unpack` requires.
  models = [encoder_lib.BertEncoder.from_bert_config(testing.tiny_config(),
                                                     kernels=k)
            for k in ("fast", "keras")]
  for a, b in zip(models[0].variables, models[1].variables):
    b.assign(a)
  inputs = testing.random_inputs(lengths=[7, 2, 4])
  inputs["input_mask"][0, 3] = 0  # a hole, not only trailing padding
  weights = np.random.default_rng(2).normal(size=(3, 7, 32)).astype(np.float32)
  grads = []
  for model in models:
    with tf.GradientTape() as tape:
      out = model(inputs, training=True, remove_padding=True)
      loss = (tf.reduce_sum(out["sequence_output"] * weights) +
              tf.reduce_sum(out["pooled_output"]))
    grads.append(tape.gradient(loss, model.trainable_variables))
  for a, b, var in zip(*grads, models[0].trainable_variables):
    a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5,
                               atol=1e-5 * max(np.abs(b).max(), 1e-3),
                               err_msg=var.path)
