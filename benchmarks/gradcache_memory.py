"""GradCache's memory: the peak RSS growth of one training step, in turns.

Issue 63's bar: with --mini_batch_size (training/train_step.py's
cached_gradients), the loss over a batch of 256 pairs grows the peak RSS by at
most 1.3x what the plain batch of 32 does (all-MiniLM-L6-v2, sequences of
128). Each case runs in a fresh process: the embedder (mean pooling) and its
optimizer are built, a batch of B (anchor, positive) pairs of random token
ids, every position a token, is made, the RSS is read (VmRSS), the peak is
reset (/proc/self/clear_refs), and one step of the train loop runs
(train_step.make_train_loop: tracing, forward, backward, update, as the first
step of run_embedding); the growth is the peak (VmHWM) minus the RSS before.
The default cases: the plain batch of 32, the plain batch of 256, and 256 in
mini-batches of 32. Prints one line per case and the ratios to the first:

    python -m benchmarks.gradcache_memory
    python -m benchmarks.gradcache_memory --bert_config_file=minilm/bert_config.json \\
      --init_checkpoint=minilm

Without --bert_config_file the model is MiniLM-shaped (L6 H384 A12 I1536,
BERT's vocabulary) with random weights: the memory of a step does not depend
on the weights' values, so nothing is downloaded. The plain batch of 256
holds every activation of 512 sequences: several GiB (--cases leaves it out).
Linux only (/proc).
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# L6 H384 A12 I1536, BERT's vocabulary: all-MiniLM-L6-v2's shape.
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
              num_attention_heads=12, intermediate_size=1536,
              hidden_act="gelu", hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1, max_position_embeddings=512,
              type_vocab_size=2, initializer_range=0.02)


def define_flags():
  flags.DEFINE_string("bert_config_file", None, "The model's config; unset: "
                      "MiniLM-shaped (L6 H384 A12), random weights.")
  flags.DEFINE_string("init_checkpoint", None, "Its encoder's weights "
                      "(optional: the memory does not depend on them).")
  flags.DEFINE_integer("seq_length", 128, "Tokens per text (all real).")
  flags.DEFINE_list("cases", ["32", "256", "256/32"], "Batches of pairs, "
                    "B or B/M (M: --mini_batch_size); the first is the "
                    "reference of the ratios.")
  flags.DEFINE_string("case", None, "(internal) Run this one case here.")


def _status(key):
  """/proc/self/status's `key` (VmRSS, VmHWM) in bytes."""
  with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
      if line.startswith(key + ":"):
        return int(line.split()[1]) * 1024
  raise OSError(f"no {key} in /proc/self/status")


def measure(case):
  """{"case", "rss_before", "peak_growth", "seconds", "loss"} of one step of
  `case` ("B" or "B/M"), in this process."""
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  cpu_allocator.use_bfc()  # as run_embedding: before TensorFlow loads
  cpu_allocator.use_onednn()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import kernels as kernels_lib  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import sentence_embedder  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.embedding import embedding_task  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  from official_bert.training import task as task_lib  # pylint: disable=g-import-not-at-top
  from official_bert.training import train_step  # pylint: disable=g-import-not-at-top
  batch, _, mini = case.partition("/")
  batch, mini = int(batch), int(mini or 0)
  config = (configs.BertConfig.from_json_file(FLAGS.bert_config_file)
            if FLAGS.bert_config_file else configs.BertConfig(**MINILM))
  model = sentence_embedder.BertSentenceEmbedder.from_bert_config(
      config, "mean", kernels=kernels_lib.resolve("auto", False, False))
  if FLAGS.init_checkpoint:
    checkpoints.restore_encoder(model.encoder, FLAGS.init_checkpoint)
  optimizer = optimization.create_optimizer("adamw", 2e-5, 10, 1)
  optimizer.build(model.trainable_variables)
  rng = np.random.default_rng(0)
  seq = FLAGS.seq_length
  inputs = {}
  for role in ("anchor", "positive"):
    inputs[f"{role}_input_word_ids"] = rng.integers(
        1000, config.vocab_size, (batch, seq)).astype(np.int32)
    inputs[f"{role}_input_mask"] = np.ones((batch, seq), np.int32)
    inputs[f"{role}_input_type_ids"] = np.zeros((batch, seq), np.int32)
  data = tf.data.Dataset.from_tensors(
      (inputs, np.zeros(batch, np.int32))).repeat()
  strategy = tf.distribute.get_strategy()
  task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
      "", "", mini_batch_size=mini))
  loop = train_step.make_train_loop(
      strategy, model, optimizer, task.losses, task.metric_counts,
      tf.Variable(0, dtype=tf.int64), train_step.StepOptions(
          in_batch_loss=task_lib.InBatchLoss(("anchor",), mini)))
  iterator = iter(data)
  before = _status("VmRSS")
  with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
    f.write("5")  # the peak (VmHWM) starts again from the RSS now
  t0 = time.time()
  losses, _ = loop(iterator, tf.constant(1, tf.int32))
  loss = float(losses["loss"])
  return {"case": case, "rss_before": before,
          "peak_growth": _status("VmHWM") - before,
          "seconds": time.time() - t0, "loss": loss}


def main(argv):
  del argv
  if FLAGS.case:
    print(json.dumps(measure(FLAGS.case)), flush=True)
    return
  results = []
  for case in FLAGS.cases:
    args = [sys.executable, "-m", "benchmarks.gradcache_memory",
            f"--case={case}", f"--seq_length={FLAGS.seq_length}"]
    if FLAGS.bert_config_file:
      args.append(f"--bert_config_file={FLAGS.bert_config_file}")
    if FLAGS.init_checkpoint:
      args.append(f"--init_checkpoint={FLAGS.init_checkpoint}")
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if proc.returncode:
      sys.exit(f"case {case} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    results.append(result)
    print(f"batch {case:>7}: peak RSS growth {result['peak_growth'] / 2**20:8.0f}"
          f" MiB over {result['rss_before'] / 2**20:.0f} MiB before the step, "
          f"{result['seconds']:.1f} s, loss {result['loss']:.4f} (load "
          f"{os.getloadavg()[0]:.1f})", flush=True)
  reference = results[0]
  for result in results[1:]:
    print(f"{result['case']} / {reference['case']}: "
          f"{result['peak_growth'] / reference['peak_growth']:.2f}x the peak "
          "RSS growth", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
