"""Pretraining step throughput: official_bert's trainer vs keras-hub's BertMaskedLM.

One run, same TensorFlow, same synthetic batches: BERT-Mini (L4 H256 A4,
intermediate 1024, vocab 30522), seq 128, batch 32, 20 predictions, AdamW.
Prints sequences/s, model-FLOPs utilisation (MFU) against this machine's
measured matmul peak, and the ratio to keras-hub with XLA:

    python -m benchmarks.pretraining_benchmark            # all configurations
    python -m benchmarks.pretraining_benchmark --steps=30 --configs=ours_xla,hub_xla

`ours_static` and `ours_dynamic` read real TFRecords through the input
pipeline instead of one in-memory batch (--input_file, else records the data
job writes from the first 200 documents of ../shared/data/pydocs_corpus.txt):
the records' masks, or masks drawn in the pipeline (run_pretraining
--masking=dynamic, --masked_lm_prob); their ratio is printed:

    python -m benchmarks.pretraining_benchmark --configs=ours_static,ours_dynamic

Model FLOPs per sequence (training = 3 x forward; embeddings' lookups and
softmax/LayerNorm not counted, as is usual for MFU):
    forward = T*L*(8H^2 + 4*H*I + 4*T*H) + P*(2H^2 + 2*H*V) + 2H^2 + 4H
keras-hub's BertMaskedLM has no next-sentence head (a negligible 2H^2 + 4H).
These are the model's nominal FLOPs for both: official_bert runs its last
block at the masked positions and [CLS] only, so it does about 13% fewer
(same results), and its MFU counts what that saves.

On a shared VM the hypervisor steals CPU time from this one (`st` in vmstat,
10-50% at times here), which moves wall-clock rates by +-20% from run to run.
So every configuration is built and warmed up first, then the timed loops
run in turns (ours, hub, ours, hub, ...), and each configuration reports the
steal share during its loops and a CPU-time rate:
sequences per second of this process's CPU time divided by the cores it can
use, i.e. the rate it would have with both cores to itself. The CPU-time rate
is steal-proof but flatters an implementation that leaves cores idle; the
wall rate is the one that counts when the machine is quiet.
"""

import atexit
import os
import shutil
import subprocess
import tempfile
import time

from absl import app
from absl import flags

flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_integer("steps", 10, "Steps per timed loop (each configuration "
                     "also runs one untimed warm-up loop).")
flags.DEFINE_integer("repeats", 3, "Timed loops per configuration, taken in "
                     "turns with the others (best kept).")
flags.DEFINE_enum("kernels", "auto", ["auto", "fast", "keras"],
                  "official_bert's kernels (as run_pretraining's --kernels).")
flags.DEFINE_bool("bfc", True, "TensorFlow's BFC CPU allocator, as the "
                  "training programs choose it (official_bert/training/"
                  "cpu_allocator.py); the process's setting, so keras-hub "
                  "runs with it too. --nobfc: TensorFlow's default "
                  "allocator.")
flags.DEFINE_list("configs", ["ours", "ours_xla", "hub", "hub_xla",
                              "ours_bf16", "ours_bf16_xla"],
                  "Configurations to run: ours[_bf16][_xla], hub[_xla], "
                  "ours_static[_xla], ours_dynamic[_xla] (real records).")
flags.DEFINE_string("input_file", None,
                    "ours_static/ours_dynamic: TFRecords of --seq_length and "
                    "--predictions (default: written from the shared corpus).")
flags.DEFINE_string("vocab_file", None,
                    "ours_dynamic: the records' vocab (default: the shared "
                    "bert_uncased_vocab.txt).")
flags.DEFINE_float("masked_lm_prob", 0.15, "ours_dynamic: the masking rate.")

FLAGS = flags.FLAGS
MINI = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
            num_attention_heads=4, intermediate_size=1024)


def model_flops_per_sequence(t, p, h=256, i=1024, layers=4, v=30522):
  """Training FLOPs of one sequence (3 x the forward pass's matmul FLOPs)."""
  forward = t * layers * (8 * h * h + 4 * h * i + 4 * t * h)
  forward += p * (2 * h * h + 2 * h * v) + 2 * h * h + 4 * h
  return 3 * forward


def matmul_peak(dtype, n=2048, seconds=3.0):
  """Measured FLOP/s of a big [n, n] x [n, n] matmul, best of a few runs.

  Both of TensorFlow's CPU matmuls are tried, oneDNN's (plain graph) and
  XLA's, and the faster one counts: here oneDNN's is the faster by ~30%.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.cast(tf.random.normal((n, n)), dtype)
  b = tf.cast(tf.random.normal((n, n)), dtype)
  best = 0.0
  for jit_compile in (False, True):

    @tf.function(jit_compile=jit_compile)
    def ten(a, b):
      c = a
      for _ in range(10):
        c = tf.matmul(c, b) * tf.cast(1e-3, dtype)
      return c

    ten(a, b).numpy()
    start = time.time()
    while time.time() - start < seconds:
      t0 = time.perf_counter()
      ten(a, b).numpy()
      best = max(best, 10 * 2 * n ** 3 / (time.perf_counter() - t0))
  return best


def _cpu_seconds():
  """This process's user + system CPU time."""
  import resource  # pylint: disable=g-import-not-at-top
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def _machine_ticks():
  """(steal, total) jiffies of all CPUs since boot, from /proc/stat."""
  try:
    with open("/proc/stat") as f:
      fields = [int(v) for v in f.readline().split()[1:]]
  except OSError:
    return 0, 0
  return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


class Loops:
  """Wall and CPU seconds of each timed loop, and the steal share during them."""

  def __init__(self):
    self.wall, self.cpu, self.sequences, self._start = [], [], [], None
    self.steal_ticks, self.total_ticks = 0, 0

  def begin(self):
    self._start = (time.perf_counter(), _cpu_seconds(), _machine_ticks())

  def end(self, sequences=None):
    """Ends a loop of `sequences` sequences (None: what rates() is given)."""
    self.sequences.append(sequences)
    wall, cpu, (steal, total) = self._start
    self.wall.append(time.perf_counter() - wall)
    self.cpu.append(_cpu_seconds() - cpu)
    now = _machine_ticks()
    self.steal_ticks += now[0] - steal
    self.total_ticks += now[1] - total

  @property
  def steal(self):
    return self.steal_ticks / max(self.total_ticks, 1)

  def rates(self, sequences, cores):
    """Best (wall, CPU-time) sequences/s over the timed loops."""
    counts = [n or sequences for n in self.sequences]
    wall = max(n / w for n, w in zip(counts, self.wall))
    cpu = max(n / (c / cores) for n, c in zip(counts, self.cpu))
    return wall, cpu

  def last_rate(self, sequences):
    """Sequences/s of the last loop."""
    return (self.sequences[-1] or sequences) / self.wall[-1]


def synthetic_batch(batch, seq, preds, vocab, seed=0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  ids = rng.integers(1000, vocab, (batch, seq)).astype("int32")
  positions = np.sort(np.stack([rng.choice(np.arange(1, seq), preds, False)
                                for _ in range(batch)]), axis=1).astype("int32")
  return {
      "ids": ids, "mask": np.ones((batch, seq), "int32"),
      "types": (np.arange(seq)[None] >= seq // 2).repeat(batch, 0).astype("int32"),
      "positions": positions,
      "labels": np.take_along_axis(ids, positions, 1),
      "weights": np.ones((batch, preds), "float32"),
      "nsp": rng.integers(0, 2, batch).astype("int32"),
  }


def corpus_records(seq_length, predictions, documents=200):
  """TFRecords the data job writes from the shared corpus's first documents
  (in a temporary directory); returns their path."""
  from tfrecords import create_pretraining_data as cpd  # pylint: disable=g-import-not-at-top
  from tools import corpus  # pylint: disable=g-import-not-at-top
  root = tempfile.mkdtemp(prefix="pretraining_benchmark_records_")
  atexit.register(shutil.rmtree, root, True)
  text = os.path.join(root, "corpus.txt")
  with open(text, "w", encoding="utf-8") as f:
    f.write("\n\n".join("\n".join(doc)
                         for doc in corpus.documents()[:documents]) + "\n")
  path = os.path.join(root, "records.tfrecord")
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.WARNING)  # not the job's example lines
  cpd.create_pretraining_data(cpd.JobConfig(
      input_files=[text], output_files=[path], vocab_file=shared_vocab(),
      max_seq_length=seq_length, max_predictions_per_seq=predictions,
      dupe_factor=1))
  return path


def shared_vocab():
  from tools import corpus  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(corpus.PYDOCS), "bert_uncased_vocab.txt")


def records_dataset_fn(files, batch, masking):
  """run_pretraining's training input: `files` through the input pipeline,
  with the records' masks (masking None) or dynamic ones."""
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  return input_pipeline.pretraining_dataset_fn(
      files, batch, FLAGS.seq_length, FLAGS.predictions, is_training=True,
      seed=0, masking=masking)


def ours_runner(data, precision, jit_compile, steps, dataset_fn=None):
  """official_bert's Trainer (default strategy, one device), traced and warm.

  Returns (run_loop, loops): each run_loop() trains `steps` more steps in one
  train() call, whose tf.function loop (built once) is timed into `loops`.
  `dataset_fn`: the training input (default: `data` repeated).
  """
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import kernels  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  distribution.set_mixed_precision(precision)
  keras.utils.set_random_seed(0)
  # As run_pretraining chooses: Keras's kernels when XLA compiles the model.
  model = pretrainer.BertPretrainer.from_bert_config(
      configs.BertConfig(**MINI),
      kernels=kernels.resolve(FLAGS.kernels, jit_compile))
  optimizer = optimization.create_optimizer("adamw", 1e-4, 10 ** 6, 0,
                                            mixed_precision=precision)
  element = ({"input_word_ids": data["ids"], "input_mask": data["mask"],
              "input_type_ids": data["types"],
              "masked_lm_positions": data["positions"]},
             {"masked_lm_ids": data["labels"],
              "masked_lm_weights": data["weights"],
              "next_sentence_labels": data["nsp"]})
  batch = len(data["ids"])
  output_dir = tempfile.mkdtemp(prefix="pretraining_benchmark_")
  atexit.register(shutil.rmtree, output_dir, True)
  t = trainer_lib.Trainer(
      tf.distribute.get_strategy(), model, optimizer,
      pretrainer.pretraining_losses,
      trainer_lib.TrainConfig(output_dir=output_dir, num_train_steps=steps,
                              steps_per_loop=steps,
                              save_checkpoints_steps=10 ** 9,
                              jit_compile=jit_compile),
      metric_fn=pretrainer.pretraining_metric_counts, log=lambda _: None)
  t.save = lambda: None  # time the steps, not checkpoints

  if dataset_fn is None:
    def dataset_fn(_):
      return tf.data.Dataset.from_tensors(element).repeat()

  t.train(dataset_fn, global_batch_size=batch)  # traces; one warm-up loop
  distribution.set_mixed_precision("float32")
  loops, train_loop = Loops(), t._train_loop  # pylint: disable=protected-access

  def timed_loop(iterator, num_steps):
    if steps > 1 and int(num_steps) == 1:
      # The trainer's untimed first step of a train() call (it keeps tracing
      # out of its own rate): not timed here either.
      return train_loop(iterator, num_steps)
    loops.begin()
    out = train_loop(iterator, num_steps)
    tf.nest.map_structure(lambda x: x.numpy(), out)
    loops.end(batch * int(num_steps))
    return out

  t._train_loop = timed_loop  # pylint: disable=protected-access

  def run_loop():
    t.config.num_train_steps += steps
    t.train(dataset_fn, global_batch_size=batch)

  return run_loop, loops


def hub_runner(data, jit_compile, steps):
  """keras-hub's BertMaskedLM trained with fit(), traced and warm.

  Returns (run_loop, loops): each run_loop() is one fit() epoch of `steps`
  steps, timed into `loops`.
  """
  import keras  # pylint: disable=g-import-not-at-top
  import keras_hub  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  keras.utils.set_random_seed(0)
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=MINI["vocab_size"], num_layers=4, num_heads=4,
      hidden_dim=256, intermediate_dim=1024)
  model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
  model.compile(
      optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6,
                                       global_clipnorm=1.0),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
      jit_compile=jit_compile)
  x = {"token_ids": data["ids"], "segment_ids": data["types"],
       "padding_mask": data["mask"].astype(bool),
       "mask_positions": data["positions"]}
  dataset = tf.data.Dataset.from_tensors(
      (x, data["labels"], data["weights"])).repeat()
  loops = Loops()

  class Timer(keras.callbacks.Callback):

    def on_epoch_begin(self, epoch, logs=None):
      loops.begin()

    def on_epoch_end(self, epoch, logs=None):
      loops.end()

  def run_loop():
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0,
              callbacks=[Timer()])

  # Traces; one untimed warm-up epoch.
  model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
  return run_loop, loops


def main(argv):
  del argv
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  os.environ[cpu_allocator.ENV] = "true" if FLAGS.bfc else "false"
  cpu_allocator.use_bfc()  # and its memory limit
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout
  print(f"load at start: {uptime.strip()}", flush=True)
  peaks = {"float32": matmul_peak(tf.float32),
           "bfloat16": matmul_peak(tf.bfloat16)}
  allocator = "BFC" if cpu_allocator.in_use() else "TensorFlow's default"
  print(f"CPU allocator: {allocator} (both sides: one process)", flush=True)
  print(f"matmul peak: float32 {peaks['float32'] / 1e9:.0f} GFLOP/s, "
        f"bfloat16 {peaks['bfloat16'] / 1e9:.0f} GFLOP/s "
        f"({tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} threads)",
        flush=True)
  data = synthetic_batch(FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions,
                         MINI["vocab_size"])
  flops = model_flops_per_sequence(FLAGS.seq_length, FLAGS.predictions)
  print(f"BERT-Mini, seq {FLAGS.seq_length}, batch {FLAGS.batch_size}, "
        f"{FLAGS.predictions} predictions: {flops / 1e9:.2f} GFLOP per "
        "training sequence", flush=True)
  cores = len(os.sched_getaffinity(0))
  record_configs = [n for n in FLAGS.configs
                    if n.startswith(("ours_static", "ours_dynamic"))]
  if record_configs:
    from official_bert.training import dynamic_masking  # pylint: disable=g-import-not-at-top
    files = [FLAGS.input_file or corpus_records(FLAGS.seq_length,
                                                FLAGS.predictions)]
    masking = dynamic_masking.options_from_vocab(
        FLAGS.vocab_file or shared_vocab(), FLAGS.masked_lm_prob,
        FLAGS.predictions, whole_word=False, seed=0)
    print(f"records: {files[0]} (ours_static: their masks; ours_dynamic: "
          f"drawn in the pipeline at {FLAGS.masked_lm_prob})", flush=True)
  # Build and warm up every configuration, then time them in turns (round
  # robin), so a burst of steal time hits all of them rather than one.
  runners = {}
  for name in FLAGS.configs:
    start = time.time()
    jit = name.endswith("_xla")
    if name.startswith("hub"):
      runners[name] = hub_runner(data, jit, FLAGS.steps)
    elif name in record_configs:
      runners[name] = ours_runner(
          data, "float32", jit, FLAGS.steps, records_dataset_fn(
              files, FLAGS.batch_size,
              masking if name.startswith("ours_dynamic") else None))
    else:
      precision = "mixed_bfloat16" if "_bf16" in name else "float32"
      runners[name] = ours_runner(data, precision, jit, FLAGS.steps)
    print(f"{name}: built, traced and warmed up in {time.time() - start:.0f} s",
          flush=True)
  for repeat in range(FLAGS.repeats):
    for name, (run_loop, loops) in runners.items():
      run_loop()
    print(f"round {repeat + 1}/{FLAGS.repeats}: " + ", ".join(
        f"{name} {loops.last_rate(FLAGS.batch_size * FLAGS.steps):.1f}"
        for name, (_, loops) in runners.items()) + " seq/s", flush=True)
  # Measured again after the loops, the best counting: steal during one
  # measurement makes the peak, and so MFU, look lower (or higher).
  peaks = {dtype: max(peak, matmul_peak(getattr(tf, dtype)))
           for dtype, peak in peaks.items()}
  print(f"matmul peak, best before and after: float32 "
        f"{peaks['float32'] / 1e9:.0f} GFLOP/s, bfloat16 "
        f"{peaks['bfloat16'] / 1e9:.0f} GFLOP/s", flush=True)
  results, cpu_results = {}, {}
  for name, (_, loops) in runners.items():
    peak = peaks["bfloat16" if "_bf16" in name else "float32"]
    rate, cpu_rate = loops.rates(FLAGS.batch_size * FLAGS.steps, cores)
    results[name], cpu_results[name] = rate, cpu_rate
    print(f"{name:14s} {rate:7.1f} seq/s  MFU {rate * flops / peak:6.1%}  "
          f"CPU-time rate {cpu_rate:5.1f} seq/s  (steal {loops.steal:.0%})",
          flush=True)
  base = results.get("hub_xla")
  if base:
    print("ratio to keras-hub with XLA, wall: " + ", ".join(
        f"{name} {rate / base:.2f}x" for name, rate in results.items()))
    print("ratio to keras-hub with XLA, CPU time: " + ", ".join(
        f"{name} {rate / cpu_results['hub_xla']:.2f}x"
        for name, rate in cpu_results.items()))
  for suffix in ("", "_xla"):
    static, dynamic = (f"ours_static{suffix}", f"ours_dynamic{suffix}")
    if static in results and dynamic in results:
      print(f"dynamic / static masking{suffix}: wall "
            f"{results[dynamic] / results[static]:.3f}x, CPU time "
            f"{cpu_results[dynamic] / cpu_results[static]:.3f}x")
  uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout
  print(f"load at end: {uptime.strip()}")


if __name__ == "__main__":
  app.run(main)
