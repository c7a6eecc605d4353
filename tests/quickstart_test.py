"""The quickstart, shortened, as a real chain of subprocesses: it cannot rot."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests import testing

# A 1-layer model (the default is 2 layers of 128): what the stages hand on
# and reuse does not depend on its size, and each stage that traces or
# reloads it does half the work.
SHORT = ["--max_documents=60", "--vocab_size=2000", "--max_seq_length=64",
         "--max_predictions_per_seq=10", "--dupe_factor=2",
         "--num_train_steps=30", "--train_batch_size=16",
         "--model=L1_H64_A2"]


def _env():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = testing.ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


def _read_lines(stream, into):
  for line in stream:
    into.append(line)


@pytest.mark.slow
def test_interrupted_quickstart_resumes_and_shows_predictions(tmp_path,
                                                            monkeypatch):
  work = str(tmp_path / "qs")
  command = [sys.executable, "-m", "official_bert.quickstart",
             f"--work_dir={work}", *SHORT]
  # Start, and kill the whole process tree (SIGKILL) once training has
  # written its first checkpoint.
  proc = subprocess.Popen(command, cwd=testing.ROOT, env=_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
  seen = []
  reader = threading.Thread(target=_read_lines, args=(proc.stdout, seen),
                            daemon=True)
  reader.start()
  index = os.path.join(work, "pretraining", "checkpoint")
  deadline = time.time() + 600
  while not os.path.exists(index):
    assert proc.poll() is None and time.time() < deadline, "".join(seen)[-3000:]
    time.sleep(0.05)
  os.killpg(proc.pid, signal.SIGKILL)
  proc.wait()
  reader.join(10)
  assert any("[quickstart] data: done" in line for line in seen), "".join(seen)[-3000:]
  assert not os.path.exists(os.path.join(work, "pretraining", "eval_results.txt"))
  killed_at = tf_latest_step(os.path.join(work, "pretraining"))
  assert 0 < killed_at < 30  # SHORT trains 30 steps

  # The rerun (in this process; its stages are processes) adds the Hugging
  # Face export of the same pretrained model (--export_huggingface).
  result = testing.run_cli(["-m", "official_bert.quickstart",
                            f"--work_dir={work}", *SHORT,
                            "--export_huggingface"], timeout=900)
  out = result.stdout
  # Finished stages are reused, not redone.
  for stage in ("corpus", "vocab", "data"):
    assert re.search(rf"\[quickstart\] {stage}: .* exists, reused", out), out[-3000:]
  assert "[quickstart] train: python -m official_bert.run_pretraining" in out
  # ... and training resumed from the checkpoint the killed run wrote.
  ckpt = os.path.join(work, "pretraining", f"ckpt-{killed_at}")
  assert f"Resumed from {ckpt} at step {killed_at}" in out, out[-3000:]
  assert "Starting from scratch" not in out
  # A healthy CPU run: no ERROR-level line, no TensorFlow start-up noise, no
  # decoded instance dumps.
  for line in out.splitlines():
    assert not re.match(r"^(E\d{4} |ERROR)", line), line
    assert "cuInit" not in line and "absl::InitializeLog" not in line, line
    assert "*** Example ***" not in line and "input_ids:" not in line, line
  # The demo ran in its own process on the reloaded exports: 4 sentences,
  # 5 predictions each, every one a vocabulary entry.
  with open(os.path.join(work, "vocab.txt"), encoding="utf-8") as f:
    vocab = set(line.rstrip("\n") for line in f)
  predictions = re.findall(r"^    -> (.*)$", out, flags=re.M)
  assert len(predictions) == 4, out[-3000:]
  for line in predictions:
    tokens = line.split(", ")
    assert len(tokens) == 5 and all(t in vocab for t in tokens), line
  assert len(re.findall(r"^  [+-]\d\.\d{3}  '", out, flags=re.M)) == 3
  # Every artefact path is printed and exists.
  for name in ("corpus", "vocab", "data", "bert_config", "pretraining",
               "hub_encoder", "hub_preprocessor", "serving", "huggingface"):
    match = re.search(rf"^  {name} +(\S+)$", out, flags=re.M)
    assert match and os.path.exists(match.group(1)), name
  assert ("[quickstart] huggingface: python -m export.export_checkpoint"
          in out), out[-2000:]
  hf_dir = os.path.join(work, "huggingface")
  assert re.search(rf"^  huggingface +{re.escape(hf_dir)}$", out, flags=re.M)
  with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as f:
    assert json.load(f)["architectures"] == ["BertForPreTraining"]
  for name in ("model.safetensors", "vocab.txt", "tokenizer_config.json"):
    assert os.path.exists(os.path.join(hf_dir, name)), name
  # A third run redoes nothing but the demo: every stage's record matches.
  # The processes it would start are only recorded (the demo ran above).
  started = []

  class _NoProcess:
    def __init__(self, args, **unused_kwargs):
      started.append(args[2])  # [python, -m, <module>, ...]
      self.stdout, self.returncode = iter(()), 0

    def __enter__(self):
      return self

    def __exit__(self, *unused_exc):
      return False

  monkeypatch.setattr(subprocess, "Popen", _NoProcess)
  again = testing.run_cli(["-m", "official_bert.quickstart",
                           f"--work_dir={work}", *SHORT,
                           "--export_huggingface"]).stdout
  for stage in ("corpus", "vocab", "data", "train", "hub", "serving",
                "huggingface"):
    assert re.search(rf"\[quickstart\] {stage}: .* exists, reused", again), again[-2000:]
  assert started == ["official_bert.quickstart"], started  # the demo


@pytest.mark.parametrize("flag,message", [
    ("--model=big", "--model=big is not of the form L<layers>_H<hidden>_A<heads>"),
    ("--corpus=/nonexistent/corpus.txt", "--corpus=/nonexistent/corpus.txt does not exist"),
])
def test_bad_flags_are_one_clear_error(tmp_path, flag, message):
  work = tmp_path / "qs"
  result = testing.run_cli(["-m", "official_bert.quickstart",
                            f"--work_dir={work}", flag], check=False, timeout=120)
  assert result.returncode != 0
  assert message in result.stderr
  assert "Traceback" not in result.stderr
  assert not work.exists()  # nothing was started


def tf_latest_step(directory):
  """The step of the checkpoint `checkpoint` points at (no TensorFlow)."""
  with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
    first = f.readline()
  return int(re.search(r'ckpt-(\d+)"', first).group(1))


def test_stages_redo_what_changed_and_every_stage_after(tmp_path, capsys):
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  work = str(tmp_path)
  vocab_txt, data_dir = tmp_path / "vocab.txt", tmp_path / "data"

  def stages(vocab_size, seq):
    vocab = quickstart._Stage("vocab", [str(vocab_txt)],
                              {"corpus": "c" * 64, "vocab_size": vocab_size},
                              work)
    data = quickstart._Stage("data", [str(data_dir)],
                             {"vocab": vocab.digest, "max_seq_length": seq},
                             work)
    return vocab, data

  def run(vocab_size, seq):
    """Which stages ran (not reused)."""
    vocab, data = stages(vocab_size, seq)
    ran = []
    if not vocab.prepare(vocab_txt.exists):
      vocab_txt.write_text(f"{vocab_size}\n")
      ran.append("vocab")
    if not data.prepare(lambda: (data_dir / "train.tfrecord").exists()):
      data_dir.mkdir()
      (data_dir / "train.tfrecord").write_text(f"{vocab_size} {seq}")
      ran.append("data")
    return ran

  assert run(100, 64) == ["vocab", "data"]
  assert json.loads((tmp_path / "vocab.made_from.json").read_text()) == {
      "corpus": "c" * 64, "vocab_size": 100}
  assert run(100, 64) == []  # the same inputs: reused
  assert run(100, 128) == ["data"]  # the data flag: data only
  assert "data: max_seq_length 64 -> 128: redoing data" in capsys.readouterr().out
  assert run(200, 128) == ["vocab", "data"]  # vocab, and what was made from it
  out = capsys.readouterr().out
  assert "vocab: vocab_size 100 -> 200: redoing vocab" in out
  assert "data: vocab was redone: redoing data" in out
  # What sits beside each output matches it.
  assert (data_dir / "train.tfrecord").read_text() == "200 128"
  # A half-done stage whose record matches (a killed run) reruns cleanly.
  (data_dir / "train.tfrecord").unlink()
  (data_dir / "partial").write_text("x")
  assert run(200, 128) == ["data"] and not (data_dir / "partial").exists()
  # Outputs with no record (another program's, an older quickstart's) are
  # never removed: one sentence instead.
  (tmp_path / "data.made_from.json").unlink()
  with pytest.raises(cli.Error, match=f"holds {data_dir} but no record"):
    stages(200, 128)[1].prepare(lambda: True)
  assert (data_dir / "train.tfrecord").exists()


def test_training_resumes_when_its_record_matches(tmp_path):
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top
  pretraining = tmp_path / "pretraining"
  made_from = {"data": "d" * 64, "model": "L2_H128_A2"}
  train = quickstart._Stage("train", [str(pretraining)], made_from,
                            str(tmp_path), resumable=True)
  assert not train.prepare(lambda: False)
  pretraining.mkdir()
  (pretraining / "ckpt-3.index").write_text("")
  again = quickstart._Stage("train", [str(pretraining)], dict(made_from),
                            str(tmp_path), resumable=True)
  assert not again.prepare(lambda: False)  # not done: run, and resume...
  assert (pretraining / "ckpt-3.index").exists()  # ...from the checkpoint
  other = quickstart._Stage("train", [str(pretraining)],
                            dict(made_from, model="L4_H256_A4"), str(tmp_path),
                            resumable=True)
  assert not other.prepare(lambda: False)
  assert not pretraining.exists()  # another model: checkpoints removed


TF_STARTUP = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795463229.300002    3429 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
E0000 00:00:1795463233.347379    3429 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
I1123 19:50:30.998048 140269617761152 functional_saver.py:440] Sharding callback duration: 274 microseconds
Saved checkpoint /w/pretraining/ckpt-400
I1123 19:47:23.461592 140285568076672 create_pretraining_data.py:149] *** Example ***
I1123 19:47:23.463882 140285568076672 create_pretraining_data.py:150] tokens: [CLS] a [MASK] [SEP] b [SEP]
I1123 19:47:23.467855 140285568076672 create_pretraining_data.py:155] input_ids: 101 1 103 102 2 102
I1123 19:47:23.468439 140285568076672 create_pretraining_data.py:149] *** Example ***
I1123 19:47:23.468509 140285568076672 create_pretraining_data.py:150] tokens: [CLS] c [SEP] d [SEP]
INFO:tensorflow:Assets written to: /w/hub/.encoder.tmp-ayh6dzwj/assets
"""


def test_quickstart_shows_progress_not_tensorflow_noise():
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top
  line_filter = quickstart._Filter()
  shown = [line_filter.shown(l) for l in TF_STARTUP.splitlines()]
  assert [l for l in shown if l is not None] == [
      "an instance: [CLS] a [MASK] [SEP] b [SEP]"]
  kept = quickstart._Filter()
  # Real problems are shown, absl's prefix cut to the level: an ERROR, a
  # cuInit failure where a driver exists (no "Could not find" before it),
  # a warning, and a program's own progress.
  assert kept.shown("E0000 00:00:1795463233.347379    3429 cuda_platform.cc:52]"
                    " failed call to cuInit: INTERNAL: CUDA error: Failed call "
                    "to cuInit: UNKNOWN ERROR (303)").startswith("ERROR: failed")
  assert kept.shown("E1123 19:47:23.461592 1 trainer.py:9] disk full") == (
      "ERROR: disk full")
  assert kept.shown("W1123 19:47:23.461592 1 learn_vocab.py:9] few lines") == (
      "warning: few lines")
  assert kept.shown("I1123 19:46:56.590834 1 learn_vocab.py:213] learning "
                    "step 4: minimum count 15 -> 2241 tokens (2.8 s)") == (
                        "learning step 4: minimum count 15 -> 2241 tokens (2.8 s)")
  step = "step 100/2000 loss 7.875 masked_lm_loss 7.188 ETA 0:23:13"
  assert kept.shown(step) == step


def test_a_killed_quickstart_takes_its_running_stage_with_it():
  """SIGKILL of the quickstart alone (not its process group) ends the stage
  it was running too: no trainer left writing under --work_dir beside the
  rerun's. A stage here is `sleep`, started as quickstart._run starts one."""
  script = ("import subprocess, time\n"
            "from official_bert import quickstart\n"
            "stage = subprocess.Popen(['sleep', '60'], "
            "preexec_fn=quickstart._ends_with_this_process())\n"
            "print(stage.pid, flush=True)\n"
            "time.sleep(60)\n")
  with subprocess.Popen([sys.executable, "-c", script], cwd=testing.ROOT,
                        env=_env(), stdout=subprocess.PIPE,
                        text=True) as parent:
    stage = int(parent.stdout.readline())
    try:
      parent.kill()
      parent.wait()
      deadline = time.time() + 10
      while testing.process_running(stage) and time.time() < deadline:
        time.sleep(0.05)
      assert not testing.process_running(stage)
    finally:
      if testing.process_running(stage):
        os.kill(stage, signal.SIGKILL)


def test_a_stages_full_disk_sentence_names_the_work_dir():
  """The stage's sentence is relayed, its advice pointing at the flag the
  user sets: --work_dir, not the stage's --output_file."""
  from official_bert import quickstart  # pylint: disable=g-import-not-at-top
  assert quickstart._relayed(
      "create_pretraining_data: error: cannot write the pretraining data "
      "/w/data/train.tfrecord: the disk is full, 1.0 MB free; free space on "
      "that disk or point --output_file at another disk.") == (
          "create_pretraining_data says: cannot write the pretraining data "
          "/w/data/train.tfrecord: the disk is full, 1.0 MB free; free space "
          "on that disk or point --work_dir at another disk")
  assert quickstart._relayed("learn_vocab: error: --vocab_size=3 is too "
                             "small.") == (
                                 "learn_vocab says: --vocab_size=3 is too "
                                 "small")
