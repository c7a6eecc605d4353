"""Fine-tuning quality: ours vs Hugging Face `Trainer` from one pretrained BERT.

Issue 30's quality check: with the original's command and hyperparameters
(lr 2e-5 and 5e-5, 1 and 3 epochs, batch 32, seq 128) on the short-sentence
task, ours' dev accuracy against Hugging Face Trainer's at the same
hyperparameters, mean of 3 seeds each with the spread (max - min).

Both sides start from the same pretrained weights: a 6-layer H384 BERT
(A6, I1536, the uncased 30,522 vocab) pretrained here by masked LM on the
shared corpus, since ../shared/data holds no pretrained model. Three stages,
so the pretraining can run where there is a GPU:

  prepare  (TensorFlow) tokenizes the corpus into 128-piece sequences
           (W/data/pretrain.npz, the last 20 documents held out), writes
           the short task (tools/short_task.py: 4,000 train, 1,000 dev) as
           run_classifier reads it (W/task/) and as token ids
           (W/data/task.npz, our tokenizer's: both sides see the same ids),
           and copies the vocab.
  hf       (torch and transformers only, no TensorFlow) pretrains
           `BertForPreTraining` with masked LM alone (15% of the tokens,
           80/10/10, new masks every batch, batch 256, AdamW 5e-4, warmup
           6% then linear decay, bf16 autocast on a GPU) for
           --pretrain_seconds, scores held-out masked-LM accuracy, rounds
           the weights to float16 (W/hf/weights-*.npz: both sides start
           from these), then fine-tunes with `Trainer` (its defaults:
           `DataCollatorWithPadding`, torch AdamW; warmup 10%, weight decay
           0.01, clipping 1.0 as ours) for every lr x epochs x seed, and
           writes W/hf/results.json.
  ours     rebuilds the Hugging Face directory from the float16 weights,
           converts it (`python -m official_bert.convert_checkpoint`),
           runs the original's command for every lr x epochs x seed
           (`python -m official_bert.run_classifier --task_data_dir=W/task
           --do_train --do_eval --max_seq_length=128 --train_batch_size=32
           --learning_rate=LR --num_train_epochs=E --seed=S`: our defaults,
           the original's AdamWeightDecay update), and prints the table.

    python -m benchmarks.finetuning_quality --stage=prepare --work_dir=/tmp/q
    python -m benchmarks.finetuning_quality --stage=hf --work_dir=/tmp/q   # a GPU if any
    python -m benchmarks.finetuning_quality --stage=ours --work_dir=/tmp/q

Each finished run is kept as a JSON file under W/ours_runs (or in
W/hf/results.json), so a rerun of `ours` goes on where it stopped; a run
whose flags changed is redone. Our runs are niced (--nice): the accuracy
does not depend on speed.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import time

from absl import app
from absl import flags

flags.DEFINE_enum("stage", None, ["prepare", "hf", "ours"], "Which stage.")
flags.DEFINE_string("work_dir", None, "The stages' shared folder.")
flags.DEFINE_list("learning_rates", ["2e-5", "5e-5"], "Peak rates.")
flags.DEFINE_list("epochs", ["1", "3"], "Training epochs.")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds; every setting runs each.")
flags.DEFINE_integer("train_examples", 4000, "Short-task training examples.")
flags.DEFINE_integer("dev_examples", 1000, "Short-task dev examples.")
flags.DEFINE_integer("data_seed", 12345, "Seed of the task's sample.")
flags.DEFINE_float("pretrain_seconds", 180, "hf: pretraining time budget.")
flags.DEFINE_integer("pretrain_batch_size", 256, "hf: pretraining batch.")
flags.DEFINE_float("pretrain_learning_rate", 5e-4, "hf: pretraining peak lr.")
flags.DEFINE_integer("max_pretrain_steps", 100000, "hf: at most this many "
                     "pretraining steps (the time budget usually stops it).")
flags.DEFINE_string("device", None, "hf: torch device (default: cuda if "
                    "there is one, else cpu).")
flags.DEFINE_integer("nice", 10, "ours: niceness of our runs.")

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
VOCAB = os.path.join(ROOT, "..", "shared", "data", "bert_uncased_vocab.txt")
SIZE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
            num_attention_heads=6, intermediate_size=1536,
            max_position_embeddings=512)
SEQ = 128
HELDOUT_DOCS = 20
CHUNK = 15 << 20  # float16 bytes per weights file (16 MiB files travel)


def _settings():
  return [(lr, epochs, seed) for lr in FLAGS.learning_rates
          for epochs in FLAGS.epochs for seed in FLAGS.seeds]


def _name(lr, epochs, seed):
  return f"lr{lr}-e{epochs}-seed{seed}"


# --------------------------------------------------------------- prepare ----
def prepare(work):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from tools import corpus  # pylint: disable=g-import-not-at-top
  from tools import short_task  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(VOCAB, True)
  data = os.path.join(work, "data")
  os.makedirs(data, exist_ok=True)
  shutil.copy(VOCAB, os.path.join(data, "vocab.txt"))

  # Pretraining: each document's sentences packed greedily into
  # [CLS] pieces [SEP] of at most SEQ; a longer sentence is cut.
  docs = corpus.documents()
  rows, is_heldout = [], []
  for d, doc in enumerate(docs):
    pieces = tokenizer.tokenize(doc).to_list()
    current = []
    for p in pieces:
      p = p[:SEQ - 2]
      if len(current) + len(p) > SEQ - 2:
        rows.append(current)
        is_heldout.append(d >= len(docs) - HELDOUT_DOCS)
        current = []
      current = current + p
    if current:
      rows.append(current)
      is_heldout.append(d >= len(docs) - HELDOUT_DOCS)
  ids = np.zeros((len(rows), SEQ), np.int16)  # the vocab fits in int16
  for i, r in enumerate(rows):
    seq = [tokenizer.cls_id] + r + [tokenizer.sep_id]
    ids[i, :len(seq)] = seq
  is_heldout = np.array(is_heldout)
  np.savez(os.path.join(data, "pretrain.npz"), train=ids[~is_heldout],
           heldout=ids[is_heldout])

  # The short task, as files (ours) and as our tokenizer's ids (HF).
  train, dev = short_task.classification_data(
      "short", tokenizer, FLAGS.train_examples, FLAGS.dev_examples,
      FLAGS.data_seed)
  task = os.path.join(work, "task")
  os.makedirs(task, exist_ok=True)
  short_task.write_tsv(os.path.join(task, "train.tsv"), train)
  short_task.write_tsv(os.path.join(task, "dev.tsv"), dev)
  arrays = {}
  for split, split_rows in (("train", train), ("dev", dev)):
    pieces = tokenizer.tokenize([t for t, _ in split_rows]).to_list()
    split_ids = np.zeros((len(pieces), SEQ), np.int16)
    for i, p in enumerate(pieces):
      seq = [tokenizer.cls_id] + p[:SEQ - 2] + [tokenizer.sep_id]
      split_ids[i, :len(seq)] = seq
    arrays[f"{split}_ids"] = split_ids
    arrays[f"{split}_labels"] = np.array([int(l) for _, l in split_rows],
                                         np.int64)
  np.savez(os.path.join(data, "task.npz"), **arrays)
  lengths = (arrays["train_ids"] != 0).sum(1)
  print(f"pretraining: {int((~is_heldout).sum())} train and "
        f"{int(is_heldout.sum())} held-out sequences of <= {SEQ}; task: "
        f"{len(train)} train, {len(dev)} dev, pieces mean "
        f"{lengths.mean():.1f}, p95 {np.percentile(lengths, 95):.0f}, "
        f"label 1: {arrays['train_labels'].mean():.3f}; in {data}",
        flush=True)


# -------------------------------------------------------------------- hf ----
def _mask(torch, ids, generator):
  """BERT's masking of a batch: (inputs, labels with -100 off the masks)."""
  special = (ids == 0) | (ids == 101) | (ids == 102)
  chosen = (torch.rand(ids.shape, generator=generator, device=ids.device)
            < 0.15) & ~special
  labels = torch.where(chosen, ids, torch.full_like(ids, -100))
  roll = torch.rand(ids.shape, generator=generator, device=ids.device)
  inputs = torch.where(chosen & (roll < 0.8), torch.full_like(ids, 103), ids)
  random_ids = torch.randint(999, SIZE["vocab_size"], ids.shape,
                             generator=generator, device=ids.device)
  inputs = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids,
                       inputs)
  return inputs, labels


def _mlm_loss(torch, model, inputs, labels):
  hidden = model.bert(input_ids=inputs, attention_mask=(inputs != 0).long(),
                      token_type_ids=torch.zeros_like(inputs))[0]
  at = labels != -100
  logits = model.cls.predictions(hidden[at])  # only the masked positions
  loss = torch.nn.functional.cross_entropy(logits.float(), labels[at])
  correct = (logits.argmax(-1) == labels[at]).sum()
  return loss, correct, at.sum()


def pretrain(torch, transformers, data, device):
  """BertForPreTraining after --pretrain_seconds of masked LM, and a log."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  transformers.set_seed(0)
  model = transformers.BertForPreTraining(
      transformers.BertConfig(**SIZE)).to(device)
  train = torch.from_numpy(data["train"].astype(np.int64)).to(device)
  heldout = torch.from_numpy(data["heldout"].astype(np.int64)).to(device)
  decay = [p for n, p in model.named_parameters()
           if not ("bias" in n or "LayerNorm" in n)]
  rest = [p for n, p in model.named_parameters()
          if "bias" in n or "LayerNorm" in n]
  optimizer = torch.optim.AdamW(
      [{"params": decay, "weight_decay": 0.01},
       {"params": rest, "weight_decay": 0.0}],
      lr=0.0, betas=(0.9, 0.98), eps=1e-6)
  generator = torch.Generator(device=device).manual_seed(0)
  autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
              if device.type == "cuda" else torch.autocast("cpu",
                                                           enabled=False))
  batch = FLAGS.pretrain_batch_size
  model.train()

  def step(lr):
    for group in optimizer.param_groups:
      group["lr"] = lr
    rows = torch.randint(0, len(train), (batch,), generator=generator,
                         device=device)
    inputs, labels = _mask(torch, train[rows], generator)
    with autocast:
      loss, _, _ = _mlm_loss(torch, model, inputs, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss

  def sync():
    if device.type == "cuda":
      torch.cuda.synchronize()

  # Ten steps at lr 0 time a step; then the schedule fits the budget.
  step(0.0)
  sync()
  t0 = time.time()
  for _ in range(10):
    step(0.0)
  sync()
  step_s = (time.time() - t0) / 10
  steps = max(10, min(FLAGS.max_pretrain_steps,
                      int(FLAGS.pretrain_seconds / step_s)))
  warmup = max(1, int(0.06 * steps))
  peak = FLAGS.pretrain_learning_rate
  print(f"pretraining {steps} steps of {batch} ({step_s * 1000:.0f} ms a "
        f"step, warmup {warmup}, peak lr {peak}) on {device}", flush=True)
  t0 = time.time()
  for i in range(steps):
    lr = peak * min((i + 1) / warmup, (steps - i) / (steps - warmup))
    loss = step(lr)
    if (i + 1) % max(1, steps // 10) == 0 or i + 1 == steps:
      print(f"  step {i + 1}/{steps} loss {loss.item():.3f} "
            f"({time.time() - t0:.0f} s)", flush=True)
  model.eval()
  correct = total = 0
  eval_generator = torch.Generator(device=device).manual_seed(1)
  with torch.no_grad(), autocast:
    for start in range(0, len(heldout), 256):
      inputs, labels = _mask(torch, heldout[start:start + 256],
                             eval_generator)
      _, c, n = _mlm_loss(torch, model, inputs, labels)
      correct += int(c)
      total += int(n)
  info = {"steps": steps, "batch": batch, "step_ms": step_s * 1000,
          "seconds": time.time() - t0, "final_loss": float(loss.item()),
          "heldout_mlm_accuracy": correct / max(total, 1),
          "heldout_masked": total, "device": str(device)}
  print(f"pretrained: held-out masked-LM accuracy "
        f"{info['heldout_mlm_accuracy']:.4f} ({total} masks)", flush=True)
  return model.cpu(), info


def save_weights(model, out):
  """The state dict in float16, split into files of at most CHUNK bytes;
  returns the float16-rounded state dict (float32) both sides start from."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  state = {k: v.detach().numpy().astype(np.float16)
           for k, v in model.state_dict().items()
           if k != "cls.predictions.decoder.weight"}  # tied to the embeddings
  for old in glob.glob(os.path.join(out, "weights-*.npz")):
    os.remove(old)
  # A tensor larger than a file (the word embeddings) goes in row blocks,
  # named <key>@<block>.
  pieces = []
  for key in sorted(state):
    value = state[key]
    rows = max(1, CHUNK // max(1, value[:1].nbytes)) if value.ndim else 1
    if value.nbytes <= CHUNK:
      pieces.append((key, value))
    else:
      pieces.extend((f"{key}@{i}", value[start:start + rows]) for i, start
                    in enumerate(range(0, len(value), rows)))
  part, size, index = {}, 0, 0
  for key, value in pieces:
    if part and size + value.nbytes > CHUNK:
      np.savez(os.path.join(out, f"weights-{index}.npz"), **part)
      part, size, index = {}, 0, index + 1
    part[key] = value
    size += value.nbytes
  np.savez(os.path.join(out, f"weights-{index}.npz"), **part)
  return {k: v.astype(np.float32) for k, v in state.items()}


def load_weights(folder):
  import numpy as np  # pylint: disable=g-import-not-at-top
  blocks = {}
  for path in glob.glob(os.path.join(folder, "weights-*.npz")):
    with np.load(path) as f:
      for name in f.files:
        key, _, block = name.partition("@")
        blocks.setdefault(key, {})[int(block or 0)] = f[name]
  state = {key: np.concatenate([parts[i] for i in sorted(parts)])
           .astype(np.float32) if len(parts) > 1 else
           parts[0].astype(np.float32) for key, parts in blocks.items()}
  if not state:
    raise app.UsageError(f"{folder} holds no weights-*.npz; run "
                         "--stage=hf first (or copy its output there).")
  return state


def hf_directory(torch, transformers, state, path):
  """A Hugging Face BertForPreTraining directory holding `state`."""
  model = transformers.BertForPreTraining(transformers.BertConfig(**SIZE))
  missing, unexpected = model.load_state_dict(
      {k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
  if unexpected or [k for k in missing
                    if k != "cls.predictions.decoder.weight"]:
    raise RuntimeError(f"weights do not fit: {missing} {unexpected}")
  model.tie_weights()
  model.save_pretrained(path)
  return path


def run_hf(work):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  device = torch.device(FLAGS.device or
                        ("cuda" if torch.cuda.is_available() else "cpu"))
  data = os.path.join(work, "data")
  if not os.path.exists(os.path.join(data, "task.npz")):
    raise app.UsageError(f"{data} holds no task.npz; run --stage=prepare "
                         "with this --work_dir first.")
  out = os.path.join(work, "hf")
  os.makedirs(out, exist_ok=True)
  with np.load(os.path.join(data, "pretrain.npz")) as f:
    pretrain_data = {k: f[k] for k in f.files}
  with np.load(os.path.join(data, "task.npz")) as f:
    task = {k: f[k] for k in f.files}
  model, info = pretrain(torch, transformers, pretrain_data, device)
  state = save_weights(model, out)
  hf_dir = hf_directory(torch, transformers, state,
                        os.path.join(work, "hf_model"))
  collator = transformers.DataCollatorWithPadding(
      transformers.BertTokenizerFast(
          vocab_file=os.path.join(data, "vocab.txt")))

  def features(split, with_labels=True):
    rows = []
    for ids, label in zip(task[f"{split}_ids"], task[f"{split}_labels"]):
      n = int((ids != 0).sum())
      row = {"input_ids": ids[:n].tolist(), "token_type_ids": [0] * n,
             "attention_mask": [1] * n}
      if with_labels:
        row["labels"] = int(label)
      rows.append(row)
    return rows

  train, dev = features("train"), features("dev", with_labels=False)
  results = {"pretraining": info, "torch": torch.__version__,
             "transformers": transformers.__version__, "runs": {}}
  for lr, epochs, seed in _settings():
    transformers.set_seed(int(seed))
    model = transformers.BertForSequenceClassification.from_pretrained(
        hf_dir, num_labels=2)
    steps = -(-len(train) // 32) * int(epochs)
    args = transformers.TrainingArguments(
        output_dir=os.path.join(work, "hf_out"), report_to=[],
        per_device_train_batch_size=32, per_device_eval_batch_size=64,
        learning_rate=float(lr), num_train_epochs=int(epochs),
        warmup_steps=int(steps * 0.1), weight_decay=0.01, max_grad_norm=1.0,
        seed=int(seed), save_strategy="no", logging_strategy="no",
        disable_tqdm=True, use_cpu=device.type == "cpu")
    trainer = transformers.Trainer(model=model, args=args,
                                   train_dataset=train, data_collator=collator)
    t0 = time.time()
    trainer.train()
    train_s = time.time() - t0
    predicted = trainer.predict(dev).predictions.argmax(-1)
    accuracy = float(np.mean(predicted == task["dev_labels"]))
    results["runs"][_name(lr, epochs, seed)] = {
        "accuracy": accuracy, "train_s": train_s,
        "predicted_1": float(np.mean(predicted))}
    print(f"hf {_name(lr, epochs, seed)}: dev accuracy {accuracy:.4f} "
          f"({train_s:.1f} s)", flush=True)
  with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=1)


# ------------------------------------------------------------------ ours ----
def run_ours(work):
  import re  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  results_path = os.path.join(work, "hf", "results.json")
  if not os.path.exists(results_path):
    raise app.UsageError(f"{results_path} does not exist; run --stage=hf "
                         "first (or copy its output there).")
  with open(results_path) as f:
    hf = json.load(f)
  ours_dir = os.path.join(work, "ours")
  if not os.path.exists(os.path.join(ours_dir, "checkpoint")):
    hf_dir = hf_directory(torch, transformers,
                          load_weights(os.path.join(work, "hf")),
                          os.path.join(work, "hf_model"))
    shutil.copy(os.path.join(work, "data", "vocab.txt"), hf_dir)
    subprocess.run([sys.executable, "-m", "official_bert.convert_checkpoint",
                    f"--source={hf_dir}", f"--output_dir={ours_dir}"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  runs = os.path.join(work, "ours_runs")
  os.makedirs(runs, exist_ok=True)
  ours = {}
  for lr, epochs, seed in _settings():
    name = _name(lr, epochs, seed)
    argv = [sys.executable, "-m", "official_bert.run_classifier",
            f"--task_data_dir={work}/task", "--do_train", "--do_eval",
            f"--vocab_file={ours_dir}/vocab.txt",
            f"--bert_config_file={ours_dir}/bert_config.json",
            f"--init_checkpoint={ours_dir}", "--max_seq_length=128",
            "--train_batch_size=32", f"--learning_rate={lr}",
            f"--num_train_epochs={epochs}", f"--seed={seed}",
            "--save_checkpoints_steps=100000",
            f"--output_dir={runs}/{name}"]
    saved = os.path.join(runs, name + ".json")
    if os.path.exists(saved):
      with open(saved) as f:
        kept = json.load(f)
      if kept["argv"] == argv[1:]:
        ours[name] = kept
        continue
    shutil.rmtree(os.path.join(runs, name), ignore_errors=True)
    t0 = time.time()
    proc = subprocess.run(
        ["nice", "-n", str(FLAGS.nice)] + argv, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if proc.returncode:
      raise RuntimeError(f"{name} failed:\n{proc.stdout[-3000:]}")
    with open(os.path.join(runs, name, "eval_results.txt")) as f:
      accuracy = float(re.search(r"eval_accuracy = ([0-9.]+)",
                                 f.read()).group(1))
    ours[name] = {"accuracy": accuracy, "seconds": time.time() - t0,
                  "argv": argv[1:]}
    with open(saved, "w") as f:
      json.dump(ours[name], f)
    shutil.rmtree(os.path.join(runs, name))  # checkpoints: 0.3 GB a run
    print(f"ours {name}: dev accuracy {accuracy:.4f} "
          f"({ours[name]['seconds']:.0f} s, load {os.getloadavg()[0]:.1f})",
          flush=True)

  info = hf["pretraining"]
  print(f"\npretrained BERT (L6 H384): {info['steps']} steps of "
        f"{info['batch']} on {info['device']}, held-out masked-LM accuracy "
        f"{info['heldout_mlm_accuracy']:.4f}; HF: torch {hf['torch']}, "
        f"transformers {hf['transformers']}")
  print("| lr | epochs | ours: mean (spread) | HF Trainer: mean (spread) | "
        "ours - HF | >= HF - 0.01 |")
  print("|---|---|---|---|---|---|")
  for lr in FLAGS.learning_rates:
    for epochs in FLAGS.epochs:
      names = [_name(lr, epochs, s) for s in FLAGS.seeds]
      a = np.array([ours[n]["accuracy"] for n in names])
      b = np.array([hf["runs"][n]["accuracy"] for n in names])
      print(f"| {lr} | {epochs} | {a.mean():.4f} ({np.ptp(a):.4f}) | "
            f"{b.mean():.4f} ({np.ptp(b):.4f}) | {a.mean() - b.mean():+.4f} "
            f"| {'yes' if a.mean() >= b.mean() - 0.01 else 'NO'} |")
  print("per seed (ours / HF): " + ", ".join(
      f"{n} {ours[n]['accuracy']:.4f}/{hf['runs'][n]['accuracy']:.4f}"
      for n in (_name(*s) for s in _settings())))


def main(argv):
  del argv
  if not FLAGS.stage or not FLAGS.work_dir:
    raise app.UsageError("--stage and --work_dir are required.")
  work = os.path.abspath(FLAGS.work_dir)
  {"prepare": prepare, "hf": run_hf, "ours": run_ours}[FLAGS.stage](work)


if __name__ == "__main__":
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  cli.run(main)
