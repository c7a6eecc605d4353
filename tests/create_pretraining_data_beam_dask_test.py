"""The Beam pipeline on a real dask.distributed cluster, and its runner-
portable behaviour: runner names, counts without metrics, temp directories.

The cluster is a `dask scheduler` and two `dask worker` processes (one
process, one thread each) on 127.0.0.1 over TCP, on free ports, started as
docs/pretraining-data.md says. The workers import the project through
PYTHONPATH=<repo root> and run in another directory (installing it into a
venv per run would take minutes; `pip install .` is shown by hand in the
issue's note). Each process has its own process group, killed in teardown.
"""

import collections
import glob
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tests import testing

PROGRAM = "tfrecords/create_pretraining_data_beam.py"
FLAGS = {"max_seq_length": 48, "max_predictions_per_seq": 6,
         "dupe_factor": 2, "window_tokens": 2500, "random_seed": 7}
START_S = 90  # scheduler + 2 workers up, or the fixture fails


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(args, cwd, log):
  env = dict(os.environ, PYTHONPATH=testing.CHILD_PATH, TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.Popen([sys.executable, "-m", "dask"] + args, cwd=cwd,
                          env=env, stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True)  # its own process group


def _stop(proc):
  try:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=15)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=15)
  except ProcessLookupError:
    pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
  """The scheduler's address; a Client to it for the tests' checks."""
  from distributed import Client  # pylint: disable=g-import-not-at-top
  elsewhere = tmp_path_factory.mktemp("cluster")  # not the repo root
  address = f"tcp://127.0.0.1:{_free_port()}"
  procs = []
  log = open(elsewhere / "cluster.log", "w")  # pylint: disable=consider-using-with
  try:
    procs.append(_start(["scheduler", "--host", "127.0.0.1", "--port",
                         address.rsplit(":", 1)[1], "--no-dashboard"],
                        elsewhere, log))
    for _ in range(2):
      procs.append(_start(["worker", address, "--nworkers", "1", "--nthreads",
                           "1", "--host", "127.0.0.1", "--no-dashboard"],
                          elsewhere, log))
    deadline = time.time() + START_S
    client = None
    while client is None:
      try:
        client = Client(address, timeout=5)
      except OSError:
        if time.time() > deadline:
          raise
    client.wait_for_workers(2, timeout=max(1, deadline - time.time()))
    yield address, client
    client.close()
  finally:
    for proc in reversed(procs):
      _stop(proc)
    log.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Three files of 300 lines of the pydocs corpus, a document every 20."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:900]
  directory = tmp_path_factory.mktemp("corpus")
  for i in range(3):
    part = [line if j % 20 else "" for j, line in
            enumerate(lines[300 * i:300 * (i + 1)])]
    (directory / f"part{i}.txt").write_text("\n".join(part) + "\n",
                                            encoding="utf-8")
  return str(directory / "part*.txt")


def _run(args, runner_args=(), check=True, process=True):
  # A real process: the pipeline's client of a real cluster.
  return testing.run_cli(
      [PROGRAM] + list(args) + [f"--{k}={v}" for k, v in FLAGS.items()] +
      (["--"] + list(runner_args) if runner_args else []),
      check=check, merge_stderr=True, process=process)


def _records(prefix):
  return [r.numpy() for path in sorted(glob.glob(prefix + "-*"))
          for r in tf.data.TFRecordDataset(path, "GZIP")]


def _executed(client):
  return client.run(lambda dask_worker: dask_worker.state.executed_count)


@pytest.mark.slow
def test_dask_cluster_writes_the_in_process_records(cluster, corpus, tmp_path):
  address, client = cluster
  common = [f"--input_file={corpus}", f"--vocab_file={testing.VOCAB}",
            "--num_output_shards=3", "--compression=GZIP"]
  before = _executed(client)
  dask_dir = tmp_path / "dask"
  proc = _run(common + [f"--output_file={dask_dir}/out.tfrecord.gz",
                        "--runner=DaskRunner"],
              [f"--dask_client_address={address}", "--dask_npartitions=3"])
  after = _executed(client)
  # Both worker processes ran the job's tasks.
  assert len(after) == 2 and all(after[w] > before.get(w, 0) for w in after)
  assert sorted(os.listdir(dask_dir)) == [
      f"out.tfrecord.gz-0000{i}-of-00003" for i in range(3)]  # no beam-temp-*
  dask_records = _records(f"{dask_dir}/out.tfrecord.gz")

  # The reference: the DirectRunner in this process (no cluster, so no
  # client process to be the point of).
  direct_dir = tmp_path / "direct"
  _run(common + [f"--output_file={direct_dir}/out.tfrecord.gz",
                 "--runner=DirectRunner"], process=False)
  direct_records = _records(f"{direct_dir}/out.tfrecord.gz")
  assert len(direct_records) > 300
  # Counted apart: pytest's diff of two Counters of binary records runs for
  # minutes when they differ.
  only_dask = collections.Counter(dask_records) - collections.Counter(
      direct_records)
  only_direct = collections.Counter(direct_records) - collections.Counter(
      dask_records)
  assert not only_dask and not only_direct, (
      f"{sum(only_dask.values())} records only from Dask, "
      f"{sum(only_direct.values())} only from the DirectRunner, of "
      f"{len(dask_records)} and {len(direct_records)}")

  # DaskRunner has no metrics: instances and random-next fraction are
  # counted from the shards; the rest is said not to be reported.
  labels = [tf.train.Example.FromString(r).features.feature[
      "next_sentence_labels"].int64_list.value[0] for r in dask_records]
  summary = [line for line in proc.stdout.splitlines()
             if "] done: " in line][-1]
  assert (f"done: wrote {len(labels):,} instances "
          f"({sum(labels) / len(labels):.1%} random next) to 3 shard(s)"
          in summary), summary
  assert "not reported by this runner" in summary
  assert "Traceback" not in proc.stdout


@pytest.mark.slow
def test_worker_failure_is_one_sentence_naming_the_input(cluster, corpus,
                                                          tmp_path):
  """A NUL byte past what the program checks before starting: the worker
  reading that file fails; nothing is left in the output directory."""
  address, _ = cluster
  bad = tmp_path / "late_binary.txt"
  bad.write_bytes(b"a line of text.\n" * 5000 + b"\0 binary\n")
  out = tmp_path / "out"
  proc = _run([f"--input_file={corpus},{bad}", f"--vocab_file={testing.VOCAB}",
               f"--output_file={out}/x.tfrecord", "--num_output_shards=2",
               "--runner=DaskRunner"],
              [f"--dask_client_address={address}", "--dask_npartitions=4"],
              check=False)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(
      proc.returncode, lines, "create_pretraining_data_beam",
      f"--input_file={bad} holds NUL bytes")
  assert not out.exists() or os.listdir(out) == []  # no shard, no beam-temp-*


@pytest.mark.parametrize("runner, expected", [
    ("Daskk", "--runner=Daskk is not a runner Beam knows; use one of "
              "BundleBasedDirectRunner, DaskRunner, DataflowRunner, "),
    ("nowhere.NoRunner", "--runner=nowhere.NoRunner cannot be used: No "
                         "module named 'nowhere'"),
    ("DataflowRunner", "--runner=DataflowRunner needs pipeline options, given "
                       "after `--`: Missing GCS path option: temp_location"),
])
def test_bad_runner_is_one_sentence(runner, expected, tmp_path):
  text = tmp_path / "a.txt"
  text.write_text("One sentence.\nAnother one.\n")
  proc = testing.run_cli(
      [PROGRAM, f"--input_file={text}", f"--output_file={tmp_path}/out/x",
       f"--vocab_file={os.path.join(testing.TESTDATA, 'export_vocab.txt')}",
       f"--runner={runner}"], check=False, merge_stderr=True)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(proc.returncode, lines,
                                   "create_pretraining_data_beam", expected)
  assert not (tmp_path / "out").exists()


def test_dask_runner_without_dask_is_one_sentence(tmp_path):
  """DaskRunner's module imports without dask; the run would then fail deep
  in Beam. A `dask` that cannot be imported stands in for a missing one."""
  fake = tmp_path / "site" / "dask"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text(
      "raise ModuleNotFoundError(\"No module named 'dask'\", name='dask')\n")
  text = tmp_path / "a.txt"
  text.write_text("One sentence.\nAnother one.\n")
  proc = testing.run_cli(
      [PROGRAM, f"--input_file={text}", f"--output_file={tmp_path}/out/x",
       f"--vocab_file={os.path.join(testing.TESTDATA, 'export_vocab.txt')}",
       "--runner=DaskRunner"], check=False, merge_stderr=True,
      env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{testing.CHILD_PATH}"})
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(
      proc.returncode, lines, "create_pretraining_data_beam",
      "--runner=DaskRunner cannot be used: No module named 'dask'; pip "
      "install 'dask[distributed]'.")


@pytest.mark.slow
def test_failed_write_removes_shards_and_temp_dir(corpus, tmp_path):
  """A directory where shard 1 goes: shard 0 and the temporary copy of
  shard 1 are written, the rename fails; the run ends in one sentence and
  leaves only the directory that was there."""
  out = tmp_path / "out"
  in_the_way = out / "x.tfrecord-00001-of-00002"
  (in_the_way / "keep").mkdir(parents=True)
  # The DirectRunner (no cluster): in this process.
  proc = _run([f"--input_file={corpus}", f"--vocab_file={testing.VOCAB}",
               f"--output_file={out}/x.tfrecord", "--num_output_shards=2"],
              check=False, process=False)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(
      proc.returncode, lines, "create_pretraining_data_beam",
      f"--output_file={out}/x.tfrecord: shard {in_the_way} could not be "
      "written on a Beam worker")
  assert os.listdir(out) == [in_the_way.name]
  assert os.listdir(in_the_way) == ["keep"]
