"""Tests of BertEncoder: outputs, padding invariance, dropout, serialization, size."""

import keras
import numpy as np
import pytest

from official_bert import configs
from official_bert.modeling import initializers
from official_bert.modeling import encoder as encoder_lib
from tests import testing


@pytest.fixture(scope="module")
def encoder():
  return encoder_lib.BertEncoder.from_bert_config(testing.tiny_config())


def test_output_names_and_shapes(encoder):
  out = encoder(testing.random_inputs())
  assert sorted(out) == ["default", "encoder_outputs", "pooled_output",
                         "sequence_output"]
  assert out["sequence_output"].shape == (testing.BATCH, testing.SEQ, testing.HIDDEN)
  assert out["pooled_output"].shape == (testing.BATCH, testing.HIDDEN)
  assert len(out["encoder_outputs"]) == testing.LAYERS
  np.testing.assert_array_equal(out["default"], out["pooled_output"])
  np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
  # The pooler is tanh(dense([CLS])).
  cls = out["sequence_output"][:, 0]
  expected = np.tanh(cls @ encoder.pooler.kernel.numpy() + encoder.pooler.bias.numpy())
  np.testing.assert_allclose(out["pooled_output"], expected, atol=1e-6)


def test_output_positions_equal_the_full_outputs_gathered(encoder):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x = testing.random_inputs()
  rng = np.random.default_rng(1)
  positions = rng.integers(0, testing.SEQ, (testing.BATCH, 5)).astype(np.int32)
  full = encoder(x)
  part = encoder(x, output_positions=positions)
  want = np.take_along_axis(np.asarray(full["sequence_output"]),
                            positions[..., None], axis=1)
  assert part["sequence_output"].shape == (testing.BATCH, 5, testing.HIDDEN)
  np.testing.assert_allclose(part["sequence_output"], want, atol=1e-5)
  np.testing.assert_allclose(part["pooled_output"], full["pooled_output"],
                             atol=1e-6)
  for got, ref in zip(part["encoder_outputs"][:-1], full["encoder_outputs"]):
    np.testing.assert_array_equal(got, ref)
  # The same gradients for every weight (inference mode: no dropout noise).
  def grads(**kwargs):
    with tf.GradientTape() as tape:
      out = encoder(x, **kwargs)
      seq = out["sequence_output"]
      if "output_positions" not in kwargs:
        seq = tf.gather(seq, positions, batch_dims=1)
      loss = tf.reduce_sum(seq ** 2) + tf.reduce_sum(out["pooled_output"])
    return tape.gradient(loss, encoder.trainable_variables)
  for got, ref, var in zip(grads(output_positions=positions), grads(),
                           encoder.trainable_variables):
    np.testing.assert_allclose(tf.convert_to_tensor(got),
                               tf.convert_to_tensor(ref), rtol=1e-4, atol=5e-5,
                               err_msg=var.path)


def test_any_length_up_to_max_positions(encoder):
  for length in (1, 5, 16):
    x = testing.random_inputs(seq=length, lengths=[length] * testing.BATCH)
    assert encoder(x)["sequence_output"].shape[1] == length
  with pytest.raises(ValueError, match="sequence length 17 exceeds max_position_embeddings=16"):
    encoder(testing.random_inputs(seq=17))


def test_padding_invariance(encoder):
  x = testing.random_inputs()
  changed = {k: v.copy() for k, v in x.items()}
  pad = x["input_mask"] == 0
  assert pad.any()
  rng = np.random.default_rng(5)
  changed["input_word_ids"][pad] = rng.integers(1, testing.VOCAB_SIZE, pad.sum())
  changed["input_type_ids"][pad] = 1 - changed["input_type_ids"][pad]
  a, b = encoder(x), encoder(changed)
  real = ~pad
  np.testing.assert_allclose(np.asarray(a["sequence_output"])[real],
                             np.asarray(b["sequence_output"])[real], atol=1e-6)
  np.testing.assert_allclose(a["pooled_output"], b["pooled_output"], atol=1e-6)
  # Not vacuous: the padded positions themselves did change.
  assert not np.allclose(np.asarray(a["sequence_output"])[pad],
                         np.asarray(b["sequence_output"])[pad])


def test_dropout_only_in_training(encoder):
  x = testing.random_inputs()
  inference = [encoder(x, training=False)["sequence_output"] for _ in range(2)]
  np.testing.assert_array_equal(inference[0], inference[1])
  np.testing.assert_array_equal(encoder(x)["sequence_output"], inference[0])
  training = [encoder(x, training=True)["sequence_output"] for _ in range(2)]
  assert not np.allclose(training[0], training[1])
  assert not np.allclose(training[0], inference[0])


def test_get_config_from_config_round_trip(encoder):
  config = encoder.get_config()
  clone = encoder_lib.BertEncoder.from_config(config)
  clone.build({name: (None, None) for name in encoder_lib.INPUT_NAMES})
  clone.set_weights(encoder.get_weights())
  x = testing.random_inputs()
  np.testing.assert_allclose(clone(x)["sequence_output"],
                             encoder(x)["sequence_output"], atol=1e-6)
  assert clone.bert_config == encoder.bert_config


def test_keras_file_save_load(encoder, tmp_path):
  path = str(tmp_path / "encoder.keras")
  encoder.save(path)
  loaded = keras.saving.load_model(path)
  x = testing.random_inputs()
  for key in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(loaded(x)[key], encoder(x)[key], atol=1e-6)


def test_variables_mirror_original_scopes(encoder):
  paths = [v.path for v in encoder.weights]
  assert "bert_encoder/embeddings/word_embeddings/embeddings" in paths
  assert "bert_encoder/layer_1/attention/query/kernel" in paths
  # The feed-forward network's scope; its checkpoint key stays
  # layer_0/intermediate (tests/transformer_test.py).
  assert "bert_encoder/layer_0/feed_forward/intermediate/kernel" in paths
  assert "bert_encoder/pooler/kernel" in paths
  assert encoder.get_embedding_table().shape == (testing.VOCAB_SIZE, testing.HIDDEN)


def test_parameter_counts_equal_the_published_ones(monkeypatch):
  # BERT-Base 109,482,240 encoder parameters ("110M" in the paper), Large
  # 335,141,888 ("340M"): embeddings + blocks + pooler, no MLM head.
  # Counts do not depend on initial values; zeros skip 445M random draws.
  monkeypatch.setattr(initializers, "truncated_normal", lambda stddev: "zeros")
  base = encoder_lib.BertEncoder.from_bert_config(configs.PRESETS["bert_base"])
  assert base.count_params() == 109_482_240
  del base
  large = encoder_lib.BertEncoder.from_bert_config(configs.PRESETS["bert_large"])
  assert large.count_params() == 335_141_888


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision(policy):
  x = testing.random_inputs()
  reference = encoder_lib.BertEncoder.from_bert_config(testing.tiny_config())
  keras.config.set_dtype_policy(policy)
  try:
    mixed = encoder_lib.BertEncoder.from_bert_config(testing.tiny_config())
  finally:
    keras.config.set_dtype_policy("float32")
  mixed.set_weights(reference.get_weights())
  assert all(v.dtype == "float32" for v in mixed.weights)  # master weights
  out = mixed(x)
  compute = "bfloat16" if policy == "mixed_bfloat16" else "float16"
  assert out["sequence_output"].dtype == compute
  # LayerNorm and softmax run in float32, so the result stays close.
  tolerance = 0.1 if compute == "bfloat16" else 0.02
  np.testing.assert_allclose(np.asarray(out["sequence_output"], np.float32),
                             reference(x)["sequence_output"], atol=tolerance)
  assert np.isfinite(np.asarray(out["pooled_output"], np.float32)).all()
