"""Learning, not speed: official_bert's pretraining vs Hugging Face's, same data and recipe.

Both sides train BERT-Mini (L4 H256 A4, intermediate 1024, vocab 30522)
from scratch on the same TFRecords, written once by our data job
(`python -m tfrecords.create_pretraining_data`) from the shared corpus, with a
held-out file written from documents the training file does not contain, and
are scored on it the same way: masked-LM accuracy weighted by
`masked_lm_weights` and next-sentence accuracy, over the same records.

    python -m benchmarks.pretraining_convergence            # the default run
    python -m benchmarks.pretraining_convergence --steps=600 --max_seq_length=128 \
        --seeds=1,2,3 --sides=hf,ours_adamw

The recipe (issue 31's): batch 32, peak lr 5e-4, linear warmup over 10% of
the steps then linear decay to 0, decoupled weight decay 0.01 off LayerNorm
and biases, gradient global norm clipped to 1.0, Adam beta 0.9/0.999, eps
1e-6, dropout 0.1, weights drawn with std 0.02. Sides (--sides):

  ours_adamw        `python -m official_bert.run_pretraining --optimizer=adamw`
                    (our default: the original's AdamWeightDecay, no bias
                    correction), a real subprocess, then `--do_eval` on the
                    held-out file.
  ours_keras_adamw  the same with `--optimizer=keras_adamw` (bias-corrected).
  ours_dynamic      the same as ours_adamw with `--masking=dynamic`.
  ours_nonsp        ours_adamw with `--next_sentence_prediction=false` (no NSP
                    head or loss; the same records, their NSP labels unread).
  ours_dynamic_nonsp  both.
  ours_keras_dynamic, ours_keras_nonsp, ours_keras_dynamic_nonsp
                    the same three with `--optimizer=keras_adamw`.
  hf                transformers' `BertForPreTraining` (its own N(0, 0.02)
                    init), torch's AdamW (bias-corrected, eps added to the
                    corrected sqrt(v)), `get_linear_schedule_with_warmup`.
  hf_trunc          hf with every N(0, 0.02) weight redrawn from our
                    initializer: a normal truncated at 2 std (std 0.0176).
  hf_nobc           hf with the original's update (no bias correction), as ours_adamw.
  hf_oursched       hf with our (the original's) schedule shape: after warmup
                    lr = peak * (1 - step / steps), i.e. it drops from peak to
                    0.9 peak at the end of a 10% warmup.
  hf_perm           hf reading a fresh uniform permutation of all records
                    per epoch (a DataLoader's shuffle=True).

The hf* variants isolate one difference each, in the same torch code. All
but hf_perm train on exactly the batches ours trains on with the same seed
(official_bert's input pipeline: one file, a 1000-record shuffle buffer), so
the sides differ in the trainer only. The hf loss is BertForPreTraining's
(masked-LM cross-entropy averaged over the masked positions, plus the
next-sentence cross-entropy averaged over the batch) with its prediction
head run at the masked positions alone: the same value and gradients as
`model(..., labels=...)` without the [batch, seq, 30522] logits, which on
CPU would make hf several times slower than ours for nothing.

Each training process runs under `nice -n 19` (--nice): the machine this
was written on has 2 cores shared with other people's timing runs, and a
lowered priority keeps this slow, throughput-insensitive run from moving
their figures. It only changes how fast these runs go, not what they learn.
Seeds run in turns (seed 1: every side, seed 2: every side, ...), so slow
periods of a shared machine fall on every side alike.

A long run can be done in parts: with --work_dir and --reuse_results, each
side's result for a seed is kept as <side>-seed<N>.json (with the recipe it
ran with, its wall time and load average) and reused by a later run of the
same recipe, so `--sides=ours_adamw --seeds=2` now and the whole table later
run each training once. The hf sides need no TensorFlow given their inputs as
.npz (--export_hf_data=DIR writes them: the held-out records and each seed's
training batches, exactly ours'), so they can run on another machine, e.g. a
GPU (--hf_device=cuda), and their JSON files copied into --work_dir:

    python -m benchmarks.pretraining_convergence --work_dir=W ... --export_hf_data=D
    # elsewhere, per side and seed (torch and transformers only):
    python benchmarks/pretraining_convergence.py --hf_worker=hf --hf_seed=1 \
        --hf_data=D --hf_device=cuda --hf_result=W/hf-seed1.json ...
    python -m benchmarks.pretraining_convergence --work_dir=W ... --reuse_results

The same init and batches on CPU and GPU differ only in the dropout draws and
in rounding.

Prints, per side, each seed's held-out masked-LM accuracy (and the mean
masked-LM loss and next-sentence accuracy),
their mean and spread (max - min over seeds, and the standard deviation),
and each side's mean against the first side's (difference and ratio).
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

flags.DEFINE_integer("steps", 100, "Training steps per run.")
flags.DEFINE_integer("max_seq_length", 64, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 10,
                     "Masked positions per record (15% of max_seq_length).")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds; every side runs each.")
flags.DEFINE_list("sides", ["hf", "ours_adamw", "ours_keras_adamw"],
                  "Sides to run, in turns (see the module docstring); the "
                  "first is the reference of the difference/ratio columns.")
flags.DEFINE_integer("batch_size", 32, "Training batch size.")
flags.DEFINE_float("learning_rate", 5e-4, "Peak learning rate.")
flags.DEFINE_float("warmup_fraction", 0.1, "Warmup steps / steps.")
flags.DEFINE_integer("eval_records", 2048,
                     "Held-out records scored (a multiple of 64; fewer if the "
                     "held-out file has fewer).")
flags.DEFINE_integer("heldout_documents", 24,
                     "Documents at the end of the corpus kept out of training "
                     "and written to the eval file.")
flags.DEFINE_string("corpus", "../shared/data/pydocs_corpus.txt",
                    "Raw text, one sentence a line, blank line between documents.")
flags.DEFINE_string("vocab", "../shared/data/bert_uncased_vocab.txt",
                    "WordPiece vocabulary (uncased).")
flags.DEFINE_string("work_dir", None,
                    "Where records and runs go (default: a temporary folder, "
                    "removed at the end). Records already there are reused.")
flags.DEFINE_bool("reuse_results", False,
                  "Reuse a side's result for a seed when --work_dir already "
                  "holds one from the same recipe (its <side>-seed<N>.json), "
                  "so a long run can be done in parts.")
flags.DEFINE_bool("report_only", False,
                  "Train nothing: print the table from the results already in "
                  "--work_dir (as --reuse_results); a side's missing seeds "
                  "show as '-' and are left out of its mean and spread.")
flags.DEFINE_string("export_hf_data", None,
                    "Write, into this folder, the held-out records and each "
                    "seed's training batches as .npz for the hf sides (see "
                    "--hf_data), then exit.")
flags.DEFINE_string("hf_data", None,
                    "Read the hf sides' batches from --export_hf_data's "
                    "folder instead of the TFRecords (no TensorFlow needed).")
flags.DEFINE_string("hf_device", "cpu", "torch device of the hf sides.")
flags.DEFINE_integer("nice", 19, "Niceness of every training process "
                     "(0 = as the benchmark itself).")
# Internal: one Hugging Face run in its own process (as ours is).
flags.DEFINE_string("hf_worker", None, "internal: run this hf side and exit")
flags.DEFINE_integer("hf_seed", 1, "internal: the hf worker's seed")
flags.DEFINE_string("hf_result", None, "internal: the hf worker's JSON output")
flags.DEFINE_string("hf_records", None, "internal: train,eval record files")

FLAGS = flags.FLAGS
EVAL_BATCH = 64
MINI = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
            num_attention_heads=4, intermediate_size=1024, hidden_act="gelu",
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
            max_position_embeddings=512, type_vocab_size=2,
            initializer_range=0.02)
OURS = {"ours_adamw": ["--optimizer=adamw"],
        "ours_keras_adamw": ["--optimizer=keras_adamw"],
        "ours_dynamic": ["--optimizer=adamw", "--masking=dynamic"],
        "ours_nonsp": ["--optimizer=adamw", "--next_sentence_prediction=false"],
        "ours_dynamic_nonsp": ["--optimizer=adamw", "--masking=dynamic",
                               "--next_sentence_prediction=false"],
        "ours_keras_dynamic": ["--optimizer=keras_adamw", "--masking=dynamic"],
        "ours_keras_nonsp": ["--optimizer=keras_adamw",
                             "--next_sentence_prediction=false"],
        "ours_keras_dynamic_nonsp": ["--optimizer=keras_adamw",
                                     "--masking=dynamic",
                                     "--next_sentence_prediction=false"]}
HF = ("hf", "hf_trunc", "hf_nobc", "hf_oursched", "hf_perm")


def _recipe(eval_records):
  """What a result depends on besides its side and seed (and the records)."""
  return dict(steps=FLAGS.steps, max_seq_length=FLAGS.max_seq_length,
              max_predictions_per_seq=FLAGS.max_predictions_per_seq,
              batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
              warmup_fraction=FLAGS.warmup_fraction,
              eval_records=eval_records)


def _warmup_steps():
  return int(round(FLAGS.warmup_fraction * FLAGS.steps))


def _niced(argv):
  return (["nice", "-n", str(FLAGS.nice)] if FLAGS.nice else []) + argv


def _run(argv, log):
  """Runs argv (niced), its output to `log`; raises with the log's tail."""
  with open(log, "w", encoding="utf-8") as f:
    status = subprocess.run(_niced(argv), stdout=f, stderr=subprocess.STDOUT,
                            check=False).returncode
  if status:
    with open(log, encoding="utf-8") as f:
      tail = f.read()[-3000:]
    raise RuntimeError(f"{' '.join(argv[:3])} failed ({status}):\n{tail}")


def write_records(work_dir):
  """Train and held-out TFRecords from our data job (reused when present)."""
  train = os.path.join(work_dir, f"train-{FLAGS.max_seq_length}.tfrecord")
  heldout = os.path.join(work_dir, f"eval-{FLAGS.max_seq_length}.tfrecord")
  if os.path.exists(train) and os.path.exists(heldout):
    return train, heldout
  with open(FLAGS.corpus, encoding="utf-8") as f:
    documents = [d for d in f.read().split("\n\n") if d.strip()]
  cut = len(documents) - FLAGS.heldout_documents
  for name, docs in (("train.txt", documents[:cut]),
                     ("eval.txt", documents[cut:])):
    with open(os.path.join(work_dir, name), "w", encoding="utf-8") as f:
      f.write("\n\n".join(docs) + "\n")
  for name, out in (("train.txt", train), ("eval.txt", heldout)):
    _run([sys.executable, "-m", "tfrecords.create_pretraining_data",
          f"--input_file={os.path.join(work_dir, name)}",
          f"--output_file={out}.tmp", f"--vocab_file={FLAGS.vocab}",
          "--do_lower_case=true",
          f"--max_seq_length={FLAGS.max_seq_length}",
          f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
          "--masked_lm_prob=0.15", "--random_seed=12345", "--dupe_factor=1",
          "--num_workers=0"],
         os.path.join(work_dir, f"data-{name}.log"))
    os.replace(out + ".tmp", out)
  return train, heldout


def count_records(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return sum(1 for _ in tf.data.TFRecordDataset(path))


def run_ours(side, seed, train, heldout, eval_steps, work_dir):
  """Trains and evaluates with run_pretraining; returns eval_results.txt's values."""
  out = os.path.join(work_dir, f"{side}-seed{seed}")
  shutil.rmtree(out, ignore_errors=True)
  config = os.path.join(work_dir, "bert_config.json")
  common = [sys.executable, "-m", "official_bert.run_pretraining",
            f"--bert_config_file={config}", f"--output_dir={out}",
            f"--max_seq_length={FLAGS.max_seq_length}",
            f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
            f"--train_batch_size={FLAGS.batch_size}",
            f"--learning_rate={FLAGS.learning_rate}",
            f"--num_train_steps={FLAGS.steps}",
            f"--num_warmup_steps={_warmup_steps()}",
            "--weight_decay=0.01", "--max_grad_norm=1.0", f"--seed={seed}",
            f"--steps_per_loop={min(100, FLAGS.steps)}",
            f"--save_checkpoints_steps={FLAGS.steps}"] + OURS[side]
  if "dynamic" in side:  # the ## pieces and special ids come from it
    common.append(f"--vocab_file={FLAGS.vocab}")
  _run(common + [f"--input_file={train}", "--do_train"],
       out + "-train.log")
  _run(common + [f"--input_file={heldout}", "--do_eval",
                 f"--eval_batch_size={EVAL_BATCH}",
                 f"--max_eval_steps={eval_steps}"], out + "-eval.log")
  result = {}
  with open(os.path.join(out, "eval_results.txt"), encoding="utf-8") as f:
    for line in f:
      key, value = line.split(" = ")
      result[key] = float(value)
  return result


def run_hf(side, seed, train, heldout, eval_steps, work_dir):
  """One Hugging Face run in its own (niced) process, as ours."""
  result = os.path.join(work_dir, f"{side}-seed{seed}.json")
  _run([sys.executable, "-m", "benchmarks.pretraining_convergence",
        f"--hf_worker={side}", f"--hf_seed={seed}", f"--hf_result={result}",
        f"--hf_records={train},{heldout}", f"--steps={FLAGS.steps}",
        f"--max_seq_length={FLAGS.max_seq_length}",
        f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
        f"--batch_size={FLAGS.batch_size}",
        f"--learning_rate={FLAGS.learning_rate}",
        f"--warmup_fraction={FLAGS.warmup_fraction}",
        f"--eval_records={eval_steps * EVAL_BATCH}", "--nice=0"],
       os.path.join(work_dir, f"{side}-seed{seed}.log"))
  with open(result, encoding="utf-8") as f:
    return json.load(f)


def read_records(path, limit=None):
  """A TFRecord file's features as numpy arrays (all records, or `limit`)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  seq, preds = FLAGS.max_seq_length, FLAGS.max_predictions_per_seq
  spec = {name: tf.io.FixedLenFeature([n], tf.int64) for name, n in (
      ("input_ids", seq), ("input_mask", seq), ("segment_ids", seq),
      ("masked_lm_positions", preds), ("masked_lm_ids", preds),
      ("next_sentence_labels", 1))}
  spec["masked_lm_weights"] = tf.io.FixedLenFeature([preds], tf.float32)
  data = tf.data.TFRecordDataset(path)
  if limit:
    data = data.take(limit)
  data = data.batch(4096).map(lambda r: tf.io.parse_example(r, spec))
  parts = list(data.as_numpy_iterator())
  return {k: np.concatenate([p[k] for p in parts]) for k in spec}


def hf_worker(side):
  """Trains transformers' BertForPreTraining on the records; writes its scores."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  if FLAGS.hf_data:
    train = None
    heldout = _load_npz("heldout.npz")
    heldout = {k: v[:FLAGS.eval_records] for k, v in heldout.items()}
  else:
    train, eval_path = FLAGS.hf_records.split(",")
    heldout = read_records(eval_path, FLAGS.eval_records)
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # One thread: under `nice` on a busy machine two OpenMP threads wait on
  # each other at every op (10 s a step here instead of ~1).
  torch.set_num_threads(1)
  seed, steps, warmup = FLAGS.hf_seed, FLAGS.steps, _warmup_steps()
  torch.manual_seed(seed)
  model = transformers.BertForPreTraining(transformers.BertConfig(**MINI))
  device = torch.device(FLAGS.hf_device)
  if side == "hf_trunc":  # our initializer: N(0, 0.02) truncated at 2 std
    with torch.no_grad():
      for name, p in model.named_parameters():
        if p.dim() >= 2 and "LayerNorm" not in name:
          torch.nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)
  decay = [p for n, p in model.named_parameters()
           if not ("bias" in n or "LayerNorm" in n)]
  no_decay = [p for n, p in model.named_parameters()
              if "bias" in n or "LayerNorm" in n]
  groups = [{"params": decay, "weight_decay": 0.01},
            {"params": no_decay, "weight_decay": 0.0}]
  model.to(device)
  if side == "hf_nobc":
    optimizer = _OriginalAdamW(groups, lr=FLAGS.learning_rate)
  else:
    optimizer = torch.optim.AdamW(groups, lr=FLAGS.learning_rate,
                                  betas=(0.9, 0.999), eps=1e-6)
  if side == "hf_oursched":
    def factor(step):  # the original's: peak * (1 - step / steps) after warmup
      if step < warmup:
        return step / warmup
      return max(0.0, 1.0 - step / steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
  else:
    schedule = transformers.get_linear_schedule_with_warmup(
        optimizer, warmup, steps)

  def batch_tensors(data, index):
    ids = torch.from_numpy(data["input_ids"][index])
    labels = torch.full_like(ids, -100)
    positions = data["masked_lm_positions"][index]
    rows = np.arange(len(index))[:, None].repeat(positions.shape[1], 1)
    real = data["masked_lm_weights"][index] > 0
    labels[rows[real], positions[real]] = torch.from_numpy(
        data["masked_lm_ids"][index][real])
    return dict(
        input_ids=ids,
        attention_mask=torch.from_numpy(data["input_mask"][index]),
        token_type_ids=torch.from_numpy(data["segment_ids"][index]),
        labels=labels,
        next_sentence_label=torch.from_numpy(
            data["next_sentence_labels"][index][:, 0]),
        masked_lm_positions=torch.from_numpy(data["masked_lm_positions"][index]),
        masked_lm_ids=torch.from_numpy(data["masked_lm_ids"][index]),
        masked_lm_weights=torch.from_numpy(data["masked_lm_weights"][index]))

  def loss_fn(inputs):
    # BertForPreTraining's loss, with its prediction head run at the masked
    # positions only (the loss ignores the others: the same value and
    # gradients, without [B, T, 30522] logits; ours does the same).
    seq_out, pooled = model.bert(
        input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
        token_type_ids=inputs["token_type_ids"], return_dict=False)[:2]
    positions = inputs["masked_lm_positions"].long()
    hidden = torch.gather(seq_out, 1, positions[..., None].expand(
        -1, -1, seq_out.shape[-1]))
    logits = model.cls.predictions(hidden)
    weights = inputs["masked_lm_weights"]
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        inputs["masked_lm_ids"].reshape(-1).long(), reduction="none")
    mlm = (ce * weights.reshape(-1)).sum() / weights.sum()
    nsp = torch.nn.functional.cross_entropy(
        model.cls.seq_relationship(pooled),
        inputs["next_sentence_label"].long())
    return mlm + nsp

  start = time.time()
  model.train()
  for step, inputs in zip(range(steps), _batches(side, train, seed)):
    inputs = {k: v.to(device) for k, v in inputs.items()}
    loss = loss_fn(inputs)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
    if step % 50 == 0 or step == steps - 1:
      print(f"step {step} loss {loss.item():.4f} "
            f"({time.time() - start:.0f}s)", flush=True)

  model.eval()
  mlm_correct = mlm_total = nsp_correct = nsp_total = mlm_loss = 0.0
  n = len(heldout["input_ids"])
  with torch.no_grad():
    for at in range(0, n, EVAL_BATCH):
      index = np.arange(at, min(n, at + EVAL_BATCH))
      inputs = {k: v.to(device)
                for k, v in batch_tensors(heldout, index).items()}
      out = model(input_ids=inputs["input_ids"],
                  attention_mask=inputs["attention_mask"],
                  token_type_ids=inputs["token_type_ids"])
      positions = torch.from_numpy(
          heldout["masked_lm_positions"][index]).long().to(device)
      logits = torch.gather(
          out.prediction_logits, 1,
          positions[..., None].expand(-1, -1, out.prediction_logits.shape[-1]))
      hit = (logits.argmax(-1).cpu().numpy() == heldout["masked_lm_ids"][index])
      weights = heldout["masked_lm_weights"][index]
      ce = torch.nn.functional.cross_entropy(
          logits.permute(0, 2, 1), inputs["masked_lm_ids"].long(),
          reduction="none").cpu().numpy()
      mlm_loss += float((ce * weights).sum())
      mlm_correct += float((hit * weights).sum())
      mlm_total += float(weights.sum())
      nsp = out.seq_relationship_logits.argmax(-1).cpu().numpy()
      nsp_correct += float(
          (nsp == inputs["next_sentence_label"].cpu().numpy()).sum())
      nsp_total += len(index)
  result = {"masked_lm_accuracy": mlm_correct / mlm_total,
            "masked_lm_loss": mlm_loss / mlm_total,
            "next_sentence_accuracy": nsp_correct / nsp_total,
            "seconds": time.time() - start, "device": _torch_device_name(device),
            "recipe": _recipe(FLAGS.eval_records)}
  with open(FLAGS.hf_result + ".tmp", "w", encoding="utf-8") as f:
    json.dump(result, f)
  os.replace(FLAGS.hf_result + ".tmp", FLAGS.hf_result)


def _batches(side, train_path, seed):
  """Training batches as dicts of torch tensors.

  hf_perm: a fresh uniform permutation of all records per epoch (a torch
  DataLoader's shuffle=True). Every other hf side: exactly the batches ours
  trains on with this seed (official_bert's input pipeline), so the sides
  differ in the trainer only.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  seq, preds, batch = (FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
                       FLAGS.batch_size)
  if FLAGS.hf_data and side != "hf_perm":
    data = _hf_names(_load_npz(f"batches-seed{seed}.npz"))
    for at in range(0, len(data["input_ids"]), batch):
      yield {k: torch.from_numpy(v[at:at + batch]) for k, v in data.items()}
    return
  if side == "hf_perm":
    data = (_load_npz("train.npz") if FLAGS.hf_data
            else read_records(train_path))
    rng = np.random.default_rng(seed)
    order, at = rng.permutation(len(data["input_ids"])), 0
    while True:
      if at + batch > len(order):
        order, at = rng.permutation(len(order)), 0
      index = order[at:at + batch]
      at += batch
      yield {k: torch.from_numpy(v[index]) for k, v in _hf_names(data).items()}
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  dataset = input_pipeline.pretraining_dataset(
      [train_path], batch, seq, preds, is_training=True, seed=seed)
  for inputs, labels in dataset.as_numpy_iterator():
    yield {k: torch.from_numpy(np.asarray(v)) for k, v in _hf_names(
        dict(input_ids=inputs["input_word_ids"],
             input_mask=inputs["input_mask"],
             segment_ids=inputs["input_type_ids"],
             masked_lm_positions=inputs["masked_lm_positions"],
             masked_lm_ids=labels["masked_lm_ids"],
             masked_lm_weights=labels["masked_lm_weights"],
             next_sentence_labels=labels["next_sentence_labels"])).items()}


def _load_npz(name):
  """One of --export_hf_data's files, in the dtypes of read_records."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  with np.load(os.path.join(FLAGS.hf_data, name)) as f:
    return {k: f[k] if f[k].dtype == np.float32 else f[k].astype(np.int64)
            for k in f.files}


def _torch_device_name(device):
  import torch  # pylint: disable=g-import-not-at-top
  if device.type == "cuda":
    return "cuda: " + torch.cuda.get_device_name(device)
  return device.type


def export_hf_data(folder, train, heldout, seeds):
  """The hf sides' inputs as .npz, for a machine without TensorFlow.

  batches-seed<N>.npz: the first --steps training batches that ours reads
  with seed N (official_bert's input pipeline), concatenated; train.npz: every
  training record (hf_perm); heldout.npz: the scored held-out records.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  os.makedirs(folder, exist_ok=True)

  def small(data):  # ids < 65536, positions/masks < 256: a quarter the bytes
    return {k: v.astype(np.float32 if k == "masked_lm_weights" else
                        np.uint16 if k in ("input_ids", "masked_lm_ids")
                        else np.uint8) for k, v in data.items()}

  np.savez_compressed(os.path.join(folder, "heldout.npz"), **small(
      read_records(heldout, FLAGS.eval_records)))
  np.savez_compressed(os.path.join(folder, "train.npz"),
                      **small(read_records(train)))
  for seed in seeds:
    dataset = input_pipeline.pretraining_dataset(
        [train], FLAGS.batch_size, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq, is_training=True, seed=seed)
    parts = []
    for _, (inputs, labels) in zip(range(FLAGS.steps),
                                   dataset.as_numpy_iterator()):
      parts.append(dict(input_ids=inputs["input_word_ids"],
                        input_mask=inputs["input_mask"],
                        segment_ids=inputs["input_type_ids"],
                        masked_lm_positions=inputs["masked_lm_positions"],
                        masked_lm_ids=labels["masked_lm_ids"],
                        masked_lm_weights=labels["masked_lm_weights"],
                        next_sentence_labels=labels["next_sentence_labels"]))
    np.savez_compressed(
        os.path.join(folder, f"batches-seed{seed}.npz"),
        **small({k: np.concatenate([p[k] for p in parts]) for k in parts[0]}))
  print(f"wrote {folder}: held-out, training records and the batches of "
        f"seeds {seeds}")


def _hf_names(data):
  """Our feature names -> the hf worker's."""
  nsp = data["next_sentence_labels"]
  return dict(input_ids=data["input_ids"], attention_mask=data["input_mask"],
              token_type_ids=data["segment_ids"],
              masked_lm_positions=data["masked_lm_positions"],
              masked_lm_ids=data["masked_lm_ids"],
              masked_lm_weights=data["masked_lm_weights"],
              next_sentence_label=nsp.reshape(len(nsp)))


def _OriginalAdamW(groups, lr):  # pylint: disable=invalid-name
  """google-research/bert's AdamWeightDecay in torch (no bias correction)."""
  import torch  # pylint: disable=g-import-not-at-top

  class OriginalAdamW(torch.optim.Optimizer):
    """m/(sqrt(v)+eps) + wd*w, uncorrected, as official_bert's "adamw"."""

    def __init__(self, params, lr):
      super().__init__(params, dict(lr=lr, weight_decay=0.0))

    @torch.no_grad()
    def step(self):  # pylint: disable=arguments-differ
      for group in self.param_groups:
        for p in group["params"]:
          if p.grad is None:
            continue
          state = self.state[p]
          if not state:
            state["m"] = torch.zeros_like(p)
            state["v"] = torch.zeros_like(p)
          m, v = state["m"], state["v"]
          m.mul_(0.9).add_(p.grad, alpha=0.1)
          v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
          update = m / (v.sqrt() + 1e-6) + group["weight_decay"] * p
          p.sub_(group["lr"] * update)

  return OriginalAdamW(groups, lr)


def _spread(values):
  mean = sum(values) / len(values)
  std = math.sqrt(sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1))
  return mean, max(values) - min(values), std


def main(argv):
  del argv
  if FLAGS.hf_worker:
    hf_worker(FLAGS.hf_worker)
    return
  unknown = [s for s in FLAGS.sides if s not in OURS and s not in HF]
  if unknown:
    raise app.UsageError(f"--sides: unknown {unknown}; choose from "
                         f"{sorted(OURS) + list(HF)}.")
  seeds = [int(s) for s in FLAGS.seeds]
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="convergence-")
  os.makedirs(work_dir, exist_ok=True)
  with open(os.path.join(work_dir, "bert_config.json"), "w",
            encoding="utf-8") as f:
    json.dump(MINI, f, indent=2)
  began = time.time()
  train, heldout = write_records(work_dir)
  eval_steps = min(FLAGS.eval_records, count_records(heldout)) // EVAL_BATCH
  if FLAGS.export_hf_data:
    FLAGS.eval_records = eval_steps * EVAL_BATCH
    export_hf_data(FLAGS.export_hf_data, train, heldout, seeds)
    return
  recipe = _recipe(eval_steps * EVAL_BATCH)
  print(f"{count_records(train)} training records, {eval_steps * EVAL_BATCH} "
        f"held-out records scored; seq {FLAGS.max_seq_length}, {FLAGS.steps} "
        f"steps, batch {FLAGS.batch_size}, lr {FLAGS.learning_rate}, warmup "
        f"{_warmup_steps()}; records written in {time.time() - began:.0f}s; "
        f"load average {os.getloadavg()[0]:.2f}", flush=True)
  results = {side: [] for side in FLAGS.sides}
  for seed in seeds:
    for side in FLAGS.sides:
      t = time.time()
      saved = os.path.join(work_dir, f"{side}-seed{seed}.json")
      r = None
      if (FLAGS.reuse_results or FLAGS.report_only) and os.path.exists(saved):
        with open(saved, encoding="utf-8") as f:
          r = json.load(f)
        if r.get("recipe") != recipe:
          r = None
      if not r and FLAGS.report_only:
        print(f"{side:18s} seed {seed}: not run", flush=True)
        results[side].append(None)
        continue
      if r:
        how = (f"reused {os.path.basename(saved)}: "
               f"{r.get('wall_seconds', r.get('seconds', 0)):.0f}s"
               + (f", load average {r['load_average']:.2f}"
                  if "load_average" in r else ""))
      else:
        run = run_hf if side in HF else run_ours
        r = run(side, seed, train, heldout, eval_steps, work_dir)
        r.update(recipe=recipe, wall_seconds=time.time() - t,
                 load_average=os.getloadavg()[0])
        r.setdefault("device", "cpu")
        with open(saved + ".tmp", "w", encoding="utf-8") as f:
          json.dump(r, f)
        os.replace(saved + ".tmp", saved)
        how = (f"{r['wall_seconds']:.0f}s, load average "
               f"{r['load_average']:.2f}")
      results[side].append(r)
      nsp = r.get("next_sentence_accuracy")
      print(f"{side:18s} seed {seed}: masked-LM {r['masked_lm_accuracy']:.4f}"
            f" (loss {r['masked_lm_loss']:.3f})  next-sentence "
            + (f"{nsp:.3f}" if nsp is not None else "-")
            + f"  ({how}; {r['device']})", flush=True)
  print()
  reference = FLAGS.sides[0]
  ref_mean = _spread([r["masked_lm_accuracy"] for r in results[reference]
                      if r])[0]
  print("| side | " + " | ".join(f"seed {s}" for s in seeds)
        + " | mean | spread (max-min) | std | masked-LM loss (mean) "
        "| next-sentence (mean) "
        f"| vs {reference} (diff, ratio) |")
  print("|---" * (len(seeds) + 7) + "|")
  for side in FLAGS.sides:
    done = [r for r in results[side] if r]
    if not done:
      continue
    mlm = [r["masked_lm_accuracy"] for r in done]
    nsp = [r["next_sentence_accuracy"] for r in done
           if "next_sentence_accuracy" in r]
    loss = [r["masked_lm_loss"] for r in done]
    mean, spread, std = _spread(mlm)
    print(f"| {side} | " + " | ".join(
        f"{r['masked_lm_accuracy']:.4f}" if r else "-" for r in results[side])
          + f" | {mean:.4f} | {spread:.4f} | {std:.4f} | "
          f"{sum(loss) / len(loss):.3f} | "
          + (f"{sum(nsp) / len(nsp):.3f}" if nsp else "-")
          + f" | {mean - ref_mean:+.4f}, "
          f"{mean / ref_mean:.3f} |")
  print(f"\n{time.time() - began:.0f}s in all; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
  if not FLAGS.work_dir:
    shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
