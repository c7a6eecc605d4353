"""Static vs dynamic masking, with and without NSP: held-out masked-LM accuracy.

One run on the shared pydocs corpus: the data job writes training records
from the first --train_documents documents (--dupe_factor 1: one set of
masks on disk) and a held-out set from the last --heldout_documents; then
`run_pretraining` trains the same small BERT for the same steps on the same
records, in turns:

  static      the records' masks (the original), every epoch the same
  dynamic     --masking=dynamic: fresh masks every epoch, same rate (0.15)
  ..._no_nsp  the same with --next_sentence_prediction=false

and evaluates each checkpoint on the held-out records' fixed (static)
masks. With a small training set the run goes over it several times, which
is where fresh masks should help (RoBERTa, section 4.1):

    python -m benchmarks.masking_learning            # ~3 min a run on 2 cores
    python -m benchmarks.masking_learning --seeds=1,2 --num_train_steps=800

Prints one line per run and the table (mean over seeds).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

flags.DEFINE_integer("train_documents", 30, "Documents of the training set "
                     "(30: ~1,000 records at seq 64, ~19 epochs in 600 "
                     "steps of 32).")
flags.DEFINE_integer("heldout_documents", 60, "Documents held out for eval.")
flags.DEFINE_integer("num_train_steps", 600, "Steps of every run.")
flags.DEFINE_integer("train_batch_size", 32, "Batch size.")
flags.DEFINE_integer("max_seq_length", 64, "Sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 10, "Predictions per "
                     "sequence (records and dynamic masks).")
flags.DEFINE_float("learning_rate", 2e-3, "Peak learning rate.")
flags.DEFINE_list("seeds", ["1"], "Seeds (weights, dropout, order, masks).")
flags.DEFINE_list("runs", ["static", "dynamic", "static_no_nsp",
                           "dynamic_no_nsp"], "Runs, each per seed.")
flags.DEFINE_string("work_dir", None, "Where records and runs go (default: "
                    "a temporary directory, deleted at the end).")

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# docs/pretraining.md's small model (L2 H64 A2): minutes on a CPU.
MODEL = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2,
             num_attention_heads=2, intermediate_size=256,
             max_position_embeddings=512)


def _python(args, log):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable] + args, cwd=ROOT, env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  with open(log, "a") as f:
    f.write(proc.stdout)
  if proc.returncode:
    sys.exit(f"failed ({proc.returncode}): {' '.join(args)}; see {log}\n"
             + proc.stdout[-2000:])
  return proc.stdout


def write_records(work, vocab, corpus_path):
  """(train, heldout) TFRecords of the data job on disjoint documents."""
  from tools import corpus  # pylint: disable=g-import-not-at-top
  docs = corpus.documents(corpus_path)
  parts = {"train": docs[:FLAGS.train_documents],
           "heldout": docs[-FLAGS.heldout_documents:]}
  paths = {}
  for name, chosen in parts.items():
    text = os.path.join(work, f"{name}.txt")
    with open(text, "w", encoding="utf-8") as f:
      f.write("\n\n".join("\n".join(doc) for doc in chosen) + "\n")
    paths[name] = os.path.join(work, f"{name}.tfrecord")
    out = _python(["-m", "tfrecords.create_pretraining_data",
                   f"--input_file={text}", f"--output_file={paths[name]}",
                   f"--vocab_file={vocab}", "--dupe_factor=1",
                   f"--max_seq_length={FLAGS.max_seq_length}",
                   f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
                   "--num_workers=0"], os.path.join(work, "data.log"))
    print(f"{name}: {out.strip().splitlines()[-1]}", flush=True)
  return paths["train"], paths["heldout"]


def train_and_evaluate(work, name, seed, train, heldout, vocab, config):
  """One run: trains on `train`, evaluates on `heldout`; eval results."""
  out = os.path.join(work, f"{name}_seed{seed}")
  common = [f"--bert_config_file={config}", f"--output_dir={out}",
            f"--max_seq_length={FLAGS.max_seq_length}",
            f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}", f"--seed={seed}",
            f"--next_sentence_prediction={'no_nsp' not in name}"]
  steps = FLAGS.num_train_steps
  train_flags = [f"--input_file={train}", "--do_train",
                 f"--train_batch_size={FLAGS.train_batch_size}",
                 f"--num_train_steps={steps}",
                 f"--num_warmup_steps={steps // 10}",
                 f"--learning_rate={FLAGS.learning_rate}",
                 f"--steps_per_loop={steps}",
                 f"--save_checkpoints_steps={steps}"]
  if name.startswith("dynamic"):
    train_flags += ["--masking=dynamic", f"--vocab_file={vocab}"]
  log = os.path.join(work, f"{name}_seed{seed}.log")
  start = time.time()
  _python(["-m", "official_bert.run_pretraining"] + common + train_flags, log)
  seconds = time.time() - start
  # Evaluation alone on the held-out set (resumes the final checkpoint).
  _python(["-m", "official_bert.run_pretraining"] + common +
          [f"--input_file={heldout}", "--do_eval", "--eval_batch_size=64",
           "--max_eval_steps=100000"], log)
  with open(os.path.join(out, "eval_results.txt")) as f:
    result = {k: float(v) for k, v in (line.split(" = ") for line in f)}
  result["seconds"] = seconds
  return result


def main(argv):
  del argv
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from tools import corpus  # pylint: disable=g-import-not-at-top
  vocab = os.path.join(os.path.dirname(corpus.PYDOCS), "bert_uncased_vocab.txt")
  if not os.path.exists(corpus.PYDOCS):
    sys.exit(f"needs the shared corpus at {corpus.PYDOCS}")
  work = FLAGS.work_dir or tempfile.mkdtemp(prefix="masking_learning_")
  os.makedirs(work, exist_ok=True)
  uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout
  print(f"load at start: {uptime.strip()}", flush=True)
  train, heldout = write_records(work, vocab, corpus.PYDOCS)
  config = os.path.join(work, "bert_config.json")
  configs.BertConfig(**MODEL).to_json_file(config)
  results = {}
  for seed in FLAGS.seeds:
    for name in FLAGS.runs:  # in turns: load changes time, not results
      result = train_and_evaluate(work, name, seed, train, heldout, vocab,
                                  config)
      results.setdefault(name, []).append(result)
      print(f"{name:15s} seed {seed}: held-out masked_lm_accuracy "
            f"{result['masked_lm_accuracy']:.4f} masked_lm_loss "
            f"{result['masked_lm_loss']:.4f}"
            + (f" next_sentence_accuracy "
               f"{result['next_sentence_accuracy']:.4f}"
               if "next_sentence_accuracy" in result else "")
            + f" ({result['seconds']:.0f} s)", flush=True)
  print(f"\nL2 H64 A2, seq {FLAGS.max_seq_length}, batch "
        f"{FLAGS.train_batch_size}, {FLAGS.num_train_steps} steps, lr "
        f"{FLAGS.learning_rate}, {FLAGS.train_documents} training documents, "
        f"seeds {','.join(FLAGS.seeds)}; held-out static masks:")
  print("| run | masked-LM accuracy | masked-LM loss |")
  print("|---|---|---|")
  for name, runs in results.items():
    accuracy = sum(r["masked_lm_accuracy"] for r in runs) / len(runs)
    loss = sum(r["masked_lm_loss"] for r in runs) / len(runs)
    print(f"| {name} | {accuracy:.4f} | {loss:.4f} |")
  uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout
  print(f"load at end: {uptime.strip()}", flush=True)
  if not FLAGS.work_dir:
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
