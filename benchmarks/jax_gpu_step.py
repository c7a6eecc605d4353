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

With `--lengths=benchmarks/data/record_lengths.json` the sequences have the
lengths of our records (a histogram written from the shared corpus by
`benchmarks/packing_benchmark.py --lengths_out`), else uniform from T/2 to
T. `--pack` packs them into rows of several sequences
(data/row_packing.py; `input_sequence_ids`: a block-diagonal mask, no
next-sentence head), `--fused_attention` runs attention as one fused op
(`keras.ops.dot_product_attention`: cuDNN's flash attention on an NVIDIA
GPU; the compiled step's custom calls are listed), and MFU is also counted
over the real tokens only (each sequence's matmuls at its own length,
attention within itself). `--peer=hf` times Hugging Face's
`BertForPreTraining` (SDPA attention, bfloat16 autocast, `torch.compile`)
with the same config, batch and lengths, its sequences padded to T.
`--fused_attention` also checks the fused forward against the dense one in
bfloat16. `--out_dir` gets the result so far as result.json after every
measurement (a run cut short keeps what it measured).

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
flags.DEFINE_string("out_dir", None, "Write result.json here after every "
                    "measurement.")
flags.DEFINE_string("lengths", None, "A JSON histogram of sequence lengths "
                    "({\"128\": {\"length\": count, ...}, ...}); default "
                    "uniform from T/2 to T.")
flags.DEFINE_bool("pack", False, "Pack the sequences into rows "
                  "(input_sequence_ids), masked-LM only.")
flags.DEFINE_bool("fused_attention", False, "Attention as one fused op.")
flags.DEFINE_enum("peer", "none", ["none", "hf"], "Also time Hugging Face's "
                  "BertForPreTraining (torch, SDPA, bf16 autocast, "
                  "torch.compile) on the same batch.")
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


def _sample_lengths(rng, count, seq):
  """`count` sequence lengths: drawn from --lengths' histogram for `seq`, or
  uniform from seq/2 to seq."""
  if not FLAGS.lengths:
    return rng.integers(seq // 2, seq + 1, count)
  with open(FLAGS.lengths) as f:
    histogram = json.load(f)[str(seq)]
  values = np.array([int(k) for k in histogram])
  weights = np.array([histogram[k] for k in histogram], np.float64)
  return rng.choice(values, count, p=weights / weights.sum())


def _batch(rng, batch, seq, predictions, lengths=None):
  """One batch of `batch` rows of `seq` positions, one sequence each (or
  with FLAGS.pack several: see `_packed_batch`)."""
  if lengths is None:
    lengths = _sample_lengths(rng, batch, seq)
  lengths = np.maximum(lengths, 2 * predictions + 2)
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


def _per_sequence_predictions(length, predictions):
  return int(min(predictions, max(1, round(length * 0.15))))


def _packed_batch(rng, batch, seq, predictions):
  """`batch` packed rows (data/row_packing.py) of sequences drawn as
  `_sample_lengths`, each with its own share of masks; returns (inputs,
  labels, the sequences' lengths)."""
  from official_bert.data import row_packing  # pylint: disable=g-import-not-at-top
  q = row_packing.default_row_predictions(predictions,
                                          row_packing.MAX_SEQUENCES_PER_ROW)
  rows = None
  count = batch * 2
  while rows is None or len(rows[0]["input_mask"]) < batch:
    count *= 2
    lengths = _sample_lengths(rng, count, seq)
    lengths = np.maximum(lengths, 4)
    inputs, labels = _batch(rng, count, seq, predictions, lengths=lengths)
    weights = np.zeros_like(labels["masked_lm_weights"])
    for i, length in enumerate(inputs["input_mask"].sum(1)):
      weights[i, :_per_sequence_predictions(length, predictions)] = 1.0
    labels["masked_lm_weights"] = weights
    rows = row_packing.pack(inputs, labels, seq, q)
  packed, packed_labels = ({k: v[:batch] for k, v in part.items()}
                           for part in rows)
  # The lengths of the sequences in the rows kept.
  ids = packed["input_sequence_ids"]
  kept = [int((ids[r] == k).sum()) for r in range(batch)
          for k in range(1, ids[r].max() + 1)]
  return packed, packed_labels, np.array(kept)


def token_flops(size, lengths, predictions):
  """Matmul FLOPs of one training step counted over real tokens only: each
  sequence's layers at its own length (attention within itself), its own
  masked positions (as `_per_sequence_predictions`)."""
  layers, h, _, inter = SIZES[size]
  total = 0
  for length in lengths:
    length = int(length)
    p = _per_sequence_predictions(length, predictions)
    out = p + 1

    def layer(queries, keys):
      return (2 * h * h * (2 * keys + 2 * queries) + 4 * queries * keys * h
              + 4 * queries * h * inter)

    total += (layers - 1) * layer(length, length) + layer(out, length)
    total += 2 * p * (h * h + h * VOCAB)
  return 3 * total


def _custom_calls(hlo_text):
  """The custom-call targets of a compiled module's HLO (e.g. cuDNN's fused
  attention, `__cudnn$fmha...`)."""
  import re  # pylint: disable=g-import-not-at-top
  return sorted(set(re.findall(r'custom_call_target="([^"]+)"', hlo_text)))


def _save(result):
  if FLAGS.out_dir:
    os.makedirs(FLAGS.out_dir, exist_ok=True)
    path = os.path.join(FLAGS.out_dir, "result.json")
    with open(path + ".tmp", "w") as f:
      json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)


def _hf_peer(config, inputs, labels, steps):
  """Hugging Face's BertForPreTraining on the same batch: SDPA attention,
  bfloat16 autocast, torch.compile, AdamW; sequences/s after warm-up."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  device = "cuda" if torch.cuda.is_available() else "cpu"
  hf_config = transformers.BertConfig(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_hidden_layers=config.num_hidden_layers,
      num_attention_heads=config.num_attention_heads,
      intermediate_size=config.intermediate_size,
      max_position_embeddings=config.max_position_embeddings,
      attn_implementation="sdpa")
  model = transformers.BertForPreTraining(hf_config).to(device)
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
  ids = torch.tensor(inputs["input_word_ids"], dtype=torch.long,
                     device=device)
  mask = torch.tensor(inputs["input_mask"], dtype=torch.long, device=device)
  types = torch.tensor(inputs["input_type_ids"], dtype=torch.long,
                       device=device)
  mlm_labels = torch.full_like(ids, -100)
  positions = torch.tensor(inputs["masked_lm_positions"], dtype=torch.long,
                           device=device)
  mlm_labels.scatter_(1, positions, torch.tensor(
      labels["masked_lm_ids"], dtype=torch.long, device=device))
  nsp = torch.tensor(labels["next_sentence_labels"], dtype=torch.long,
                     device=device)

  def step():
    with torch.autocast(device, dtype=torch.bfloat16):
      loss = model(input_ids=ids, attention_mask=mask, token_type_ids=types,
                   labels=mlm_labels, next_sentence_label=nsp).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss

  compiled = torch.compile(step)
  for _ in range(3):
    compiled()
  if device == "cuda":
    torch.cuda.synchronize()
  start = time.perf_counter()
  for _ in range(steps):
    compiled()
  if device == "cuda":
    torch.cuda.synchronize()
  seconds = (time.perf_counter() - start) / max(steps, 1)
  return {"hf_step_ms": seconds * 1e3,
          "hf_sequences_per_s": len(inputs["input_mask"]) / seconds,
          "hf_device": device, "torch": torch.__version__}


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


def _fused_vs_dense(model, config, rng):
  """The largest difference of the masked-LM logits, fused attention against
  the dense formula, same weights and batch, in the current (bfloat16)
  policy, relative to the largest logit. Each forward is jit-compiled, as
  the training step is (run eagerly, JAX compiles every op on its first
  call: ~10 s on a CPU, against ~1 s for the two compiled forwards)."""
  import jax  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top
  dense = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=model.use_next_sentence)
  dense.set_weights(model.get_weights())
  if FLAGS.pack:
    inputs, _, _ = _packed_batch(rng, 8, FLAGS.seq_length, FLAGS.predictions)
  else:
    inputs, _ = _batch(rng, 8, FLAGS.seq_length, FLAGS.predictions)

  def logits(m):
    forward = jax.jit(lambda train_vars, fixed_vars, x: m.stateless_call(
        train_vars, fixed_vars, x)[0]["mlm_logits"])
    return np.asarray(forward([v.value for v in m.trainable_variables],
                              [v.value for v in m.non_trainable_variables],
                              inputs), np.float32)
  got, want = logits(model), logits(dense)
  return float(np.abs(got - want).max() / np.abs(want).max())


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

  if device.platform == "cpu":  # no accelerator: nothing to compare
    result["fp32_check"] = "skipped: JAX found no accelerator"
    print("float32 check skipped: JAX found no accelerator", flush=True)
  got = {}
  pairs = () if device.platform == "cpu" else (
      ("accelerator", device), ("cpu", jax.local_devices(backend="cpu")[0]))
  for name, dev in pairs:
    with jax.default_matmul_precision("highest"):
      args = jax.device_put((trainable, non_trainable, inputs, labels), dev)
      loss, logits, grads = jax.jit(forward_and_grads)(*args)
      got[name] = (float(loss), np.asarray(logits),
                   [np.asarray(g) for g in grads])
  if got:
    _compare(result, got)
  _save(result)
  if FLAGS.steps == 0:
    print(json.dumps(result))
    return
  del model, got
  _train_and_time(result, config, device, rng)


def _compare(result, got):
  """Check 1's figures: float32 on the accelerator against the CPU."""
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


def _train_and_time(result, config, device, rng):
  """Checks 2 and 3: mixed_bfloat16 training steps, their speed and MFU
  (and the peer's)."""
  import jax  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer as pretrainer_lib  # pylint: disable=g-import-not-at-top

  def loss_fn(train_vars, fixed_vars, x, y, training):
    outputs, fixed_vars = model.stateless_call(train_vars, fixed_vars, x,
                                               training=training)
    return pretrainer_lib.pretraining_losses(y, outputs)["loss"], (
        outputs, fixed_vars)

  keras.config.set_dtype_policy("mixed_bfloat16")
  keras.utils.set_random_seed(1)
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=not FLAGS.pack,
      fused_attention=FLAGS.fused_attention)
  result.update(pack=FLAGS.pack, fused_attention=FLAGS.fused_attention,
                lengths=FLAGS.lengths or "uniform T/2..T")
  if FLAGS.fused_attention:
    result["fused_vs_dense_bf16_max_rel_diff"] = _fused_vs_dense(
        model, config, rng)
    print("fused against dense attention, bfloat16 forward: largest "
          "difference of the logits "
          f"{result['fused_vs_dense_bf16_max_rel_diff']:.2e} of the largest",
          flush=True)
    _save(result)
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

  def make_batch():
    if FLAGS.pack:
      inputs, labels, lengths = _packed_batch(
          rng, FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions)
    else:
      lengths = np.maximum(_sample_lengths(rng, FLAGS.batch_size,
                                           FLAGS.seq_length),
                           2 * FLAGS.predictions + 2)
      inputs, labels = _batch(rng, FLAGS.batch_size, FLAGS.seq_length,
                              FLAGS.predictions, lengths=lengths)
    return (inputs, labels), lengths

  batch, _ = make_batch()
  batch = jax.device_put(batch, device)
  start = time.perf_counter()
  compiled = step.lower(state, *batch).compile()
  result["compile_s"] = time.perf_counter() - start
  result["custom_calls"] = _custom_calls(compiled.as_text())
  print(f"custom calls of the compiled step: {result['custom_calls']}",
        flush=True)
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

  _save(result)
  made = [make_batch() for _ in range(4)]
  batches = [jax.device_put(b, device) for b, _ in made]
  sequences = np.mean([len(lengths) for _, lengths in made])
  real_flops = np.mean([token_flops(FLAGS.config, lengths, FLAGS.predictions)
                        for _, lengths in made])
  real_tokens = np.mean([lengths.sum() for _, lengths in made])
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
                sequences_per_s=sequences / seconds,
                rows_per_s=FLAGS.batch_size / seconds,
                sequences_per_row=float(sequences / FLAGS.batch_size),
                real_token_share=float(real_tokens / (FLAGS.batch_size *
                                                      FLAGS.seq_length)),
                model_tflops_per_step=flops / 1e12,
                achieved_tflops=flops / seconds / 1e12, peak_tflops=peak,
                mfu=(flops / seconds / 1e12 / peak) if peak else None,
                real_token_tflops_per_step=real_flops / 1e12,
                mfu_real_tokens=(real_flops / seconds / 1e12 / peak)
                if peak else None,
                params=int(model.count_params()))
  print(f"{FLAGS.config} ({result['params']:,} parameters), batch "
        f"{FLAGS.batch_size} x {FLAGS.seq_length}: {seconds * 1e3:.2f} ms a "
        f"step, {result['sequences_per_s']:.0f} sequences/s, "
        f"{result['achieved_tflops']:.1f} model TFLOP/s"
        + (f", MFU {result['mfu']:.1%} of {peak} TFLOP/s" if peak else "")
        + f" (XLA counts {result['xla_flops_per_step'] / 1e12:.3f} TFLOP a "
        f"step, the shapes {flops / 1e12:.3f}); {sequences:.0f} sequences a "
        f"step, {result['real_token_share']:.1%} of the positions real"
        + (f", MFU over real tokens {result['mfu_real_tokens']:.1%}"
           if peak else ""), flush=True)
  _save(result)
  if FLAGS.peer == "hf":
    lengths = np.maximum(_sample_lengths(rng, FLAGS.batch_size,
                                         FLAGS.seq_length),
                         2 * FLAGS.predictions + 2)
    hf_inputs, hf_labels = _batch(rng, FLAGS.batch_size, FLAGS.seq_length,
                                  FLAGS.predictions, lengths=lengths)
    result.update(_hf_peer(config, hf_inputs, hf_labels, FLAGS.steps))
    result["ours_over_hf_sequences_per_s"] = (result["sequences_per_s"]
                                              / result["hf_sequences_per_s"])
    print(f"Hugging Face BertForPreTraining (SDPA, bf16 autocast, "
          f"torch.compile) on {result['hf_device']}: "
          f"{result['hf_sequences_per_s']:.0f} sequences/s; ours "
          f"{result['ours_over_hf_sequences_per_s']:.2f}x", flush=True)
    _save(result)
  text = json.dumps(result)
  if FLAGS.out:
    with open(FLAGS.out, "w") as f:
      f.write(text + "\n")
  print(text)


if __name__ == "__main__":
  cli.run(main)  # a bad flag: one sentence, the last line
