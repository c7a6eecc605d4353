r"""create_pretraining_data.py as an Apache Beam pipeline, for big corpora.

The same flags, instance-building code (tfrecords/instances.py) and TFRecord
schema (official_bert/data/features.py) as create_pretraining_data.py, as a
pipeline that any Beam runner can spread over machines:

  input files --(per file: read, tokenize, window documents)--> windows
    --Reshuffle--> (per window: build, mask, serialize) --> records
    --GroupByKey(shard = crc32(record) % N)--> (per shard: write, rename)
    --> OUTPUT-00000-of-0000N ...

Parallelism is over input files (reading) and windows (building): give many
input files for many machines. Windows are formed per file and seeded from
(random_seed, file index, window index, dupe), so for a single input file the
records are exactly those of create_pretraining_data.py with the same flags
(the order within shards is the runner's; which shard holds a record is
not). Each shard is written in the run's beam-temp-* directory and renamed
into place; the program removes that directory on success and on failure.
On the DirectRunner (the job lives and dies with this process) the
directory's name records this host and process id, and a later run of the
same --output_file removes such a directory whose process no longer runs
(a SIGKILLed run's); another runner's job may outlive the process that
launched it, so its directory records no owner and is never removed by
another run (temp_dir_for, remove_stale_temp_dirs).

Runner-portable: the transforms are Beam's core ones (Create, ParDo,
Reshuffle, Flatten, GroupByKey), which every runner runs, DaskRunner included.
The summary line takes its counts from Beam metrics where the runner reports
them and otherwise counts the instances in the written shards (documents and
tokens are then "not reported by this runner"). Workers import this project
(`pip install .` on them, or --setup_file/--extra_package; see
docs/pretraining-data.md) and read --input_file and --vocab_file by path, so
those must be on storage every worker sees.

Usage:
  python -m tfrecords.create_pretraining_data_beam \
    --input_file='corpus/*.txt' --output_file=/tmp/pretrain.tfrecord \
    --vocab_file=vocab.txt --num_output_shards=8 --runner=DirectRunner \
    [-- other Beam pipeline options, e.g. --direct_num_workers=2 or, with
     --runner=DaskRunner, --dask_client_address=tcp://HOST:8786]
"""

import importlib
import logging as logging_std
import os
import re
import shutil
import socket
import sys
import time
import uuid
import zlib

from absl import app
from absl import flags
from absl import logging
import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options
import numpy as np

from official_bert import atomic_io
from official_bert import cli
from official_bert import disk_full
from official_bert.data import features
from tfrecords import documents
from tfrecords import instances
from tfrecords import job_flags

_COUNTERS = "create_pretraining_data"

# Beam 2.77 lists its runners in StandardOptions.ALL_KNOWN_RUNNERS but not
# its DaskRunner, so `--runner=DaskRunner` would be refused by name.
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
# What a runner imports at run time beyond apache-beam, and how to get it.
_RUNNER_PACKAGES = {DASK_RUNNER: ("dask.distributed",
                                  "pip install 'dask[distributed]'")}


class _FileToWindows(beam.DoFn):
  """(file index, path) -> Windows of that file's tokenized documents."""

  def __init__(self, vocab_file, do_lower_case, window_tokens):
    super().__init__()
    self._vocab_file = vocab_file
    self._do_lower_case = do_lower_case
    self._window_tokens = window_tokens
    self._tokenizer = None

  def setup(self):
    from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
    self._tokenizer = tokenization.FullTokenizer(self._vocab_file,
                                                 self._do_lower_case)

  def process(self, element):
    file_index, path = element
    try:
      yield from self._windows(file_index, path)
    except OSError as e:
      # On a cluster the usual cause: the path is not there on the worker.
      raise documents.InputError(
          f"--input_file={path} could not be read on a Beam worker "
          f"({type(e).__name__}: {e}); put the input files on storage "
          "every worker can read at the same path.") from None

  def _windows(self, file_index, path):
    reader = documents.Reader([path])
    windower = instances.Windower(self._window_tokens)

    def keyed(windows):
      for window in windows:
        # Seeds stay unique across files; file 0 keeps the CLI's indices.
        window.index = (file_index << 32) | window.index
        yield window

    for ids, lengths, blank, _ in documents.tokenized_batches(
        reader, self._tokenizer):
      yield from keyed(windower.add(ids, lengths, blank))
    yield from keyed(windower.finish())
    beam.metrics.Metrics.counter(_COUNTERS, "undecodable_lines").inc(
        reader.undecodable_lines)
    beam.metrics.Metrics.counter(_COUNTERS, "empty_files").inc(
        len(reader.empty_files))


def _records(window, options):
  """Window -> its serialized tf.train.Examples."""
  result = instances.process_window(window, options)
  for name in ("documents", "sentences", "tokens", "random_next"):
    beam.metrics.Metrics.counter(_COUNTERS, name).inc(getattr(result, name))
  beam.metrics.Metrics.counter(_COUNTERS, "instances").inc(len(result.lengths))
  return features.split_blob(result.blob, result.lengths)


def _keyed_by_shard(record, num_shards):
  # A hash of the bytes: balanced, and the same shard on every run and runner.
  return zlib.crc32(record) % num_shards, record


def shard_path(output_prefix, index, num_shards):
  return f"{output_prefix}-{index:05d}-of-{num_shards:05d}"


class _WriteShard(beam.DoFn):
  """(shard index, its records) -> that shard's TFRecord file.

  Written in the run's temporary directory and renamed into place, so a
  shard is whole or absent (a retried bundle writes it again). Empty
  records are the markers that make every shard exist; never written.
  """

  def __init__(self, output_prefix, num_shards, temp_dir, compression_type):
    super().__init__()
    self._output_prefix = output_prefix
    self._num_shards = num_shards
    self._temp_dir = temp_dir
    self._compression_type = compression_type

  def process(self, element):
    index, records = element
    final = shard_path(self._output_prefix, index, self._num_shards)
    temp = FileSystems.join(self._temp_dir, FileSystems.split(final)[1])
    try:
      with FileSystems.create(temp,
                              compression_type=self._compression_type) as f:
        batch = []
        for record in records:
          if record:
            batch.append(record)
          if len(batch) == 4096:
            f.write(_framed(batch))
            batch = []
        if batch:
          f.write(_framed(batch))
      FileSystems.rename([temp], [final])
    except OSError as e:  # BeamIOError is one too
      if disk_full.reason(e):  # the temp dir goes with the failed run
        raise documents.InputError(disk_full.from_error(
            e, "the pretraining data shard", final).sentence(
                "output_file")) from None
      raise documents.InputError(
          f"--output_file={self._output_prefix}: shard {final} could not be "
          f"written on a Beam worker ({type(e).__name__}: {e}); choose an "
          "output path every worker can write.") from None
    yield final


def _framed(records):
  lengths = np.array([len(r) for r in records], np.int64)
  return features.frame_records(b"".join(records), lengths)


def temp_dir_for(output_prefix, owner=None):
  """A fresh beam-temp-* directory beside the output for one run.

  `owner`: (host, pid) of the process whose end ends the job (a runner in
  this process: the DirectRunner), recorded in the name as
  beam-temp-NAME-HOST-PID-UUID so that a later run can tell a killed run's
  directory from a running one's (remove_stale_temp_dirs). None (a
  distributed runner, whose job may outlive the process that launched it):
  beam-temp-NAME-UUID, which no other run removes.
  """
  directory, name = FileSystems.split(output_prefix)
  tag = f"{owner[0]}-{owner[1]}-" if owner else ""
  return FileSystems.join(directory or ".",
                          f"beam-temp-{name}-{tag}{uuid.uuid4().hex}")


def this_host():
  """This machine's name as a temp directory's name records it (no "-")."""
  return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "localhost"


def remove_stale_temp_dirs(output_prefix, host=None):
  """Removes the beam-temp-* directories of `output_prefix` that a killed
  run left: those whose name records this host (`host`, default
  this_host()) and a process that no longer runs. Kept: a live process's (a
  run of the same output in progress), another host's (its process cannot
  be seen from here), and those that record no owner (a distributed
  runner's, whose job may still be running). Local paths only. "This host"
  is its host name and the processes it sees: two containers that share a
  host name and the output directory but not their process ids must not
  write the same output at once. Returns the paths removed."""
  if "://" in output_prefix:
    return []
  directory, name = os.path.split(output_prefix)
  owned = re.compile(re.escape(f"beam-temp-{name}-{host or this_host()}-")
                     + r"(\d+)-[0-9a-f]{32}")
  try:
    entries = os.listdir(directory or ".")
  except OSError:
    return []
  removed = []
  for entry in sorted(entries):
    match = owned.fullmatch(entry)
    path = os.path.join(directory, entry)
    if (not match or atomic_io.process_running(int(match[1])) or
        not os.path.isdir(path) or os.path.islink(path)):
      continue
    shutil.rmtree(path, ignore_errors=True)
    removed.append(path)
  return removed


def build_pipeline(pipeline, input_files, output_prefix, vocab_file, options,
                   do_lower_case=True, window_tokens=1 << 18,
                   num_output_shards=1, compression="", temp_dir=None):
  """Adds the job to a beam.Pipeline (library entry point, no flags).

  Only core transforms (Create, ParDo, Reshuffle, Flatten, GroupByKey), so
  every runner runs it as written. Shards are written by a ParDo rather than
  WriteToTFRecord: that sink reads its temporary directory and the written
  files as side inputs, which DaskRunner 2.77 recomputes for each reader
  (a new directory each time; with several partitions the rename fails with
  "src and dst files do not exist"). Returns the written shard paths.
  """
  compression_type = (CompressionTypes.GZIP if compression
                      else CompressionTypes.UNCOMPRESSED)
  records = (pipeline
             | "Files" >> beam.Create(list(enumerate(input_files)))
             | "Windows" >> beam.ParDo(
                 _FileToWindows(vocab_file, do_lower_case, window_tokens))
             | "Spread" >> beam.Reshuffle()
             | "Instances" >> beam.FlatMap(_records, options)
             | "Key" >> beam.Map(_keyed_by_shard, num_output_shards))
  every_shard = pipeline | "Shards" >> beam.Create(
      [(i, b"") for i in range(num_output_shards)])
  return ((records, every_shard)
          | "Merge" >> beam.Flatten()
          | "Group" >> beam.GroupByKey()
          | "Write" >> beam.ParDo(_WriteShard(
              output_prefix, num_output_shards,
              temp_dir or temp_dir_for(output_prefix), compression_type)))


FLAGS = flags.FLAGS


class _NoInputErrorTraceback(logging_std.Filter):
  """Beam logs a failed bundle's traceback; for bad input, the one sentence
  printed at the end says it all."""

  def filter(self, record):
    error = record.exc_info[1] if record.exc_info else None
    while error is not None:
      if isinstance(error, documents.InputError):
        return False
      error = error.__cause__ or error.__context__
    return "documents.InputError" not in record.getMessage()


def runner_path(name):
  """--runner -> the dotted path of its class.

  A short name is one Beam knows (StandardOptions.KNOWN_RUNNER_NAMES, with or
  without the "Runner" suffix, any case) or DaskRunner; a dotted path is
  taken as is. Raises cli.Error with one sentence for anything else.
  """
  paths = pipeline_options.StandardOptions.ALL_KNOWN_RUNNERS + (DASK_RUNNER,)
  short = {path.rsplit(".", 1)[1]: path for path in paths}
  lower = {key.lower(): path for key, path in short.items()}
  path = lower.get(name.lower()) or lower.get(name.lower() + "runner")
  if path:
    return path
  if "." in name.strip(".") and " " not in name:
    return name
  raise cli.Error(f"--runner={name} is not a runner Beam knows; use one of "
                  f"{', '.join(sorted(short))}, or the dotted path of a "
                  "PipelineRunner class.")


def _runner(name, path, options):
  """The runner object for --runner=name (resolved to `path`); one sentence
  when its module or a package it needs cannot be imported."""
  module, class_name = path.rsplit(".", 1)
  try:
    runner_class = getattr(importlib.import_module(module), class_name)
    needed = _RUNNER_PACKAGES.get(path)
    if needed:
      importlib.import_module(needed[0])
  except ImportError as e:
    how = (_RUNNER_PACKAGES[path][1] if path in _RUNNER_PACKAGES else
           "install the package that provides it, or check the dotted path")
    raise cli.Error(f"--runner={name} cannot be used: {e.msg}; {how}.") \
        from None
  except AttributeError:
    raise cli.Error(f"--runner={name}: module {module} has no {class_name}; "
                    "check the dotted path.") from None
  return _in_process_runner(name, options) or runner_class()


def _metric_counts(result):
  """The job's counters, or {} where the runner does not report metrics
  (DaskRunner's metrics() raises NotImplementedError)."""
  try:
    counters = result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(_COUNTERS))["counters"]
  except NotImplementedError:
    return {}
  return {c.key.metric.name: c.committed if c.committed is not None
          else c.attempted for c in counters}


def count_records(paths, compression):
  """(instances, random-next instances) in the written shards."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  paths = [p for p in paths if tf.io.gfile.exists(p)]
  if not paths:
    return 0, 0
  spec = {"next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
  labels = tf.data.TFRecordDataset(paths, compression_type=compression).batch(
      4096).map(lambda r: tf.io.parse_example(r, spec)["next_sentence_labels"])
  instances = random_next = 0
  for batch in labels:
    instances += int(batch.shape[0])
    random_next += int(tf.reduce_sum(batch))
  return instances, random_next


DIRECT_RUNNER = "apache_beam.runners.direct.direct_runner.DirectRunner"


def runs_in_this_process(name):
  """Whether --runner=name runs the job in this process tree (the
  DirectRunner, as _in_process_runner builds it): the job ends with it."""
  return name.lower() in ("direct", "directrunner", DIRECT_RUNNER.lower())


def _in_process_runner(name, options):
  """Beam's FnApiRunner for --runner=DirectRunner; None (Beam resolves the
  name) for any other runner.

  Beam's DirectRunner first tries its Prism runner, a Go binary it downloads
  from GitHub on first use (with no network timeout), and falls back to the
  FnApiRunner when that fails. Where GitHub cannot be reached the job would
  wait on the download, or print the failure, before it runs. Here
  DirectRunner is the FnApiRunner at once, built as the DirectRunner builds
  it (its workers get the pipeline options: --direct_num_workers and
  --direct_running_mode work as in Beam). --runner=PrismRunner asks for
  Prism by name.
  """
  if not runs_in_this_process(name):
    return None
  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability import portable_runner
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  # pylint: enable=g-import-not-at-top
  encoded = portable_runner.JobServiceHandle.encode_pipeline_options(
      options.get_all_options())
  return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
      beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def _cancel(result):
  if result is None:
    return
  try:
    result.cancel()
  except Exception:  # pylint: disable=broad-except  # not every runner can
    pass


def _remove(paths):
  """Deletes the shard files among `paths` (never a directory in the way)."""
  existing = [p for p in paths if (os.path.isfile(p) if "://" not in p
                                   else FileSystems.exists(p))]
  if existing:
    FileSystems.delete(existing)


def _input_error(error):
  """The one sentence of the InputError behind `error` (a worker's, as the
  runner re-raises it), or None."""
  while error is not None:
    if isinstance(error, documents.InputError):
      return str(error).split(" [while running")[0]
    error = error.__cause__ or error.__context__
  return None


def main(argv):
  for name in ("input_file", "output_file", "vocab_file"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  if "," in FLAGS.output_file:
    raise app.UsageError("--output_file is one prefix here (Beam names the "
                         "shards); set --num_output_shards instead of a list.")
  if FLAGS.num_output_shards < 1:
    raise app.UsageError(
        f"--num_output_shards={FLAGS.num_output_shards} must be >= 1.")
  cli.check_input_file("vocab_file", FLAGS.vocab_file)
  cli.check_output_file("output_file", FLAGS.output_file)
  path = runner_path(FLAGS.runner)
  owner = None
  if runs_in_this_process(FLAGS.runner):
    # A killed run's temp directory (SIGKILL cannot clean up); this run's
    # records this process, so the next run can tell.
    for stale in remove_stale_temp_dirs(FLAGS.output_file):
      logging.info("removed %s: the run that wrote it was stopped (its "
                   "process no longer runs)", stale)
    owner = (this_host(), os.getpid())
  start = time.time()
  try:
    input_files = documents.expand_inputs(FLAGS.input_file)
    from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file,
                                           FLAGS.do_lower_case)
    options = instances.InstanceOptions.from_flags(tokenizer, FLAGS)
    options.validate()
  except ValueError as e:
    raise cli.Error(str(e)) from None
  beam_options = pipeline_options.PipelineOptions(
      argv[1:] + [f"--runner={path}"])
  try:
    pipeline = beam.Pipeline(
        runner=_runner(FLAGS.runner, path, beam_options), options=beam_options)
  except ValueError as e:  # the runner's checks of its options
    problems = [line.strip().rstrip(".") for line in str(e).split("\n")[1:]]
    raise cli.Error(f"--runner={FLAGS.runner} needs pipeline options, given "
                    f"after `--`: {'; '.join(filter(None, problems))}.") \
        from None
  compression = "" if FLAGS.compression == "none" else FLAGS.compression
  temp_dir = temp_dir_for(FLAGS.output_file, owner)
  build_pipeline(pipeline, input_files, FLAGS.output_file, FLAGS.vocab_file,
                 options, FLAGS.do_lower_case, FLAGS.window_tokens,
                 FLAGS.num_output_shards, compression, temp_dir)
  for handler in logging_std.getLogger().handlers:
    handler.addFilter(_NoInputErrorTraceback())
  shards = [shard_path(FLAGS.output_file, i, FLAGS.num_output_shards)
            for i in range(FLAGS.num_output_shards)]
  result = None
  try:
    result = pipeline.run()
    result.wait_until_finish()
    counts = _metric_counts(result)
  except BaseException as e:
    _cancel(result)  # a cluster may still be running the job's other tasks
    _remove(shards)  # a failed run keeps none of its shards
    sentence = _input_error(e)
    if sentence:
      raise cli.Error(sentence) from None
    raise
  finally:
    if FileSystems.exists(temp_dir):
      FileSystems.delete([temp_dir])
  runner_name = path.rsplit(".", 1)[1]
  from_metrics = "instances" in counts
  if not from_metrics:
    counts["instances"], counts["random_next"] = count_records(shards,
                                                                compression)
  if not counts["instances"]:
    _remove(shards)
    raise cli.Error(f"No documents in --input_file ({', '.join(input_files)}): the "
          "files are empty or blank; give text with one sentence per line "
          "and a blank line between documents.")
  seconds = time.time() - start
  logging.info("Counters (%s): %s", "Beam metrics" if from_metrics else
               "counted from the shards", counts)
  if from_metrics:
    source = (f"from {counts.get('documents', 0):,} documents, "
              f"{counts.get('tokens', 0):,} tokens ")
    problems = (f"; skipped {counts.get('undecodable_lines', 0)} undecodable "
                f"lines (bytes dropped), {counts.get('empty_files', 0)} "
                "empty files")
  else:
    source = ""
    problems = (f"; documents, tokens, undecodable lines, empty files: not "
                f"reported by this runner ({runner_name} has no metrics; "
                "instances counted from the shards)")
  print(f"[create_pretraining_data_beam] done: wrote {counts['instances']:,} "
        f"instances ({counts.get('random_next', 0) / counts['instances']:.1%} "
        f"random next) {source}to {FLAGS.num_output_shards} "
        f"shard(s) of {FLAGS.output_file} in {seconds:.1f} s "
        f"({counts['instances'] / seconds:,.0f} instances/s) on "
        f"{runner_name}{problems}",
        file=sys.stderr, flush=True)


if __name__ == "__main__":
  job_flags.define_flags(
      output_file_help="Output prefix: shards are named PREFIX-00000-of-0000N.",
      num_output_shards_help="Number of output shards.")
  flags.adopt_module_key_flags(job_flags)  # listed by --help
  flags.DEFINE_string(
      "runner", "DirectRunner",
      "The Beam runner: a short name Beam knows (DirectRunner, "
      "DataflowRunner, FlinkRunner, SparkRunner, PortableRunner, ...), "
      "DaskRunner, or a dotted class path. Its own options go after `--`.")
  cli.run(main)
