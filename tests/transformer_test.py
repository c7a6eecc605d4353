"""Tests for official_bert/modeling/transformer.py and feed_forward.py: one block
with either kernels, the feed-forward layer's checkpoint keys."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import transformer


def _block(hidden_act="gelu", policy="float32", kernels="fast"):
  block = transformer.TransformerBlock(16, 2, 40, hidden_act=hidden_act,
                                       kernels=kernels, dtype=policy)
  block.build(((3, 7, 16), (3, 7)))
  rng = np.random.default_rng(0)
  for weight in block.weights:  # large enough that GELU's tails matter
    if weight.trainable:
      weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.5)
  return block


def _value_and_grads(block, x, mask, upstream, positions=None):
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = block((x, mask), training=False, output_positions=positions)
    total = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
  return [y] + tape.gradient(total, [x] + block.trainable_weights)


@pytest.mark.parametrize("policy,tolerance", [("float32", 1e-4),
                                              ("mixed_bfloat16", 6e-2)])
@pytest.mark.parametrize("with_positions", [False, True])
def test_gelu_feed_forward_matches_keras_layers_and_autodiff(
    policy, tolerance, with_positions):
  rng = np.random.default_rng(1)
  dtype = "bfloat16" if policy == "mixed_bfloat16" else "float32"
  x = tf.constant(rng.normal(size=(3, 7, 16)) * 2, dtype)
  mask = tf.constant([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
  positions = tf.constant([[0, 2], [1, 4], [0, 2]]) if with_positions else None
  upstream = tf.constant(
      rng.normal(size=(3, 2 if with_positions else 7, 16)), tf.float32)
  block = _block(policy=policy)
  ours = _value_and_grads(block, x, mask, upstream, positions)
  # The same weights with kernels="keras": Keras's formulas and autodiff.
  keras_block = _block(policy=policy, kernels="keras")
  reference = _value_and_grads(keras_block, x, mask, upstream, positions)
  assert len(ours) == len(reference) == 2 + len(block.trainable_weights)
  for a, b in zip(ours, reference):
    assert a.dtype == b.dtype and a.shape == b.shape
    a, b = tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy()
    # (The key bias's gradient is zero up to rounding: softmax ignores it.)
    np.testing.assert_allclose(a, b, rtol=tolerance,
                               atol=tolerance * max(np.abs(b).max(), 1.0))


def test_other_activations_use_the_dense_layers():
  # No fast feed-forward kernel for them: with either kernels, the block's
  # feed-forward network is its Dense layers' computation.
  block = _block(hidden_act="relu")
  x = tf.constant(np.random.default_rng(2).normal(size=(3, 7, 16)), tf.float32)
  mask = tf.ones((3, 7), tf.int32)
  np.testing.assert_allclose(
      block((x, mask)), _block(hidden_act="relu", kernels="keras")((x, mask)),
      rtol=1e-5, atol=1e-6)  # (LayerNorm's kernels differ by rounding)
  ffn = block.feed_forward
  np.testing.assert_array_equal(ffn(x), ffn.output_dense(ffn.intermediate(x)))


def test_feed_forward_layer_keeps_the_checkpoint_keys(tmp_path):
  """The block's checkpoint keys are those from before `FeedForward` owned
  the dense layers (as TF1/HF conversion and old checkpoints expect)."""
  block = _block()
  assert block.intermediate is block.feed_forward.intermediate
  assert block.output_dense is block.feed_forward.output_dense
  path = tf.train.Checkpoint(block=block).write(str(tmp_path / "ckpt"))
  keys = sorted(name.split("/.ATTRIBUTES")[0]
                for name, _ in tf.train.list_variables(path)
                if "ATTRIBUTES/VARIABLE_VALUE" in name)
  assert [k for k in keys if "feed_forward" in k] == []
  for name in ("intermediate/_kernel", "intermediate/bias",
               "output_dense/_kernel", "output_dense/bias"):
    assert f"block/{name}" in keys, keys
  assert len(keys) == len(block.weights)
