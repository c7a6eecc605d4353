"""Every kind of writer, stopped by a real full disk: one sentence, no debris.

A child process (this module run as `python -m tests.disk_full_test DIR`)
imports TensorFlow once and runs the programs in turn in-process
(testing.run_program), each case under a real file size limit
(RLIMIT_FSIZE: a write past it fails with EFBIG, the errno `ulimit -f`
gives, as ENOSPC does on a full disk), set just before the program and
lifted after it. SIGXFSZ is ignored there, so the write returns the error
instead of killing the process. The limit is a fraction of what an
undisturbed run writes, so the write fails part-way.

Bugs these catch: a traceback (the error not translated: disk_full.py,
cli.run); a sentence that does not name the path; `ckpt-N_temp/`, a
`.tmp`/`.incomplete` file or a half file under the final name left behind
(the clean-up skipped); a half checkpoint that becomes the latest, so the
rerun does not resume from the last good one to the same weights; a data
job whose rerun does not give the bytes of an undisturbed run.
"""

import errno
import glob
import json
import os
import resource
import shutil
import signal
import sys
import time

import pytest

from official_bert import disk_full
from tests import testing

PRETRAIN = "official_bert.run_pretraining"


def _pretraining_flags(root, output_dir, steps):
  values = dict(
      input_file=f"{root}/part-*.tfrecord", output_dir=output_dir,
      bert_config_file=f"{root}/bert_config.json", max_seq_length=testing.SEQ,
      max_predictions_per_seq=3, train_batch_size=4, num_train_steps=steps,
      num_warmup_steps=2, learning_rate=1e-3, steps_per_loop=2,
      save_checkpoints_steps=2)
  return [f"--{k}={v}" for k, v in values.items()]


def _data_flags(root, output_file):
  return [f"--input_file={root}/corpus.txt", f"--output_file={output_file}",
          f"--vocab_file={testing.VOCAB}", "--max_seq_length=32",
          "--max_predictions_per_seq=5", "--dupe_factor=1",
          "--num_workers=0", "--window_tokens=3000"]


def _size(pattern):
  return sum(os.path.getsize(p) for p in glob.glob(pattern))


def _run(results, name, module, argv, limit=None, watch=None):
  """Runs `module` in this process under a file size limit of `limit`
  bytes (None: none); records its status, output lines and the files in
  `watch` (a directory) right after it, before a rerun replaces them."""
  start = time.time()
  soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
  if limit is not None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), hard))
  try:
    proc = testing.run_program(module, argv, check=False, merge_stderr=True)
  finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
  results[name] = {"status": proc.returncode, "limit": limit,
                   "seconds": round(time.time() - start, 1),
                   "lines": [l for l in proc.stdout.splitlines() if l.strip()],
                   "files": sorted(
                       os.path.relpath(os.path.join(parent, n), watch)
                       for parent, dirs, files in os.walk(watch or "/nowhere")
                       for n in dirs + files)}


def child(root):
  """The cases, in turn, in this process; results to root/results.json."""
  signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  results = {}
  # Data job: an undisturbed run, then one cut at half its output, rerun.
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:250]
  with open(f"{root}/corpus.txt", "w", encoding="utf-8") as f:
    f.write("\n".join(line if i % 20 else "" for i, line in enumerate(lines)))
  _run(results, "data_whole", "tfrecords.create_pretraining_data",
       _data_flags(root, f"{root}/whole/data.tfrecord"))
  half = _size(f"{root}/whole/data.tfrecord") / 2
  _run(results, "data_full", "tfrecords.create_pretraining_data",
       _data_flags(root, f"{root}/cut/data.tfrecord"), limit=half,
       watch=f"{root}/cut")
  _run(results, "data_rerun", "tfrecords.create_pretraining_data",
       _data_flags(root, f"{root}/cut/data.tfrecord"))

  # Trainer: 4 steps undisturbed; its ckpt-2 alone in another directory,
  # resumed with ckpt-4 cut at half its size, then resumed again.
  for i in range(2):
    input_pipeline_test.write_records(
        f"{root}/part-{i}.tfrecord",
        input_pipeline_test.make_instances(24, seed=10 + i))
  # One layer: what a full disk does to the writers does not depend on
  # depth, and each run traces half the layers.
  config = testing.tiny_config(num_hidden_layers=1)
  config.to_json_file(f"{root}/bert_config.json")
  _run(results, "train_whole", PRETRAIN,
       ["--do_train"] + _pretraining_flags(root, f"{root}/whole_run", 4))
  os.makedirs(f"{root}/resumed")
  for path in glob.glob(f"{root}/whole_run/ckpt-2.*"):
    shutil.copy(path, f"{root}/resumed")
  with open(f"{root}/resumed/checkpoint", "w", encoding="utf-8") as f:
    f.write('model_checkpoint_path: "ckpt-2"\n'
            'all_model_checkpoint_paths: "ckpt-2"\n')
  half = _size(f"{root}/resumed/ckpt-2.data-*") / 2
  _run(results, "train_full", PRETRAIN,
       ["--do_train"] + _pretraining_flags(root, f"{root}/resumed", 4),
       limit=half, watch=f"{root}/resumed")
  _run(results, "train_rerun", PRETRAIN,
       ["--do_train"] + _pretraining_flags(root, f"{root}/resumed", 4))

  # Results files (eval_results.txt, flags.json: driver.write, as every
  # fine-tuning program writes them): an evaluation under a limit smaller
  # than any of them.
  _run(results, "eval_full", PRETRAIN,
       ["--do_eval", "--max_eval_steps=2"]
       + _pretraining_flags(root, f"{root}/whole_run", 4), limit=40,
       watch=f"{root}/whole_run")

  # Export: a SavedModel cut at an eighth of the checkpoint.
  model = pretrainer.BertPretrainer.from_bert_config(config)
  checkpoints.save_model(model, f"{root}/ckpt/ckpt-1")
  _run(results, "export_full", "export.export_saved_model",
       [f"--bert_config_file={root}/bert_config.json",
        f"--init_checkpoint={root}/ckpt/ckpt-1",
        f"--vocab_file={testing.TESTDATA}/export_vocab.txt",
        f"--export_dir={root}/exports/model", f"--max_seq_length={testing.SEQ}"],
       limit=_size(f"{root}/ckpt/ckpt-1.data-*") / 8, watch=f"{root}/exports")

  # A small file: learn_vocab's vocab.txt cut at half.
  learn = ["--input_file", f"{root}/corpus.txt", "--vocab_size=300",
           "--num_unused=3"]
  _run(results, "vocab_whole", "tfrecords.learn_vocab",
       learn + [f"--output_file={root}/whole/vocab.txt"])
  os.makedirs(f"{root}/vocab")
  _run(results, "vocab_full", "tfrecords.learn_vocab",
       learn + [f"--output_file={root}/vocab/vocab.txt"],
       limit=_size(f"{root}/whole/vocab.txt") / 2, watch=f"{root}/vocab")
  with open(f"{root}/results.json", "w", encoding="utf-8") as f:
    json.dump(results, f)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """(root, {case: {status, limit, lines}}) of the child's cases."""
  testing.require_shared_data()
  root = str(tmp_path_factory.mktemp("disk_full"))
  testing.run_process(["-m", "tests.disk_full_test", root], timeout=300)
  with open(f"{root}/results.json", encoding="utf-8") as f:
    return root, json.load(f)


def _assert_full(result, program, flag, path=None):
  """Exit 1, no traceback, the last line one sentence naming `path` (when
  given), the file size limit and --`flag`."""
  testing.assert_one_sentence_last(
      result["status"], result["lines"], program, "cannot write ")
  last = result["lines"][-1]
  assert ": the file size limit (ulimit -f) was reached" in last, last
  if path is not None:
    assert f" {path}: the file size limit" in last, last
  assert last.endswith(f"raise the limit or point --{flag} at another "
                       "disk."), last
  assert ". " not in last, last  # one sentence


def _debris(result):
  """Temporary files and directories the run left in its watched directory."""
  return [path for path in result["files"]
          if any(n.endswith("_temp") or ".tmp" in n or n.startswith(".")
                 or n.endswith(".incomplete") for n in path.split(os.sep))]


def test_data_job_stops_in_one_sentence_and_its_rerun_is_byte_identical(runs):
  root, results = runs
  assert results["data_whole"]["status"] == 0, results["data_whole"]
  _assert_full(results["data_full"], "create_pretraining_data",
               "output_file", f"{root}/cut/data.tfrecord")
  assert results["data_full"]["files"] == [], "half or temporary output"
  assert results["data_rerun"]["status"] == 0, results["data_rerun"]
  with open(f"{root}/whole/data.tfrecord", "rb") as a, open(
      f"{root}/cut/data.tfrecord", "rb") as b:
    assert a.read() == b.read()


def test_trainer_keeps_its_last_checkpoint_and_resumes_to_the_same_weights(
    runs):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  root, results = runs
  assert results["train_whole"]["status"] == 0, results["train_whole"]
  result = results["train_full"]
  _assert_full(result, "run_pretraining", "output_dir",
               f"{root}/resumed/ckpt-4")
  assert "it needs about " in result["lines"][-1]
  assert _debris(result) == []
  # ckpt-2 stays the latest; nothing of ckpt-4 is left.
  assert [f for f in result["files"] if f.startswith("ckpt-")] == [
      "ckpt-2.data-00000-of-00001", "ckpt-2.index"], result["files"]
  rerun = "\n".join(results["train_rerun"]["lines"])
  assert results["train_rerun"]["status"] == 0, rerun[-3000:]
  assert f"Resumed from {root}/resumed/ckpt-2 at step 2" in rerun
  assert "truncated or corrupt" not in rerun
  whole = tf.train.load_checkpoint(f"{root}/whole_run/ckpt-4")
  resumed = tf.train.load_checkpoint(f"{root}/resumed/ckpt-4")
  names = [n for n in whole.get_variable_to_shape_map()
           if n.startswith(("model/", "optimizer/", "step/"))]
  assert len(names) > 40
  for name in names:
    np.testing.assert_allclose(resumed.get_tensor(name),
                               whole.get_tensor(name), atol=1e-6,
                               err_msg=name)


def test_results_files_stop_in_one_sentence_without_half_files(runs):
  root, results = runs
  result = results["eval_full"]
  _assert_full(result, "run_pretraining", "output_dir")
  path = result["lines"][-1].split("cannot write the file ")[1].split(":")[0]
  assert os.path.dirname(path) == f"{root}/whole_run", path
  assert _debris(result) == []
  # The file named is the previous run's whole one or absent, never half.
  if os.path.basename(path) == "flags.json":
    with open(path, encoding="utf-8") as f:
      json.load(f)
  else:
    assert not os.path.exists(path), path


def test_export_stops_in_one_sentence_and_leaves_no_directory(runs):
  root, results = runs
  _assert_full(results["export_full"], "export_saved_model", "export_dir",
               f"{root}/exports/model/1")  # its first version
  assert results["export_full"]["files"] == ["model"]  # no hidden .tmp-*


def test_small_file_writer_stops_in_one_sentence_without_half_file(runs):
  root, results = runs
  assert results["vocab_whole"]["status"] == 0, results["vocab_whole"]
  _assert_full(results["vocab_full"], "learn_vocab", "output_file",
               f"{root}/vocab/vocab.txt")
  assert results["vocab_full"]["files"] == []  # no half vocab.txt, no .tmp


@pytest.mark.parametrize("number,why,advice", [
    (errno.ENOSPC, "the disk is full, ", "free space on that disk"),
    (errno.EDQUOT, "the disk quota is used up", "free space within the quota"),
    (errno.EFBIG, "the file size limit (ulimit -f) was reached",
     "raise the limit"),
    (errno.EIO, "Input/output error", "check the disk"),
])
def test_each_errno_has_its_reason_and_advice(tmp_path, number, why, advice):
  """The errnos a real limit here cannot produce (a full disk, a quota)."""
  path = str(tmp_path / "out.txt")
  with pytest.raises(disk_full.WriteFailed) as raised:
    with disk_full.writing(path, "the file", needed=2_500_000):
      raise OSError(number, os.strerror(number))
  assert raised.value.sentence("output_file") == (
      f"cannot write the file {path}: {why}"
      + raised.value.why[len(why):] + " (it needs about 2.5 MB); "
      f"{advice} or point --output_file at another disk.")
  assert raised.value.why.startswith(why)


@pytest.mark.skipif(not os.access("/dev/full", os.W_OK),
                    reason="no /dev/full to write to")
def test_a_real_enospc_is_the_full_disk_sentence():
  """A real ENOSPC, which a file size limit cannot give (EFBIG) and a small
  filesystem would need root for: /dev/full fails every write with it.
  Python's write in a writer's `writing` block, and TensorFlow's
  TFRecordWriter (the data job's; its error carries the errno as words)
  translated as cli.run translates an error outside any block."""
  with pytest.raises(disk_full.WriteFailed) as raised:
    with disk_full.writing("/dev/full", "the file"):
      with open("/dev/full", "wb") as f:
        f.write(b"x")
  assert raised.value.why.startswith("the disk is full, "), raised.value.why
  assert raised.value.why.endswith(" free"), raised.value.why
  assert raised.value.advice == "free space on that disk"
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with pytest.raises(tf.errors.OpError) as raised_tf:
    with tf.io.TFRecordWriter("/dev/full") as writer:
      writer.write(b"x" * 100_000)
  failed = disk_full.from_error(raised_tf.value)
  assert failed.sentence("output_file").startswith(
      "cannot write a file /dev/full: the disk is full, "), failed.sentence()


if __name__ == "__main__":
  child(sys.argv[1])
