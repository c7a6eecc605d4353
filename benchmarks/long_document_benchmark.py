"""Long documents: how run_classifier's --doc_stride windows combine.

On tools/long_document_task.py's task (the label is one sentence anywhere in
a document), trains run_classifier with --doc_stride (each window fitted to
its document's label) once per seed, then evaluates the same checkpoint on
~800-WordPiece dev documents with --window_aggregation=max, =mean, and
without --doc_stride (the document truncated to its first --max_seq_length
pieces: the baseline the windows must beat), and prints dev accuracy per
seed and the mean.

    python -m benchmarks.long_document_benchmark --work_dir=/tmp/long_docs

The training documents are --train_doc_pieces long (default 24, one to three
windows of 16: from random weights, this small model learns the key sentence
only where most windows hold it; on 800-piece training documents it stayed
at chance, and on 48-piece ones with windows of 32 it learned for 1 seed of
3); the aggregation is chosen at evaluation, on the long dev documents
(~113 windows each).

The model is a 2-layer H32 BERT from random weights (the tests' tiny
config with BERT's uncased vocab), so the figures measure the windows, not
pretraining.
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "..", "shared", "data", "bert_uncased_vocab.txt")


def _tiny_config(path, max_positions):
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  configs.BertConfig(
      vocab_size=30522, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=4, intermediate_size=37, hidden_act="gelu",
      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
      max_position_embeddings=max_positions, type_vocab_size=2,
      initializer_range=0.02).to_json_file(path)


def _run(args):
  t0 = time.time()
  subprocess.run([sys.executable, "-m", "official_bert.run_classifier"]
                 + args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
  return time.time() - t0


def _accuracy(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return float(dict(line.strip().split(" = ") for line in f)[
        "eval_accuracy"])


def parse_args(argv=None):
  sys.path.insert(0, ROOT)
  from tools import long_document_task  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work_dir", required=True)
  long_document_task.add_arguments(parser)
  parser.add_argument("--train_doc_pieces", type=int, default=24)
  parser.add_argument("--max_seq_length", type=int, default=16)
  parser.add_argument("--doc_stride", type=int, default=7)
  parser.add_argument("--epochs", type=float, default=6)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--learning_rate", type=float, default=1e-3)
  parser.add_argument("--seeds", default="12345,1,2")
  return parser.parse_args(argv)


def main():
  args = parse_args()
  from tools import long_document_task  # pylint: disable=g-import-not-at-top
  data = os.path.join(args.work_dir, "task")
  # Train from the short documents, dev from the long ones.
  long_document_task.write_task(data, args.train, 0, 2,
                                args.train_doc_pieces, args.seed)
  long_task = os.path.join(args.work_dir, "long")
  long_document_task.write_task(long_task, 0, args.dev, 0, args.doc_pieces,
                                args.seed)
  os.replace(os.path.join(long_task, "dev.tsv"),
             os.path.join(data, "dev.tsv"))
  config = os.path.join(args.work_dir, "bert_config.json")
  _tiny_config(config, args.max_seq_length)
  common = [f"--task_data_dir={data}", f"--bert_config_file={config}",
            f"--vocab_file={VOCAB}", f"--max_seq_length={args.max_seq_length}"]
  print("seed  train s  max  mean  truncated")
  table = []
  for seed in args.seeds.split(","):
    out = os.path.join(args.work_dir, f"seed{seed}")
    seconds = _run(common + [
        f"--output_dir={out}", "--do_train", "--do_eval",
        f"--doc_stride={args.doc_stride}", "--window_aggregation=max",
        f"--num_train_epochs={args.epochs}",
        f"--train_batch_size={args.batch_size}",
        f"--learning_rate={args.learning_rate}", f"--seed={seed}"])
    row = [_accuracy(out)]
    _run(common + [f"--output_dir={out}", "--do_eval",
                   f"--doc_stride={args.doc_stride}",
                   "--window_aggregation=mean"])
    row.append(_accuracy(out))
    _run(common + [f"--output_dir={out}", "--do_eval"])
    row.append(_accuracy(out))
    table.append(row)
    print(f"{seed:>5} {seconds:8.0f}  " + "  ".join(f"{a:.3f}" for a in row),
          flush=True)
  means = [sum(column) / len(table) for column in zip(*table)]
  print("mean           " + "  ".join(f"{a:.3f}" for a in means))


if __name__ == "__main__":
  main()
