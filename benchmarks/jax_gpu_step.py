"""The model on the JAX backend on a GPU: a bfloat16 training step and its MFU.

Runs official_bert's BertPretrainer (the Keras model code, no TensorFlow) with
KERAS_BACKEND=jax on whatever accelerator JAX finds, and checks three things:

1. **Same numbers as the CPU.** One float32 forward pass and the gradient of
   the pretraining loss on the accelerator, at `highest` matmul precision,
   against the same on JAX's CPU device (same weights, same batch): largest
   difference of the logits and of the gradients, relative to their largest
   value.
2. **It trains in bfloat16.** Under the `mixed_bfloat16` policy (bfloat16
   matmuls, float32 weights), a jit-compiled step (loss, gradients, clipping
   to global norm 1.0, Keras AdamW applied statelessly) repeated on one batch
   lowers the loss (memorisation: a step that is broken does not).
3. **How fast.** Steps per second after compilation and the model FLOP
   utilisation (MFU): the matmul FLOPs of a training step (3x the forward's,
   counted from the shapes: every layer's projections and feed-forward over
   all tokens, attention's two batched products, the last layer run at the
   masked positions and [CLS] only, as BertPretrainer does, and the masked-LM
   head), divided by the step time and the chip's dense bf16 peak. XLA's own
   count of the compiled step's FLOPs is printed beside it.

    KERAS_BACKEND=jax python -m benchmarks.jax_gpu_step \
        --config=base --batch_size=64 --seq_length=128 --steps=50

Prints one JSON object as its last line (and writes it to --out if given).
"""

import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from official_bert import cli  # pylint: disable=g-import-not-at-top

flags.DEFINE_enum("config", "base", ["tiny", "mini", "base", "large"],
                  "Model size: tiny (L2 H64), mini (L4 H256), base (L12 "
                  "H768), large (L24 H1024); vocabulary 30522.")
flags.DEFINE_integer("batch_size", 64, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_integer("steps", 50, "Timed steps (after 3 untimed ones).")
flags.DEFINE_integer("memorise_steps", 30, "Steps on one batch for check 2.")
flags.DEFINE_float("peak_tflops", None, "The chip's dense bf16 peak in "
                   "TFLOP/s (default: 989 for H100/H200, else unknown).")
flags.DEFINE_string("out", None, "Also write the JSON result here.")
FLAGS = flags.FLAGS
flags.register_multi_flags_validator(
    ["predictions", "seq_length"],
    lambda f: 0 < f["predictions"] < f["seq_length"] // 2,
    "--predictions must be positive and below --seq_length / 2 (the "
    "shortest synthetic row's length); lower it.")
for _name in ("batch_size", "memorise_steps"):
  flags.register_validator(_name, lambda v: v > 0,
                           f"--{_name} must be positive.")
flags.register_validator("steps", lambda v: v >= 0,
                         "--steps must be 0 or more (0: only the float32 "
                         "check).")

SIZES = {"tiny": (2, 64, 2, 256), "mini": (4, 256, 4, 1024),
         "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
VOCAB = 30522


def _config(size):
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  layers, hidden, heads, intermediate = SIZES[size]
  return configs.BertConfig(
      vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
      num_attention_heads=heads, intermediate_size=intermediate,
      max_position_embeddings=512)


def _batch(rng, batch, seq, predictions):
  lengths = rng.integers(seq // 2, seq + 1, batch)
  mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
  positions = np.stack([np.sort(rng.choice(np.arange(1, n), predictions,
                                           replace=False)) for n in lengths])
  return ({"input_word_ids": (rng.integers(999, VOCAB, (batch, seq))
                              * mask).astype(np.int32),
           "input_mask": mask,
           "input_type_ids": (np.arange(seq)[None] >= lengths[:, None] // 2
                              ).astype(np.int32) * mask,
           "masked_lm_positions": positions.astype(np.int32)},
          {"masked_lm_ids": rng.integers(999, VOCAB, (batch, predictions)
                                         ).astype(np.int32),
           "masked_lm_weights": np.ones((batch, predictions), np.float32),
           "next_sentence_labels": rng.integers(0, 2, batch).astype(np.int32)})


def model_flops(size, batch, seq, predictions):
  """Matmul FLOPs of one training step (forward x 3), counted from shapes."""
  layers, h, _, inter = SIZES[size]
  out = predictions + 1  # the last layer's positions: masked ones and [CLS]

  def layer(queries):  # K/V over all `seq` tokens, the rest over `queries`
    projections = 2 * h * h * (2 * seq + 2 * queries)  # K, V; Q, output
    attention = 2 * 2 * queries * seq * h  # QK^T and AV
    feed_forward = 2 * 2 * queries * h * inter
    return projections + attention + feed_forward

  forward = (layers - 1) * layer(seq) + layer(out)
  forward += 2 * predictions * (h * h + h * VOCAB)  # masked-LM transform, logits
  forward += 2 * (h * h + 2 * h)  # pooler, next-sentence
  return 3 * batch * forward


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top

  assert keras.backend.backend() == "jax", keras.backend.backend()
  device = jax.devices()[0]
  result = {"backend": keras.backend.backend(), "device": device.device_kind,
            "platform": device.platform, "jax": jax.__version__,
            "keras": keras.__version__, "config": FLAGS.config,
            "batch_size": FLAGS.batch_size, "seq_length": FLAGS.seq_length}
  print(f"JAX {jax.__version__} on {device.device_kind} ({device.platform}), "
        f"Keras {keras.__version__}", flush=True)
  rng = np.random.default_rng(0)
  config = _config(FLAGS.config)

  # 1. float32, accelerator vs CPU, same weights and batch.
  keras.config.set_dtype_policy("float32")
  keras.utils.set_random_seed(1)
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  inputs, labels = _batch(rng, 8, FLAGS.seq_length, FLAGS.predictions)
  trainable = [np.asarray(v.value) for v in model.trainable_variables]
  non_trainable = [np.asarray(v.value) for v in model.non_trainable_variables]

  def loss_fn(train_vars, fixed_vars, x, y, training):
    outputs, fixed_vars = model.stateless_call(train_vars, fixed_vars, x,
                                               training=training)
    return pretrainer_lib.pretraining_losses(y, outputs)["loss"], (
        outputs, fixed_vars)

  def forward_and_grads(train_vars, fixed_vars, x, y):
    (loss, (outputs, _)), grads = jax.value_and_grad(
        loss_fn, has_aux=True)(train_vars, fixed_vars, x, y, False)
    return loss, outputs["mlm_logits"], grads

  got = {}
  for name, dev in (("accelerator", device),
                    ("cpu", jax.local_devices(backend="cpu")[0])):
    with jax.default_matmul_precision("highest"):
      args = jax.device_put((trainable, non_trainable, inputs, labels), dev)
      loss, logits, grads = jax.jit(forward_and_grads)(*args)
      got[name] = (float(loss), np.asarray(logits),
                   [np.asarray(g) for g in grads])
  (loss_a, logits_a, grads_a), (loss_c, logits_c, grads_c) = (
      got["accelerator"], got["cpu"])
  result["fp32_loss_accelerator"], result["fp32_loss_cpu"] = loss_a, loss_c
  result["fp32_logits_max_rel_diff"] = float(
      np.abs(logits_a - logits_c).max() / np.abs(logits_c).max())
  # Relative to the largest gradient of all: a weight whose gradient is
  # ~0 (a padding embedding row, a bias far from the loss) would make a
  # per-tensor ratio meaningless.
  largest = max(np.abs(c).max() for c in grads_c)
  result["fp32_grads_max_rel_diff"] = float(max(
      np.abs(a - c).max() for a, c in zip(grads_a, grads_c)) / largest)
  result["fp32_grads_worst_tensor_rel_l2"] = float(max(
      np.linalg.norm(a - c) / max(np.linalg.norm(c), 1e-30)
      for a, c in zip(grads_a, grads_c) if np.linalg.norm(c) > 1e-6 * largest))
  print(f"float32 on the accelerator vs the CPU: loss {loss_a:.6f} vs "
        f"{loss_c:.6f}; logits differ by {result['fp32_logits_max_rel_diff']:.2e}"
        f", gradients by {result['fp32_grads_max_rel_diff']:.2e} of the largest "
        f"(worst tensor's relative L2 difference "
        f"{result['fp32_grads_worst_tensor_rel_l2']:.2e})", flush=True)
  if FLAGS.steps == 0:
    print(json.dumps(result))
    return
  del model, got

  # 2 and 3. mixed_bfloat16 training steps.
  keras.config.set_dtype_policy("mixed_bfloat16")
  keras.utils.set_random_seed(1)
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01,
                                     epsilon=1e-6, global_clipnorm=1.0)
  optimizer.build(model.trainable_variables)
  state = ([v.value for v in model.trainable_variables],
           [v.value for v in model.non_trainable_variables],
           [v.value for v in optimizer.variables])
  compute_dtypes = sorted({str(layer.compute_dtype)
                           for layer in model._flatten_layers()})  # pylint: disable=protected-access

  def train_step(state, x, y):
    train_vars, fixed_vars, opt_vars = state
    (loss, (_, fixed_vars)), grads = jax.value_and_grad(
        loss_fn, has_aux=True)(train_vars, fixed_vars, x, y, True)
    train_vars, opt_vars = optimizer.stateless_apply(opt_vars, grads,
                                                     train_vars)
    return (train_vars, fixed_vars, opt_vars), loss

  step = jax.jit(train_step, donate_argnums=0)
  batch = _batch(rng, FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions)
  batch = jax.device_put(batch, device)
  start = time.perf_counter()
  compiled = step.lower(state, *batch).compile()
  result["compile_s"] = time.perf_counter() - start
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  result["xla_flops_per_step"] = float(cost.get("flops", float("nan")))
  losses = []
  for _ in range(FLAGS.memorise_steps):
    state, loss = compiled(state, *batch)
    losses.append(float(loss))
  result["bf16_first_losses"] = losses[:3]
  result["bf16_last_losses"] = losses[-3:]
  result["compute_dtypes"] = compute_dtypes
  print(f"mixed_bfloat16 ({', '.join(compute_dtypes)} compute): loss "
        f"{losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps on one "
        "batch", flush=True)

  batches = [jax.device_put(_batch(rng, FLAGS.batch_size, FLAGS.seq_length,
                                   FLAGS.predictions), device)
             for _ in range(4)]
  for i in range(3):
    state, loss = compiled(state, *batches[i % 4])
  jax.block_until_ready(state)
  start = time.perf_counter()
  for i in range(FLAGS.steps):
    state, loss = compiled(state, *batches[i % 4])
  jax.block_until_ready((state, loss))
  seconds = (time.perf_counter() - start) / FLAGS.steps
  flops = model_flops(FLAGS.config, FLAGS.batch_size, FLAGS.seq_length,
                      FLAGS.predictions)
  peak = FLAGS.peak_tflops
  if peak is None and any(name in device.device_kind
                          for name in ("H100", "H200")):
    peak = 989.4  # dense bf16, SXM
  result.update(step_ms=seconds * 1e3,
                sequences_per_s=FLAGS.batch_size / seconds,
                model_tflops_per_step=flops / 1e12,
                achieved_tflops=flops / seconds / 1e12, peak_tflops=peak,
                mfu=(flops / seconds / 1e12 / peak) if peak else None,
                params=int(model.count_params()))
  print(f"{FLAGS.config} ({result['params']:,} parameters), batch "
        f"{FLAGS.batch_size} x {FLAGS.seq_length}: {seconds * 1e3:.2f} ms a "
        f"step, {result['sequences_per_s']:.0f} sequences/s, "
        f"{result['achieved_tflops']:.1f} model TFLOP/s"
        + (f", MFU {result['mfu']:.1%} of {peak} TFLOP/s" if peak else "")
        + f" (XLA counts {result['xla_flops_per_step'] / 1e12:.3f} TFLOP a "
        f"step, the shapes {flops / 1e12:.3f})", flush=True)
  text = json.dumps(result)
  if FLAGS.out:
    with open(FLAGS.out, "w") as f:
      f.write(text + "\n")
  print(text)


if __name__ == "__main__":
  cli.run(main)  # a bad flag: one sentence, the last line
