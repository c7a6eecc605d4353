"""Tests of BertPretrainer, its heads, the pretraining loss and metrics."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import kernels
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

POSITIONS = np.array([[1, 2, 6, 0], [0, 3, 4, 0], [5, 1, 2, 3]], np.int32)
WEIGHTS = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]], np.float32)


def _inputs():
  return {**testing.random_inputs(), "masked_lm_positions": POSITIONS}


@pytest.fixture(scope="module")
def model():
  return pretrainer_lib.BertPretrainer.from_bert_config(testing.tiny_config())


def _log_softmax(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_mlm_logits_use_the_tied_embedding_table(model):
  x = _inputs()
  out = model(x)
  assert out["mlm_logits"].shape == (3, 4, testing.VOCAB_SIZE)
  assert out["next_sentence_logits"].shape == (3, 2)
  # Recompute the head by hand from the encoder's output and its table.
  seq = np.asarray(model.encoder(x)["sequence_output"])
  gathered = np.take_along_axis(seq, POSITIONS[..., None], axis=1)
  head = model.cls_predictions
  h = head.layer_norm(head.dense(gathered))
  table = model.encoder.get_embedding_table().numpy()
  expected = np.asarray(h) @ table.T + head.output_bias.numpy()
  np.testing.assert_allclose(out["mlm_logits"], expected, atol=1e-5)
  # Tied, not copied: the head holds the encoder's variable itself.
  assert head.embedding_table is model.encoder.get_embedding_table()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_scores_gradient_is_autodiffs(dtype):
  rng = np.random.default_rng(0)
  x = tf.constant(rng.normal(size=(6, 8)), dtype)
  table = tf.constant(rng.normal(size=(11, 8)), dtype)
  upstream = tf.constant(rng.normal(size=(6, 11)), dtype)
  grads = []
  for scores in (kernels._scores,  # pylint: disable=protected-access
                 lambda a, b: tf.matmul(a, b, transpose_b=True)):
    with tf.GradientTape() as tape:
      tape.watch([x, table])
      out = scores(x, table)
    grads.append([out] + tape.gradient(out, [x, table],
                                       output_gradients=upstream))
  tolerance = 1e-5 if dtype == "float32" else 2e-2
  for ours, autodiff in zip(*grads):
    assert ours.dtype == autodiff.dtype
    np.testing.assert_allclose(tf.cast(ours, tf.float32),
                               tf.cast(autodiff, tf.float32),
                               rtol=tolerance, atol=tolerance)


def test_embedding_table_trains_through_both_paths(model):
  x = _inputs()
  labels = {"masked_lm_ids": np.full((3, 4), 7, np.int32),
            "masked_lm_weights": WEIGHTS,
            "next_sentence_labels": np.array([[0], [1], [1]], np.int32)}
  table = model.encoder.get_embedding_table()
  with tf.GradientTape() as tape:
    loss = pretrainer_lib.pretraining_losses(labels, model(x, training=True))["loss"]
  grad = tf.convert_to_tensor(tape.gradient(loss, table.value))
  # Row 7 gets gradient from the output layer even though no input uses it.
  assert 7 not in x["input_word_ids"]
  assert np.abs(grad.numpy()[7]).sum() > 0


def test_losses_match_the_original_formula(model):
  rng = np.random.default_rng(3)
  labels = {"masked_lm_ids": rng.integers(0, testing.VOCAB_SIZE, (3, 4)),
            "masked_lm_weights": WEIGHTS,
            "next_sentence_labels": np.array([[0], [1], [1]])}
  out = model(_inputs())
  losses = pretrainer_lib.pretraining_losses(labels, out)
  logp = _log_softmax(np.asarray(out["mlm_logits"], np.float64))
  ce = -np.take_along_axis(logp, labels["masked_lm_ids"][..., None], -1)[..., 0]
  mlm = (WEIGHTS * ce).sum() / (WEIGHTS.sum() + 1e-5)
  nsp_logp = _log_softmax(np.asarray(out["next_sentence_logits"], np.float64))
  nsp = -nsp_logp[np.arange(3), labels["next_sentence_labels"][:, 0]].mean()
  np.testing.assert_allclose(losses["masked_lm_loss"], mlm, rtol=1e-5)
  np.testing.assert_allclose(losses["next_sentence_loss"], nsp, rtol=1e-5)
  np.testing.assert_allclose(losses["loss"], mlm + nsp, rtol=1e-5)
  # Padded prediction slots (weight 0) do not count: changing their label
  # leaves the loss unchanged.
  other = dict(labels, masked_lm_ids=labels["masked_lm_ids"].copy())
  other["masked_lm_ids"][0, 3] = (other["masked_lm_ids"][0, 3] + 1) % testing.VOCAB_SIZE
  np.testing.assert_allclose(pretrainer_lib.pretraining_losses(other, out)["loss"],
                             losses["loss"], rtol=1e-6)


def test_metric_counts(model):
  out = model(_inputs())
  predicted = np.argmax(out["mlm_logits"], -1)
  ids = predicted.copy()
  ids[0, 0] = (ids[0, 0] + 1) % testing.VOCAB_SIZE  # one real miss
  ids[1, 3] = (ids[1, 3] + 1) % testing.VOCAB_SIZE  # padded slot: not counted
  nsp_pred = np.argmax(out["next_sentence_logits"], -1)
  nsp_labels = np.array([[nsp_pred[0]], [1 - nsp_pred[1]], [nsp_pred[2]]])
  labels = {"masked_lm_ids": ids, "masked_lm_weights": WEIGHTS,
            "next_sentence_labels": nsp_labels}
  counts = {k: float(v) for k, v in
            pretrainer_lib.pretraining_metric_counts(labels, out).items()}
  assert counts == {"masked_lm_correct": 9.0, "masked_lm_total": 10.0,
                    "next_sentence_correct": 2.0, "next_sentence_total": 3.0}


def test_without_next_sentence_prediction():
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config(), use_next_sentence=False)
  out = model(_inputs())
  assert sorted(out) == ["mlm_logits"]
  assert not [v for v in model.weights if "seq_relationship" in v.path]
  labels = {"masked_lm_ids": np.zeros((3, 4), np.int32),
            "masked_lm_weights": WEIGHTS}
  losses = pretrainer_lib.pretraining_losses(labels, out)
  assert sorted(losses) == ["loss", "masked_lm_loss"]
  assert float(losses["loss"]) == pytest.approx(float(losses["masked_lm_loss"]))


def test_keras_file_save_load(model, tmp_path):
  path = str(tmp_path / "pretrainer.keras")
  model.save(path)
  loaded = keras.saving.load_model(path)
  x = _inputs()
  for key in ("mlm_logits", "next_sentence_logits"):
    np.testing.assert_allclose(loaded(x)[key], model(x)[key], atol=1e-6)
  assert loaded.cls_predictions.embedding_table is loaded.encoder.get_embedding_table()


def test_logits_are_float32_under_mixed_precision():
  keras.config.set_dtype_policy("mixed_bfloat16")
  try:
    model = pretrainer_lib.BertPretrainer.from_bert_config(testing.tiny_config())
  finally:
    keras.config.set_dtype_policy("float32")
  out = model(_inputs())
  assert out["mlm_logits"].dtype == "float32"
  assert out["next_sentence_logits"].dtype == "float32"
