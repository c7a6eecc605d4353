"""Padding each batch to its longest example changes no result: the cut
lengths, the predictions of the three task models (equal to fixed-length
padding at 1e-5, per-position outputs at the examples' own positions), one
training step's loss and gradients, and Hugging Face's length-grouped
order."""

import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import finetuning_models
from official_bert.training import finetuner
from official_bert.training import padding
from tests import testing

SEQ = 16               # the fixed length (max_seq_length)
LENGTHS = [5, 9, 3]    # longest 9 -> cut to 12 with multiple 4


def _inputs(lengths=LENGTHS, seed=0):
  return testing.random_inputs(batch=len(lengths), seq=SEQ, seed=seed,
                               lengths=lengths)


def test_batch_length_is_the_longest_rounded_up_and_capped():
  mask = _inputs()["input_mask"]
  assert int(padding.batch_length(mask, 4)) == 12
  assert int(padding.batch_length(mask, 1)) == 9
  assert int(padding.batch_length(mask, 5)) == 10
  assert int(padding.batch_length(mask, 32)) == SEQ  # capped
  # A mask with a hole still keeps its last token.
  holed = np.zeros((2, SEQ), np.int32)
  holed[0, [0, 10]] = 1
  assert int(padding.batch_length(holed, 1)) == 11


def test_cut_batch_cuts_inputs_and_token_labels_only():
  inputs = _inputs()
  token_labels = np.full((3, SEQ), -1, np.int32)
  token_labels[:, :3] = 1
  # A multi-label task with as many labels as positions: 0/1 float rows.
  label_rows = np.zeros((3, SEQ), np.float32)
  label_rows[:, -1] = 1.0
  labels = {"start_positions": np.array([1, 8, 2], np.int32),
            "tokens": token_labels, "label_rows": label_rows}
  cut, cut_labels = padding.cut_batch(
      tf.nest.map_structure(tf.constant, inputs),
      tf.nest.map_structure(tf.constant, labels), multiple=4)
  for key, value in inputs.items():
    np.testing.assert_array_equal(cut[key].numpy(), value[:, :12])
  np.testing.assert_array_equal(cut_labels["tokens"].numpy(),
                                token_labels[:, :12])
  np.testing.assert_array_equal(cut_labels["start_positions"].numpy(),
                                labels["start_positions"])
  np.testing.assert_array_equal(cut_labels["label_rows"].numpy(), label_rows)


def _model(kind, kernels):
  config = testing.tiny_config(hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0,
                               max_position_embeddings=SEQ)
  tf.keras.utils.set_random_seed(1)
  if kind == "classifier":
    return finetuning_models.BertClassifier.from_bert_config(
        config, 3, kernels=kernels)
  if kind == "span":
    return finetuning_models.BertSpanLabeler.from_bert_config(
        config, kernels=kernels)
  return finetuning_models.BertTokenClassifier.from_bert_config(
      config, 5, kernels=kernels)


@pytest.mark.parametrize("kernels", ["fast", "keras"])
@pytest.mark.parametrize("kind", ["classifier", "span", "token"])
def test_predictions_equal_fixed_length_padding(kind, kernels):
  model = _model(kind, kernels)
  # 7 examples in batches of 3: lengths differ per batch (12, 8, 16 after
  # rounding to 4), the last batch is short.
  lengths = [5, 9, 3, 2, 7, 4, 16]
  inputs = _inputs(lengths, seed=3)
  fixed = finetuner.predict(model, inputs, 3)
  # In order of length (the default with `multiple`), the batches are the
  # examples [3, 2, 5] (cut to 4), [0, 4, 1] (to 12) and [6] (16); in the
  # inputs' order, [0, 1, 2] (to 12), [3, 4, 5] (8) and [6].
  by_length = finetuner.predict(model, inputs, 3, multiple=4, fill=-7.0)
  in_order = finetuner.predict(model, inputs, 3, multiple=4, fill=-7.0,
                               by_length=False)
  mask = inputs["input_mask"].astype(bool)
  for fixed_out, by_length_out, in_order_out in zip(
      tf.nest.flatten(fixed), tf.nest.flatten(by_length),
      tf.nest.flatten(in_order)):
    for cut_out in (by_length_out, in_order_out):
      assert fixed_out.shape == cut_out.shape
      if kind == "classifier":
        np.testing.assert_allclose(cut_out, fixed_out, atol=1e-5)
      else:  # per position: equal on the tokens
        np.testing.assert_allclose(cut_out[mask], fixed_out[mask], atol=1e-5)
    if kind != "classifier":  # `fill` past the cut of each example's batch
      assert (by_length_out[[3, 2, 5], 4:] == -7.0).all()
      assert (by_length_out[[0, 4, 1], 12:] == -7.0).all()
      assert not (by_length_out[1, 9:12] == -7.0).any()  # computed
      assert (in_order_out[:3, 12:] == -7.0).all()
      assert not (in_order_out[:3, 9:12] == -7.0).any()


def _losses(kind):
  from official_bert.tasks.classification import classification_task  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.ner import ner_task  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_task  # pylint: disable=g-import-not-at-top
  return {"classifier": classification_task.classifier_losses,
          "span": squad_task.squad_losses,
          "token": ner_task.token_losses}[kind]


def _labels(kind, inputs):
  rng = np.random.default_rng(5)
  if kind == "classifier":
    return np.array([0, 2, 1], np.int32)
  if kind == "span":
    return {"start_positions": np.array([1, 8, 2], np.int32),
            "end_positions": np.array([3, 8, 2], np.int32)}
  labels = rng.integers(0, 5, size=inputs["input_mask"].shape).astype(np.int32)
  return np.where(inputs["input_mask"] > 0, labels, -1).astype(np.int32)


@pytest.mark.parametrize("kind", ["classifier", "span", "token"])
def test_one_training_step_loss_and_gradients_equal(kind):
  model = _model(kind, "fast")
  inputs = _inputs()
  labels = _labels(kind, inputs)
  loss_fn = _losses(kind)

  def loss_and_grads(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))["loss"]
    grads = tape.gradient(loss, model.trainable_variables)
    return loss, grads

  tensors = tf.nest.map_structure(tf.constant, (inputs, labels))
  full_loss, full_grads = loss_and_grads(*tensors)
  cut_x, cut_y = padding.cut_batch(*tensors, multiple=4)
  assert cut_x["input_mask"].shape[1] == 12
  cut_loss, cut_grads = loss_and_grads(cut_x, cut_y)
  np.testing.assert_allclose(cut_loss.numpy(), full_loss.numpy(), atol=1e-6)
  for variable, a, b in zip(model.trainable_variables, full_grads, cut_grads):
    if a is None:
      assert b is None, variable.path
      continue
    a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
    if "position_embeddings" in variable.path:
      # Positions past the cut get no gradient either way (padding).
      a, b = a[:12], b[:12]
    np.testing.assert_allclose(b, a, atol=1e-6, err_msg=variable.path)


def test_length_grouped_order_is_hugging_faces():
  rng = np.random.default_rng(0)
  lengths = rng.integers(3, 120, size=1000)
  order = padding.length_grouped_order(lengths, 8, seed=7,
                                       num_examples_needed=2500)
  assert len(order) == 3000  # whole epochs
  epochs = order.reshape(3, 1000)
  for epoch in epochs:  # each epoch a permutation
    np.testing.assert_array_equal(np.sort(epoch), np.arange(1000))
  assert not (epochs[0] == epochs[1]).all()  # reshuffled each epoch
  # The first batch holds the longest example; within a mega-batch of
  # 50 * 8 (after that first swap) lengths fall.
  assert lengths[epochs[0][:8]].max() == lengths.max()
  mega = lengths[epochs[0][400:800]]
  assert (np.diff(mega) <= 0).all()
  # Grouped batches pad less than random ones.
  def padded(o):
    return sum(lengths[o[i:i + 8]].max() for i in range(0, len(o), 8))
  assert padded(epochs[0]) < 0.7 * padded(rng.permutation(1000))
  # Deterministic for a seed (a resumed run skips to the same place).
  np.testing.assert_array_equal(
      order, padding.length_grouped_order(lengths, 8, 7, 2500))


def test_cut_batch_cuts_documents_windows_and_lengths():
  """[B, M, T] documents of windows: M cut to the most windows a document
  has, T to the longest window (rounded up)."""
  windows = _inputs(lengths=[5, 9, 3, 2])                         # [4, T]
  documents = {k: np.zeros((2, 4, SEQ), np.int32) for k in windows}
  for k, v in windows.items():
    documents[k][0, :3] = v[:3]       # 3 windows, the longest 9 pieces
    documents[k][1, :1] = v[3:]       # 1 window
  labels = np.array([1, 0], np.int32)
  cut, cut_labels = padding.cut_batch(
      tf.nest.map_structure(tf.constant, documents), tf.constant(labels),
      multiple=4)
  for key, value in documents.items():
    np.testing.assert_array_equal(cut[key].numpy(), value[:, :3, :12])
  np.testing.assert_array_equal(cut_labels.numpy(), labels)
