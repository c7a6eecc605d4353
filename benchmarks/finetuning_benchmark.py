"""Fine-tuning: official_bert's programs vs Hugging Face `Trainer`, in turns.

The same weights (a BERT initialised at random in Hugging Face, 6 layers,
H384, A6, I1536 by default, or --hf_model's pretrained one, converted to
ours with convert_checkpoint), the same token ids (our tokenizer, the same vocab), the same hyperparameters
(batch 32, learning rate, epochs, warmup 10%, weight decay 0.01, clipping
1.0, dropout 0.1, seed), on three tasks:

  short   real short sentences of the Python docs (../shared/data), an
          SST-2-like rule label (a negative or error word in it), seq 128;
  long    texts near 128 WordPieces (consecutive sentences of a document),
          labelled by the half of the docs they come from, seq 128;
  squad   the pydocs SQuAD task (tools/squad_task.py), windows of 384;
  topics  (not run by default) multi-label: the short sentences labelled
          with the topics they name (tools/short_task.py, 5 topics), ours
          `run_classifier --task_type=multi_label`, HF's
          `problem_type="multi_label_classification"`; dev micro F1 at 0.5,
          beside predicting every topic's (the floor a model that learned
          must beat). From a pretrained start (`--hf_model=DIR
          --train_examples=4096 --epochs=3`) or from random weights
          (`--model=tiny --train_examples=8192 --epochs=4
          --learning_rate=3e-4`) both sides learn them.

Ours is the user's command (`run_classifier`, `run_squad`: every batch
padded to its longest example, the position-wise layers on its tokens only,
the original's AdamWeightDecay update);
Hugging Face's is `Trainer` with its defaults (`DataCollatorWithPadding`:
each batch padded to its longest; torch AdamW). Per task and side: training
time and examples/s (ours from the program's "Trained steps" line: it
includes tracing the step, as a user waits for it; HF's `train_runtime`),
prediction examples/s (the test split; ours from the program's line, HF's
`predict` + the same postprocessing for SQuAD), the dev metric, and the
ratios ours/HF. Tasks run one after the other, each side in turn:

    python -m benchmarks.finetuning_benchmark --train_examples=4000   # 15 min
    python -m benchmarks.finetuning_benchmark --tasks=short --rounds=3 # medians
    python -m benchmarks.finetuning_benchmark --model=base --tasks=short # 14m
    python -m benchmarks.finetuning_benchmark --tasks=topics  # speed only
    python -m benchmarks.finetuning_benchmark --tasks=topics --model=tiny \
      --train_examples=8192 --epochs=4 --learning_rate=3e-4  # 10m loaded

(times on 2 idle cores; docs/performance.md has the results). Ours' own
output goes to WORK/<task>_ours/program.log; --keep_work keeps WORK.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import peer_flags

flags.DEFINE_list("tasks", ["short", "long", "squad"], "Tasks to run.")
flags.DEFINE_enum("model", "small", ["small", "base", "tiny"], "small: L6 "
                  "H384 A6 I1536; base: BERT-Base (L12 H768 A12 I3072); "
                  "tiny: BERT-Tiny (L2 H128 A2 I512), cheap enough to learn "
                  "topics from random weights (1,024 steps).")
flags.DEFINE_string("hf_model", None, "Start both sides from this Hugging "
                    "Face BERT directory (e.g. the pretrained one "
                    "finetuning_quality --stage=hf writes to W/hf_model; it "
                    "needs a vocab.txt, else BERT's uncased vocab is copied "
                    "in) instead of a --model from random weights.")
flags.DEFINE_integer("train_examples", 2048, "Training examples of short "
                     "and topics (a multiple of 32: the same steps both "
                     "ways).")
flags.DEFINE_integer("predict_examples", 1024, "Dev/test examples of "
                     "short and topics.")
flags.DEFINE_integer("long_train", 2048, "Training examples of long.")
flags.DEFINE_integer("long_predict", 256, "Dev/test examples of long.")
flags.DEFINE_integer("squad_train", 1024, "SQuAD training questions.")
flags.DEFINE_integer("squad_predict", 256, "SQuAD dev questions.")
peer_flags.define("HF")
flags.DEFINE_bool("keep_work", False, "Keep the work directory (data, "
                  "models, our programs' logs) and print its path.")
flags.DEFINE_list("ours_flags", [], "Extra flags for our programs, e.g. "
                  "--ours_flags=--nodynamic_padding.")

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tools import short_task  # pylint: disable=g-import-not-at-top,wrong-import-position
SIZES = {"small": dict(hidden_size=384, num_hidden_layers=6,
                       num_attention_heads=6, intermediate_size=1536),
         "base": dict(hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072),
         "tiny": dict(hidden_size=128, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=512)}
def _load():
  return os.getloadavg()[0]


# ------------------------------------------------------------------ ours ----
def run_ours(args, what):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  load = _load()
  proc = subprocess.run([sys.executable, "-m"] + args + FLAGS.ours_flags,
                        cwd=ROOT, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
  out = next(a.split("=", 1)[1] for a in args if a.startswith("--output_dir="))
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "program.log"), "w", encoding="utf-8") as f:
    f.write(proc.stdout)
  if proc.returncode:
    raise RuntimeError(f"{what} failed:\n{proc.stdout[-3000:]}")
  train = re.search(r"Trained steps \d+\.\.\d+ .* in ([0-9.]+) s", proc.stdout)
  predict = re.search(r"(\d+) (?:test )?predictions in ([0-9.]+) s",
                      proc.stdout)
  # The steady rate: the progress lines' seq/s (they leave out the first,
  # tracing step), as a harmonic mean (the loops have equal steps).
  rates = [float(r) for r in re.findall(r"step \d+/\d+ .* ([0-9.]+) seq/s",
                                        proc.stdout)]
  return {"train_s": float(train.group(1)),
          "steady_rate": len(rates) / sum(1 / r for r in rates),
          "predict_n": int(predict.group(1)),
          "predict_s": float(predict.group(2)), "load": load}


def common_flags(work, lr):
  return [f"--bert_config_file={work}/ours/bert_config.json",
          f"--vocab_file={work}/ours/vocab.txt",
          f"--init_checkpoint={work}/ours", f"--learning_rate={lr}",
          f"--num_train_epochs={FLAGS.epochs}",
          f"--train_batch_size={FLAGS.batch_size}",
          f"--predict_batch_size={FLAGS.batch_size}",
          f"--seed={FLAGS.seed}", "--steps_per_loop=10",
          "--save_checkpoints_steps=100000", "--do_train", "--do_predict"]


# -------------------------------------------------------------------- HF ----
def hf_trainer(model, train, work, num_examples, collator):
  import math  # pylint: disable=g-import-not-at-top
  from transformers import Trainer, TrainingArguments  # pylint: disable=g-import-not-at-top
  steps = math.ceil(num_examples / FLAGS.batch_size) * FLAGS.epochs
  args = TrainingArguments(
      output_dir=os.path.join(work, "hf_out"), report_to=[],
      per_device_train_batch_size=FLAGS.batch_size,
      per_device_eval_batch_size=FLAGS.batch_size,
      learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.epochs,
      warmup_steps=int(steps * 0.1), weight_decay=0.01, max_grad_norm=1.0,
      seed=FLAGS.seed, save_strategy="no", logging_strategy="no",
      disable_tqdm=True, use_cpu=True)
  return Trainer(model=model, args=args, train_dataset=train,
                 data_collator=collator)


def timed(fn):
  load = _load()
  t0 = time.time()
  out = fn()
  return out, time.time() - t0, load


# ------------------------------------------------------------------ tasks ----
def classification_task(kind, work, tokenizer, collator, hf_dir):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import BertForSequenceClassification  # pylint: disable=g-import-not-at-top
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top
  from official_bert.training import classifier_metrics  # pylint: disable=g-import-not-at-top
  sizes = ((FLAGS.long_train, FLAGS.long_predict) if kind == "long"
           else (FLAGS.train_examples, FLAGS.predict_examples))
  topics = sorted(short_task.TOPICS)
  multi_label = kind == "topics"

  def label_of(label):  # the class id, or the topics' 0/1 row
    if multi_label:
      return [float(t in label.split("|")) for t in topics]
    return int(label)

  try:
    train, dev = short_task.classification_data(kind, tokenizer, *sizes,
                                                FLAGS.seed)
  except ValueError as e:
    names = ("--train_examples, --predict_examples" if kind == "short"
             else "--long_train, --long_predict")
    raise app.UsageError(f"{e} ({names})")
  task = os.path.join(work, kind)
  os.makedirs(task, exist_ok=True)
  short_task.write_tsv(os.path.join(task, "train.tsv"), train)
  short_task.write_tsv(os.path.join(task, "dev.tsv"), dev)
  short_task.write_tsv(os.path.join(task, "test.tsv"), dev, with_label=False)
  columns = text_files.Columns("sentence", None, "label")
  encoded = {}
  for split in ("train", "dev"):
    examples = text_files.read_examples(
        os.path.join(task, f"{split}.tsv"), columns)
    encoded[split] = (text_files.encode(examples, tokenizer, 128),
                      np.array([label_of(e.label or "") for e in examples]))
  lengths = encoded["train"][0]["input_mask"].sum(1)
  info = (f"{len(train)} train, {len(dev)} dev; pieces mean "
          f"{lengths.mean():.0f}, p95 {np.percentile(lengths, 95):.0f}, "
          f"label 1: {np.round(np.mean(encoded['train'][1], 0), 2)}")
  if multi_label:  # the floor a model that learned anything must beat
    info += (f" {topics}; predicting every topic: dev micro F1 "
             + format(classifier_metrics.multi_label_metrics(
                 encoded["dev"][1], np.ones_like(encoded["dev"][1]) > 0,
                 topics)["micro_f1"], ".3f"))

  def ours():
    out = os.path.join(work, f"{kind}_ours")
    shutil.rmtree(out, ignore_errors=True)
    result = run_ours(["official_bert.run_classifier",
                       f"--task_data_dir={task}", f"--output_dir={out}",
                       "--do_eval", f"--eval_batch_size={FLAGS.batch_size}",
                       "--max_seq_length=128"]
                      + (["--task_type=multi_label"] if multi_label else [])
                      + common_flags(work, FLAGS.learning_rate),
                      "run_classifier")
    key = "eval_micro_f1" if multi_label else "eval_accuracy"
    with open(os.path.join(out, "eval_results.txt")) as f:
      text = f.read()
    result["metric"] = float(re.search(rf"{key} = ([0-9.]+)", text).group(1))
    result["dev_loss"] = float(re.search(r"eval_loss = ([0-9.]+)",
                                         text).group(1))
    return result

  def hf():
    torch.manual_seed(FLAGS.seed)
    model = BertForSequenceClassification.from_pretrained(
        hf_dir, num_labels=len(topics) if multi_label else 2,
        problem_type=("multi_label_classification" if multi_label
                      else "single_label_classification"))
    features = short_task.hf_features(encoded["train"][0])
    for row, label in zip(features, encoded["train"][1]):
      row["labels"] = label.tolist()
    trainer = hf_trainer(model, features, work, len(train), collator)
    _, train_s, load = timed(trainer.train)
    prediction, predict_s, _ = timed(
        lambda: trainer.predict(short_task.hf_features(encoded["dev"][0])))
    logits = torch.tensor(prediction.predictions)
    labels = torch.tensor(encoded["dev"][1])
    if multi_label:  # micro F1 at 0.5, as ours; the mean BCE, as eval_loss
      metric = classifier_metrics.multi_label_metrics(
          encoded["dev"][1], prediction.predictions > 0, topics)["micro_f1"]
      dev_loss = torch.nn.functional.binary_cross_entropy_with_logits(
          logits, labels.float())
    else:
      metric = float(np.mean(prediction.predictions.argmax(-1)
                             == encoded["dev"][1]))
      dev_loss = torch.nn.functional.cross_entropy(logits, labels.long())
    return {"train_s": train_s, "predict_s": predict_s, "predict_n": len(dev),
            "metric": metric, "dev_loss": float(dev_loss), "load": load}
  return info, "micro_f1" if multi_label else "accuracy", len(train), ours, hf


def squad_task(work, tokenizer, collator, hf_dir):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import BertForQuestionAnswering  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_data  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_answers  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_metrics  # pylint: disable=g-import-not-at-top
  from tools import squad_task as squad_tool  # pylint: disable=g-import-not-at-top
  task = os.path.join(work, "squad")
  splits = squad_tool.write_task(task, max_train=FLAGS.squad_train,
                                 max_dev=FLAGS.squad_predict)
  train_examples = squad_data.read_squad_examples(
      os.path.join(task, "train.json"), True, False)
  dev_examples = squad_data.read_squad_examples(
      os.path.join(task, "dev.json"), False, False)
  import random  # pylint: disable=g-import-not-at-top
  random.Random(FLAGS.seed).shuffle(train_examples)  # as run_squad
  features = {
      "train": squad_data.convert_examples_to_features(
          train_examples, tokenizer, 384, 128, 64, True),
      "dev": squad_data.convert_examples_to_features(
          dev_examples, tokenizer, 384, 128, 64, False)}
  lengths = np.array([sum(f.input_mask) for f in features["train"]])
  info = (f"{len(train_examples)} train questions -> "
          f"{len(features['train'])} windows, {len(dev_examples)} dev "
          f"questions -> {len(features['dev'])} windows; pieces mean "
          f"{lengths.mean():.0f}, p95 {np.percentile(lengths, 95):.0f}")

  def ours():
    out = os.path.join(work, "squad_ours")
    shutil.rmtree(out, ignore_errors=True)
    result = run_ours(["official_bert.run_squad", f"--output_dir={out}",
                       f"--train_file={task}/train.json",
                       f"--predict_file={task}/dev.json",
                       "--max_seq_length=384"]
                      + common_flags(work, FLAGS.learning_rate), "run_squad")
    with open(os.path.join(out, "eval_results.txt")) as f:
      result["metric"] = float(re.search(r"^f1 = ([0-9.]+)", f.read(),
                                         re.M).group(1))
    return result

  def hf():
    torch.manual_seed(FLAGS.seed)
    model = BertForQuestionAnswering.from_pretrained(hf_dir)
    inputs, labels = squad_data.feature_arrays(features["train"], True)
    trainer = hf_trainer(model, short_task.hf_features(inputs, labels), work,
                         len(features["train"]), collator)
    _, train_s, load = timed(trainer.train)

    def predict():
      dev_inputs = squad_data.feature_arrays(features["dev"])
      out = trainer.predict(short_task.hf_features(dev_inputs)).predictions
      starts, ends = out  # padded to each batch's longest by -100: fill
      full = np.full((len(features["dev"]), 384), -1e4, np.float32)
      s, e = full.copy(), full.copy()
      s[:, :starts.shape[1]] = np.where(starts == -100, -1e4, starts)
      e[:, :ends.shape[1]] = np.where(ends == -100, -1e4, ends)
      predictions, _, _ = squad_answers.postprocess(
          dev_examples, features["dev"], s.tolist(), e.tolist(),
          tokenizer.vocab)
      return predictions
    predictions, predict_s, _ = timed(predict)
    f1 = squad_metrics.evaluate_v1(splits["dev"], predictions)["f1"]
    return {"train_s": train_s, "predict_s": predict_s,
            "predict_n": len(dev_examples), "metric": f1, "load": load}
  # Steps count questions on our side (as the original), windows on HF's.
  return info, "f1", (len(train_examples), len(features["train"])), ours, hf


# ------------------------------------------------------------------- main ----
def main(argv):
  del argv
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import BertConfig, BertForPreTraining  # pylint: disable=g-import-not-at-top
  from transformers import BertTokenizerFast, DataCollatorWithPadding  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  vocab = os.path.join(ROOT, "..", "shared", "data", "bert_uncased_vocab.txt")
  work = tempfile.mkdtemp(prefix="finetuning_benchmark_")
  try:
    hf_dir = os.path.join(work, "hf")
    if FLAGS.hf_model:
      shutil.copytree(FLAGS.hf_model, hf_dir)
      size = "pretrained " + FLAGS.hf_model
    else:
      torch.manual_seed(FLAGS.seed)
      config = BertConfig(vocab_size=30522, max_position_embeddings=512,
                          **SIZES[FLAGS.model])
      BertForPreTraining(config).save_pretrained(hf_dir)
      size = f"{FLAGS.model} ({SIZES[FLAGS.model]}) from random weights"
    if not os.path.exists(os.path.join(hf_dir, "vocab.txt")):
      shutil.copy(vocab, os.path.join(hf_dir, "vocab.txt"))
    subprocess.run([sys.executable, "-m", "official_bert.convert_checkpoint",
                    f"--source={hf_dir}", f"--output_dir={work}/ours"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    tokenizer = tokenization.FullTokenizer(vocab, True)
    collator = DataCollatorWithPadding(BertTokenizerFast(vocab_file=vocab))
    print(f"model {size}, torch "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cores, "
          f"lr {FLAGS.learning_rate}, {FLAGS.epochs} epochs, batch "
          f"{FLAGS.batch_size}, ours_flags {FLAGS.ours_flags}", flush=True)
    rows = []
    for name in FLAGS.tasks:
      if name == "squad":
        info, metric, n, run_ours_side, run_hf_side = squad_task(
            work, tokenizer, collator, hf_dir)
      else:
        info, metric, n, run_ours_side, run_hf_side = classification_task(
            name, work, tokenizer, collator, hf_dir)
      n_ours, n_hf = n if isinstance(n, tuple) else (n, n)
      print(f"\n[{name}] {info}", flush=True)
      rounds = []
      for r in range(FLAGS.rounds):
        ours, hf = run_ours_side(), run_hf_side()
        ours["train_rate"] = n_ours * FLAGS.epochs / ours["train_s"]
        hf["train_rate"] = n_hf * FLAGS.epochs / hf["train_s"]
        for side in (ours, hf):
          side["predict_rate"] = side["predict_n"] / side["predict_s"]
        # SQuAD: ours takes its steps from the questions (as the original),
        # HF goes over every window: both rates count windows trained on.
        if name == "squad":
          ours["train_rate"] = (int(n_ours / FLAGS.batch_size * FLAGS.epochs)
                                * FLAGS.batch_size / ours["train_s"])
        for side_name, side in (("ours", ours), ("HF Trainer", hf)):
          print(f"  round {r + 1} {side_name:10s} train {side['train_s']:6.1f}"
                f" s {side['train_rate']:6.1f} ex/s | predict "
                f"{side['predict_rate']:6.1f} ex/s | dev {metric} "
                f"{side['metric']:.3f}"
                + (f" loss {side['dev_loss']:.4f}" if "dev_loss" in side
                   else "")
                + f" | load {side['load']:.2f}", flush=True)
        rounds.append((ours, hf))
      ours, hf = ({key: float(np.median([r[i][key] for r in rounds]))
                   for key in rounds[0][i]} for i in (0, 1))
      ratios = (ours["train_rate"] / hf["train_rate"],
                ours["predict_rate"] / hf["predict_rate"])
      print(f"  ours/HF{' (medians)' if FLAGS.rounds > 1 else ''}: train "
            f"{ratios[0]:.2f}x (steady, without the tracing step: "
            f"{ours['steady_rate'] / hf['train_rate']:.2f}x), predict "
            f"{ratios[1]:.2f}x", flush=True)
      rows.append((name, ratios, ours, hf))
    print("\nsummary: " + json.dumps({
        name: {"train_x": round(r[0], 2),
               "train_steady_x": round(o["steady_rate"] / h["train_rate"], 2),
               "predict_x": round(r[1], 2),
               "ours_metric": round(o["metric"], 3),
               "hf_metric": round(h["metric"], 3)}
        for name, r, o, h in rows}), flush=True)
  finally:
    if FLAGS.keep_work:
      print(f"work directory kept: {work}", flush=True)
    else:
      shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
