"""Sentence embeddings: run_embedding vs sentence-transformers, in turns.

The same starting weights (a BERT initialised at random in Hugging Face,
L6 H384 A6 I1536 by default, or --hf_model's pretrained one, converted to
ours with convert_checkpoint and written for sentence-transformers by
`export_checkpoint --format=sentence_transformers`: mean pooling), the same
pairs (tools/retrieval_task.py: sentences of the Python docs and their
rewordings, another sentence of the document as the hard negative), the
same hyperparameters (batch, learning rate, epochs, warmup 10%, weight
decay 0.01, clipping 1.0, dropout 0.1, seed) and the same loss
(MultipleNegativesRankingLoss, scale 20, the hard negatives in):

  ours    `python -m official_bert.run_embedding --do_train --do_eval`, its
          defaults (each batch padded to its longest text) but the update:
          --ours_optimizer (default adamw, the original's AdamWeightDecay,
          what the published figures used; run_embedding's own default is
          now keras_adamw: --ours_optimizer=keras_adamw measures it, with
          epsilon 1e-8); train time from its "Trained steps" line (tracing
          included, as a user waits for it);
  theirs  `SentenceTransformerTrainer` with its defaults (torch AdamW),
          in this process; train time its `train_runtime`.

With --student_layers=0,2,4 both sides distill instead (issue 62): the
teacher is the start fine-tuned by run_embedding for --teacher_epochs
(0: the start itself), written for sentence-transformers too; each student
keeps those layers of the start, with its embeddings, and fits the
teacher's embeddings of every text of the training rows (anchor, positive,
negative) by mean squared error, for --epochs:

  ours    run_embedding's command plus `--teacher=W/teacher
          --student_layers=L --distill_alpha=1` (MSE only);
  theirs  sentence-transformers' layer-reduction recipe
          (model_distillation_layer_reduction.py): the encoder's
          `layer` list cut to L, the teacher's `encode` of the texts as
          labels (before training, as ours caches them), `MSELoss`, the same
          texts per step (batch_size x 3) and the same update settings.

The rates are then texts/s (each side's texts x epochs / train time).

With --mine_hard_negatives=K (issue 63) each round trains four runs: each
side as above and each side again on K negatives its start mined: ours
`--mine_hard_negatives=K` (its defaults: the margin 0.05); theirs the
anchor-positive pairs through `util.mine_hard_negatives(...,
num_negatives=K, output_format="n-tuple")`, its defaults otherwise (the
start's model, the positives as the corpus, no margin), before its trainer.
It prints each side's gain in dev MRR@10 over its own plain run. It and
--student_layers measure different things: the benchmark takes one of them.
With --nofile_negatives no run reads the task's negative column: the plain
runs train on in-batch negatives alone and ours mines among the positives
(`--negative_column=none`), as theirs does. --remine_every_epoch adds that
flag to our mined run (theirs has no equivalent: it mines once).

Both are scored by the same function (embedding_task.retrieval_metrics):
each dev anchor against every dev positive by cosine, MRR@10 and
recall@1. Prints per round and side: train seconds, train pairs/s, MRR@10,
the load average; then the ratios ours/theirs:

    python -m benchmarks.embedding_benchmark --work_dir=/tmp/embedding_benchmark

sentence-transformers' trainer needs its `train` extra: `pip install
datasets` (accelerate is in requirements-test.txt; datasets is not, as CI
runs no benchmark). Without it the benchmark says so in one sentence and
exits with status 1, before it prepares anything.
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
SIZES = {"tiny": (2, 128, 2, 512), "small": (6, 384, 6, 1536)}


def define_flags():
  """The benchmark's flags (defined when it runs as a program)."""
  flags.DEFINE_string("work_dir", None, "Where the task, the weights and the "
                      "runs go (kept; a rerun reuses the weights).")
  flags.DEFINE_enum("size", "small", ["tiny", "small"], "small: L6 H384 A6 "
                    "I1536; tiny: L2 H128 A2 I512.")
  flags.DEFINE_string("hf_model", None, "Start both sides from this Hugging "
                      "Face BERT directory (e.g. the pretrained one "
                      "finetuning_quality --stage=hf writes to W/hf_model) "
                      "instead of a --size BERT from random weights.")
  flags.DEFINE_integer("train_pairs", 2048, "Training pairs (a multiple of "
                       "the batch: the same steps both ways).")
  flags.DEFINE_integer("dev_pairs", 500, "Dev pairs (the retrieval pool).")
  flags.DEFINE_enum("ours_optimizer", "adamw", ["adamw", "keras_adamw"],
                    "Our side's update (see the module docstring).")
  flags.DEFINE_integer("seq_length", 128, "Longest text, in WordPieces.")
  flags.DEFINE_bool("next_sentence", False, "The task's positive is the "
                    "sentence after the anchor (tools.retrieval_task "
                    "--next_sentence: a hard task), not a rewording.")
  flags.DEFINE_bool("context", False, "The task's positive is the passage "
                    "around the anchor (tools.retrieval_task --context: the "
                    "Inverse Cloze Task), not a rewording.")
  flags.DEFINE_string("student_layers", None, "Distill instead: students "
                      "keep these layers of the start (e.g. 0,2,4) and fit "
                      "the teacher's embeddings (module docstring).")
  flags.DEFINE_enum("their_batch_sampler", "batch_sampler",
                    ["batch_sampler", "no_duplicates"], "sentence-"
                    "transformers' batch_sampler for its in-batch-negatives "
                    "runs: its default, or NO_DUPLICATES (what its docs "
                    "recommend for MultipleNegativesRankingLoss, and how "
                    "run_embedding batches).")
  flags.DEFINE_integer("mine_hard_negatives", 0, "Also train each side on "
                       "this many negatives mined by its start, and print "
                       "each side's gain (module docstring).")
  flags.DEFINE_bool("file_negatives", True, "Whether training reads the "
                    "task's hard-negative column (module docstring).")
  flags.DEFINE_bool("remine_every_epoch", False, "With "
                    "--mine_hard_negatives: our mined run mines again at "
                    "each epoch's start.")
  flags.DEFINE_integer("teacher_epochs", 1, "With --student_layers: the "
                       "teacher is the start fine-tuned by run_embedding for "
                       "this many epochs (0: the start itself).")
  peer_flags.define("sentence-transformers")  # --batch_size: the negatives
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


def prepare(work):
  """(the task's rows, what the start is): the task (W/task), the start
  (--hf_model, or a --size BERT from random weights) in our format
  (W/start) and for sentence-transformers (W/start_st)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  rows = retrieval_task.write_task(os.path.join(work, "task"),
                                   FLAGS.train_pairs, FLAGS.dev_pairs, 8,
                                   FLAGS.seed,
                                   next_sentence=FLAGS.next_sentence,
                                   context=FLAGS.context)
  # The start is made again when what it is made from changed.
  source = (os.path.abspath(FLAGS.hf_model) if FLAGS.hf_model
            else f"{FLAGS.size} {SIZES[FLAGS.size]} seed {FLAGS.seed}")
  marker = os.path.join(work, "start_st", "made_from.txt")
  made_from = None
  if os.path.exists(marker):
    with open(marker, encoding="utf-8") as f:
      made_from = f.read()
  if made_from != source:
    for old in ("start", "start_st"):
      shutil.rmtree(os.path.join(work, old), ignore_errors=True)
    hf_dir = FLAGS.hf_model
    if not hf_dir:
      layers, hidden, heads, intermediate = SIZES[FLAGS.size]
      torch.manual_seed(FLAGS.seed)
      hf_dir = os.path.join(work, "hf_start")
      transformers.BertModel(transformers.BertConfig(
          vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
          num_attention_heads=heads, intermediate_size=intermediate)
                            ).save_pretrained(hf_dir)
    _program(["official_bert.convert_checkpoint", f"--source={hf_dir}",
              f"--output_dir={work}/start", f"--vocab_file={VOCAB}"])
    _program(["export.export_checkpoint", "--format=sentence_transformers",
              f"--bert_config_file={work}/start/bert_config.json",
              f"--init_checkpoint={work}/start", f"--vocab_file={VOCAB}",
              f"--max_seq_length={FLAGS.seq_length}",
              f"--export_dir={work}/start_st"])
    with open(marker, "w", encoding="utf-8") as f:
      f.write(source)
  return rows, source


def _run_embedding(work, out, extra, epochs=None):
  """run_embedding on the task from W/start into `out` (afresh); (its log,
  its train seconds, its eval_results)."""
  shutil.rmtree(out, ignore_errors=True)  # a rerun trains afresh, not resumes
  log = _program([
      "official_bert.run_embedding", f"--task_data_dir={work}/task",
      f"--bert_config_file={work}/start/bert_config.json",
      f"--vocab_file={VOCAB}", f"--init_checkpoint={work}/start",
      f"--output_dir={out}", "--do_train", "--do_eval",
      f"--max_seq_length={FLAGS.seq_length}",
      f"--train_batch_size={FLAGS.batch_size}", f"--learning_rate={FLAGS.learning_rate}",
      f"--num_train_epochs={FLAGS.epochs if epochs is None else epochs}",
      f"--seed={FLAGS.seed}", "--steps_per_loop=10",
      "--save_checkpoints_steps=100000",
      f"--optimizer={FLAGS.ours_optimizer}",
      "--adam_epsilon=" + ("1e-6" if FLAGS.ours_optimizer == "adamw"
                           else "1e-8")] + extra)
  with open(os.path.join(out, "program.log"), "w", encoding="utf-8") as f:
    f.write(log)
  seconds = sum(float(t) for t in re.findall(  # each epoch's, remining
      r"Trained steps \d+\.\.\d+ .* in ([0-9.]+) s", log))
  with open(os.path.join(out, "eval_results.txt"), encoding="utf-8") as f:
    results = dict(line.strip().split(" = ") for line in f)
  return log, seconds, results


def teacher(work, source, dev):
  """With --student_layers: (our teacher's folder, its sentence-transformers
  copy, its MRR@10 on the `dev` pairs), made again when the start or
  --teacher_epochs changed."""
  made = f"{source}; {FLAGS.teacher_epochs} epochs, seed {FLAGS.seed}"
  marker = os.path.join(work, "teacher_st", "made_from.txt")
  if os.path.exists(marker):
    with open(marker, encoding="utf-8") as f:
      if f.read() == made:
        with open(os.path.join(work, "teacher_st", "mrr.txt"),
                  encoding="utf-8") as g:
          folder = os.path.join(work, "teacher" if FLAGS.teacher_epochs
                                else "start")
          return folder, os.path.join(work, "teacher_st"), float(g.read())
  shutil.rmtree(os.path.join(work, "teacher_st"), ignore_errors=True)
  if FLAGS.teacher_epochs:
    folder = os.path.join(work, "teacher")
    _, _, results = _run_embedding(work, folder, [], FLAGS.teacher_epochs)
    mrr = float(results["eval_mrr_at_10"])
    _program(["export.export_checkpoint", "--format=sentence_transformers",
              f"--bert_config_file={work}/start/bert_config.json",
              f"--init_checkpoint={folder}", f"--vocab_file={VOCAB}",
              f"--max_seq_length={FLAGS.seq_length}",
              f"--export_dir={work}/teacher_st"])
  else:
    folder = os.path.join(work, "start")
    shutil.copytree(os.path.join(work, "start_st"),
                    os.path.join(work, "teacher_st"))
    mrr, _ = _st_mrr(_st_model(os.path.join(work, "teacher_st")), dev)
  with open(os.path.join(work, "teacher_st", "mrr.txt"), "w",
            encoding="utf-8") as f:
    f.write(str(mrr))
  with open(marker, "w", encoding="utf-8") as f:
    f.write(made)
  return folder, os.path.join(work, "teacher_st"), mrr


def _student_layers():
  return [int(i) for i in FLAGS.student_layers.split(",")]


def ours(work, turn, rows, teacher_dir=None, mine=0):
  load = os.getloadavg()[0]
  extra = [] if teacher_dir is None else [
      f"--teacher={teacher_dir}", f"--student_layers={FLAGS.student_layers}",
      "--distill_alpha=1"]
  if mine:
    extra.append(f"--mine_hard_negatives={mine}")
    if FLAGS.remine_every_epoch:
      extra.append("--remine_every_epoch")
  if not FLAGS.file_negatives:
    extra.append("--negative_column=none")
  _, seconds, results = _run_embedding(
      work, os.path.join(work, f"ours_{'mined_' * bool(mine)}{turn}"), extra)
  # Distilling, every text of a row is an example (the rows' texts/s).
  examples = len(rows["train"]) * (len(rows["train"][0]) if teacher_dir
                                   else 1)
  return {"train_s": seconds, "load": load, "examples": examples,
          "mrr_at_10": float(results["eval_mrr_at_10"]),
          "recall_at_1": float(results["eval_recall_at_1"])}


def _st_model(path):
  import sentence_transformers as st  # pylint: disable=g-import-not-at-top
  return st.SentenceTransformer(path, device="cpu")


def _st_mrr(model, dev):
  """(MRR@10, recall@1) of a SentenceTransformer on the `dev` pairs."""
  from official_bert.tasks.embedding import embedding_task  # pylint: disable=g-import-not-at-top
  metrics = embedding_task.retrieval_metrics(
      model.encode([a for a, _ in dev], batch_size=FLAGS.batch_size),
      model.encode([p for _, p in dev], batch_size=FLAGS.batch_size))
  return metrics["mrr_at_10"], metrics["recall_at_1"]


def theirs(work, turn, rows, teacher_st=None, mine=0):
  import datasets  # pylint: disable=g-import-not-at-top
  import sentence_transformers as st  # pylint: disable=g-import-not-at-top
  from sentence_transformers.sentence_transformer import losses  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  model = _st_model(os.path.join(work, "start_st"))
  batch = FLAGS.batch_size
  if mine:
    train = st.util.mine_hard_negatives(
        datasets.Dataset.from_dict(dict(zip(
            ("anchor", "positive"), list(zip(*rows["train"]))[:2]))),
        model, num_negatives=mine, output_format="n-tuple", verbose=False)
    loss = losses.MultipleNegativesRankingLoss(model)
    examples = len(train)
  elif teacher_st is None:
    columns = ("anchor", "positive", "negative")[
        :3 if FLAGS.file_negatives else 2]
    train = datasets.Dataset.from_dict(dict(zip(
        columns, list(zip(*rows["train"]))[:len(columns)])))
    loss = losses.MultipleNegativesRankingLoss(model)
    examples = FLAGS.train_pairs
  else:
    # Their layer-reduction recipe: the student is the model with its
    # encoder's layer list cut; the labels the teacher's embeddings.
    encoder = model[0].auto_model
    encoder.encoder.layer = torch.nn.ModuleList(
        [encoder.encoder.layer[i] for i in _student_layers()])
    encoder.config.num_hidden_layers = len(_student_layers())
    texts = [text for row in rows["train"] for text in row]
    labels = _st_model(teacher_st).encode(texts, batch_size=batch)
    train = datasets.Dataset.from_dict({"sentence": texts,
                                        "label": labels.tolist()})
    loss = losses.MSELoss(model)
    batch *= len(rows["train"][0])  # the texts of our batch of rows
    examples = len(texts)
  steps = int(examples / batch * FLAGS.epochs)
  args = st.SentenceTransformerTrainingArguments(
      output_dir=os.path.join(work, f"theirs_{'mined_' * bool(mine)}{turn}"),
      report_to=[],
      per_device_train_batch_size=batch, learning_rate=FLAGS.learning_rate,
      num_train_epochs=FLAGS.epochs, warmup_steps=int(steps * 0.1),
      weight_decay=0.01, max_grad_norm=1.0, seed=FLAGS.seed,
      batch_sampler=(FLAGS.their_batch_sampler if teacher_st is None
                     else "batch_sampler"),
      save_strategy="no", logging_strategy="no", disable_tqdm=True,
      use_cpu=True)
  trainer = st.SentenceTransformerTrainer(
      model=model, args=args, train_dataset=train, loss=loss)
  load = os.getloadavg()[0]
  seconds = trainer.train().metrics["train_runtime"]
  mrr, recall = _st_mrr(model, rows["dev"])
  return {"train_s": seconds, "load": load, "examples": examples,
          "mrr_at_10": mrr, "recall_at_1": recall}


def main(argv):
  del argv
  if importlib.util.find_spec("datasets") is None:
    raise cli.Error("sentence-transformers' trainer needs the datasets "
                    "package, which is not installed: pip install datasets")
  if FLAGS.student_layers and FLAGS.mine_hard_negatives:
    raise cli.Error("--student_layers and --mine_hard_negatives compare "
                    "different things (distillation, mining's gain): pass "
                    "one of them.")
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  work = FLAGS.work_dir
  os.makedirs(work, exist_ok=True)
  rows, source = prepare(work)
  negatives = ("with a hard negative" if FLAGS.file_negatives
               else "without the file hard negatives")
  print(f"embeddings: BERT {source}"
        f"{'' if FLAGS.hf_model else ' from random weights'}, "
        f"{FLAGS.train_pairs} train pairs {negatives}, "
        f"{FLAGS.dev_pairs} dev pairs, batch {FLAGS.batch_size}, lr {FLAGS.learning_rate}, "
        f"{FLAGS.epochs} epochs, seq {FLAGS.seq_length}; torch "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} cores",
        flush=True)
  teacher_dir = teacher_st = None
  unit = "pairs"
  if FLAGS.student_layers:
    teacher_dir, teacher_st, teacher_mrr = teacher(work, source, rows["dev"])
    unit = "texts"
    print(f"distilling: teacher {teacher_dir} (dev MRR@10 "
          f"{teacher_mrr:.4f}), students keep layers {FLAGS.student_layers} "
          "and fit its embeddings of every training text by MSE", flush=True)
  rounds = []
  for turn in range(FLAGS.rounds):
    sides = {"ours": ours(work, turn, rows, teacher_dir),
             "theirs": theirs(work, turn, rows, teacher_st)}
    if FLAGS.mine_hard_negatives:
      k = FLAGS.mine_hard_negatives
      sides["ours_mined"] = ours(work, turn, rows, teacher_dir, k)
      sides["theirs_mined"] = theirs(work, turn, rows, teacher_st, k)
    for name, side in sides.items():
      side["rate"] = side["examples"] * FLAGS.epochs / side["train_s"]
      print(f"  round {turn + 1} {name:12s} train {side['train_s']:6.1f} s "
            f"{side['rate']:6.1f} {unit}/s | dev MRR@10 "
            f"{side['mrr_at_10']:.4f} recall@1 {side['recall_at_1']:.4f} | "
            f"load {side['load']:.2f}", flush=True)
    rounds.append(sides)
  median = {name: {key: float(np.median([t[name][key] for t in rounds]))
                   for key in rounds[0][name]} for name in rounds[0]}
  summary = {"train_x": median["ours"]["rate"] / median["theirs"]["rate"],
             "ours_mrr_at_10": median["ours"]["mrr_at_10"],
             "theirs_mrr_at_10": median["theirs"]["mrr_at_10"]}
  if FLAGS.mine_hard_negatives:
    for side in ("ours", "theirs"):
      summary[f"{side}_mined_mrr_at_10"] = median[f"{side}_mined"]["mrr_at_10"]
      summary[f"{side}_mining_gain"] = (median[f"{side}_mined"]["mrr_at_10"]
                                        - median[side]["mrr_at_10"])
    print(f"hard negatives ({FLAGS.mine_hard_negatives} mined): dev MRR@10 "
          f"gain ours {summary['ours_mining_gain']:+.4f}, "
          f"sentence-transformers {summary['theirs_mining_gain']:+.4f}",
          flush=True)
  print(f"ours/sentence-transformers: train {summary['train_x']:.2f}x, dev "
        f"MRR@10 {summary['ours_mrr_at_10']:.4f} vs "
        f"{summary['theirs_mrr_at_10']:.4f} (at "
        f"{time.strftime('%H:%M', time.gmtime())} UTC)", flush=True)
  print("summary: " + json.dumps({k: round(v, 4) for k, v in
                                  summary.items()}), flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)  # a missing package or bad flag: one sentence, the last line
