r"""create_pretraining_data.py as an Apache Beam pipeline, for big corpora.

The same flags, instance-building code (tfrecords/instances.py) and TFRecord
schema (official_bert/data/features.py) as create_pretraining_data.py, as a
pipeline that any Beam runner can spread over machines:

  input files --(per file: read, tokenize, window documents)--> windows
    --Reshuffle--> (per window: build, mask, serialize) --> records
    --WriteToTFRecord--> OUTPUT-00000-of-0000N ...

Parallelism is over input files (reading) and windows (building): give many
input files for many machines. Windows are formed per file and seeded from
(random_seed, file index, window index, dupe), so for a single input file the
records are exactly those of create_pretraining_data.py with the same flags
(the order within shards is the runner's). Beam writes to a temporary
directory and renames the shards when the pipeline succeeds.

Usage:
  python -m tfrecords.create_pretraining_data_beam \
    --input_file='corpus/*.txt' --output_file=/tmp/pretrain.tfrecord \
    --vocab_file=vocab.txt --num_output_shards=8 --runner=DirectRunner \
    [-- other Beam pipeline options, e.g. --direct_num_workers=2]
"""

import glob
import logging as logging_std
import os
import shutil
import sys
import time

from absl import app
from absl import flags
from absl import logging
import apache_beam as beam
from apache_beam.options import pipeline_options

from official_bert import cli
from official_bert.data import features
from tfrecords import documents
from tfrecords import instances
from tfrecords import job_flags

_COUNTERS = "create_pretraining_data"


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


def build_pipeline(pipeline, input_files, output_prefix, vocab_file, options,
                   do_lower_case=True, window_tokens=1 << 18,
                   num_output_shards=1, compression=""):
  """Adds the job to a beam.Pipeline (library entry point, no flags)."""
  compression_type = (beam.io.filesystem.CompressionTypes.GZIP if compression
                      else beam.io.filesystem.CompressionTypes.UNCOMPRESSED)
  return (pipeline
          | "Files" >> beam.Create(list(enumerate(input_files)))
          | "Windows" >> beam.ParDo(
              _FileToWindows(vocab_file, do_lower_case, window_tokens))
          | "Spread" >> beam.Reshuffle()
          | "Instances" >> beam.FlatMap(_records, options)
          | "Write" >> beam.io.WriteToTFRecord(
              output_prefix, num_shards=num_output_shards,
              compression_type=compression_type))


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


def _remove_beam_temp(output_prefix):
  pattern = os.path.join(os.path.dirname(os.path.abspath(output_prefix)),
                         f"beam-temp-{os.path.basename(output_prefix)}-*")
  for path in glob.glob(pattern):
    shutil.rmtree(path, ignore_errors=True)


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
  if name.lower() not in ("direct", "directrunner"):
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
      argv[1:] + [f"--runner={FLAGS.runner}"])
  pipeline = beam.Pipeline(
      runner=_in_process_runner(FLAGS.runner, beam_options),
      options=beam_options)
  build_pipeline(pipeline, input_files, FLAGS.output_file, FLAGS.vocab_file,
                 options, FLAGS.do_lower_case, FLAGS.window_tokens,
                 FLAGS.num_output_shards,
                 "" if FLAGS.compression == "none" else FLAGS.compression)
  for handler in logging_std.getLogger().handlers:
    handler.addFilter(_NoInputErrorTraceback())
  try:
    result = pipeline.run()
    result.wait_until_finish()
  except documents.InputError as e:
    _remove_beam_temp(FLAGS.output_file)
    raise cli.Error(str(e).split(" [while running")[0]) from None
  counts = {c.key.metric.name: c.committed for c in result.metrics().query(
      beam.metrics.MetricsFilter().with_namespace(_COUNTERS))["counters"]}
  if not counts.get("instances"):
    for i in range(FLAGS.num_output_shards):
      path = f"{FLAGS.output_file}-{i:05d}-of-{FLAGS.num_output_shards:05d}"
      if os.path.exists(path):
        os.remove(path)
    raise cli.Error(f"No documents in --input_file ({', '.join(input_files)}): the "
          "files are empty or blank; give text with one sentence per line "
          "and a blank line between documents.")
  seconds = time.time() - start
  logging.info("Counters: %s", counts)
  print(f"[create_pretraining_data_beam] done: wrote {counts['instances']:,} "
        f"instances ({counts.get('random_next', 0) / counts['instances']:.1%} "
        f"random next) from {counts.get('documents', 0):,} documents, "
        f"{counts.get('tokens', 0):,} tokens to {FLAGS.num_output_shards} "
        f"shard(s) of {FLAGS.output_file} in {seconds:.1f} s "
        f"({counts['instances'] / seconds:,.0f} instances/s); skipped "
        f"{counts.get('undecodable_lines', 0)} undecodable lines (bytes "
        f"dropped), {counts.get('empty_files', 0)} empty files",
        file=sys.stderr, flush=True)


if __name__ == "__main__":
  job_flags.define_flags(
      output_file_help="Output prefix: shards are named PREFIX-00000-of-0000N.",
      num_output_shards_help="Number of output shards.")
  flags.adopt_module_key_flags(job_flags)  # listed by --help
  flags.DEFINE_string("runner", "DirectRunner", "The Beam runner.")
  cli.run(main)
