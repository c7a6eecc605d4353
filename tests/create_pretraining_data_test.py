"""create_pretraining_data.py: real CLI runs, determinism, formats, bad input."""

import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tfrecords import create_pretraining_data as cpd
from tfrecords import instances

L, P = 64, 9  # max_seq_length, max_predictions_per_seq of these tests

# The original reader's spec, independent of features.feature_spec.
ORIGINAL_SPEC = testing.original_feature_spec(L, P)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """The first 3,000 lines of the pydocs corpus, a document every 20 lines
  (so about 150 documents, several windows)."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:3000]
  lines = [line if i % 20 else "" for i, line in enumerate(lines)]
  path = tmp_path_factory.mktemp("corpus") / "slice.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


def _cli_flags(input_file, output_file, **extra):
  flags = {"input_file": input_file, "output_file": output_file,
           "vocab_file": testing.VOCAB, "max_seq_length": L,
           "max_predictions_per_seq": P, "dupe_factor": 2,
           "window_tokens": 3000}
  flags.update(extra)
  return [f"--{k}={v}" for k, v in flags.items()]


def _config(input_files, output_files, **extra):
  if "vocab_file" not in extra:
    testing.require_shared_data()
  kwargs = dict(input_files=input_files, output_files=output_files,
                vocab_file=testing.VOCAB, max_seq_length=L,
                max_predictions_per_seq=P, dupe_factor=2, window_tokens=3000)
  kwargs.update(extra)
  return cpd.JobConfig(**kwargs)


def _read(path, compression=""):
  return [r.numpy() for r in tf.data.TFRecordDataset(path, compression)]


@pytest.fixture(scope="module")
def cli_runs(corpus, tmp_path_factory):
  """The CLI with 1 and with 2 workers: (paths, stderr of the 2-worker run)."""
  out = tmp_path_factory.mktemp("cli")
  paths = {}
  for workers in (1, 2):
    paths[workers] = str(out / f"w{workers}.tfrecord")
    proc = testing.run_cli(
        ["tfrecords/create_pretraining_data.py"] +
        _cli_flags(corpus, paths[workers], num_workers=workers))
  return paths, proc.stderr


@pytest.mark.slow
def test_same_seed_same_bytes_with_1_and_2_workers_and_in_process(cli_runs, corpus, tmp_path):
  paths, _ = cli_runs
  with open(paths[1], "rb") as a, open(paths[2], "rb") as b:
    one, two = a.read(), b.read()
  assert len(one) > 100000 and one == two
  # The library in this process (no workers) writes the same bytes too.
  path = str(tmp_path / "inline.tfrecord")
  stats = cpd.create_pretraining_data(_config([corpus], [path], num_workers=0))
  with open(path, "rb") as f:
    assert f.read() == one
  assert stats["windows"] > 5  # several windows, so workers really split work
  # Another seed gives other bytes.
  other = str(tmp_path / "other.tfrecord")
  cpd.create_pretraining_data(_config([corpus], [other], random_seed=1))
  with open(other, "rb") as f:
    assert f.read() != one


@pytest.mark.slow
def test_logs_examples_progress_and_summary(cli_runs):
  paths, stderr = cli_runs
  assert stderr.count("*** Example ***") == 3
  assert "tokens: [CLS] " in stderr
  n = len(_read(paths[2]))
  assert f"done: wrote {n:,} instances" in stderr
  assert "instances/s" in stderr and "Traceback" not in stderr
  assert not glob.glob(paths[2] + ".incomplete")


def test_records_parse_with_the_original_reader_spec(cli_runs):
  paths, _ = cli_runs
  records = _read(paths[1])
  for record in records[:200]:
    parsed = tf.io.parse_single_example(record, ORIGINAL_SPEC)
    mask = parsed["input_mask"].numpy()
    n = mask.sum()
    ids = parsed["input_ids"].numpy()
    assert ids[0] == 101 and ids[n - 1] == 102 and np.all(ids[n:] == 0)
    weights = parsed["masked_lm_weights"].numpy()
    k = int(weights.sum())
    positions = parsed["masked_lm_positions"].numpy()[:k]
    assert np.all(np.diff(positions) > 0) and positions.max() < n


def test_gzip_sharded_round_trip_equals_the_plain_file(cli_runs, corpus, tmp_path):
  paths, _ = cli_runs
  plain = _read(paths[1])
  outputs = cpd.output_paths(
      f"{tmp_path}/a.tfrecord.gz,{tmp_path}/b.tfrecord.gz", num_output_shards=2)
  assert [os.path.basename(p) for p in outputs] == [
      "a.tfrecord.gz-00000-of-00002", "a.tfrecord.gz-00001-of-00002",
      "b.tfrecord.gz-00000-of-00002", "b.tfrecord.gz-00001-of-00002"]
  cpd.create_pretraining_data(_config([corpus], outputs, compression="GZIP"))
  for i, path in enumerate(outputs):
    with open(path, "rb") as f:
      assert f.read(2) == b"\x1f\x8b"
    # Round-robin: file i holds records i, i + 4, i + 8, ...
    assert _read(path, "GZIP") == plain[i::4]


def test_a_failed_run_leaves_no_finished_looking_file(corpus, tmp_path, monkeypatch):
  path = str(tmp_path / "out.tfrecord")
  real = instances.process_window

  def fail_on_third(window, options, framed=False):
    if window.index == 3:
      raise RuntimeError("simulated crash")
    return real(window, options, framed)

  monkeypatch.setattr(instances, "process_window", fail_on_third)
  with pytest.raises(RuntimeError, match="simulated crash"):
    cpd.create_pretraining_data(_config([corpus], [path]))
  assert os.listdir(tmp_path) == []
  # A stale temporary file of a killed run is replaced by a rerun.
  monkeypatch.setattr(instances, "process_window", real)
  with open(path + ".incomplete", "wb") as f:
    f.write(b"half a record")
  cpd.create_pretraining_data(_config([corpus], [path]))
  assert os.listdir(tmp_path) == ["out.tfrecord"]
  assert len(_read(path)) > 100


def _write(path, data):
  with open(path, "wb") as f:
    f.write(data)
  return str(path)


def test_bad_vocab_files_are_one_sentence_errors(corpus, tmp_path):
  out = str(tmp_path / "o.tfrecord")
  for vocab, message in [
      (str(tmp_path / "missing.txt"), "does not exist"),
      (_write(tmp_path / "empty.txt", b""), "is empty"),
      (_write(tmp_path / "plain.txt", b"the\nof\nand\n"), "lacks the special"),
  ]:
    with pytest.raises(cpd.InputError, match=message):
      cpd.create_pretraining_data(_config([corpus], [out], vocab_file=vocab))
  assert os.listdir(tmp_path) == ["empty.txt", "plain.txt"]


def test_empty_and_blank_inputs_write_nothing(tmp_path):
  empty = _write(tmp_path / "empty.txt", b"")
  blank = _write(tmp_path / "blank.txt", b"\n  \n\t\n\n")
  out = str(tmp_path / "o.tfrecord")
  with pytest.raises(cpd.InputError, match="No documents in --input_file"):
    cpd.create_pretraining_data(_config([empty, blank], [out]))
  assert not glob.glob(out + "*")


def test_odd_inputs_are_counted_not_fatal(tmp_path):
  # One document; undecodable bytes on one line; a very long line; an empty
  # file beside it.
  long_line = " ".join(["documentation"] * 5000)
  text = ("The first sentence is here.\nA second \xff\xfe one follows.\n".encode(
      "latin-1") + long_line.encode() + b"\nAnd a last sentence.\n")
  source = _write(tmp_path / "one_doc.txt", text)
  empty = _write(tmp_path / "empty.txt", b"")
  out = str(tmp_path / "o.tfrecord")
  stats = cpd.create_pretraining_data(_config([source, empty], [out]))
  assert stats["documents"] == 1 and stats["sentences"] == 4
  assert stats["undecodable_lines"] == 1 and stats["empty_files"] == 1
  records = _read(out)
  assert len(records) == stats["instances"] >= 4  # >= 2 per dupe
  for record in records:
    parsed = tf.io.parse_single_example(record, ORIGINAL_SPEC)
    assert parsed["input_mask"].numpy().sum() <= L


def test_cli_bad_flags_exit_1_with_one_sentence(corpus, tmp_path):
  out = str(tmp_path / "o.tfrecord")
  proc = testing.run_cli(
      ["tfrecords/create_pretraining_data.py"] +
      _cli_flags(corpus, out, max_predictions_per_seq=L + 1), check=False)
  assert proc.returncode == 1
  assert f"--max_predictions_per_seq={L + 1} must be between 1 and" in proc.stderr
  assert "Traceback" not in proc.stderr
  proc = testing.run_cli(
      ["tfrecords/create_pretraining_data.py"] +
      _cli_flags(str(tmp_path / "nothing*.txt"), out), check=False)
  assert proc.returncode == 1
  assert "matches no file" in proc.stderr and "Traceback" not in proc.stderr
  assert os.listdir(tmp_path) == []


def _children(pid):
  """{pid: command line} of the processes whose parent is `pid`."""
  found = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
      if ppid == pid:
        with open(f"/proc/{entry}/cmdline", "rb") as f:
          found[int(entry)] = f.read().replace(b"\0", b" ").decode()
    except (OSError, ValueError, IndexError):
      continue  # it ended meanwhile
  return found


@pytest.mark.slow
def test_a_killed_worker_is_one_sentence_and_a_rerun_completes(tmp_path):
  """SIGKILL one worker of two mid-job, as the OOM killer would: the job
  must not wait forever (multiprocessing.Pool did), must say which worker
  died and what to do, leave no output, and a rerun must complete."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:10000]
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
  out_dir = tmp_path / "out"
  out = out_dir / "o.tfrecord"
  args = (["tfrecords/create_pretraining_data.py"] +
          _cli_flags(str(corpus), str(out), num_workers=2, dupe_factor=5))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=testing.ROOT + os.pathsep +
             os.environ.get("PYTHONPATH", ""))
  proc = subprocess.Popen([sys.executable] + args, cwd=testing.ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
  try:
    # Mid-job: the first window is written (so more are being built) and
    # both workers are up.
    deadline = time.time() + 240
    workers = []
    while time.time() < deadline and proc.poll() is None:
      workers = [p for p, cmd in _children(proc.pid).items()
                 if "spawn_main" in cmd]
      if (len(workers) == 2 and os.path.exists(f"{out}.incomplete") and
          os.path.getsize(f"{out}.incomplete")):
        break
      time.sleep(0.05)
    assert proc.poll() is None and len(workers) == 2, "never saw the job run"
    os.kill(workers[1], signal.SIGKILL)
    output, _ = proc.communicate(timeout=180)  # not forever (a loaded CI machine)
  finally:
    if proc.poll() is None:  # the whole tree: its workers hold the pipe too
      os.killpg(proc.pid, signal.SIGKILL)
      proc.communicate(timeout=180)
  lines = [l for l in output.splitlines() if l.strip()]
  assert proc.returncode == 1, output[-3000:]
  assert "Traceback" not in output, output[-3000:]
  assert lines[-1].startswith(
      f"create_pretraining_data: error: Worker process {workers[1]} was "
      "killed by SIGKILL while building window "), output[-3000:]
  assert lines[-1].endswith(
      "likely out of memory; rerun with fewer --num_workers (now 2) or a "
      "smaller --window_tokens (now 3000)."), lines[-1]
  assert os.listdir(out_dir) == []  # nothing that looks finished
  # The survivor was stopped too: no orphan keeps working.
  assert not [pid for pid in workers if testing.process_running(pid)]
  testing.run_cli(args)
  assert os.listdir(out_dir) == ["o.tfrecord"]
  assert len(_read(str(out))) > 1000


def test_pack_sequences_writes_the_same_masked_sequences_packed(corpus,
                                                                 tmp_path):
  # --pack_sequences: the instances (and masks) the job writes without it,
  # placed several to a row; each decoded sequence is one of them, whole.
  # run_pretraining reads the rows as they are (input_sequence_ids), and
  # refuses them with next-sentence prediction on.
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  from official_bert.data import features  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.pretraining import pretraining_task  # pylint: disable=g-import-not-at-top
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  plain, packed = str(tmp_path / "plain.tfrecord"), str(tmp_path / "p.tfrecord")
  job = dict(next_sentence_prediction=False, short_seq_prob=0.5, dupe_factor=1)
  cpd.create_pretraining_data(_config([corpus], [plain], **job))
  stats = cpd.create_pretraining_data(_config([corpus], [packed],
                                              pack_sequences=True, **job))
  assert not features.is_packed(plain) and features.is_packed(packed)
  q = features.record_predictions(packed)
  assert q == P + 7

  def sequences(path, predictions, is_packed):
    out = []
    dataset = input_pipeline.pretraining_dataset(
        [path], 256, L, predictions, is_training=False,
        packed_records=is_packed)
    for inputs, labels in dataset:
      inputs = {k: v.numpy() for k, v in inputs.items()}
      labels = {k: v.numpy() for k, v in labels.items()}
      ids = inputs.get("input_sequence_ids", inputs["input_mask"])
      for r in range(len(ids)):
        for k in range(1, ids[r].max() + 1):
          where = np.flatnonzero(ids[r] == k)
          start, end = where[0], where[-1] + 1
          slots = ((labels["masked_lm_weights"][r] > 0)
                   & (inputs["masked_lm_positions"][r] >= start)
                   & (inputs["masked_lm_positions"][r] < end))
          out.append((tuple(inputs["input_word_ids"][r, start:end]),
                      tuple(inputs["input_type_ids"][r, start:end]),
                      tuple(inputs["masked_lm_positions"][r][slots] - start),
                      tuple(labels["masked_lm_ids"][r][slots])))
    return sorted(out)

  want = sequences(plain, P, False)
  assert sequences(packed, q, True) == want
  assert stats["instances"] < len(want)  # rows: fewer than the sequences
  config = pretraining_task.PretrainingConfig(
      input_file=packed, bert_config_file="", max_seq_length=L,
      max_predictions_per_seq=P)
  task = pretraining_task.PretrainingTask(config)
  with pytest.raises(cli.Error, match="holds packed rows .* pass "
                     "--next_sentence_prediction=false"):
    task.load(testing.tiny_config(vocab_size=30522), seed=1)
  import dataclasses  # pylint: disable=g-import-not-at-top
  task = pretraining_task.PretrainingTask(dataclasses.replace(
      config, next_sentence_prediction=False))
  task.load(testing.tiny_config(vocab_size=30522), seed=1)
  assert task.packed_records and task.record_predictions == q
