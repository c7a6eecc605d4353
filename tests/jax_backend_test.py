"""The model on the JAX backend: the "any Keras 3 backend" claim, run.

The parent (TensorFlow, as conftest.py pins) builds the tiny BertPretrainer,
saves its weights (.weights.h5), the inputs, and its outputs and gradients.
One child process with KERAS_BACKEND=jax (this file run as a program; one
process for every case, as JAX's import is not free) loads those weights into
the same model built with kernels="fast" and with kernels="keras", and writes
its outputs, the gradient of the pretraining loss (jax.grad, inference mode),
and what one jit-compiled SGD step with dropout did to every weight, and the
encoder's padding-removed path (`remove_padding=True`, serving's; run
eagerly: its token count is data-dependent, which jax.jit cannot trace). The
parent compares: the outputs within 1e-5, the gradients within 1e-5 of the
largest, every weight changed by the step, the packed path's
sequence_output equal to the padded one at the tokens and zero elsewhere.
It also runs four steps of the original's AdamWeightDecay (its Python
`update_step`: the fused kernels are TensorFlow's), which must match the
transcription of google-research/bert's update.
"""

import json
import os
import sys

import numpy as np
import pytest

from tests import testing

POSITIONS = np.array([[1, 2, 6, 0], [0, 3, 4, 0], [5, 1, 2, 3]], np.int32)
KERNELS = ("fast", "keras")
_FAST_COMPILE = ("--xla_backend_optimization_level=0 "
                 "--xla_llvm_disable_expensive_passes=true")


ADAMW_STEPS = 4


def _data():
  rng = np.random.default_rng(7)
  adamw = {"adamw/kernel": rng.normal(size=(3, 5)),
           "adamw/bias": rng.normal(size=(5,)),
           "adamw/kernel_grads": rng.normal(size=(ADAMW_STEPS, 3, 5)) * 1e-2,
           "adamw/bias_grads": rng.normal(size=(ADAMW_STEPS, 5)) * 1e-3}
  return {**testing.random_inputs(), "masked_lm_positions": POSITIONS,
          **{k: v.astype(np.float32) for k, v in adamw.items()},
          "masked_lm_ids": rng.integers(0, testing.VOCAB_SIZE, (3, 4)),
          "masked_lm_weights": np.array([[1, 1, 1, 0], [1, 1, 1, 0],
                                         [1, 1, 1, 1]], np.float32),
          "next_sentence_labels": np.array([0, 1, 1], np.int32)}


def _split(data):
  from official_bert.modeling import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top
  inputs = {k: data[k] for k in pretrainer_lib.PRETRAINING_INPUT_NAMES}
  labels = {k: data[k] for k in ("masked_lm_ids", "masked_lm_weights",
                                 "next_sentence_labels")}
  encoder_inputs = {k: data[k] for k in encoder_lib.INPUT_NAMES}
  return inputs, labels, encoder_inputs


def _outputs(model, inputs, encoder_inputs):
  encoded = model.encoder(encoder_inputs)
  predicted = model(inputs)
  return {"sequence_output": encoded["sequence_output"],
          "pooled_output": encoded["pooled_output"],
          "mlm_logits": predicted["mlm_logits"],
          "next_sentence_logits": predicted["next_sentence_logits"]}


@pytest.mark.slow
def test_encoder_and_pretrainer_on_jax_match_tensorflow(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top

  data = _data()
  inputs, labels, encoder_inputs = _split(data)
  config = testing.tiny_config()
  config.to_json_file(str(tmp_path / "bert_config.json"))
  model = pretrainer_lib.BertPretrainer.from_bert_config(config,
                                                         kernels="keras")
  model.save_weights(str(tmp_path / "model.weights.h5"))
  np.savez(tmp_path / "data.npz", **data)
  want = {k: np.asarray(v) for k, v in
          _outputs(model, inputs, encoder_inputs).items()}
  with tf.GradientTape() as tape:
    loss = pretrainer_lib.pretraining_losses(labels, model(inputs))["loss"]
  want_grads = [tf.convert_to_tensor(g).numpy()
                for g in tape.gradient(loss, model.trainable_variables)]

  proc = testing.run_cli(["-m", "tests.jax_backend_test", str(tmp_path)],
                         env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                              # Compiles in half the time; a test of values.
                              "XLA_FLAGS": _FAST_COMPILE},
                         timeout=600)
  with open(tmp_path / "jax_summary.json") as f:
    summary = json.load(f)
  assert summary["backend"] == "jax", proc.stdout
  assert summary["auto"] == "keras"  # JAX compiles: "auto" is Keras's kernels
  assert not summary["tensorflow_imported"]
  got = np.load(tmp_path / "jax_results.npz")
  names = [v.path for v in model.trainable_variables]
  for kernels in KERNELS:
    assert summary[kernels]["kernels_of_every_layer"] == [kernels]
    for key, value in want.items():
      np.testing.assert_allclose(got[f"{kernels}/{key}"], value, rtol=1e-5,
                                 atol=1e-5, err_msg=f"{kernels} {key}")
    np.testing.assert_allclose(got[f"{kernels}/loss"], loss, rtol=1e-5)
    for i, (grad, name) in enumerate(zip(want_grads, names)):
      np.testing.assert_allclose(
          got[f"{kernels}/grad_{i}"], grad, rtol=1e-5,
          atol=1e-5 * max(np.abs(grad).max(), 1e-3),
          err_msg=f"{kernels} {name}")
    # One compiled training step (dropout on) changed every weight.
    unchanged = [n for n, c in zip(names, summary[kernels]["changed"])
                 if not c]
    assert not unchanged, (kernels, unchanged)
    assert len(summary[kernels]["changed"]) == len(names) == 46
    assert np.isfinite(summary[kernels]["train_loss"])
    mask = encoder_inputs["input_mask"][..., None].astype(bool)
    assert not mask.all()  # rows of different lengths: there is padding
    np.testing.assert_allclose(
        got[f"{kernels}/packed_sequence_output"],
        np.where(mask, want["sequence_output"], 0.0), rtol=1e-5, atol=1e-5,
        err_msg=f"{kernels} remove_padding")
    np.testing.assert_allclose(got[f"{kernels}/packed_pooled_output"],
                               want["pooled_output"], rtol=1e-5, atol=1e-5)
  # Packed rows and fused attention on JAX (sequence_packing_test's
  # batches): each sequence's outputs, the loss and every gradient equal the
  # dense padded path's within 1e-5.
  from tests import sequence_packing_test  # pylint: disable=g-import-not-at-top
  _, _, _, _, where = sequence_packing_test.packed_and_dense()
  base = "packing/dense/dense"
  num_grads = len([k for k in got.files if k.startswith(base + "/grad_")])
  assert num_grads > 30
  for attention, rows in (("dense", "packed"), ("fused", "packed")):
    key = f"packing/{attention}/{rows}"
    for name, slots in (("sequence_output", None), ("mlm_logits", "slots")):
      for want_part, got_part in sequence_packing_test.per_sequence(
          got[f"{base}/{name}"], got[f"{key}/{name}"], where, None, slots):
        np.testing.assert_allclose(got_part, want_part, atol=1e-5,
                                   err_msg=f"{key} {name}")
    np.testing.assert_allclose(got[f"{key}/loss"], got[f"{base}/loss"],
                               atol=1e-5, err_msg=key)
    for i in range(num_grads):
      want_grad = got[f"{base}/grad_{i}"]
      np.testing.assert_allclose(
          got[f"{key}/grad_{i}"], want_grad,
          atol=1e-5 * max(np.abs(want_grad).max(), 1e-3),
          err_msg=f"{key} gradient {i}")
  # The original's optimizer on JAX: its `update_step`, no TensorFlow.
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  assert summary["adamw_fused_kernels"] is False
  names = ("kernel", "bias")
  schedule = optimization.WarmupLinearDecay(1e-2, ADAMW_STEPS, 1)
  want_adamw = testing.original_adam_weight_decay(
      {n: data[f"adamw/{n}"] for n in names},
      [{n: data[f"adamw/{n}_grads"][s] for n in names}
       for s in range(ADAMW_STEPS)],
      [float(schedule(s)) for s in range(ADAMW_STEPS)], decayed={"kernel"})
  for step, want_step in enumerate(want_adamw):
    for n in names:
      np.testing.assert_allclose(got[f"adamw/{n}_{step}"], want_step[n],
                                 rtol=2e-6, atol=1e-7,
                                 err_msg=f"{n} after step {step + 1}")


def _child(workdir):
  """Runs under KERAS_BACKEND=jax: see the module docstring."""
  import jax  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import kernels as kernels_lib  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top

  data = dict(np.load(os.path.join(workdir, "data.npz")))
  inputs, labels, encoder_inputs = _split(data)
  config = configs.BertConfig.from_json_file(
      os.path.join(workdir, "bert_config.json"))
  summary = {"backend": keras.backend.backend(),
             "auto": kernels_lib.resolve("auto")}
  results = {}
  for kernels in KERNELS:
    model = pretrainer_lib.BertPretrainer.from_bert_config(config,
                                                           kernels=kernels)
    model.load_weights(os.path.join(workdir, "model.weights.h5"))
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    encoder = model.encoder
    encoder_variables = ([v.value for v in encoder.trainable_variables],
                         [v.value for v in encoder.non_trainable_variables])

    def loss_fn(trainable, non_trainable, training):
      outputs, non_trainable = model.stateless_call(
          trainable, non_trainable, inputs, training=training)
      loss = pretrainer_lib.pretraining_losses(labels, outputs)["loss"]
      return loss, outputs

    # Everything under jax.jit: JAX's eager mode compiles op by op.
    @jax.jit
    def evaluate(trainable, non_trainable, encoder_variables):
      encoded, _ = encoder.stateless_call(*encoder_variables, encoder_inputs)
      (loss, outputs), grads = jax.value_and_grad(
          lambda t: loss_fn(t, non_trainable, False), has_aux=True)(trainable)
      return encoded, outputs, loss, grads

    @jax.jit
    def train_step(trainable, non_trainable):
      (loss, _), grads = jax.value_and_grad(
          lambda t: loss_fn(t, non_trainable, True), has_aux=True)(trainable)
      return [w - 0.1 * g for w, g in zip(trainable, grads)], loss

    encoded, outputs, loss, grads = evaluate(trainable, non_trainable,
                                             encoder_variables)
    for key, value in {**encoded, **outputs}.items():
      if key in ("sequence_output", "pooled_output", "mlm_logits",
                 "next_sentence_logits"):
        results[f"{kernels}/{key}"] = np.asarray(value)
    # The encoder's sequence_output, not the pretrainer's (at the positions).
    results[f"{kernels}/sequence_output"] = np.asarray(
        encoded["sequence_output"])
    results[f"{kernels}/pooled_output"] = np.asarray(encoded["pooled_output"])
    results[f"{kernels}/loss"] = np.asarray(loss)
    packed, _ = encoder.stateless_call(*encoder_variables, encoder_inputs,
                                       remove_padding=True)
    for key in ("sequence_output", "pooled_output"):
      results[f"{kernels}/packed_{key}"] = np.asarray(packed[key])
    for i, grad in enumerate(grads):
      results[f"{kernels}/grad_{i}"] = np.asarray(grad)
    updated, train_loss = train_step(trainable, non_trainable)
    summary[kernels] = {
        "changed": [bool(np.any(np.asarray(a) != np.asarray(b)))
                    for a, b in zip(updated, trainable)],
        "train_loss": float(train_loss),
        "kernels_of_every_layer": sorted({
            layer.kernels for layer in model._flatten_layers()  # pylint: disable=protected-access
            if hasattr(layer, "kernels")})}
    print(f"{kernels}: done", flush=True)
  _packed_rows_on_jax(config, results)
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  dense = keras.layers.Dense(5)
  dense.build((None, 3))
  dense.kernel.assign(data["adamw/kernel"])
  dense.bias.assign(data["adamw/bias"])
  optimizer = optimization.create_optimizer("adamw", 1e-2, ADAMW_STEPS, 1)
  summary["adamw_fused_kernels"] = optimizer.fused_kernels()
  for step in range(ADAMW_STEPS):
    optimizer.apply([data["adamw/kernel_grads"][step],
                     data["adamw/bias_grads"][step]],
                    [dense.kernel, dense.bias])
    results[f"adamw/kernel_{step}"] = np.asarray(dense.kernel)
    results[f"adamw/bias_{step}"] = np.asarray(dense.bias)
  # (keras.utils.set_random_seed would import TensorFlow: not called.)
  summary["tensorflow_imported"] = "tensorflow" in sys.modules
  np.savez(os.path.join(workdir, "jax_results.npz"), **results)
  with open(os.path.join(workdir, "jax_summary.json"), "w") as f:
    json.dump(summary, f)


def _packed_rows_on_jax(config, results):
  """sequence_packing_test's batches on JAX, under jax.jit (static shapes):
  dense rows, packed rows, and packed rows with fused attention: each one's
  sequence_output, masked-LM logits, loss and gradients, as
  `packing/{attention}/{rows}/...` results."""
  import jax  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top
  from tests import sequence_packing_test  # pylint: disable=g-import-not-at-top
  dense_in, dense_labels, packed_in, packed_labels, _ = (
      sequence_packing_test.packed_and_dense())
  plain = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=False)
  fused = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=False, fused_attention=True)
  fused.set_weights(plain.get_weights())
  for attention, model, rows, inputs, labels in (
      ("dense", plain, "dense", dense_in, dense_labels),
      ("dense", plain, "packed", packed_in, packed_labels),
      ("fused", fused, "packed", packed_in, packed_labels)):
    encoder_inputs = {k: v for k, v in inputs.items()
                      if k != "masked_lm_positions"}
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    encoder_variables = (
        [v.value for v in model.encoder.trainable_variables],
        [v.value for v in model.encoder.non_trainable_variables])

    @jax.jit
    def run(trainable, non_trainable, encoder_variables, model=model,
            inputs=inputs, labels=labels, encoder_inputs=encoder_inputs):
      def loss_fn(weights):
        outputs, _ = model.stateless_call(weights, non_trainable, inputs,
                                          training=False)
        return pretrainer_lib.pretraining_losses(labels, outputs)[
            "loss"], outputs
      (loss, outputs), grads = jax.value_and_grad(
          loss_fn, has_aux=True)(trainable)
      encoded, _ = model.encoder.stateless_call(*encoder_variables,
                                                encoder_inputs)
      return encoded["sequence_output"], outputs["mlm_logits"], loss, grads

    sequence, logits, loss, grads = run(trainable, non_trainable,
                                        encoder_variables)
    key = f"packing/{attention}/{rows}"
    results[f"{key}/sequence_output"] = np.asarray(sequence)
    results[f"{key}/mlm_logits"] = np.asarray(logits)
    results[f"{key}/loss"] = np.asarray(loss)
    for i, grad in enumerate(grads):
      results[f"{key}/grad_{i}"] = np.asarray(grad)
  print("packed rows: done", flush=True)


if __name__ == "__main__":
  _child(sys.argv[1])
