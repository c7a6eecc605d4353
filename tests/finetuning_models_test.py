"""BertClassifier, BertSpanLabeler, BertTokenClassifier: numbers, padding
invariance, checkpoint round trips, and the heads overfitting a few examples."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from export import serving
from official_bert.training import checkpoints
from official_bert.modeling import finetuning_models
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _pad(inputs, extra):
  return {k: np.pad(v, ((0, 0), (0, extra))) for k, v in inputs.items()}


def test_classifier_is_dense_on_pooled_output_and_ignores_padding():
  keras.utils.set_random_seed(0)
  model = finetuning_models.BertClassifier.from_bert_config(
      testing.tiny_config(), num_classes=5)
  x = testing.random_inputs()
  logits = model(x, training=False)
  assert logits.shape == (testing.BATCH, 5) and logits.dtype == "float32"
  pooled = model.encoder(x, training=False)["pooled_output"]
  kernel, bias = model.classifier.get_weights()
  np.testing.assert_allclose(logits, pooled @ kernel + bias, atol=1e-6)
  assert np.abs(bias).max() == 0 and kernel.std() > 0.005  # Truncated normal.
  np.testing.assert_allclose(model(_pad(x, 4), training=False), logits,
                             atol=1e-5)
  # Dropout is on in training: outputs differ from inference.
  assert not np.allclose(model(x, training=True), logits, atol=1e-4)


def test_span_labeler_masks_padding_and_token_classifier_shapes():
  keras.utils.set_random_seed(1)
  x = testing.random_inputs()
  span = finetuning_models.BertSpanLabeler.from_bert_config(testing.tiny_config())
  out = span(x, training=False)
  assert out["start_logits"].shape == (testing.BATCH, testing.SEQ)
  padded = x["input_mask"] == 0
  assert padded.any()
  assert np.all(np.asarray(out["end_logits"])[padded] < -1000)
  assert np.all(np.abs(np.asarray(out["start_logits"])[~padded]) < 100)
  sequence = span.encoder(x, training=False)["sequence_output"]
  kernel, bias = span.classifier.get_weights()
  expected = np.asarray(sequence) @ kernel + bias
  np.testing.assert_allclose(np.asarray(out["start_logits"])[~padded],
                             expected[..., 0][~padded], atol=1e-5)
  tagger = finetuning_models.BertTokenClassifier.from_bert_config(
      testing.tiny_config(), num_classes=6)
  assert tagger(x, training=False).shape == (testing.BATCH, testing.SEQ, 6)
  with pytest.raises(ValueError, match="num_classes must be at least 1, got 0"):
    finetuning_models.BertClassifier.from_bert_config(testing.tiny_config(), 0)


@pytest.mark.parametrize("cls", [finetuning_models.BertClassifier,
                                 finetuning_models.BertSpanLabeler,
                                 finetuning_models.BertTokenClassifier])
def test_remove_padding_gives_the_same_outputs_at_the_tokens(cls):
  # What the serving export runs (it passes remove_padding=True to a model
  # whose call takes it): the rows' lengths differ, so a mixed-up gather
  # cannot pass.
  keras.utils.set_random_seed(2)
  model = cls.from_bert_config(testing.tiny_config(), num_classes=2)
  assert serving.takes_remove_padding(model)
  x = testing.random_inputs(lengths=[7, 2, 4])
  want = tf.nest.flatten(model(x, training=False))
  got = tf.nest.flatten(model(x, training=False, remove_padding=True))
  tokens = x["input_mask"] == 1
  for g, w in zip(got, want):
    g, w = np.asarray(g), np.asarray(w)
    if w.ndim > 1 and w.shape[1] == tokens.shape[1]:  # [B, T, ...]
      g, w = g[tokens], w[tokens]
    np.testing.assert_allclose(g, w, atol=1e-5)


@pytest.mark.parametrize("kernels", ["fast", "keras"])
@pytest.mark.parametrize("cls", [finetuning_models.BertClassifier,
                                 finetuning_models.BertSpanLabeler,
                                 finetuning_models.BertTokenClassifier])
def test_remove_padding_in_training_gives_the_same_loss_and_gradients(
    cls, kernels):
  # What fine-tuning runs (training/finetuner.py, --remove_padding): the
  # training branch (the query scale folded into its kernel, the fast
  # kernels' written-out gradients), dropout off (its draws follow the
  # layout). Weights of std 0.3 make the rows' outputs differ, and a loss
  # reading every token's output (random weights, padding left out) makes a
  # gradient that mixed rows or positions differ.
  keras.utils.set_random_seed(3)
  model = cls.from_bert_config(
      testing.tiny_config(initializer_range=0.3, **NO_DROPOUT),
      num_classes=2, kernels=kernels)
  x = testing.random_inputs(lengths=[7, 2, 4])
  tokens = tf.constant(x["input_mask"], tf.float32)
  rng = np.random.default_rng(0)

  def loss_and_gradients(remove_padding):
    with tf.GradientTape() as tape:
      loss = 0.0
      for out in tf.nest.flatten(model(x, training=True,
                                       remove_padding=remove_padding)):
        weights = rng.normal(size=out.shape).astype(np.float32)
        if out.shape.rank > 2 or out.shape[-1] == tokens.shape[1]:
          out = out * tf.reshape(tokens, tokens.shape + (1,) * (
              out.shape.rank - 2))  # [B, T, ...]: tokens only
        loss += tf.reduce_sum(out * weights)
    grads = tape.gradient(loss, model.trainable_variables)
    return loss, [None if g is None else tf.convert_to_tensor(g)
                  for g in grads]

  state = rng.bit_generator.state
  want_loss, want = loss_and_gradients(False)
  rng.bit_generator.state = state  # the same weights of the loss
  got_loss, got = loss_and_gradients(True)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
  # Relative to the largest gradient: some are zero but for rounding (the
  # key bias: the softmax ignores a shift shared by every key).
  scale = max(float(np.abs(w).max()) for w in want if w is not None)
  checked = 0
  for variable, g, w in zip(model.trainable_variables, got, want):
    assert (g is None) == (w is None), variable.path
    if w is not None:
      np.testing.assert_allclose(g / scale, w / scale, atol=1e-5,
                                 err_msg=variable.path)
      checked += 1
  assert checked > 20


def test_fine_tuned_checkpoint_round_trip_and_init_from_pretrainer(tmp_path):
  config = testing.tiny_config()
  keras.utils.set_random_seed(2)
  pretrainer = pretrainer_lib.BertPretrainer.from_bert_config(config)
  pretrained = checkpoints.save_model(pretrainer, str(tmp_path / "pre" / "ckpt"))
  model = finetuning_models.BertClassifier.from_bert_config(config, 3)
  checkpoints.restore_encoder(model.encoder, pretrained)
  x = testing.random_inputs()
  np.testing.assert_allclose(model.encoder(x)["pooled_output"],
                             pretrainer.encoder(x)["pooled_output"], atol=1e-6)
  # A fine-tuned checkpoint restores whole, and its encoder alone too.
  tuned = checkpoints.save_model(model, str(tmp_path / "tuned" / "ckpt"))
  again = finetuning_models.BertClassifier.from_bert_config(config, 3)
  checkpoints.restore_model(again, tuned)
  np.testing.assert_allclose(again(x, training=False), model(x, training=False),
                             atol=1e-6)
  encoder_only = finetuning_models.BertTokenClassifier.from_bert_config(config, 4)
  checkpoints.restore_encoder(encoder_only.encoder, tuned)
  np.testing.assert_allclose(encoder_only.encoder(x)["sequence_output"],
                             model.encoder(x)["sequence_output"], atol=1e-6)


def test_keras_config_and_file_round_trip(tmp_path):
  keras.utils.set_random_seed(6)
  model = finetuning_models.BertTokenClassifier.from_bert_config(
      testing.tiny_config(), num_classes=4, dropout_rate=0.2)
  again = finetuning_models.BertTokenClassifier.from_config(model.get_config())
  assert (again.num_classes, again.dropout_rate) == (4, 0.2)
  assert again.encoder.bert_config == testing.tiny_config()
  model.save(str(tmp_path / "tagger.keras"))
  loaded = keras.models.load_model(str(tmp_path / "tagger.keras"))
  x = testing.random_inputs()
  np.testing.assert_allclose(loaded(x, training=False), model(x, training=False),
                             atol=1e-6)


def test_mixed_precision_heads_return_float32():
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = finetuning_models.BertTokenClassifier.from_bert_config(
        testing.tiny_config(), 4)
    logits = model(testing.random_inputs(), training=False)
    assert logits.dtype == "float32"
    assert model.classifier.compute_dtype == "bfloat16"
  finally:
    keras.mixed_precision.set_global_policy("float32")


def _fit(model, x, y, loss, steps):
  """`steps` full-batch Adam steps in one traced function (Keras' fit()
  takes far longer to trace on 2 cores)."""
  optimizer = keras.optimizers.Adam(3e-3)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      out = model(x, training=True)
      value = (sum(loss(y[k], out[k]) for k in y) if isinstance(y, dict)
               else loss(y, out))
    variables = model.trainable_variables
    grads = tape.gradient(value, variables)
    optimizer.apply_gradients(
        [(g, v) for g, v in zip(grads, variables) if g is not None])
    return value

  first = float(step())
  for _ in range(steps - 1):
    last = float(step())
  assert last < 0.1 * first, (first, last)


@pytest.mark.slow
def test_span_and_token_heads_overfit_a_handful_of_examples():
  keras.utils.set_random_seed(3)
  x = testing.random_inputs(batch=4, seq=9, lengths=[9, 8, 7, 6], seed=4)
  sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  span = finetuning_models.BertSpanLabeler.from_bert_config(
      testing.tiny_config(**NO_DROPOUT))
  starts, ends = np.array([1, 2, 3, 4]), np.array([5, 4, 6, 5])
  _fit(span, x, {"start_logits": starts, "end_logits": ends},
       sparse, steps=40)
  out = span(x, training=False)
  np.testing.assert_array_equal(np.argmax(out["start_logits"], -1), starts)
  np.testing.assert_array_equal(np.argmax(out["end_logits"], -1), ends)

  tagger = finetuning_models.BertTokenClassifier.from_bert_config(
      testing.tiny_config(**NO_DROPOUT), num_classes=3)
  tags = np.random.default_rng(5).integers(0, 3, size=(4, 9)) * x["input_mask"]
  _fit(tagger, x, tags, sparse, steps=50)
  predicted = np.argmax(tagger(x, training=False), -1)
  real = x["input_mask"] == 1
  accuracy = (predicted[real] == tags[real]).mean()
  assert accuracy == 1.0, accuracy


@pytest.mark.parametrize("aggregation", ["max", "mean"])
def test_document_classifier_combines_its_windows_logits(aggregation):
  """[B, W, T] documents: the max (mean) over each document's own windows
  of BertClassifier's per-window logits, all-zero windows ignored; [B, T]:
  BertClassifier's logits (the same weights)."""
  keras.utils.set_random_seed(2)
  config = testing.tiny_config(**NO_DROPOUT)
  model = finetuning_models.BertDocumentClassifier.from_bert_config(
      config, 3, aggregation=aggregation)
  windows = testing.random_inputs(batch=5, seed=4)                 # [5, T]
  per_window = np.asarray(model(windows, training=False))          # [5, 3]
  plain = finetuning_models.BertClassifier.from_bert_config(config, 3)
  plain.set_weights(model.get_weights())
  np.testing.assert_allclose(plain(windows, training=False), per_window,
                             atol=1e-6)
  # Document 0: windows 0, 1, 2; document 1: windows 3, 4 and an empty one.
  documents = {name: np.zeros((2, 3, testing.SEQ), np.int32)
               for name in windows}
  for name, value in windows.items():
    documents[name][0] = value[:3]
    documents[name][1, :2] = value[3:]
  reduce = np.max if aggregation == "max" else np.mean
  expected = [reduce(per_window[:3], 0), reduce(per_window[3:], 0)]
  got = model(documents, training=False)
  assert got.shape == (2, 3)
  np.testing.assert_allclose(got, expected, atol=1e-5)
  # As fine-tuning calls it: the position-wise work on the tokens only,
  # where an all-padding window has no [CLS] token of its own.
  np.testing.assert_allclose(
      model(documents, training=False, remove_padding=True), expected,
      atol=1e-5)
  assert model.get_config()["aggregation"] == aggregation
  with pytest.raises(ValueError, match="aggregation must be one of"):
    finetuning_models.BertDocumentClassifier.from_bert_config(
        config, 3, aggregation="sum")
