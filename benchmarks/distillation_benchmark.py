"""Distillation: the teacher, its distilled student, the student without a teacher, Hugging Face's.

From one pretrained BERT (a converted checkpoint folder, e.g. all-MiniLM-L6-v2
converted by `python -m official_bert.convert_checkpoint`, and the same
model as a Hugging Face directory), on a classification task in
run_classifier's `--task_data_dir` layout (train.tsv, dev.tsv:
`sentence<TAB>label`; default: the short-sentence task of tools/short_task.py
written from the shared corpus), each row trains with the same batch, epochs,
rate, warmup, decay and length, in turns, for every seed:

  teacher         `run_classifier` from --init_checkpoint, all its layers
  distilled       the teacher's command plus `--student_layers=L
                  --teacher=<the teacher of seed 1>` (soft targets at
                  --distill_temperature, mixed by --distill_alpha)
  distilled+data  with --distill_examples=N: the distilled student with
                  `--distill_data` (N more texts of --task, unlabelled)
  student         the same student layers, labels only (no --teacher)
  hf_student      transformers' `Trainer` on `BertForSequenceClassification`
                  from --hf_model with the same layers kept, labels only

A multi-label task (--task=topics, or --task_type=multi_label with
--task_data_dir: `a|b` labels) trains every row as run_classifier
--task_type=multi_label does (one sigmoid per label, binary cross-entropy;
a distilled student fits the teacher's per-label probabilities), Hugging
Face's with problem_type="multi_label_classification"; the metric is then
dev micro-F1 at each side's default threshold 0.5 (ours untuned), not
accuracy, and --ort (single-label) is skipped.

It prints each row's dev metric (mean of the seeds and the spread), its
training time (the "Trained steps" line's seconds; Trainer's train_runtime),
and, for our rows, the export's one text p50 (ms) and batch 32 texts/s as
served (`serving_default`, raw text in, loaded in this process, library
default threads); for hf_student the same through `BertTokenizerFast` and
torch.

--ort (the default; --latency_only alone, on a work_dir's runs): one text
from raw text, p50 over interleaved rounds, the first seed's teacher served
by ONNX Runtime (`export_checkpoint --format=huggingface`, then
`torch.onnx.export`; float32 and `quantize_dynamic` at its defaults, after
`BertTokenizerFast`, ORT's default threads) against our exports: float32
from raw text (`--xla_single_text`), float32 after the client tokenizer
(`serving_ids`), the student's float32 LiteRT model (`--litert`, 1 and 2
threads) and int8 (`--quantize=int8`, the client tokenizer, 1 LiteRT
thread; the teacher's on 1 and 2), with the tokenizer/model split where a
client tokenizes.

    python -m benchmarks.distillation_benchmark --work_dir=/tmp/distill \
        --init_checkpoint=minilm --hf_model=/path/to/all-MiniLM-L6-v2 \
        --student_layers=0,2,4
    python -m benchmarks.distillation_benchmark --smoke --work_dir=/tmp/ds  # tiny

--smoke: a tiny random 4-layer model (pretrained for no steps: the teacher
starts from random weights) and 400 training sentences: checks the script
end to end in a few minutes, measures nothing worth reporting.
"""

import json
import os
import re
import shutil
import time

from absl import app
from absl import flags
import numpy as np

from benchmarks import logged_run

def define_flags():
  """The benchmark's flags (defined when it runs as a program)."""
  flags.DEFINE_string("work_dir", None, "Runs, exports and the task go here.")
  flags.DEFINE_string("task_data_dir", None, "A classification task "
                      "(train.tsv, dev.tsv with sentence, label); default: "
                      "tools/short_task.py's, written to work_dir/task.")
  flags.DEFINE_string("init_checkpoint", None, "The pretrained model (a "
                      "folder with bert_config.json, vocab.txt, the checkpoint).")
  flags.DEFINE_string("hf_model", None, "The same model as a Hugging Face "
                      "directory (for hf_student; unset: no hf_student row).")
  flags.DEFINE_string("student_layers", "0,2,4", "The layers students keep.")
  flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds, in turns.")
  flags.DEFINE_float("learning_rate", 5e-5, "Peak rate, every row.")
  flags.DEFINE_float("num_train_epochs", 3, "Epochs, every row.")
  flags.DEFINE_integer("train_batch_size", 32, "Batch, every row.")
  flags.DEFINE_integer("max_seq_length", 128, "Length, every row.")
  flags.DEFINE_float("distill_alpha", 0.5, "The distilled row's --distill_alpha.")
  flags.DEFINE_float("distill_temperature", 2.0, "Its --distill_temperature.")
  flags.DEFINE_integer("train_examples", 4000, "Default task: training "
                       "sentences.")
  flags.DEFINE_integer("dev_examples", 1000, "Default task: dev sentences.")
  flags.DEFINE_enum("task", "short", ["short", "hidden_topic", "topics"],
                    "Without --task_data_dir: tools/short_task.py's task to "
                    "write (topics: multi-label).")
  flags.DEFINE_enum("task_type", None, ["classification", "multi_label"],
                    "run_classifier's --task_type for every row; default: "
                    "multi_label for --task=topics, else classification.")
  flags.DEFINE_integer("distill_examples", 0, "Without --task_data_dir: this "
                       "many more texts of the task, unlabelled, for a "
                       "`distilled+data` row (the distilled student with "
                       "--distill_data); 0: no such row.")
  flags.DEFINE_integer("latency_calls", 200, "One-text calls timed per export.")
  flags.DEFINE_bool("ort", True, "Also time one text against the teacher "
                    "served by ONNX Runtime (float32 and quantize_dynamic's "
                    "int8), our exports in float32 (--xla_single_text) and "
                    "int8 (LiteRT after the client tokenizer); see the "
                    "module docstring. Needs torch, transformers, onnxruntime.")
  flags.DEFINE_bool("latency_only", False, "Train nothing: the --ort timing "
                    "alone, of the first seed's teacher and distilled runs "
                    "and exports already in --work_dir.")
  flags.DEFINE_integer("latency_rounds", 6, "--ort: interleaved rounds; each "
                       "peer answers --latency_calls / rounds texts a round.")
  flags.DEFINE_bool("smoke", False, "A tiny random model and task (see the "
                    "module docstring).")


FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "..", "shared", "data", "bert_uncased_vocab.txt")


def _multi_label():
  if FLAGS.task_type:
    return FLAGS.task_type == "multi_label"
  return FLAGS.task == "topics" and not FLAGS.task_data_dir


def _metric_name():
  return "micro_f1" if _multi_label() else "accuracy"


def _write_task(work, vocab):
  """work/task (train.tsv, dev.tsv) of --task, and with --distill_examples
  work/unlabelled.tsv: more texts of the task without their labels."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from tools import short_task  # pylint: disable=g-import-not-at-top
  task = os.path.join(work, "task")
  os.makedirs(task, exist_ok=True)
  tokenizer = tokenization.FullTokenizer(vocab, True)
  train, rest = short_task.classification_data(
      FLAGS.task, tokenizer, FLAGS.train_examples,
      FLAGS.dev_examples + FLAGS.distill_examples, seed=0)
  short_task.write_tsv(os.path.join(task, "train.tsv"), train)
  short_task.write_tsv(os.path.join(task, "dev.tsv"),
                       rest[:FLAGS.dev_examples])
  short_task.write_tsv(os.path.join(work, "unlabelled.tsv"),
                       rest[FLAGS.dev_examples:], with_label=False)
  return task


def _smoke_model(work):
  """A tiny random 'pretrained' folder (bert_config.json, vocab.txt and a
  checkpoint of a 0-step pretraining run) and its Hugging Face directory."""
  folder = os.path.join(work, "tiny")
  if os.path.exists(os.path.join(folder, "bert_config.json")):
    return folder, os.path.join(work, "tiny_hf")
  os.makedirs(folder, exist_ok=True)
  config = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=4,
                num_attention_heads=2, intermediate_size=128,
                hidden_act="gelu", hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1, max_position_embeddings=128,
                type_vocab_size=2, initializer_range=0.02)
  with open(os.path.join(folder, "bert_config.json"), "w") as f:
    json.dump(config, f)
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import encoder  # pylint: disable=g-import-not-at-top
  from official_bert.training import release_folder  # pylint: disable=g-import-not-at-top
  bert_config = configs.BertConfig.from_json_file(
      os.path.join(folder, "bert_config.json"))
  release_folder.write(folder, encoder.BertEncoder.from_bert_config(
      bert_config), bert_config, vocab=VOCAB)
  hf = os.path.join(work, "tiny_hf")
  logged_run.run(["export.export_checkpoint", "--format=huggingface",
        f"--init_checkpoint={folder}",
        f"--bert_config_file={os.path.join(folder, 'bert_config.json')}",
        f"--vocab_file={os.path.join(folder, 'vocab.txt')}",
        f"--export_dir={hf}"], os.path.join(work, "tiny_hf.log"), cwd=ROOT)
  return folder, hf


def _ours(work, name, seed, task, model, extra, export_suffix=None):
  """Trains (from scratch) and exports the run `name`-seed`seed`; with
  `export_suffix`, reruns its command instead (nothing left to train) to
  export again to <run>-`export_suffix`."""
  out = os.path.join(work, f"{name}-seed{seed}")
  export = out + "-" + (export_suffix or "export")
  for old in ((export,) if export_suffix else (out, export)):
    shutil.rmtree(old, ignore_errors=True)
  log, _ = logged_run.run(
      ["official_bert.run_classifier", f"--task_data_dir={task}",
       "--text_column=sentence", "--label_column=label",
       f"--bert_config_file={os.path.join(model, 'bert_config.json')}",
       f"--vocab_file={os.path.join(model, 'vocab.txt')}",
       f"--init_checkpoint={model}", "--do_train", "--do_eval",
       f"--max_seq_length={FLAGS.max_seq_length}",
       f"--train_batch_size={FLAGS.train_batch_size}",
       f"--learning_rate={FLAGS.learning_rate}",
       f"--num_train_epochs={FLAGS.num_train_epochs}",
       f"--seed={seed}", f"--output_dir={out}",
       f"--export_dir={export}"]
      + (["--task_type=multi_label"] if _multi_label() else []) + extra,
      out + (f"-{export_suffix}" if export_suffix else "") + ".log", cwd=ROOT)
  with open(os.path.join(out, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f)
  seconds = re.search(r"^Trained steps .* in ([\d.]+) s", log, re.M)
  metric = _metric_name()
  return {"metric": float(results[f"eval_{metric}"]),
          "train_s": float(seconds.group(1)) if seconds else float("nan"),
          "export": os.path.join(export, "1"), "output_dir": out,
          "teacher_metric": float(results.get(f"teacher_eval_{metric}",
                                              "nan"))}


def _hf_student(work, seed, task, hf_model, layers):
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(os.cpu_count() or 1)
  tokenizer = transformers.BertTokenizerFast.from_pretrained(hf_model)

  def split(name):
    rows = [line.rstrip("\n").split("\t") for line in
            open(os.path.join(task, f"{name}.tsv"), encoding="utf-8")][1:]
    return rows

  train, dev = split("train"), split("dev")
  multi = _multi_label()
  if multi:  # `a|b`, an empty cell none: as run_classifier reads them
    import types  # pylint: disable=g-import-not-at-top
    from official_bert.tasks.classification import multi_label_task  # pylint: disable=g-import-not-at-top

    def names_of(cell):
      return multi_label_task.split_labels(types.SimpleNamespace(label=cell),
                                           "|")
    labels = sorted({name for _, cell in train for name in names_of(cell)})

    def target(label):
      names = set(names_of(label))
      return [float(name in names) for name in labels]
  else:
    labels = sorted({label for _, label in train})
    target = labels.index
  model = transformers.BertForSequenceClassification.from_pretrained(
      hf_model, num_labels=len(labels),
      problem_type=("multi_label_classification" if multi
                    else "single_label_classification"))
  keep = [int(i) for i in layers.split(",")]
  model.bert.encoder.layer = torch.nn.ModuleList(
      [model.bert.encoder.layer[i] for i in keep])
  model.config.num_hidden_layers = len(keep)

  def dataset(rows):  # a list of features: what Trainer's loader takes
    encoded = tokenizer([text for text, _ in rows], truncation=True,
                        max_length=FLAGS.max_seq_length)
    return [dict({k: v[i] for k, v in encoded.items()},
                 labels=target(label))
            for i, (_, label) in enumerate(rows)]

  train_set = dataset(train)
  steps = int(len(train_set) / FLAGS.train_batch_size * FLAGS.num_train_epochs)
  args = transformers.TrainingArguments(
      output_dir=os.path.join(work, f"hf_student-seed{seed}"),
      per_device_train_batch_size=FLAGS.train_batch_size,
      per_device_eval_batch_size=64, learning_rate=FLAGS.learning_rate,
      num_train_epochs=FLAGS.num_train_epochs,
      warmup_steps=int(steps * 0.1), weight_decay=0.01, max_grad_norm=1.0,
      seed=int(seed), report_to=[], save_strategy="no",
      logging_strategy="no", disable_tqdm=True, use_cpu=True)
  trainer = transformers.Trainer(
      model=model, args=args, train_dataset=train_set,
      data_collator=transformers.DataCollatorWithPadding(tokenizer))
  result = trainer.train()
  logits = trainer.predict(dataset(dev)).predictions
  if multi:  # sigmoid > 0.5, micro-F1 as run_classifier reports it
    from official_bert.training import classifier_metrics  # pylint: disable=g-import-not-at-top
    metric = classifier_metrics.multi_label_metrics(
        labels=[target(label) for _, label in dev],
        predicted=logits > 0, label_names=labels)["micro_f1"]
  else:
    gold = np.array([labels.index(label) for _, label in dev])
    metric = float((logits.argmax(-1) == gold).mean())
  model.eval()
  texts = [text for text, _ in dev]

  def serve(batch):
    with torch.no_grad():
      return model(**tokenizer(batch, return_tensors="pt", padding=True,
                               truncation=True,
                               max_length=FLAGS.max_seq_length)).logits

  p50, rate = _latency(serve, texts)
  return {"metric": float(metric),
          "train_s": float(result.metrics["train_runtime"]), "p50_ms": p50,
          "batch32_texts_per_s": rate}


def _latency(serve, texts):
  """(one text p50 in ms, batch-32 texts/s) of `serve(list of texts)`."""
  for text in texts[:10]:
    serve([text])
  times = []
  for i in range(FLAGS.latency_calls):
    start = time.perf_counter()
    serve([texts[i % len(texts)]])
    times.append(time.perf_counter() - start)
  batches = [texts[i:i + 32] for i in range(0, min(len(texts), 320), 32)]
  serve(batches[0])
  start = time.perf_counter()
  for batch in batches:
    serve(batch)
  return (float(np.median(times) * 1e3),
          sum(len(b) for b in batches) / (time.perf_counter() - start))


def _version(export_dir):
  """The highest version folder of an export."""
  versions = [v for v in os.listdir(export_dir) if v.isdigit()]
  return os.path.join(export_dir, max(versions, key=int))


def _served(export, texts):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  signature = tf.saved_model.load(export).signatures["serving_default"]
  return _latency(lambda batch: signature(text=tf.constant(batch)), texts)


def _onnx_teacher(work, teacher_run, vocab):
  """The teacher as a user serves it with ONNX Runtime: our run exported by
  `export_checkpoint --format=huggingface`, `BertForSequenceClassification`
  written by `torch.onnx.export`, float32 and `quantize_dynamic` at its
  defaults. Returns (BertTokenizerFast, {name: InferenceSession}, hf dir)."""
  import onnxruntime  # pylint: disable=g-import-not-at-top
  from onnxruntime.quantization import quantize_dynamic  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from benchmarks import onnx_peer  # pylint: disable=g-import-not-at-top
  hf_dir = teacher_run + "-hf"
  shutil.rmtree(hf_dir, ignore_errors=True)
  logged_run.run(["export.export_checkpoint", "--format=huggingface",
                  f"--bert_config_file={teacher_run}/bert_config.json",
                  f"--init_checkpoint={teacher_run}", f"--vocab_file={vocab}",
                  f"--export_dir={hf_dir}"], hf_dir + ".log", cwd=ROOT)
  tokenizer = transformers.BertTokenizerFast.from_pretrained(hf_dir)
  model = transformers.BertForSequenceClassification.from_pretrained(
      hf_dir).eval()
  path = os.path.join(work, "teacher.onnx")
  onnx_peer.export(model, tokenizer(["hello world"], return_tensors="pt"),
                   path, {"logits": (lambda found: found.logits,
                                     {0: "batch"})})
  quantize_dynamic(path, path.replace(".onnx", "_int8.onnx"))
  sessions = {kind: onnxruntime.InferenceSession(  # ORT's default threads
      file, providers=["CPUExecutionProvider"]) for kind, file in (
          ("float32", path), ("int8", path.replace(".onnx", "_int8.onnx")))}
  return tokenizer, sessions, hf_dir


def _against_onnx_runtime(work, teacher_run, teacher_export, student_export,
                          student_litert, texts):
  """One text's p50 from raw text, in interleaved rounds: the teacher served
  by ONNX Runtime (float32, int8) against our student's and teacher's
  exports (float32 with --xla_single_text; int8 on 1 and 2 LiteRT threads
  after the client tokenizer), each split into tokenizer and model where
  the client tokenizes. Prints the table and returns {peer: p50 ms}."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  from export import client_tokenizer  # pylint: disable=g-import-not-at-top
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  vocab = os.path.join(teacher_export, "assets", next(  # --vocab_file's name
      f for f in os.listdir(os.path.join(teacher_export, "assets"))
      if f.endswith(".txt")))
  tokenizer, sessions, _ = _onnx_teacher(work, teacher_run, vocab)
  from benchmarks import onnx_peer  # pylint: disable=g-import-not-at-top
  names = onnx_peer.INPUT_NAMES
  client = client_tokenizer.ClientTokenizer(
      vocab, do_lower_case=True, max_seq_length=FLAGS.max_seq_length)
  peers = {}  # name: (tokenize or None, model)
  for kind, session in sessions.items():
    peers[f"teacher ORT {kind}"] = (
        lambda t: tokenizer(t, truncation=True,
                            max_length=FLAGS.max_seq_length,
                            return_tensors="np"),
        lambda x, s=session: s.run(None, {n: x[n].astype(np.int64)
                                          for n in names})[0])
  for who, export in (("student", student_export), ("teacher", teacher_export)):
    signatures = tf.saved_model.load(export).signatures
    peers[f"{who} ours float32"] = (None, lambda t, f=signatures[
        "serving_default"]: f(text=tf.constant(t))["logits"].numpy())
    # The client tokenizes, as ORT's does: serving_ids (XLA for one row).
    peers[f"{who} ours float32 client"] = (
        client, lambda x, f=signatures["serving_ids"]: f(
            input_word_ids=tf.constant(x["input_word_ids"]),
            input_mask=tf.constant(x["input_mask"]),
            input_type_ids=tf.constant(x["input_type_ids"]))["logits"].numpy())
    if not os.path.exists(os.path.join(export, "model.tflite")):
      print(f"{export} has no model.tflite (its int8 gate failed?): no int8 "
            f"row for the {who}", flush=True)
      continue
    for threads in ((1,) if who == "student" else (1, 2)):
      model = litert_int8.Int8Model.load(export, num_threads=threads)
      peers[f"{who} ours int8 {threads}t"] = (
          client, lambda x, m=model: m(**x)["logits"])
  for threads in (1, 2):  # --litert: the student's float32 LiteRT model
    model = litert_int8.Int8Model.load(student_litert, num_threads=threads)
    peers[f"student ours LiteRT {threads}t"] = (
        client, lambda x, m=model: m(**x)["logits"])
  # The same answers: ORT float32 against our teacher's float32 export.
  probe = texts[:8]
  ort = np.concatenate([peers["teacher ORT float32"][1](
      peers["teacher ORT float32"][0]([t])) for t in probe])
  ours = np.concatenate([peers["teacher ours float32"][1]([t]) for t in probe])
  print(f"teacher logits, ORT float32 vs ours: max |difference| "
        f"{np.abs(ort - ours).max():.1e}", flush=True)
  times = {name: {"call": [], "tokenizer": [], "model": []} for name in peers}
  order = list(peers)
  per_round = max(1, FLAGS.latency_calls // FLAGS.latency_rounds)
  for text in texts[:10]:  # warm every path (XLA compiles per bucket)
    for tokenize, model in peers.values():
      model(tokenize([text])) if tokenize else model([text])
  for r in range(FLAGS.latency_rounds):
    for name in order[r % len(order):] + order[:r % len(order)]:
      tokenize, model = peers[name]
      for i in range(per_round):
        text = [texts[(r * per_round + i) % len(texts)]]
        start = time.perf_counter()
        inputs = tokenize(text) if tokenize else text
        middle = time.perf_counter()
        model(inputs)
        end = time.perf_counter()
        times[name]["call"].append(end - start)
        if tokenize:
          times[name]["tokenizer"].append(middle - start)
          times[name]["model"].append(end - middle)
  p50 = {name: {part: float(np.median(v) * 1e3) if v else float("nan")
                for part, v in parts.items()} for name, parts in times.items()}
  print(f"one text from raw text, p50 ms over {FLAGS.latency_rounds} "
        f"interleaved rounds of {per_round} calls (load average "
        f"{os.getloadavg()[0]:.2f}):")
  print(f"{'peer':<28} {'call':>7} {'tokenizer':>10} {'model':>7} "
        f"{'vs ORT float32':>15} {'vs ORT int8':>12}")
  for name, parts in p50.items():
    print(f"{name:<28} {parts['call']:>7.2f} {parts['tokenizer']:>10.2f} "
          f"{parts['model']:>7.2f} "
          f"{parts['call'] / p50['teacher ORT float32']['call']:>14.2f}x "
          f"{parts['call'] / p50['teacher ORT int8']['call']:>11.2f}x",
          flush=True)
  return {name: parts["call"] for name, parts in p50.items()}


def main(argv):
  del argv
  work = FLAGS.work_dir
  os.makedirs(work, exist_ok=True)
  if FLAGS.smoke:
    model, hf_model = _smoke_model(work)
  else:
    if not FLAGS.init_checkpoint:
      raise app.UsageError("--init_checkpoint is required (or --smoke).")
    model, hf_model = FLAGS.init_checkpoint, FLAGS.hf_model
  task = FLAGS.task_data_dir or _write_task(work, os.path.join(model,
                                                                "vocab.txt"))
  print(f"load average {os.getloadavg()[0]:.2f}; task {task}; model {model}; "
        f"student layers {FLAGS.student_layers}", flush=True)
  dev = [line.split("\t")[0] for line in
         open(os.path.join(task, "dev.tsv"), encoding="utf-8")][1:]
  first = os.path.join(work, f"%s-seed{FLAGS.seeds[0]}")
  if FLAGS.latency_only:
    _against_onnx_runtime(work, first % "teacher",
                          _version(first % "teacher" + "-export"),
                          _version(first % "distilled" + "-export"),
                          _version(first % "distilled" + "-litert"), dev)
    return
  # The served exports: one text XLA-compiled, and the int8 model.
  ort = FLAGS.ort and not _multi_label()
  if FLAGS.ort and not ort:
    print("--ort: skipped (ONNX Runtime's teacher is a single-label "
          "classifier here)", flush=True)
  serve = ["--xla_single_text", "--quantize=int8"] if ort else []
  rows = {name: [] for name in ("teacher", "distilled", "distilled+data",
                                "student", "hf_student")}
  teacher_dir = None
  for seed in FLAGS.seeds:  # in turns
    teacher = _ours(work, "teacher", seed, task, model, serve)
    rows["teacher"].append(teacher)
    teacher_dir = teacher_dir or teacher["output_dir"]
    student = ["--student_layers=" + FLAGS.student_layers]
    distill = student + [f"--teacher={teacher_dir}",
                         f"--distill_alpha={FLAGS.distill_alpha}",
                         f"--distill_temperature={FLAGS.distill_temperature}"]
    rows["distilled"].append(_ours(work, "distilled", seed, task, model,
                                   distill + serve))
    if ort and seed == FLAGS.seeds[0]:  # its float32 LiteRT model
      _ours(work, "distilled", seed, task, model, distill + ["--litert"],
            export_suffix="litert")
    if FLAGS.distill_examples and not FLAGS.task_data_dir:
      rows["distilled+data"].append(_ours(
          work, "distilled+data", seed, task, model, student + [
              f"--teacher={teacher_dir}",
              f"--distill_data={os.path.join(work, 'unlabelled.tsv')}",
              f"--distill_alpha={FLAGS.distill_alpha}",
              f"--distill_temperature={FLAGS.distill_temperature}"]))
    rows["student"].append(_ours(work, "student", seed, task, model, student))
    if hf_model:
      rows["hf_student"].append(_hf_student(work, seed, task, hf_model,
                                            FLAGS.student_layers))
    print(f"seed {seed}: " + ", ".join(
        f"{name} {runs[-1]['metric']:.4f}" for name, runs in rows.items()
        if runs), flush=True)
  print(f"{'row':<14} {'dev ' + _metric_name():>22} {'train s':>9} {'p50 ms':>8} "
        f"{'b32 texts/s':>12}")
  for name, runs in rows.items():
    if not runs:
      continue
    metric = [r["metric"] for r in runs]
    if "export" in runs[0]:
      p50, rate = _served(runs[0]["export"], dev)
    else:
      p50, rate = runs[0]["p50_ms"], runs[0]["batch32_texts_per_s"]
    print(f"{name:<14} {np.mean(metric):>9.4f} (spread {np.ptp(metric):.4f})"
          f" {np.mean([r['train_s'] for r in runs]):>9.1f} {p50:>8.2f} "
          f"{rate:>12.1f}", flush=True)
  if ort:
    _against_onnx_runtime(work, first % "teacher", rows["teacher"][0]["export"],
                          rows["distilled"][0]["export"],
                          _version(first % "distilled" + "-litert"), dev)
  print(f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
