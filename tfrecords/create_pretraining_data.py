r"""Creates masked-LM / next-sentence pretraining TFRecords from raw text.

The flags, algorithm and output format of google-research/bert's
create_pretraining_data.py, run as a streaming, parallel job:

  main process   reads lines, tokenizes them in big batches (TF Text, the
                 project's FullTokenizer), groups whole documents into windows
                 of about --window_tokens tokens, writes the records;
  worker procs   build, mask and serialize one window's instances each
                 (numpy only: tfrecords/instances.py; no TensorFlow import).

Memory is bounded by a few windows, not by the corpus. Each window's random
streams are seeded from (random_seed, window, dupe), so the files are
byte-identical for a seed whatever --num_workers is. Files are written under
`<name>.incomplete` and renamed when complete.

Input: one sentence per line, a blank line between documents.

Usage:
  python -m tfrecords.create_pretraining_data \
    --input_file=corpus.txt --output_file=/tmp/pretrain.tfrecord \
    --vocab_file=vocab.txt --do_lower_case=True --max_seq_length=128 \
    --max_predictions_per_seq=20 --masked_lm_prob=0.15 --random_seed=12345 \
    --dupe_factor=5
"""

import collections
import dataclasses
import gc
import gzip
import importlib
import json
import os
import sys
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from official_bert import cli
from official_bert import disk_full
from official_bert.data import features
from tfrecords import documents
from tfrecords import instances
from tfrecords import job_flags
from tfrecords import worker_pool

# Instances decoded to tokens in the log, as the original's first examples.
LOGGED_EXAMPLES = 3


@dataclasses.dataclass
class JobConfig:
  """Everything one run needs (the programs' flags, resolved)."""
  input_files: list
  output_files: list
  vocab_file: str
  do_lower_case: bool = True
  do_whole_word_mask: bool = False
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  random_seed: int = 12345
  dupe_factor: int = 10
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  next_sentence_prediction: bool = True
  pack_sequences: bool = False
  num_workers: int = 0
  compression: str = ""  # "" or "GZIP"
  window_tokens: int = 1 << 18


InputError = documents.InputError


def output_paths(output_file, num_output_shards):
  """Comma list of outputs, each split in num_output_shards when > 1."""
  names = [p.strip() for p in output_file.split(",") if p.strip()]
  if not names:
    raise InputError("--output_file is empty; give one or more output paths.")
  if num_output_shards < 1:
    raise InputError(f"--num_output_shards={num_output_shards} must be >= 1.")
  if num_output_shards == 1:
    return names
  return [f"{name}-{i:05d}-of-{num_output_shards:05d}"
          for name in names for i in range(num_output_shards)]


class _Writers:
  """Round-robin TFRecord files under temporary names, renamed at the end.

  Workers hand over framed records (features.frame_records), so writing is
  appending bytes; GZIP is the gzip format TF's "GZIP" TFRecord reader reads.
  """

  def __init__(self, paths, compression):
    self.paths = paths
    self.counts = [0] * len(paths)
    self._raw, self._files = [], []
    for path in paths:
      parent = os.path.dirname(path)
      if parent:
        os.makedirs(parent, exist_ok=True)
      with self._writing(path):
        raw = open(path + ".incomplete", "wb")  # pylint: disable=consider-using-with
      self._raw.append(raw)
      self._files.append(
          gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6,
                        mtime=0) if compression == "GZIP" else raw)
    self._next = 0

  def write(self, framed, lengths):
    """Appends framed records (lengths: their data lengths) round-robin."""
    n_files = len(self._files)
    if n_files == 1:
      with self._writing(self.paths[0]):
        self._files[0].write(framed)
      self.counts[0] += len(lengths)
      return
    ends = np.cumsum(lengths + 16).tolist()
    parts = [[] for _ in range(n_files)]
    view, start, k = memoryview(framed), 0, self._next
    for end in ends:
      parts[k].append(view[start:end])
      start, k = end, (k + 1) % n_files
    for f, i in zip(self._files, range(n_files)):
      with self._writing(self.paths[i]):
        f.write(b"".join(parts[i]))
      self.counts[i] += len(parts[i])
    self._next = k

  @staticmethod
  def _writing(path):
    """A full disk is one sentence naming the output (disk_full)."""
    return disk_full.writing(path, "the pretraining data")

  def commit(self):
    for f, raw, path in zip(self._files, self._raw, self.paths):
      with self._writing(path):
        f.close()  # GZIP's trailer, buffered bytes
        raw.close()
    for p in self.paths:
      os.replace(p + ".incomplete", p)

  def abort(self):
    """Closes and removes the files; a close that fails (the disk that
    stopped the job is still full) does not keep them."""
    for f, raw in zip(self._files, self._raw):
      for stream in (f, raw):
        try:
          stream.close()
        except OSError:
          pass
    for p in self.paths:
      if os.path.exists(p + ".incomplete"):
        os.remove(p + ".incomplete")


def _log_examples(records, tokenizer):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for record in records:
    feature = tf.train.Example.FromString(record).features.feature
    mask = list(feature["input_mask"].int64_list.value)
    n = sum(mask)
    logging.info("*** Example ***")
    logging.info("tokens: %s", " ".join(tokenizer.convert_ids_to_tokens(
        feature["input_ids"].int64_list.value[:n])))
    for name, kind, _ in features.SCHEMA:
      values = (feature[name].float_list if kind == "float"
                else feature[name].int64_list).value
      logging.info("%s: %s", name, " ".join(str(v) for v in values))


def _progress(start, reader, stats):
  elapsed = time.time() - start
  done = stats["bytes_done"] / max(1, reader.total_bytes)
  eta = elapsed * (1 - done) / done if done > 0 else float("nan")
  print(f"[create_pretraining_data] {done:6.1%} of input, "
        f"{stats['documents']:,} documents, {stats['instances']:,} instances "
        f"({stats['instances'] / max(elapsed, 1e-9):,.0f}/s), "
        f"{elapsed:.0f} s elapsed, ETA {eta:.0f} s", file=sys.stderr, flush=True)


def create_pretraining_data(config):
  """Runs the job; returns a dict of counts. Raises InputError on bad input."""
  start = time.time()
  # Flags first: a bad one fails in a second, before TensorFlow is imported.
  try:
    instances.InstanceOptions.from_flags(None, config).validate()
  except ValueError as e:
    raise InputError(str(e)) from None
  # Workers start first (spawned: fork after importing TF is unsafe), so
  # their start-up overlaps the TensorFlow import below.
  pool = (worker_pool.Pool(config.num_workers, importlib.import_module,
                           ("tfrecords.instances",))
          if config.num_workers > 0 else None)
  failed = True
  try:
    stats = _run(config, pool, start)
    failed = False
    return stats
  # Raised again below as new errors, without the frames that hold the pool.
  except InputError as e:
    error = InputError(str(e))
  except disk_full.WriteFailed as e:
    error = disk_full.WriteFailed(*e.args)
  finally:
    if pool is not None:
      pool.close(kill=failed)
  # Free the pool's semaphores now: a program that exits at once
  # (cli.fail) would otherwise get the resource tracker's "leaked
  # semaphore" warning printed after its error.
  del pool
  gc.collect()
  raise error


def _run(config, pool, start):
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  try:
    tokenizer = tokenization.FullTokenizer(config.vocab_file, config.do_lower_case)
  except ValueError as e:
    raise InputError(str(e)) from None
  options = instances.InstanceOptions.from_flags(tokenizer, config)
  reader = documents.Reader(config.input_files)
  windower = instances.Windower(config.window_tokens)
  stats = collections.Counter()
  writers = _Writers(config.output_files, config.compression)
  try:
    def run(window):
      if pool is None:
        return window.index, _Done(instances.process_window(window, options,
                                                            True))
      try:
        return window.index, pool.submit(instances.process_window, window,
                                         options, True)
      except worker_pool.BrokenPool:  # a worker died since the last result
        raise InputError(_died(config, pool, window.index)) from None

    pending = collections.deque()
    last_report = time.time()

    def drain(limit):
      nonlocal last_report
      while len(pending) > limit:
        index, future = pending.popleft()
        try:
          result = future.result() if pool is None else pool.result(future)
        except worker_pool.BrokenPool:
          raise InputError(_died(config, pool, index)) from None
        if result.index == 0:
          _log_examples(features.unframe_records(
              result.blob[:int(np.sum(result.lengths[:LOGGED_EXAMPLES] + 16))]),
                        tokenizer)
        writers.write(result.blob, result.lengths)
        stats.update(documents=result.documents, sentences=result.sentences,
                     tokens=result.tokens, instances=len(result.lengths),
                     random_next=result.random_next, windows=1)
        if time.time() - last_report > 2:
          _progress(start, reader, stats)
          last_report = time.time()

    in_flight = max(1, config.num_workers) + 1
    for ids, lengths, blank, bytes_read in documents.tokenized_batches(reader, tokenizer):
      stats["bytes_done"] = bytes_read
      for window in windower.add(ids, lengths, blank):
        pending.append(run(window))
        drain(in_flight)
    for window in windower.finish():
      pending.append(run(window))
    drain(0)
    if not stats["instances"]:
      raise InputError(
          f"No documents in --input_file ({', '.join(config.input_files)}): "
          "the files are empty or blank; give text with one sentence per "
          "line and a blank line between documents.")
    writers.commit()
  except BaseException:
    writers.abort()
    raise
  stats["seconds"] = time.time() - start
  stats["undecodable_lines"] = reader.undecodable_lines
  stats["empty_files"] = len(reader.empty_files)
  for path in reader.empty_files:
    logging.warning("Skipped empty input file %s.", path)
  if stats["documents"] == 1:
    logging.warning("The input holds one document, so random next segments "
                    "come from that same document.")
  return dict(stats)


def _died(config, pool, index):
  """The sentence for a worker that died (the OOM killer's SIGKILL, say)."""
  return (f"Worker {pool.death()} while building window {index} of "
          f"--input_file={','.join(config.input_files)}, likely out of "
          f"memory; rerun with fewer --num_workers (now "
          f"{pool.num_workers}) or a smaller --window_tokens (now "
          f"{config.window_tokens}).")


class _Done:
  """An already computed result with the Future interface."""

  def __init__(self, value):
    self._value = value

  def result(self):
    return self._value


FLAGS = flags.FLAGS


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  for name in ("input_file", "output_file", "vocab_file"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  cli.check_input_file("vocab_file", FLAGS.vocab_file)
  num_workers = FLAGS.num_workers
  if num_workers is None:
    num_workers = len(os.sched_getaffinity(0))
  if num_workers < 0:
    raise app.UsageError(f"--num_workers={num_workers} must be >= 0.")
  if FLAGS.window_tokens < 1:
    raise app.UsageError(f"--window_tokens={FLAGS.window_tokens} must be >= 1.")
  try:
    config = JobConfig(
        input_files=documents.expand_inputs(FLAGS.input_file),
        output_files=output_paths(FLAGS.output_file, FLAGS.num_output_shards),
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        random_seed=FLAGS.random_seed, dupe_factor=FLAGS.dupe_factor,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        next_sentence_prediction=FLAGS.next_sentence_prediction,
        pack_sequences=FLAGS.pack_sequences,
        num_workers=num_workers,
        compression="" if FLAGS.compression == "none" else FLAGS.compression,
        window_tokens=FLAGS.window_tokens)
    for path in config.output_files:
      cli.check_output_file("output_file", path)
    logging.info("Resolved config: %s", json.dumps(dataclasses.asdict(config)))
    cli.start_tensorflow()  # without its start-up lines
    stats = create_pretraining_data(config)
  except InputError as e:
    raise cli.Error(str(e)) from None
  seconds = stats["seconds"]
  skipped = []
  if stats["undecodable_lines"]:
    skipped.append(f"{stats['undecodable_lines']} lines with undecodable "
                   "bytes (bytes dropped)")
  if stats["empty_files"]:
    skipped.append(f"{stats['empty_files']} empty files")
  rows = "packed rows" if config.pack_sequences else "instances"
  print(f"[create_pretraining_data] done: wrote {stats['instances']:,} "
        f"{rows} ({stats['random_next'] / stats['instances']:.1%} random "
        f"next) from {stats['documents']:,} documents, "
        f"{stats['sentences']:,} sentences, {stats['tokens']:,} tokens to "
        f"{len(config.output_files)} file(s) in {seconds:.1f} s "
        f"({stats['instances'] / seconds:,.0f} {rows}/s)"
        + (f"; skipped: {', '.join(skipped)}" if skipped else ""),
        file=sys.stderr, flush=True)


if __name__ == "__main__":
  job_flags.define_flags(
      output_file_help="Output TF example file (or comma-separated list of "
      "files).",
      num_output_shards_help="Split each --output_file into this many shards "
      "named NAME-00000-of-0000N (instances go round-robin).")
  flags.adopt_module_key_flags(job_flags)  # listed by --help
  flags.DEFINE_integer("num_workers", None,
                       "Processes that build instances (default: all cores; 0 "
                       "= in the main process). Does not change the output.")
  cli.run(main)
