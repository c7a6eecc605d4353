"""Long documents: how run_classifier's --doc_stride windows combine.

On tools/long_document_task.py's task (the label is one sentence anywhere in
a document), trains run_classifier with --doc_stride (each window fitted to
its document's label; --window_training=documents: each document's windows
combined by max) once per seed, then evaluates the same checkpoint on
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
pretraining. With --hf_model (a pretrained Hugging Face BERT directory, e.g.
finetuning_quality --stage=hf's W/hf_model) both sides start from it
instead, as a user's run would:

    python -m benchmarks.long_document_benchmark --work_dir=/tmp/long_pre \\
      --hf_model=/tmp/q/hf_model --max_seq_length=128 --doc_stride=64 \\
      --train=800 --train_doc_pieces=256 --learning_rate=5e-5 --epochs=3 \\
      --batch_size=32

and --size=bert_tiny draws such a start from random weights (BERT-Tiny,
L2 H128): windows of 128 that learn on 2 cores in about a minute a seed,

    python -m benchmarks.long_document_benchmark --work_dir=/tmp/long_128 \\
      --size=bert_tiny --max_seq_length=128 --doc_stride=64 --train=800 \\
      --train_doc_pieces=256 --learning_rate=3e-4 --epochs=6 --batch_size=32

Against Hugging Face at 512 (--hf_max_seq_length, 0 to skip): each seed's
fine-tuned checkpoint is exported with `export.export_checkpoint
--format=huggingface` and `BertForSequenceClassification` reads the same dev
documents (our ids) truncated to their first 512 pieces, at the same batch
size; printed beside ours: dev accuracy, prediction ms per document (ours
from run_classifier's "test predictions" line over every window of the
dev documents, written again as test.tsv; HF's a timed forward over the
pre-tokenized documents, as ours' are encoded before its clock starts), the
ratio, our training ms per training document, and the accuracy a reader of
the first 510 pieces can reach (key sentence inside: right; else a coin).
Its positions past --max_seq_length are untrained (ours never sees them),
so HF's accuracy is that of our weights read at 512, not of a model
fine-tuned at 512; the config then has max(--max_seq_length, 512)
position embeddings. With --hf_model, HF's side is `Trainer` fine-tuning
the same start on the training documents cut to their first 512 pieces
(same epochs, batch, learning rate, seed; warmup 10%, weight decay 0.01),
and its training ms per document is printed too.
"""

import argparse
import os
import re
import shutil
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


def _bert_tiny(path, max_positions):
  """A Hugging Face BERT-Tiny (L2 H128 A2 I512) from random weights (torch
  seed 12345) with BERT's uncased vocab, in `path` (made once)."""
  if not os.path.exists(os.path.join(path, "vocab.txt")):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    torch.manual_seed(12345)
    transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=30522, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=512,
        max_position_embeddings=max_positions)).save_pretrained(path)
    shutil.copy(VOCAB, os.path.join(path, "vocab.txt"))
  return path


def _run(args, program="official_bert.run_classifier"):
  """(wall seconds, the program's output)."""
  t0 = time.time()
  proc = subprocess.run([sys.executable, "-m", program] + args, cwd=ROOT,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, env=dict(os.environ,
                                            TF_CPP_MIN_LOG_LEVEL="2"))
  if proc.returncode:
    raise RuntimeError(f"{program} failed:\n{proc.stdout[-3000:]}")
  return time.time() - t0, proc.stdout


def _accuracy(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return float(dict(line.strip().split(" = ") for line in f)[
        "eval_accuracy"])


def _encoded(tsv, max_seq_length):
  """(examples, our encoded arrays) of `tsv`, each text cut to its first
  `max_seq_length` pieces."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top
  examples = text_files.read_examples(
      tsv, text_files.Columns("sentence", None, "label"))
  return examples, text_files.encode(
      examples, tokenization.FullTokenizer(VOCAB, True), max_seq_length)


def _hf_trainer(args, train_tsv, max_seq_length, seed, output_dir):
  """(model, training seconds): `Trainer` fine-tuning --hf_model on the
  training documents cut to `max_seq_length` (our ids), with our side's
  epochs, batch, learning rate and seed (warmup 10%, weight decay 0.01,
  clipping 1.0, as ours; its other defaults)."""
  import math  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, ROOT)
  from tools import short_task  # pylint: disable=g-import-not-at-top
  examples, inputs = _encoded(train_tsv, max_seq_length)
  names = sorted({e.label for e in examples})
  transformers.set_seed(seed)
  model = transformers.BertForSequenceClassification.from_pretrained(
      args.hf_model, num_labels=len(names),
      id2label=dict(enumerate(names)))
  features = short_task.hf_features(
      inputs, {"labels": [names.index(e.label) for e in examples]})
  steps = math.ceil(len(features) / args.batch_size) * args.epochs
  trainer = transformers.Trainer(
      model=model, train_dataset=features,
      data_collator=transformers.DataCollatorWithPadding(
          transformers.BertTokenizerFast(vocab_file=VOCAB)),
      args=transformers.TrainingArguments(
          output_dir=output_dir, report_to=[],
          per_device_train_batch_size=args.batch_size,
          learning_rate=args.learning_rate, num_train_epochs=args.epochs,
          warmup_steps=int(steps * 0.1), weight_decay=0.01,
          max_grad_norm=1.0, seed=seed, save_strategy="no",
          logging_strategy="no", disable_tqdm=True, use_cpu=True))
  t0 = time.time()
  trainer.train()
  return model, time.time() - t0


def _hf_at(model, dev_tsv, max_seq_length, batch_size):
  """(dev accuracy, seconds) of an HF classifier (or the directory of one)
  reading each dev document's first `max_seq_length` pieces (our
  tokenizer's ids, encoded first)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  from transformers import BertForSequenceClassification  # pylint: disable=g-import-not-at-top
  examples, inputs = _encoded(dev_tsv, max_seq_length)
  if isinstance(model, str):
    model = BertForSequenceClassification.from_pretrained(model)
  model.eval()
  arrays = [torch.from_numpy(np.asarray(inputs[k], np.int64)) for k in
            ("input_word_ids", "input_mask", "input_type_ids")]
  predicted = []
  t0 = time.time()
  with torch.inference_mode():
    for i in range(0, len(examples), batch_size):
      ids, mask, types = (a[i:i + batch_size] for a in arrays)
      predicted += model(input_ids=ids, attention_mask=mask,
                         token_type_ids=types).logits.argmax(-1).tolist()
  seconds = time.time() - t0
  names = model.config.id2label
  right = sum(names[p] == e.label for p, e in zip(predicted, examples))
  return right / len(examples), seconds


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
  parser.add_argument("--window_training", default="windows",
                      choices=["windows", "documents"],
                      help="run_classifier's --window_training: fit each "
                      "window to its document's label, or each document's "
                      "windows combined by max")
  parser.add_argument("--size", default="h32", choices=["h32", "bert_tiny"],
                      help="the model from random weights when no "
                      "--hf_model: h32 (2 layers, H32, ours only; HF reads "
                      "our fine-tuned weights) or bert_tiny (L2 H128 A2 "
                      "I512, drawn in Hugging Face with seed 12345, so "
                      "both sides fine-tune it as they would --hf_model)")
  parser.add_argument("--hf_model", default=None,
                      help="start both sides from this pretrained Hugging "
                      "Face BERT directory (e.g. finetuning_quality "
                      "--stage=hf's W/hf_model) instead of the tiny model "
                      "from random weights; Hugging Face's side is then "
                      "`Trainer` fine-tuned on the training documents "
                      "truncated to --hf_max_seq_length")
  parser.add_argument("--hf_max_seq_length", type=int, default=512,
                      help="Hugging Face's side: the dev documents "
                      "truncated to this many pieces (0: no HF side)")
  return parser.parse_args(argv)


def main():
  args = parse_args()
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # HF's side loads TF
  from tools import long_document_task  # pylint: disable=g-import-not-at-top
  data = os.path.join(args.work_dir, "task")
  # Train from the short documents, dev (and test: the same texts,
  # unlabelled, for ours' prediction timing) from the long ones.
  long_document_task.write_task(data, args.train, 0, 2,
                                args.train_doc_pieces, args.seed)
  long_task = os.path.join(args.work_dir, "long")
  splits = long_document_task.write_task(long_task, 0, args.dev, 0,
                                         args.doc_pieces, args.seed)
  dev_tsv = os.path.join(data, "dev.tsv")
  os.replace(os.path.join(long_task, "dev.tsv"), dev_tsv)
  with open(os.path.join(data, "test.tsv"), "w", encoding="utf-8") as f:
    f.write("sentence\n")
    f.writelines(f"{text}\n" for text, _ in splits["dev"])
  hf_length = args.hf_max_seq_length
  if args.size == "bert_tiny" and not args.hf_model:
    positions = max(args.max_seq_length, hf_length)
    args.hf_model = _bert_tiny(
        os.path.join(args.work_dir, f"bert_tiny_hf_{positions}"), positions)
  if args.hf_model:
    # Converted again when --hf_model (or --size's draw) changed.
    start = os.path.join(args.work_dir, "start")
    marker = os.path.join(start, "made_from.txt")
    source = os.path.abspath(args.hf_model)
    made_from = None
    if os.path.exists(marker):
      with open(marker, encoding="utf-8") as f:
        made_from = f.read()
    if made_from != source:
      shutil.rmtree(start, ignore_errors=True)
      _run([f"--source={args.hf_model}", f"--output_dir={start}"],
           "official_bert.convert_checkpoint")
      with open(marker, "w", encoding="utf-8") as f:
        f.write(source)
    config = os.path.join(start, "bert_config.json")
    init = [f"--init_checkpoint={start}"]
  else:
    config = os.path.join(args.work_dir, "bert_config.json")
    _tiny_config(config, max(args.max_seq_length, hf_length))
    init = []
  common = [f"--task_data_dir={data}", f"--bert_config_file={config}",
            f"--vocab_file={VOCAB}", f"--max_seq_length={args.max_seq_length}"]
  print("seed  train s  max  mean  truncated" + (
      f"  | ms/doc ours  HF@{hf_length} acc  ms/doc  HF/ours" if hf_length
      else ""), flush=True)
  table, per_doc, hf_train = [], [], []
  for seed in args.seeds.split(","):
    out = os.path.join(args.work_dir, f"seed{seed}")
    shutil.rmtree(out, ignore_errors=True)  # a rerun trains afresh
    seconds, log = _run(common + [
        f"--output_dir={out}", "--do_train", "--do_eval", "--do_predict",
        f"--doc_stride={args.doc_stride}", "--window_aggregation=max",
        f"--window_training={args.window_training}",
        f"--num_train_epochs={args.epochs}",
        f"--train_batch_size={args.batch_size}",
        f"--predict_batch_size={args.batch_size}",
        f"--learning_rate={args.learning_rate}", f"--seed={seed}"] + init)
    row = [_accuracy(out)]
    _run(common + [f"--output_dir={out}", "--do_eval",
                   f"--doc_stride={args.doc_stride}",
                   "--window_aggregation=mean"])
    row.append(_accuracy(out))
    _run(common + [f"--output_dir={out}", "--do_eval"])
    row.append(_accuracy(out))
    line = f"{seed:>5} {seconds:8.0f}  " + "  ".join(f"{a:.3f}" for a in row)
    if hf_length:
      # Ours: the program's own clocks (training: "Trained steps ... in
      # X s", the tracing step included; prediction: every window of the
      # dev documents, combined).
      train_s = float(re.search(r"Trained steps \d+\.\.\d+ .* in ([0-9.]+) s",
                                log).group(1))
      n, predict_s = re.search(r"(\d+) test predictions in ([0-9.]+) s",
                               log).groups()
      if args.hf_model:
        model, hf_train_s = _hf_trainer(
            args, os.path.join(data, "train.tsv"), hf_length, int(seed),
            os.path.join(args.work_dir, f"seed{seed}_hf_out"))
        hf_train.append(1000 * hf_train_s / args.train)
      else:
        model = os.path.join(args.work_dir, f"seed{seed}_hf")
        shutil.rmtree(model, ignore_errors=True)
        _run(["--format=huggingface", f"--bert_config_file={config}",
              f"--init_checkpoint={out}", f"--vocab_file={VOCAB}",
              f"--export_dir={model}"], "export.export_checkpoint")
      hf_accuracy, hf_s = _hf_at(model, dev_tsv, hf_length, args.batch_size)
      ours_ms = 1000 * float(predict_s) / int(n)
      hf_ms = 1000 * hf_s / args.dev
      per_doc.append((ours_ms, hf_ms, 1000 * train_s / args.train))
      row.append(hf_accuracy)
      line += (f"  | {ours_ms:11.1f}  {hf_accuracy:10.3f}  {hf_ms:6.1f}  "
               f"{hf_ms / ours_ms:6.2f}x")
    table.append(row)
    print(line, flush=True)
  means = [sum(column) / len(table) for column in zip(*table)]
  print("mean           " + "  ".join(f"{a:.3f}" for a in means[:3]),
        flush=True)
  if hf_length:
    ours_ms, hf_ms, train_ms = (sorted(c)[len(c) // 2] for c in zip(*per_doc))
    _, inside = long_document_task.rows(args.dev, args.doc_pieces,
                                        args.seed + 1, hf_length - 2)
    print(f"per dev document (medians over seeds): ours --doc_stride="
          f"{args.doc_stride} windows of {args.max_seq_length} "
          f"{ours_ms:.1f} ms (max accuracy {means[0]:.3f}), HF truncated at "
          f"{hf_length} {hf_ms:.1f} ms (accuracy {means[3]:.3f}; "
          f"{inside} of {args.dev} hold the key sentence in their first "
          f"{hf_length - 2} pieces: a truncating reader can reach "
          f"{(inside + (args.dev - inside) / 2) / args.dev:.3f}); "
          f"HF/ours time {hf_ms / ours_ms:.2f}x. Ours' training: "
          f"{train_ms:.1f} ms per training document of ~"
          f"{args.train_doc_pieces} pieces" + (
              f"; HF Trainer's at {hf_length}: "
              f"{sorted(hf_train)[len(hf_train) // 2]:.1f} ms"
              if hf_train else ""), flush=True)


if __name__ == "__main__":
  main()
