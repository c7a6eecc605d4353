"""Tests for official_bert/modeling/kernels.py: every fast kernel against the
Keras formula it replaces (value and every gradient), the choice of kernels
(resolve, layers, configs) and the whole model with either."""

import inspect
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from official_bert.modeling import dropout
from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import feed_forward
from official_bert.modeling import kernels
from official_bert.modeling import normalization
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

H, I, V, N = testing.HIDDEN, testing.INTERMEDIATE, testing.VOCAB_SIZE, 21


def _normal(rng, shape, scale=1.0, offset=0.0):
  return (rng.normal(size=shape) * scale + offset).astype("float32")


def _cases(rng):
  """name -> (function(inputs..., kernels), float32 inputs, first input's
  dtype follows the policy?). Sizes all different; values large enough that
  GELU's tails and LayerNorm's mean terms matter."""
  x = _normal(rng, (3, 7, H), 2.0)
  return {
      "gelu": (lambda x, k: kernels.gelu(x, k), [_normal(rng, (3, 7, I), 3)]),
      "activation": (lambda x, k: kernels.activation("gelu", k)(x),
                     [_normal(rng, (5, I), 3)]),
      "feed_forward": (
          lambda x, w1, b1, w2, b2, k: kernels.feed_forward(
              x, w1, b1, w2, b2, "gelu", k),
          [x, _normal(rng, (H, I), 0.5), _normal(rng, (I,), 0.5),
           _normal(rng, (I, H), 0.5), _normal(rng, (H,), 0.5)]),
      "layer_norm": (
          lambda x, gamma, beta, k: kernels.layer_norm(x, gamma, beta, 1e-12,
                                                       k),
          [_normal(rng, (3, 7, H), 4, 3), _normal(rng, (H,)),
           _normal(rng, (H,))]),
      "mlm_logits": (
          lambda x, table, bias, k: kernels.mlm_logits(x, table, bias, k),
          [_normal(rng, (N, H)), _normal(rng, (V, H)), _normal(rng, (V,))]),
      "sum_rows": (
          lambda x, k: (kernels.sum_rows(x) if k == "fast"
                        else ops.sum(x, axis=(0, 1))),
          [_normal(rng, (3, 7, H))]),
  }


def _value_and_grads(fn, inputs, kernel, upstream_seed):
  with tf.GradientTape() as tape:
    tape.watch(inputs)
    y = fn(*inputs, kernel)
    upstream = tf.constant(np.random.default_rng(upstream_seed).normal(
        size=y.shape), tf.float32)  # not ones: the upstream must multiply
    total = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
  return [y] + tape.gradient(total, inputs)


def test_every_kernel_has_a_pair_case():
  # A kernel added to kernels.py without a case here fails this test.
  chosen = {name for name, f in vars(kernels).items()
            if inspect.isfunction(f) and not name.startswith("_")
            and "kernels" in inspect.signature(f).parameters} - {"check"}
  assert chosen | {"sum_rows"} == set(_cases(np.random.default_rng(0))) | {
      "dropout"}


@pytest.mark.parametrize("policy,rtol", [("float32", 2e-6),
                                         ("mixed_bfloat16", 3e-2)])
@pytest.mark.parametrize("name", sorted(_cases(np.random.default_rng(0))))
def test_fast_kernel_equals_keras_formula(name, policy, rtol):
  fn, arrays = _cases(np.random.default_rng(1))[name]
  dtype = "bfloat16" if policy == "mixed_bfloat16" else "float32"
  # Under mixed precision the activations and weights arrive in bfloat16,
  # the masked-LM bias in float32 (its variable's dtype).
  inputs = [tf.constant(a, "float32" if name == "mlm_logits" and i == 2
                        else dtype) for i, a in enumerate(arrays)]
  fast = _value_and_grads(fn, inputs, "fast", 2)
  reference = _value_and_grads(fn, inputs, "keras", 2)
  assert len(fast) == len(inputs) + 1
  if policy == "float32":  # the fast kernel ran: its rounding differs
    assert any(not np.array_equal(a, b) for a, b in zip(fast, reference))
  for i, (a, b) in enumerate(zip(fast, reference)):
    assert a.dtype == b.dtype and a.shape == b.shape, i
    a, b = tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy()
    # Relative to the largest entry: sums over many terms cancel.
    np.testing.assert_allclose(a, b, rtol=rtol,
                               atol=rtol * max(np.abs(b).max(), 1.0),
                               err_msg=f"{name} output {i}")


@pytest.mark.parametrize("kernel", ["fast", "keras"])
def test_dropout_kernels_rate_expected_value_and_gradient(kernel):
  rate = 0.3
  x = tf.fill((64, 4, 33), 3.0)  # odd last axis
  seed = keras.random.SeedGenerator(5)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = kernels.dropout(x, rate, seed, kernel)
    total = tf.reduce_sum(y * 2.0)
  y, grad = y.numpy(), tape.gradient(total, x).numpy()
  assert abs(np.mean(y == 0) - rate) < 0.02  # 8448 elements: ~4 sigma
  rounded = round(rate * 65536) / 65536
  np.testing.assert_allclose(y[y != 0], 3.0 / (1 - rounded), rtol=1e-6)
  np.testing.assert_allclose(grad, 2.0 * y / 3.0, rtol=1e-6)


def test_keras_kernels_are_keras_layers():
  """kernels="keras" computes exactly what Keras's own layers compute.

  (Dropout's mask is the 16-bit draws either way: dropout_test.py's
  test_keras_kernels_draw_the_same_mask.)
  """
  rng = np.random.default_rng(3)
  x = tf.constant(_normal(rng, (3, 7, H), 2.0))
  # LayerNorm.
  ln = normalization.LayerNormalization(epsilon=1e-12, kernels="keras")
  reference = keras.layers.LayerNormalization(epsilon=1e-12)
  for layer in (ln, reference):
    layer.build((3, 7, H))
  reference.set_weights([_normal(rng, (H,)), _normal(rng, (H,))])
  ln.set_weights(reference.get_weights())
  np.testing.assert_array_equal(ln(x), reference(x))
  # The feed-forward network: its own Dense layers, called.
  ffn = feed_forward.FeedForward(H, I, kernels="keras")
  ffn.build((3, 7, H))
  np.testing.assert_allclose(ffn(x), ffn.output_dense(ffn.intermediate(x)),
                             rtol=1e-6, atol=1e-6)


def test_resolve():
  assert kernels.resolve("auto", backend="tensorflow") == "fast"
  # Whatever XLA compiles gets Keras's formulas: --jit_compile, TPUs, JAX.
  assert kernels.resolve("auto", jit_compile=True,
                         backend="tensorflow") == "keras"
  assert kernels.resolve("auto", is_tpu=True, backend="tensorflow") == "keras"
  assert kernels.resolve("auto", backend="jax") == "keras"
  assert kernels.resolve("auto", backend="torch") == "keras"
  # An explicit choice is kept.
  assert kernels.resolve("fast", jit_compile=True) == "fast"
  assert kernels.resolve("keras") == "keras"
  with pytest.raises(ValueError, match="one of auto, fast, keras; got 'xla'"):
    kernels.resolve("xla")
  with pytest.raises(ValueError, match="resolved by the program"):
    encoder_lib.BertEncoder(99, 32, 2, 4, 37, kernels="auto")
  with pytest.raises(ValueError, match="'fast' or 'keras', got 'Fast'"):
    dropout.Dropout(0.1, kernels="Fast")


def _pretrainer(kernel):
  return pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config(), kernels=kernel)


def test_every_layer_gets_the_models_kernels_and_configs_keep_them():
  model = _pretrainer("fast")
  layers = [l for l in model._flatten_layers() if hasattr(l, "kernels")]  # pylint: disable=protected-access
  # embeddings (LN, dropout), 2 x (block, attention + its dropout, 2 LN,
  # FFN, 2 dropouts), the encoder, the MLM head and its LN.
  assert len(layers) == 3 + 2 * 8 + 3
  assert {l.kernels for l in layers} == {"fast"}
  clone = pretrainer_lib.BertPretrainer.from_config(model.get_config())
  clone.build({name: (None, None)
               for name in pretrainer_lib.PRETRAINING_INPUT_NAMES})
  assert {l.kernels for l in clone._flatten_layers()  # pylint: disable=protected-access
          if hasattr(l, "kernels")} == {"fast"}
  assert model.encoder.get_config()["kernels"] == "fast"
  # Same variables, in the same order, either way.
  assert ([(v.path, v.shape) for v in model.weights] ==
          [(v.path, v.shape) for v in _pretrainer("keras").weights])


def _unnumbered(path):
  """A variable's path without the number Keras gives each seed generator."""
  return re.sub(r"seed_generator_\d+", "seed_generator", path)


@pytest.mark.parametrize("training", [False, True])
def test_whole_pretrainer_same_loss_and_gradients_with_either_kernels(
    training):
  fast, reference = _pretrainer("fast"), _pretrainer("keras")
  # Every variable, the dropout layers' seed states too: in training both
  # draw the same dropout masks.
  assert len(fast.variables) > len(fast.weights)
  for a, b in zip(fast.variables, reference.variables):
    assert _unnumbered(a.path) == _unnumbered(b.path)
    b.assign(a)
  rng = np.random.default_rng(4)
  inputs = {**testing.random_inputs(),
            "masked_lm_positions": rng.integers(0, testing.SEQ, (3, 4))}
  labels = {"masked_lm_ids": rng.integers(0, V, (3, 4)),
            "masked_lm_weights": np.ones((3, 4), np.float32),
            "next_sentence_labels": np.array([0, 1, 1])}
  results = []
  for model in (fast, reference):
    with tf.GradientTape() as tape:
      outputs = model(inputs, training=training)
      loss = pretrainer_lib.pretraining_losses(labels, outputs)["loss"]
    results.append((loss, tape.gradient(loss, model.trainable_variables)))
  (loss_a, grads_a), (loss_b, grads_b) = results
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  assert len(grads_a) == len(fast.trainable_variables) == 46
  for a, b, var in zip(grads_a, grads_b, fast.trainable_variables):
    a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5,
                               atol=1e-5 * max(np.abs(b).max(), 1e-3),
                               err_msg=var.path)


# ---- the helpers the fast gradients use (were tests/gradients_test.py) ----
@pytest.mark.parametrize("shape", [(7, 5), (3, 4, 6), (1, 9)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sum_rows_is_the_sum_over_leading_axes(shape, dtype):
  x = np.random.default_rng(0).normal(size=shape).astype("float32")
  got = kernels.sum_rows(tf.constant(x, dtype))
  assert got.dtype == dtype and got.shape == (shape[-1],)
  tolerance = 1e-5 if dtype == "float32" else 5e-2
  np.testing.assert_allclose(tf.cast(got, tf.float32),
                             x.reshape(-1, shape[-1]).sum(0),
                             rtol=tolerance, atol=tolerance)


def test_custom_gradient_passes_the_upstream_gradient():

  @kernels.custom_gradient
  def cube(x, y):
    # Deliberately not the true gradient of x**3 * y: shows it is used.
    return x ** 3 * y, lambda upstream: (upstream * 10.0, upstream * -1.0)

  x, y = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
  with tf.GradientTape() as tape:
    tape.watch([x, y])
    value = cube(x, y)
  np.testing.assert_allclose(value, [3.0, 32.0])
  dx, dy = tape.gradient(value, [x, y], output_gradients=tf.constant([1.0, 2.0]))
  np.testing.assert_allclose(dx, [10.0, 20.0])
  np.testing.assert_allclose(dy, [-1.0, -2.0])
  assert ops.is_tensor(dx)


def test_keras_kernels_trace_no_custom_gradient():
  """With kernels="keras" nothing in the model has a hand-written gradient
  (what XLA would compile slowly; LayerNorm and the masked-LM scores once
  kept theirs under XLA). With "fast", the written-out gradients are there."""
  inputs = {**testing.random_inputs(), "masked_lm_positions": np.zeros(
      (3, 4), np.int32)}
  for kernel, expected in (("keras", 0), ("fast", 2 * 3 + 1 + 2 + 2)):
    model = _pretrainer(kernel)
    graph = tf.function(lambda x: model(x, training=True)).get_concrete_function(
        inputs).graph  # pylint: disable=cell-var-from-loop
    custom = [op for op in graph.get_operations()
              if "_gradient_op_type" in op.node_def.attr]
    # fast: per block 2 LayerNorms + the feed-forward network; the
    # embeddings' LayerNorm; the head's GELU and LayerNorm; scores and bias.
    assert len(custom) == expected, (kernel, [op.name for op in custom])



def test_feed_forward_column_blocks_are_the_same_network():
  # Blocks of 768 columns from 3072 (BERT-Base's 4 blocks); none below.
  assert [kernels.inference_column_blocks(i) for i in (1536, 3072, 4096,
                                                        3000)] == [1, 4, 1, 1]
  rng = np.random.default_rng(5)
  inputs = [tf.constant(a) for a in (
      _normal(rng, (3, 7, H), 2.0), _normal(rng, (H, 4 * I), 0.5),
      _normal(rng, (4 * I,), 0.5), _normal(rng, (4 * I, H), 0.5),
      _normal(rng, (H,), 0.5))]
  want = _value_and_grads(
      lambda *a: kernels.feed_forward(*a[:-1], "gelu", a[-1]), inputs,
      "keras", 0)
  got = _value_and_grads(
      lambda *a: kernels.feed_forward(*a[:-1], "gelu", a[-1],
                                      column_blocks=4), inputs, "keras", 0)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)
  # The layer blocks at inference only: a BERT-Base-wide FeedForward gives
  # the same value either way.
  ffn = feed_forward.FeedForward(H, 3072, kernels="keras")
  ffn.build((3, 7, H))
  x = inputs[0]
  np.testing.assert_allclose(ffn(x), ffn(x, training=True), rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(ffn(x), ffn.output_dense(ffn.intermediate(x)),
                             rtol=1e-5, atol=1e-5)
