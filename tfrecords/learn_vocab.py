r"""Learns a WordPiece vocab.txt from a corpus, for FullTokenizer and BERT.

Input: the pretraining corpus format (one sentence per line, blank lines
between documents). Words are split exactly as `FullTokenizer` splits them
(official_bert/data/tokenization.py: clean, lower-case + strip accents when
uncased, punctuation and CJK split), then TF Text's WordPiece learner
(`tensorflow_text.tools.wordpiece_vocab`, the bottom-up learner behind
`bert_vocab_from_dataset`) picks the subwords.

Output layout, as google-research/bert's vocab files:
  [PAD], [unused0] .. [unused{N-1}], [UNK], [CLS], [SEP], [MASK], learned...
With the default --num_unused=99 the special ids equal BERT's released
vocabularies ([PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103).

  python -m tfrecords.learn_vocab --input_file='corpus/*.txt' \
      --output_file=vocab.txt --vocab_size=30522 --do_lower_case=True

--vocab_size is an upper bound that includes the special tokens; the learner
aims for 95-100% of it, and a small corpus can support fewer tokens (the
summary line prints the size reached). Set bert_config.json's vocab_size to at
least the number of lines written.
"""

import collections
import glob
import json
import math
import os
import time

from absl import app
from absl import flags
from absl import logging

from official_bert import cli

# Tokens below this count are not learned (the learner's own default).
MIN_TOKEN_COUNT = 10
# Lines per TensorFlow batch when splitting words.
BATCH_LINES = 16384


def reserved_tokens(num_unused):
  """[PAD], [unused0..num_unused-1], [UNK], [CLS], [SEP], [MASK]."""
  return (["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)]
          + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])


def count_words(lines, do_lower_case=True, progress=None):
  """Counts FullTokenizer's words (before WordPiece) over `lines` (str).

  `progress(lines_done)` is called after every batch.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def split(batch):
    words = tokenization.split_words(
        tokenization.normalize(batch, do_lower_case)).flat_values
    unique, _, counts = tf.unique_with_counts(words)
    return unique, counts

  counts = collections.Counter()
  done = 0
  batch = []
  for line in list(lines) + [None]:
    if line is not None:
      batch.append(line)
    if batch and (line is None or len(batch) == BATCH_LINES):
      unique, batch_counts = split(tf.constant(batch))
      counts.update(dict(zip(unique.numpy().tolist(),
                             batch_counts.numpy().tolist())))
      done += len(batch)
      batch = []
      if progress:
        progress(done)
  return collections.Counter(
      {word.decode("utf-8"): n for word, n in counts.items()})


def learn_vocab(word_counts, vocab_size, num_unused=99, progress=None):
  """WordPiece vocab (list of str, special tokens first) from word counts.

  TF Text's learner: a search over the minimum subword count, each step a
  full bottom-up learning pass. The search is driven here (not by
  `learner.learn`) to report each step through `progress(step, threshold,
  size, seconds)`, to bisect in log space, and to never return more than
  `vocab_size` tokens.
  """
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner  # pylint: disable=g-import-not-at-top,line-too-long
  reserved = reserved_tokens(num_unused)
  if vocab_size <= len(reserved):
    raise ValueError(
        f"vocab_size={vocab_size} leaves no room after the {len(reserved)} "
        f"special tokens; raise vocab_size or lower num_unused.")
  # The learner's defaults, but for the minimum count.
  params = learner.Params(
      upper_thresh=int(1e7), lower_thresh=MIN_TOKEN_COUNT, num_iterations=4,
      max_input_tokens=int(5e6), max_token_length=50, max_unique_chars=1000,
      vocab_size=vocab_size, slack_ratio=0.05, include_joiner_token=True,
      joiner="##", reserved_tokens=reserved)
  items = list(word_counts.items())
  upper, lower = learner.get_search_threshs(
      items, params.upper_thresh, params.lower_thresh)
  words = learner.get_input_words(items, reserved, params.max_token_length)
  words = learner.filter_input_words(
      words, learner.get_allowed_chars(words, params.max_unique_chars),
      params.max_input_tokens)
  # A corpus whose most frequent word is rarer than the minimum count: one
  # pass at that highest count (characters and little more).
  lower = min(lower, upper)
  best, smallest, step = None, None, 0
  while lower <= upper:
    # Bisect in log space: the vocab size falls roughly as a power of the
    # threshold, so this takes about half the steps of the learner's own
    # arithmetic bisection (the vocab learned at a threshold is the same).
    threshold = int(math.sqrt(upper * lower))
    step += 1
    start = time.time()
    vocab = learner.learn_with_thresh(words, threshold, params)
    if progress:
      progress(step, threshold, len(vocab), time.time() - start)
    if len(vocab) <= vocab_size and (best is None or len(vocab) > len(best)):
      best = vocab
    if smallest is None or len(vocab) < len(smallest):
      smallest = vocab
    if vocab_size * (1 - params.slack_ratio) <= len(vocab) <= vocab_size:
      break
    if len(vocab) > vocab_size:
      lower = threshold + 1
    else:
      upper = threshold - 1
  # Even the highest threshold tried gave too many tokens: keep the first
  # ones (special tokens, single characters, then the most frequent).
  vocab = best if best is not None else smallest[:vocab_size]
  assert vocab[:len(reserved)] == reserved, "learner moved the special tokens"
  return vocab


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def _input_files(patterns):
  """Files of a comma list of globs (local without importing TensorFlow)."""
  files = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if pattern:
      if os.path.isdir(pattern):
        raise app.UsageError(
            f"--input_file={pattern} is a directory; pass text files or a "
            f"glob such as {os.path.join(pattern, '*.txt')}.")
      matched = sorted(_gfile().glob(pattern) if "://" in pattern
                       else (p for p in glob.glob(pattern)
                             if not os.path.isdir(p)))
      if not matched and "://" not in pattern and cli.blocked_by(pattern):
        raise cli.missing("input_file", pattern)
      if not matched:
        raise app.UsageError(
            f"--input_file pattern {pattern!r} matches no file; pass "
            f"a comma-separated list of existing files or globs.")
      for path in matched:
        cli.check_text_file("input_file", path)
      files.extend(matched)
  if not files:
    raise app.UsageError("--input_file is empty; pass the corpus files.")
  return files


def _read_lines(files):
  """Non-blank lines of all files (document boundaries do not matter here).

  A few undecodable bytes are dropped, as the original's convert_to_unicode;
  a file with NUL bytes or mostly undecodable lines is not text (cli.Error).
  """
  lines = []
  for path in files:
    total = undecodable = 0
    with (_gfile().GFile(path, "rb") if "://" in path else open(path, "rb")) as f:
      for number, raw in enumerate(f, 1):
        if b"\0" in raw:
          raise cli.Error(f"--input_file={path} line {number} holds NUL "
                          "bytes: it is not a text file; pass UTF-8 text, "
                          "one sentence per line.")
        total += 1
        try:
          line = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
          undecodable += 1
          line = raw.decode("utf-8", "ignore").strip()
        if line:
          lines.append(line)
    reason = cli.mostly_undecodable("input_file", path, undecodable, total)
    if reason:
      raise cli.Error(reason)
  return lines


def main(argv):
  del argv
  f = flags.FLAGS
  config = {name: f[name].value for name in (
      "input_file", "output_file", "vocab_size", "do_lower_case", "num_unused")}
  logging.info("learn_vocab config: %s", json.dumps(config, sort_keys=True))
  if f.vocab_size <= len(reserved_tokens(f.num_unused)):
    raise app.UsageError(
        f"--vocab_size={f.vocab_size} leaves no room after the "
        f"{len(reserved_tokens(f.num_unused))} special tokens; raise it or "
        f"lower --num_unused.")
  cli.check_output_file("output_file", f.output_file)
  out_dir = os.path.dirname(os.path.abspath(f.output_file))
  if not os.path.isdir(out_dir):
    raise app.UsageError(
        f"--output_file directory {out_dir} does not exist; create it first.")
  files = _input_files(f.input_file)
  start = time.time()
  lines = _read_lines(files)
  if not lines:
    raise app.UsageError(
        f"--input_file {f.input_file} holds no text (only blank lines); pass "
        f"a corpus with one sentence per line.")
  logging.info("read %d lines from %d file(s)", len(lines), len(files))
  # Import TensorFlow and TF Text before the progress clock starts (without
  # TensorFlow's start-up lines).
  cli.start_tensorflow()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top,unused-import
  split_start = time.time()

  def progress(done):
    elapsed = time.time() - split_start
    rate = done / max(elapsed, 1e-9)
    logging.info("split %d/%d lines (%.0f lines/s, ETA %.0f s)", done,
                 len(lines), rate, (len(lines) - done) / max(rate, 1e-9))

  counts = count_words(lines, f.do_lower_case, progress)
  logging.info("%d words, %d distinct; learning WordPiece: a search "
               "over the minimum subword count, bisected in log space",
               sum(counts.values()), len(counts))

  def learn_progress(step, threshold, size, seconds):
    logging.info("learning step %d: minimum count %d -> %d tokens (%.1f s)",
                 step, threshold, size, seconds)

  learn_start = time.time()
  vocab = learn_vocab(counts, f.vocab_size, f.num_unused, learn_progress)
  logging.info("learned in %.1f s; first learned tokens: %s",
               time.time() - learn_start,
               " ".join(vocab[len(reserved_tokens(f.num_unused)):][:40]))

  cli.atomic_write(f.output_file, "".join(token + "\n" for token in vocab),
                   what="the vocabulary")
  print(f"learn_vocab: wrote {len(vocab)} tokens (asked for at most "
        f"{f.vocab_size}, {len(reserved_tokens(f.num_unused))} special) to "
        f"{f.output_file} from {len(lines)} lines, {sum(counts.values())} "
        f"words in {time.time() - start:.1f} s")


if __name__ == "__main__":
  flags.DEFINE_string("input_file", None,
                      "Comma-separated files or globs: one sentence per line.")
  flags.DEFINE_string("output_file", None, "Where to write vocab.txt.")
  flags.DEFINE_integer("vocab_size", 30522,
                       "Upper bound on tokens written, special tokens included "
                       "(30522: BERT-base's vocab_size).")
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case and strip accents (uncased models).")
  flags.DEFINE_integer("num_unused", 99,
                       "[unusedN] tokens between [PAD] and [UNK] (99: the "
                       "special ids of google-research/bert's vocab files).")
  flags.mark_flags_as_required(["input_file", "output_file"])
  cli.run(main)
