"""Packed rows against one sequence per row: padding, steps, loss, speed.

Writes masked-LM records (no next-sentence pairs) from the shared corpus with
our data job, at --max_seq_length 128 and 512, and reports for each:

- the padding share of the records (positions that are padding, one
  sequence per row), and after packing (data/row_packing.py, what
  `run_pretraining --pack_sequences` reads: first fit over 1,000 records);
- steps per epoch at --train_batch_size, with and without packing.

Then, at 128 on the training part of the corpus (its last documents held
out), `run_pretraining` trains a small model (L2 H128 by default) for one
epoch both ways, in turns, for each of --seeds: unpacked
(`--next_sentence_prediction=false`) and packed (the same plus
`--pack_sequences`, the same sequences in fewer steps); each is then
evaluated on the held-out records, unpacked, the same way. It prints each
run's held-out masked-LM loss, the spread over seeds of each side, and the
training sequences/s (the trainer's last progress line; rows/s times the
mean sequences per row when packed), and the ratio.

    python -m benchmarks.packing_benchmark
    python -m benchmarks.packing_benchmark --seeds=1 --documents=120  # quick
    python -m benchmarks.packing_benchmark --stats_only \
        --lengths_out=benchmarks/data/record_lengths.json  # the histogram

Every run is a real `python -m` process; the work directory is kept with
--work_dir.
"""

import json
import os
import re
import tempfile

from absl import app
from absl import flags
import numpy as np

from benchmarks import logged_run

flags.DEFINE_string("corpus", os.path.join(os.path.dirname(__file__), "..",
                                           "..", "shared", "data",
                                           "pydocs_corpus.txt"),
                    "Text with one sentence per line, blank lines between "
                    "documents.")
flags.DEFINE_string("vocab_file", os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data",
    "bert_uncased_vocab.txt"), "The vocabulary.")
flags.DEFINE_integer("documents", 0, "Use the corpus's first N documents "
                     "(0: all).")
flags.DEFINE_float("held_out", 0.1, "The share of documents held out for "
                   "evaluation (the last ones).")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds, run in turns.")
flags.DEFINE_integer("train_batch_size", 32, "Rows per step.")
flags.DEFINE_string("model", "2,128,2,512", "layers,hidden,heads,"
                    "intermediate of the trained model (vocab 30522).")
flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate.")
flags.DEFINE_string("work_dir", None, "Keep the records and runs here.")
flags.DEFINE_string("lengths_out", None, "Write the records' length "
                    "histogram here ({\"128\": {length: count}, \"512\": "
                    "...}: benchmarks/jax_gpu_step.py --lengths).")
flags.DEFINE_bool("stats_only", False, "Stop after the padding and steps "
                  "figures (no training).")
FLAGS = flags.FLAGS


def _documents(path, limit):
  with open(path, encoding="utf-8") as f:
    docs = [d for d in f.read().split("\n\n") if d.strip()]
  return docs[:limit] if limit else docs


def _records(corpus, out, seq):
  predictions = max(1, round(seq * 0.15))
  logged_run.run(["tfrecords.create_pretraining_data", f"--input_file={corpus}",
        f"--output_file={out}", f"--vocab_file={FLAGS.vocab_file}",
        "--next_sentence_prediction=false", f"--max_seq_length={seq}",
        f"--max_predictions_per_seq={predictions}", "--dupe_factor=1"],
       out + ".log")
  return predictions


def _read(path, seq, predictions):
  """(inputs, labels) numpy of every record of `path`."""
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  dataset = input_pipeline.pretraining_dataset(
      [path], 1024, seq, predictions, is_training=False)
  parts = list(dataset)
  inputs = {k: np.concatenate([p[0][k].numpy() for p in parts])
            for k in parts[0][0]}
  labels = {k: np.concatenate([p[1][k].numpy() for p in parts])
            for k in parts[0][1]}
  return inputs, labels


def _pack_stats(inputs, labels, seq, predictions):
  """(padding share unpacked, packed, rows, mean sequences per row)."""
  from official_bert.data import row_packing  # pylint: disable=g-import-not-at-top
  q = row_packing.default_row_predictions(
      predictions, row_packing.MAX_SEQUENCES_PER_ROW)
  n = len(inputs["input_mask"])
  rows = 0
  for start in range(0, n, 1000):  # the pipeline's windows
    window = {k: v[start:start + 1000] for k, v in inputs.items()}
    window_labels = {k: v[start:start + 1000] for k, v in labels.items()}
    packed, _ = row_packing.pack(window, window_labels, seq, q)
    rows += len(packed["input_mask"])
  tokens = inputs["input_mask"].sum()
  return (row_packing.padding_share(inputs["input_mask"].sum(1), seq),
          1 - tokens / (rows * seq), rows, n / rows)


def _train(work, name, records, held_out, seed, steps, packed, predictions):
  layers, hidden, heads, intermediate = (int(v) for v in
                                         FLAGS.model.split(","))
  config = os.path.join(work, "bert_config.json")
  with open(config, "w") as f:
    json.dump({"vocab_size": 30522, "hidden_size": hidden,
               "num_hidden_layers": layers, "num_attention_heads": heads,
               "intermediate_size": intermediate, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1,
               "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 512, "type_vocab_size": 2,
               "initializer_range": 0.02}, f)
  out = os.path.join(work, f"{name}-seed{seed}")
  common = [f"--bert_config_file={config}", f"--output_dir={out}",
            "--max_seq_length=128", f"--max_predictions_per_seq={predictions}",
            "--next_sentence_prediction=false", f"--seed={seed}"]
  log, wall = logged_run.run(["official_bert.run_pretraining", "--do_train",
                    f"--input_file={records}", f"--num_train_steps={steps}",
                    f"--num_warmup_steps={max(1, steps // 10)}",
                    f"--train_batch_size={FLAGS.train_batch_size}",
                    f"--learning_rate={FLAGS.learning_rate}",
                    f"--steps_per_loop={max(1, steps // 4)}"]
                   + common + (["--pack_sequences"] if packed else []),
                   out + ".train.log")
  rates = [float(r) for r in re.findall(r" ([\d.]+) seq/s ", log)]
  logged_run.run(["official_bert.run_pretraining", "--do_eval",
        f"--input_file={held_out}", "--eval_batch_size=64",
        "--max_eval_steps=100000"] + common, out + ".eval.log")
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f)
  return {"masked_lm_loss": float(results["masked_lm_loss"]),
          "masked_lm_accuracy": float(results["masked_lm_accuracy"]),
          "rows_per_second": rates[-1] if rates else float("nan"),
          "wall_s": wall}


def main(argv):
  del argv
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="packing_benchmark_")
  os.makedirs(work, exist_ok=True)
  docs = _documents(FLAGS.corpus, FLAGS.documents)
  held = max(1, int(len(docs) * FLAGS.held_out))
  paths = {}
  for name, part in (("train", docs[:-held]), ("held_out", docs[-held:])):
    paths[name] = os.path.join(work, f"{name}.txt")
    with open(paths[name], "w", encoding="utf-8") as f:
      f.write("\n\n".join(part) + "\n")
  print(f"load average {os.getloadavg()[0]:.2f}; {len(docs) - held} training "
        f"and {held} held-out documents; work dir {work}", flush=True)
  stats, histograms = {}, {}
  for seq in (128, 512):
    records = os.path.join(work, f"train{seq}.tfrecord")
    predictions = _records(paths["train"], records, seq)
    inputs, labels = _read(records, seq, predictions)
    before, after, rows, per_row = _pack_stats(inputs, labels, seq,
                                               predictions)
    n = len(inputs["input_mask"])
    values, counts = np.unique(inputs["input_mask"].sum(1), return_counts=True)
    histograms[str(seq)] = {str(v): int(c) for v, c in zip(values, counts)}
    stats[seq] = dict(records=records, predictions=predictions, n=n,
                      rows=rows, per_row=per_row)
    batch = FLAGS.train_batch_size
    print(f"seq {seq}: {n} records, padding {before:.1%} of positions; "
          f"packed: {rows} rows ({per_row:.2f} sequences per row), padding "
          f"{after:.1%}; steps per epoch at batch {batch}: {n // batch} "
          f"unpacked, {rows // batch} packed ({n / rows:.2f}x fewer)",
          flush=True)
  if FLAGS.lengths_out:
    with open(FLAGS.lengths_out, "w") as f:
      json.dump(histograms, f, indent=0, sort_keys=True)
    print(f"wrote the length histograms to {FLAGS.lengths_out}", flush=True)
  if FLAGS.stats_only:
    return
  held_out = os.path.join(work, "held_out128.tfrecord")
  _records(paths["held_out"], held_out, 128)
  s = stats[128]
  steps = {"unpacked": s["n"] // FLAGS.train_batch_size,
           "packed": s["rows"] // FLAGS.train_batch_size}
  results = {side: [] for side in steps}
  for seed in FLAGS.seeds:  # in turns
    for side in steps:
      result = _train(work, side, s["records"], held_out, seed, steps[side],
                      side == "packed", s["predictions"])
      if side == "packed":
        result["sequences_per_second"] = (result["rows_per_second"]
                                          * s["per_row"])
      else:
        result["sequences_per_second"] = result["rows_per_second"]
      results[side].append(result)
      print(f"seed {seed} {side}: {steps[side]} steps, held-out masked-LM "
            f"loss {result['masked_lm_loss']:.4f}, accuracy "
            f"{result['masked_lm_accuracy']:.4f}, "
            f"{result['sequences_per_second']:.1f} sequences/s "
            f"(process {result['wall_s']:.0f} s)", flush=True)
  summary = {}
  for side, runs in results.items():
    losses = [r["masked_lm_loss"] for r in runs]
    rates = [r["sequences_per_second"] for r in runs]
    summary[side] = dict(loss_mean=float(np.mean(losses)),
                         loss_spread=float(np.ptp(losses)),
                         sequences_per_second=float(np.mean(rates)))
    print(f"{side}: held-out masked-LM loss mean {np.mean(losses):.4f} "
          f"(spread {np.ptp(losses):.4f} over {len(losses)} seeds), "
          f"{np.mean(rates):.1f} sequences/s", flush=True)
  diff = summary["packed"]["loss_mean"] - summary["unpacked"]["loss_mean"]
  spread = max(summary["packed"]["loss_spread"],
               summary["unpacked"]["loss_spread"])
  print(f"packed - unpacked loss {diff:+.4f} (largest spread {spread:.4f}: "
        f"{'within' if abs(diff) <= spread else 'outside'} it); sequences/s "
        f"packed / unpacked {summary['packed']['sequences_per_second'] / summary['unpacked']['sequences_per_second']:.2f}x; "
        f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
  app.run(main)
