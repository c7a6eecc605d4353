r"""Extends a trained BERT for a domain: its words, and longer texts.

From a checkpoint (ours, google-research/bert's TF1 `bert_model.ckpt`, or a
Hugging Face directory) and its vocab.txt, writes to --output_dir a new
release folder (training/release_folder.py): `bert_model.ckpt` + `vocab.txt`
+ `bert_config.json` + `extend_info.json`:

  * domain words (--new_words_file, one per line, or learned from
    --domain_corpus) go first into the `[unusedN]` slots, then after the
    vocabulary's last line (vocab_size grows); each new row of the word
    embeddings and of the masked-LM output bias starts as the mean of the
    rows of the WordPieces the old tokenizer split that word into;
  * --max_position_embeddings=N (e.g. 512 -> 1024) repeats the learned
    position rows periodically (row i = old row i mod old length).

Text that none of the new words tokenizes differently gives exactly the old
outputs. Continue pretraining from --output_dir at a small learning rate
(docs/domain-adaptation.md has the whole recipe):

    python -m official_bert.extend_checkpoint \
      --init_checkpoint=uncased_L-12_H-768_A-12 --domain_corpus='domain/*.txt' \
      --max_new_words=2000 --max_position_embeddings=1024 \
      --output_dir=/tmp/bert_domain

Casing: --do_lower_case (default true, as every program) must be the
model's. Words are normalised as its tokenizer normalises text (uncased:
lower-cased, accents stripped), so "BRCA1" is added as "brca1".
"""

import dataclasses
import glob
import json
import os
import time

from absl import app
from absl import flags
from absl import logging

from official_bert import cli

FLAGS = flags.FLAGS

flags.DEFINE_string("init_checkpoint", None,
                    "The checkpoint to extend: a prefix or its directory "
                    "(official_bert's, or google-research/bert's "
                    "bert_model.ckpt), or a Hugging Face BERT directory.")
flags.DEFINE_string("bert_config_file", None,
                    "Its bert_config.json (default: beside the checkpoint).")
flags.DEFINE_string("vocab_file", None,
                    "Its vocab.txt (default: beside the checkpoint).")
flags.DEFINE_bool("do_lower_case", True,
                  "The model's casing (true for uncased models): new words "
                  "are normalised as its tokenizer normalises text.")
flags.DEFINE_string("new_words_file", None,
                    "Words to add, one per line, most wanted first.")
flags.DEFINE_string("domain_corpus", None,
                    "Or learn the words: comma-separated files or globs of "
                    "domain text (one sentence per line). learn_vocab's "
                    "WordPiece learner runs on it; the whole words it "
                    "learns that the vocabulary lacks are added, those "
                    "saving the most WordPieces over the corpus first.")
flags.DEFINE_integer("max_new_words", 1000,
                     "Add at most this many new words.")
flags.DEFINE_integer("max_position_embeddings", None,
                     "New number of positions (at least the checkpoint's; "
                     "default: unchanged).")
flags.DEFINE_string("output_dir", None,
                    "Where to write the extended checkpoint; must not exist "
                    "or be empty.")


def _check_flags():
  """The errors one sentence explains, before TensorFlow starts."""
  for name in ("init_checkpoint", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  if cli.blocked_by(FLAGS.init_checkpoint):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  if ("://" not in FLAGS.init_checkpoint and
      not os.path.exists(FLAGS.init_checkpoint) and
      not glob.glob(FLAGS.init_checkpoint + ".*")):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  for name in ("bert_config_file", "vocab_file"):
    if getattr(FLAGS, name):
      cli.check_input_file(name, getattr(FLAGS, name))
  output = FLAGS.output_dir
  if "://" in output:
    raise app.UsageError(f"--output_dir={output} must be a local directory "
                         "(it is written through a temporary one, then "
                         "renamed); copy it to remote storage afterwards.")
  if os.path.isdir(output) and os.listdir(output):
    raise app.UsageError(f"--output_dir={output} is not empty; choose a new "
                         "directory (nothing is overwritten).")
  cli.check_output_dir("output_dir", output, create=False)
  if FLAGS.new_words_file and FLAGS.domain_corpus:
    raise app.UsageError("Pass --new_words_file or --domain_corpus, not both.")
  if FLAGS.max_new_words <= 0:
    raise app.UsageError(f"--max_new_words must be positive, got "
                         f"{FLAGS.max_new_words}.")
  if (FLAGS.max_position_embeddings is not None and
      FLAGS.max_position_embeddings <= 0):
    raise app.UsageError(f"--max_position_embeddings must be positive, got "
                         f"{FLAGS.max_position_embeddings}.")
  if not (FLAGS.new_words_file or FLAGS.domain_corpus or
          FLAGS.max_position_embeddings):
    raise app.UsageError("Nothing to extend: pass --new_words_file, "
                         "--domain_corpus or --max_position_embeddings.")
  if FLAGS.new_words_file:
    cli.check_text_file("new_words_file", FLAGS.new_words_file,
                        "UTF-8 text, one word per line")
    if not _words_file_entries(FLAGS.new_words_file):
      raise app.UsageError(f"--new_words_file={FLAGS.new_words_file} holds "
                           "no word; write one word per line.")
  if FLAGS.domain_corpus:
    _corpus_files(FLAGS.domain_corpus)


def _words_file_entries(path):
  with open(path, encoding="utf-8", errors="replace") as f:
    return [line.strip() for line in f if line.strip()]


def _corpus_files(patterns):
  files = []
  for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
    matched = sorted(p for p in glob.glob(pattern) if not os.path.isdir(p))
    if not matched:
      if cli.blocked_by(pattern):
        raise cli.missing("domain_corpus", pattern)
      raise app.UsageError(f"--domain_corpus pattern {pattern!r} matches no "
                           "file; pass text files or globs.")
    for path in matched:
      cli.check_text_file("domain_corpus", path)
    files.extend(matched)
  if not files:
    raise app.UsageError("--domain_corpus is empty; pass domain text files.")
  return files


def _beside(flag_value, name):
  """--flag's path, or `name` beside --init_checkpoint (a directory or a
  prefix)."""
  if flag_value:
    return flag_value
  path = FLAGS.init_checkpoint
  return os.path.join(path if os.path.isdir(path) else os.path.dirname(path),
                      name)


def load_source():
  """(model, config, heads) of --init_checkpoint; `model` a BertPretrainer,
  `heads` the original-name prefixes the source has ("cls/predictions",
  "cls/seq_relationship"; none for an encoder-only source)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert import convert_checkpoint  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  path = FLAGS.init_checkpoint
  if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")):
    source = convert_checkpoint.read_hf_directory(path)
    config, names = source.config, set(source.arrays)
    model, _, _ = convert_checkpoint.build_model(source)
  else:
    prefix = checkpoints.resolve(path)
    config_file = _beside(FLAGS.bert_config_file, "bert_config.json")
    if not os.path.exists(config_file):
      raise ValueError(f"{config_file} does not exist; pass the checkpoint's "
                       "--bert_config_file")
    config = configs.BertConfig.from_json_file(config_file,
                                               "--bert_config_file")
    # Original names (a TF1 checkpoint), or ours: model/cls_predictions/...
    ours = {"model/cls_predictions/output_bias/": "cls/predictions/",
            "model/cls_seq_relationship/": "cls/seq_relationship/"}
    names = set()
    for name in tf.train.load_checkpoint(prefix).get_variable_to_shape_map():
      names.add(next((head for start, head in ours.items()
                      if name.startswith(start)), name))
    model = pretrainer.BertPretrainer.from_bert_config(
        config, use_next_sentence=any(
            n.startswith("cls/seq_relationship/") for n in names))
    checkpoints.restore_model(model, prefix)
  heads = [h for h in ("cls/predictions", "cls/seq_relationship")
           if any(n.startswith(h + "/") for n in names)]
  return model, config, heads


def _arrays(model, heads):
  """The model's weights by original name (the source's heads only)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  arrays = {}
  for name, (variable, transpose) in checkpoint_names.original_names(
      model).items():
    if name.startswith("bert/") or "/".join(name.split("/")[:2]) in heads:
      value = np.asarray(variable.numpy())
      arrays[name] = value.T if transpose else value
  return arrays


def learned_words(files, tokenizer, vocab_size):
  """Whole words that learn_vocab's WordPiece learner keeps for `files` and
  the old vocabulary lacks, most WordPieces saved over the corpus first."""
  from official_bert.training import extension  # pylint: disable=g-import-not-at-top
  from tfrecords import learn_vocab  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  lines = []
  for path in files:
    with open(path, encoding="utf-8", errors="ignore") as f:
      lines.extend(line.strip() for line in f if line.strip())
  if not lines:
    raise cli.Error(f"--domain_corpus={FLAGS.domain_corpus} holds no text "
                    "(only blank lines); pass domain text, one sentence per "
                    "line.")
  logging.info("splitting %d lines of --domain_corpus into words", len(lines))
  counts = learn_vocab.count_words(
      lines, tokenizer.do_lower_case,
      lambda done: logging.info("split %d/%d lines", done, len(lines)))
  logging.info("%d distinct words; learning a %d-token WordPiece vocabulary",
               len(counts), vocab_size)
  learned = learn_vocab.learn_vocab(
      counts, vocab_size, num_unused=0,
      progress=lambda step, threshold, size, seconds: logging.info(
          "learning step %d: minimum count %d -> %d tokens (%.1f s)", step,
          threshold, size, seconds))
  old = set(tokenizer.vocab)
  candidates = [t for t in learned if t in counts and t not in old and
                not extension.UNUSED.match(t) and len(t) > 1]
  if not candidates:
    return [], len(lines)
  pieces = tokenizer.tokenize(tf.constant(candidates)).row_lengths().numpy()
  saved = {t: counts[t] * max(int(n) - 1, 1)
           for t, n in zip(candidates, pieces)}
  return sorted(candidates, key=lambda t: (-saved[t], t)), len(lines)


def main(argv):
  del argv
  start = time.time()
  _check_flags()
  logging.info("extend_checkpoint flags: %s", json.dumps(
      {name: FLAGS[name].value for name in (
          "init_checkpoint", "bert_config_file", "vocab_file",
          "do_lower_case", "new_words_file", "domain_corpus", "max_new_words",
          "max_position_embeddings", "output_dir")}, sort_keys=True))
  cli.start_tensorflow()  # without its start-up lines
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  from official_bert import tokenization as python_tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  from official_bert.training import extension  # pylint: disable=g-import-not-at-top
  from official_bert.training import release_folder  # pylint: disable=g-import-not-at-top

  try:
    model, config, heads = load_source()
  except ValueError as e:
    raise cli.Error(f"--init_checkpoint: {e}") from None
  except (tf.errors.OpError, IndexError) as e:
    raise cli.Error(f"cannot read --init_checkpoint {FLAGS.init_checkpoint}: "
                    f"{type(e).__name__}; pass a complete checkpoint") from None
  vocab_file = _beside(FLAGS.vocab_file, "vocab.txt")
  try:
    python_tokenization.validate_case_matches_checkpoint(
        FLAGS.do_lower_case, FLAGS.init_checkpoint)
    tokenizer = tokenization.FullTokenizer(vocab_file, FLAGS.do_lower_case)
  except ValueError as e:
    raise cli.Error(str(e).rstrip(".") + ".") from None
  if tokenizer.vocab_size > config.vocab_size:
    raise cli.Error(
        f"--vocab_file={vocab_file} has {tokenizer.vocab_size} lines but the "
        f"checkpoint's vocab_size is {config.vocab_size}; pass the vocab.txt "
        "the checkpoint was trained with.")
  positions = FLAGS.max_position_embeddings
  if positions is not None and positions < config.max_position_embeddings:
    raise cli.Error(
        f"--max_position_embeddings={positions} is smaller than the "
        f"checkpoint's {config.max_position_embeddings}; pass at least "
        f"{config.max_position_embeddings} (positions are only added).")
  cased = [t for t in tokenizer.vocab if t != t.lower()
           and not t.startswith("[")]
  if FLAGS.do_lower_case and len(cased) > tokenizer.vocab_size // 100:
    print(f"note: {vocab_file} holds {len(cased)} tokens with capitals "
          f"(e.g. {cased[0]!r}), so its model may be cased: pass "
          "--do_lower_case=false if it is", flush=True)

  plan = None
  entries = []
  if FLAGS.new_words_file:
    entries = _words_file_entries(FLAGS.new_words_file)
  elif FLAGS.domain_corpus:
    entries, num_lines = learned_words(_corpus_files(FLAGS.domain_corpus),
                                       tokenizer, tokenizer.vocab_size)
    print(f"learned {len(entries)} whole words the vocabulary lacks from "
          f"{num_lines} lines of --domain_corpus", flush=True)
  if FLAGS.new_words_file or FLAGS.domain_corpus:
    plan = extension.plan_words(tokenizer, entries, config.vocab_size,
                                FLAGS.max_new_words)
    if not plan.added and positions is None:
      raise cli.Error(
          f"nothing to add: {len(plan.known)} of the words are in {vocab_file} "
          f"already, {len(plan.not_one_word)} are not one word to the "
          "tokenizer; pass other words or --max_position_embeddings.")

  arrays = extension.extend_arrays(_arrays(model, heads), plan, positions)
  new_config = config.replace(
      vocab_size=plan.vocab_size if plan else config.vocab_size,
      max_position_embeddings=positions or config.max_position_embeddings)
  extended = pretrainer.BertPretrainer.from_bert_config(
      new_config, use_next_sentence="cls/seq_relationship" in heads)
  target = extended if "cls/predictions" in heads else extended.encoder
  checkpoint_names.assign_original(target, arrays, "the extended weights")

  info = {
      "source": os.path.abspath(FLAGS.init_checkpoint),
      "do_lower_case": FLAGS.do_lower_case,
      "old_vocab_size": config.vocab_size, "vocab_size": new_config.vocab_size,
      "old_max_position_embeddings": config.max_position_embeddings,
      "max_position_embeddings": new_config.max_position_embeddings,
      "position_rows": "periodic copy: row i = old row i mod "
                       f"{config.max_position_embeddings}",
      "new_words": [w for w, _, _ in plan.added] if plan else [],
      "new_word_ids": plan.new_ids if plan else [],
      "unused_slots_taken": plan.slots if plan else 0,
      "skipped_in_vocab": len(plan.known) if plan else 0,
      "skipped_not_one_word": plan.not_one_word if plan else [],
  }
  output = os.path.abspath(FLAGS.output_dir)
  with saved_model_io.atomic_dir(output) as tmp:
    release_folder.write(
        tmp, target, new_config, plan.vocab if plan else tokenizer.vocab,
        {extension.INFO_FILE: json.dumps(info, indent=2) + "\n"},
        temporary=True)
  words = (f"added {len(plan.added)} words ({plan.slots} into [unused] "
           f"slots, {len(plan.added) - plan.slots} appended), vocab_size "
           f"{config.vocab_size} -> {new_config.vocab_size}; skipped "
           f"{len(plan.known)} already in the vocabulary and "
           f"{len(plan.not_one_word)} that are not one word"
           if plan else "no new words")
  rows = (f"{config.max_position_embeddings} -> "
          f"{new_config.max_position_embeddings} (periodic copy)"
          if new_config.max_position_embeddings > config.max_position_embeddings
          else f"{config.max_position_embeddings} (unchanged)")
  print(f"extend_checkpoint: {words}; positions {rows}; heads: "
        f"{', '.join(heads) or 'none (encoder only)'} -> {output} in "
        f"{time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
  cli.run(main)
