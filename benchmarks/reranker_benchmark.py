"""A reranker: run_reranker vs sentence-transformers' CrossEncoderTrainer, in turns.

The same start (--init_checkpoint, a converted BERT such as
all-MiniLM-L6-v2: `convert_checkpoint`'s output directory; written for
Hugging Face by `export_checkpoint --format=huggingface` unless --hf_model
names it), the same retriever (that start's `export_saved_model`:
mean-pooled `sentence_embedding`), the same task (tools/retrieval_task.py
--next_sentence: each sentence and the one after it, hard for a
bi-encoder), the same negatives (mined once by run_reranker as
sentence-transformers' reranker guide mines them, `reranker_negatives.tsv`,
which sentence-transformers then trains on as labelled pairs), the same
hyperparameters (batch of pairs, learning rate, epochs, warmup 10%, seed)
and the same loss (binary cross-entropy, positives weighted by the
negatives per positive, as the guide's pos_weight):

  ours    `python -m official_bert.run_reranker --retriever=...` per
          --losses (bce, listwise); train time from its "Trained steps"
          line (tracing included, as a user waits for it);
  theirs  `CrossEncoderTrainer` with `BinaryCrossEntropyLoss`, in this
          process; train time its `train_runtime`.

Both are scored alike (tasks/reranking/candidates.py): each dev query's top
--rerank_top_k dev passages by the retriever, reranked; MRR@10, alone
and fused with the retriever's order (candidates.fused: reciprocal rank
fusion; theirs on CrossEncoder.predict's scores). Prints
per round and side the train pairs/s and dev MRR@10, the retriever's own
MRR@10, then the ratio of pairs/s, ours/theirs:

    python -m benchmarks.reranker_benchmark --work_dir=/tmp/reranker_benchmark \\
      --init_checkpoint=minilm

--smoke runs it on a tiny random BERT and a few dozen queries (seconds; the
mining limits opened for a random retriever), to check that it runs.
CrossEncoderTrainer needs `datasets` (pip install datasets): without it,
one sentence and status 1, before anything is prepared.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

from absl import flags

from benchmarks import peer_flags

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from official_bert import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
VOCAB = os.path.join(ROOT, "..", "shared", "data", "bert_uncased_vocab.txt")


def define_flags():
  """The benchmark's flags (defined when it runs as a program)."""
  flags.DEFINE_string("work_dir", None, "Where the task, the start, the "
                      "retriever and the runs go.")
  flags.DEFINE_string("init_checkpoint", None, "Our start: a directory with "
                      "bert_config.json, vocab.txt and the checkpoint "
                      "(convert_checkpoint's output).")
  flags.DEFINE_string("hf_model", None, "sentence-transformers' start, the "
                      "same weights as a Hugging Face directory (default: "
                      "export_checkpoint --format=huggingface of "
                      "--init_checkpoint).")
  flags.DEFINE_bool("smoke", False, "A tiny random BERT, 32 training and 16 "
                    "dev queries, the mining limits opened: that it runs.")
  flags.DEFINE_integer("train_queries", 1000, "Training queries.")
  flags.DEFINE_integer("dev_queries", 200, "Dev queries (their positives "
                       "are the dev passages).")
  flags.DEFINE_integer("rerank_top_k", 20, "Dev candidates per query.")
  flags.DEFINE_integer("seq_length", 128, "Longest pair, in WordPieces.")
  flags.DEFINE_list("losses", ["bce"], "Our losses to run (bce, listwise).")
  peer_flags.define("sentence-transformers")
  flags.mark_flag_as_required("work_dir")


def _program(args):
  """Runs `python -m <args>` from the repository root; its output."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, "-m"] + args, cwd=ROOT, env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True)
  if proc.returncode:
    raise RuntimeError(f"{args[0]} failed:\n{proc.stdout[-3000:]}")
  return proc.stdout


def _mining_flags():
  if FLAGS.smoke:  # a random retriever's cosines are all near 1
    return ["--num_negatives=2", "--negative_rank_range=0,10",
            "--max_negative_score=1", "--negative_margin=0"]
  return []


def prepare(work):
  """(start dir, vocab, HF start dir, retriever export, the task's rows)."""
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  start, vocab = FLAGS.init_checkpoint, None
  if FLAGS.smoke:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    start, vocab = os.path.join(work, "start"), VOCAB
    if not os.path.exists(start):
      torch.manual_seed(FLAGS.seed)
      hf = os.path.join(work, "hf_random")
      transformers.BertModel(transformers.BertConfig(
          vocab_size=30522, hidden_size=32, num_hidden_layers=1,
          num_attention_heads=4, intermediate_size=37,
          max_position_embeddings=64)).save_pretrained(hf)
      _program(["official_bert.convert_checkpoint", f"--source={hf}",
                f"--output_dir={start}", f"--vocab_file={VOCAB}"])
  vocab = vocab or os.path.join(start, "vocab.txt")
  config = os.path.join(start, "bert_config.json")
  hf_start = FLAGS.hf_model or os.path.join(work, "start_hf")
  if not os.path.exists(hf_start):
    _program(["export.export_checkpoint", "--format=huggingface",
              f"--bert_config_file={config}", f"--init_checkpoint={start}",
              f"--vocab_file={vocab}", f"--export_dir={hf_start}"])
  retriever = os.path.join(work, "retriever")
  if not os.path.exists(retriever):
    _program(["export.export_saved_model", f"--bert_config_file={config}",
              f"--init_checkpoint={start}", f"--vocab_file={vocab}",
              f"--max_seq_length={FLAGS.seq_length}",
              f"--export_dir={retriever}"])
  rows = retrieval_task.write_task(
      os.path.join(work, "task"), FLAGS.train_queries, FLAGS.dev_queries, 4,
      FLAGS.seed, next_sentence=not FLAGS.smoke)
  return start, vocab, hf_start, retriever, rows


def ours(work, turn, loss, start, vocab, retriever):
  out = os.path.join(work, f"ours_{loss}_{turn}")
  shutil.rmtree(out, ignore_errors=True)  # a rerun trains afresh
  load = os.getloadavg()[0]
  log = _program([
      "official_bert.run_reranker", f"--task_data_dir={work}/task",
      f"--retriever={retriever}", f"--loss={loss}",
      f"--bert_config_file={start}/bert_config.json",
      f"--vocab_file={vocab}", f"--init_checkpoint={start}",
      f"--output_dir={out}", "--do_train", "--do_eval",
      f"--max_seq_length={FLAGS.seq_length}",
      f"--train_batch_size={FLAGS.batch_size}",
      f"--learning_rate={FLAGS.learning_rate}",
      f"--num_train_epochs={FLAGS.epochs}", f"--seed={FLAGS.seed}",
      f"--rerank_top_k={FLAGS.rerank_top_k}", "--steps_per_loop=10",
      "--save_checkpoints_steps=100000"] + _mining_flags())
  with open(os.path.join(out, "program.log"), "w", encoding="utf-8") as f:
    f.write(log)
  m = re.search(r"Trained steps \d+\.\.(\d+) .*batch (\d+)\) in ([0-9.]+) s",
                log)
  group = re.search(r"listwise groups of (\d+) passages", log)
  pairs = int(m.group(1)) * int(m.group(2)) * (int(group.group(1)) if group
                                               else 1)
  with open(os.path.join(out, "eval_results.txt"), encoding="utf-8") as f:
    results = {k: float(v) for k, v in (l.split(" = ") for l in f)}
  return {"rate": pairs / float(m.group(3)), "load": load, "out": out,
          "mrr_at_10": results["eval_mrr_at_10"],
          "fused_mrr_at_10": results["eval_fused_mrr_at_10"],
          "retriever_mrr_at_10": results["eval_retriever_mrr_at_10"]}


def _labelled_pairs(rows, negatives_file):
  """(queries, passages, labels) as run_reranker's bce trains on them: each
  distinct (query, passage), 1 for a positive, 0 for a mined negative."""
  mined = {}
  with open(negatives_file, encoding="utf-8") as f:
    for line in f.read().splitlines()[1:]:
      query, *negs = line.split("\t")
      mined[query] = negs
  positives = {}
  for query, positive, *_ in rows:
    positives.setdefault(query, set()).add(positive)
  pairs = {}
  for query, positive, *_ in rows:
    pairs.setdefault((query, positive), 1.0)
    for text in mined.get(" ".join(query.split()), []):
      if text not in positives[query]:
        pairs.setdefault((query, text), 0.0)
  return ([q for q, _ in pairs], [p for _, p in pairs],
          list(pairs.values()))


def theirs(work, turn, hf_start, retriever, rows, negatives_file):
  import datasets  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  import torch  # pylint: disable=g-import-not-at-top
  from sentence_transformers import cross_encoder as ce  # pylint: disable=g-import-not-at-top
  from sentence_transformers.cross_encoder import losses  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.reranking import candidates  # pylint: disable=g-import-not-at-top
  queries, passages, labels = _labelled_pairs(rows["train"], negatives_file)
  model = ce.CrossEncoder(hf_start, num_labels=1,
                          max_length=FLAGS.seq_length, device="cpu")
  positive_weight = max(1.0, (len(labels) - sum(labels)) / sum(labels))
  steps = int(len(labels) / FLAGS.batch_size * FLAGS.epochs)
  args = ce.CrossEncoderTrainingArguments(
      output_dir=os.path.join(work, f"theirs_{turn}"), report_to=[],
      per_device_train_batch_size=FLAGS.batch_size,
      learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.epochs,
      warmup_steps=int(steps * 0.1), weight_decay=0.01, max_grad_norm=1.0,
      seed=FLAGS.seed, save_strategy="no", logging_strategy="no",
      disable_tqdm=True, use_cpu=True)
  trainer = ce.CrossEncoderTrainer(
      model=model, args=args, train_dataset=datasets.Dataset.from_dict(
          {"query": queries, "passage": passages, "label": labels}),
      loss=losses.BinaryCrossEntropyLoss(
          model, pos_weight=torch.tensor(positive_weight)))
  load = os.getloadavg()[0]
  seconds = trainer.train().metrics["train_runtime"]
  # Dev: the retriever's top k of the dev passages, reranked.
  from official_bert.tasks.reranking import retriever as retriever_lib  # pylint: disable=g-import-not-at-top
  embed = tf.saved_model.load(retriever_lib.version_dir(retriever)).signatures[
      "serving_default"]
  dev_queries = [q for q, _ in rows["dev"]]
  dev_passages = [p for _, p in rows["dev"]]
  vectors = [np.concatenate([embed(text=tf.constant(t[i:i + 64]))[
      "sentence_embedding"].numpy() for i in range(0, len(t), 64)])
             for t in (dev_queries, dev_passages)]
  top = candidates.top_candidates(candidates.cosine(*vectors),
                                  FLAGS.rerank_top_k)
  scores = [model.predict([(q, dev_passages[j]) for j in c],
                          batch_size=FLAGS.batch_size,
                          show_progress_bar=False)
            for q, c in zip(dev_queries, top)]
  relevant = [{i} for i in range(len(dev_queries))]
  found = candidates.ranking_metrics(candidates.reranked(top, scores),
                                     relevant)
  fused = candidates.ranking_metrics(  # with the retriever's order, as ours
      candidates.reranked(top, candidates.fused(scores)), relevant)
  return {"rate": len(labels) * FLAGS.epochs / seconds, "load": load,
          "mrr_at_10": found["mrr_at_10"],
          "fused_mrr_at_10": fused["mrr_at_10"]}


def main(argv):
  del argv
  if importlib.util.find_spec("datasets") is None:
    raise cli.Error("sentence-transformers' trainer needs the datasets "
                    "package, which is not installed: pip install datasets")
  if not FLAGS.smoke and not FLAGS.init_checkpoint:
    raise cli.Error("--init_checkpoint is required (a converted BERT "
                    "directory), or --smoke.")
  if FLAGS.smoke:
    FLAGS.train_queries, FLAGS.dev_queries = 32, 16
    FLAGS.rerank_top_k, FLAGS.seq_length, FLAGS.batch_size = 8, 32, 8
  import numpy as np  # pylint: disable=g-import-not-at-top
  work = FLAGS.work_dir
  os.makedirs(work, exist_ok=True)
  start, vocab, hf_start, retriever, rows = prepare(work)
  print(f"reranker: start {start}, {FLAGS.train_queries} train and "
        f"{FLAGS.dev_queries} dev queries, top {FLAGS.rerank_top_k}, batch "
        f"{FLAGS.batch_size} pairs, lr {FLAGS.learning_rate}, {FLAGS.epochs} "
        f"epochs, seq {FLAGS.seq_length}, {os.cpu_count()} cores", flush=True)
  rounds = []
  for turn in range(FLAGS.rounds):
    sides = {f"ours_{loss}": ours(work, turn, loss, start, vocab, retriever)
             for loss in FLAGS.losses}
    first = next(iter(sides.values()))
    negatives = os.path.join(first["out"], "reranker_negatives.tsv")
    sides["theirs"] = theirs(work, turn, hf_start, retriever, rows,
                             negatives)
    print(f"  round {turn + 1} retriever alone: dev MRR@10 "
          f"{first['retriever_mrr_at_10']:.4f}", flush=True)
    for name, side in sides.items():
      print(f"  round {turn + 1} {name:13s} train {side['rate']:7.1f} "
            f"pairs/s | dev MRR@10 {side['mrr_at_10']:.4f}, fused with "
            f"the retriever {side['fused_mrr_at_10']:.4f} | load "
            f"{side['load']:.2f}", flush=True)
    rounds.append(sides)
  median = {name: {key: float(np.median([t[name][key] for t in rounds]))
                   for key in ("rate", "mrr_at_10", "fused_mrr_at_10")}
            for name in rounds[0]}
  summary = {"retriever_mrr_at_10": rounds[0][next(iter(rounds[0]))][
      "retriever_mrr_at_10"]}
  for name in rounds[0]:
    summary[f"{name}_mrr_at_10"] = median[name]["mrr_at_10"]
    summary[f"{name}_fused_mrr_at_10"] = median[name]["fused_mrr_at_10"]
    if name != "theirs":
      summary[f"{name}_train_x"] = (median[name]["rate"]
                                    / median["theirs"]["rate"])
  print("ours/sentence-transformers: " + ", ".join(
      f"{name} train {summary[f'{name}_train_x']:.2f}x, dev MRR@10 "
      f"{summary[f'{name}_mrr_at_10']:.4f}" for name in rounds[0]
      if name != "theirs") + f" vs {summary['theirs_mrr_at_10']:.4f} "
        f"(retriever alone {summary['retriever_mrr_at_10']:.4f}; at "
        f"{time.strftime('%H:%M', time.gmtime())} UTC)", flush=True)
  print("summary: " + json.dumps({k: round(v, 4) for k, v in
                                  summary.items()}), flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)  # a missing package or bad flag: one sentence, the last line
