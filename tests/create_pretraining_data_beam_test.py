"""The Beam pipeline on the DirectRunner: same records as the CLI job."""

import glob
import os

import pytest
import tensorflow as tf

from tests import testing
from tfrecords import create_pretraining_data as cpd


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """2,000 lines of the pydocs corpus, a document every 20 lines."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:2000]
  lines = [line if i % 20 else "" for i, line in enumerate(lines)]
  path = tmp_path_factory.mktemp("corpus") / "slice.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("next_sentence_prediction", [True, False])
def test_beam_writes_the_same_records_as_the_cli_job(corpus, tmp_path,
                                                     next_sentence_prediction):
  """Also with next_sentence_prediction=False (FULL-SENTENCES packing)."""
  flags = {"vocab_file": testing.VOCAB, "max_seq_length": 48,
           "max_predictions_per_seq": 6, "dupe_factor": 2,
           "window_tokens": 2500, "random_seed": 7,
           "next_sentence_prediction": next_sentence_prediction}
  prefix = str(tmp_path / "beam.tfrecord.gz")
  proc = testing.run_cli(
      ["tfrecords/create_pretraining_data_beam.py", f"--input_file={corpus}",
       f"--output_file={prefix}", "--num_output_shards=3",
       "--compression=GZIP", "--runner=DirectRunner"] +
      [f"--{k}={v}" for k, v in flags.items()])
  shards = sorted(glob.glob(prefix + "-*"))
  assert [s[len(prefix):] for s in shards] == [
      "-00000-of-00003", "-00001-of-00003", "-00002-of-00003"]
  beam_records = [r.numpy() for s in shards
                  for r in tf.data.TFRecordDataset(s, "GZIP")]
  assert all(len(list(tf.data.TFRecordDataset(s, "GZIP"))) for s in shards)

  path = str(tmp_path / "cli.tfrecord")
  stats = cpd.create_pretraining_data(cpd.JobConfig(
      input_files=[corpus], output_files=[path], **flags))
  cli_records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
  assert stats["windows"] > 3
  assert len(beam_records) == len(cli_records) > 500
  assert sorted(beam_records) == sorted(cli_records)
  assert f"done: wrote {len(cli_records):,} instances" in proc.stderr
  # DirectRunner runs in this process tree: Beam's own would first fetch its
  # Prism runner from GitHub (nothing is downloaded at run time).
  assert "Prism" not in proc.stderr, proc.stderr[-3000:]


def test_beam_cli_rejects_bad_input_with_one_sentence(tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n")
  proc = testing.run_cli(
      ["tfrecords/create_pretraining_data_beam.py", f"--input_file={empty}",
       f"--output_file={tmp_path}/out",
       f"--vocab_file={os.path.join(testing.TESTDATA, 'export_vocab.txt')}"],
      check=False)
  assert proc.returncode == 1
  assert "No documents in --input_file" in proc.stderr
  assert "Traceback" not in proc.stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]


def _dead_pid():
  """The id of a process that has ended (and been reaped)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  proc = subprocess.Popen(["true"])
  proc.wait()
  return proc.pid


def _temp_dirs(tmp_path, *owners):
  """A beam-temp-* directory of tmp_path/data per owner ((host, pid) or
  None), each with a half shard in it, as temp_dir_for names them."""
  from tfrecords import create_pretraining_data_beam as beam_job  # pylint: disable=g-import-not-at-top
  paths = []
  for owner in owners:
    path = beam_job.temp_dir_for(str(tmp_path / "data"), owner)
    os.makedirs(path)
    (tmp_path / path / "data-00000-of-00002").write_bytes(b"half")
    paths.append(path)
  return paths


def test_a_killed_runs_beam_temp_dir_is_removed_by_the_next_run(tmp_path):
  """A run SIGKILLed on the DirectRunner leaves its beam-temp-* directory;
  the next run of the same output removes it (in-process, no pipeline: the
  run stops at its missing input, after the clean-up)."""
  from tfrecords import create_pretraining_data_beam as beam_job  # pylint: disable=g-import-not-at-top
  host = beam_job.this_host()
  killed, = _temp_dirs(tmp_path, (host, _dead_pid()))
  other_output = str(tmp_path / f"beam-temp-data2-{host}-{_dead_pid()}-"
                     f"{'0' * 32}")  # another output's: not this run's
  os.makedirs(other_output)
  proc = testing.run_program("tfrecords.create_pretraining_data_beam", [
      f"--input_file={tmp_path}/missing.txt",
      f"--output_file={tmp_path}/data",
      f"--vocab_file={os.path.join(testing.TESTDATA, 'export_vocab.txt')}"],
                             check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "missing.txt" in proc.stderr.strip().splitlines()[-1], proc.stderr
  assert not os.path.exists(killed)
  assert os.path.isdir(other_output)


def test_a_live_foreign_or_unowned_beam_temp_dir_is_kept(tmp_path):
  """Removed only when its owner is known to be gone: a running process's
  directory (a run in progress), another host's, and a distributed
  runner's (no owner recorded: its job may outlive its launcher) stay."""
  from tfrecords import create_pretraining_data_beam as beam_job  # pylint: disable=g-import-not-at-top
  host, dead = beam_job.this_host(), _dead_pid()
  live, foreign, unowned, killed = _temp_dirs(
      tmp_path, (host, os.getpid()), ("another.host", dead), None,
      (host, dead))
  assert beam_job.remove_stale_temp_dirs(str(tmp_path / "data")) == [killed]
  assert [os.path.isdir(p) for p in (live, foreign, unowned, killed)] == [
      True, True, True, False]
