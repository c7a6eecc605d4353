"""The quickstart, shortened, as a real chain of subprocesses: it cannot rot."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests import testing

SHORT = ["--max_documents=60", "--vocab_size=2000", "--max_seq_length=64",
         "--max_predictions_per_seq=10", "--dupe_factor=2",
         "--num_train_steps=30", "--train_batch_size=16"]


def _env():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = testing.ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


@pytest.mark.slow
def test_interrupted_quickstart_resumes_and_shows_predictions(tmp_path):
  work = str(tmp_path / "qs")
  command = [sys.executable, "-m", "official_bert.quickstart",
             f"--work_dir={work}", *SHORT]
  # Start, and kill the whole process tree (SIGKILL) once training has begun.
  proc = subprocess.Popen(command, cwd=testing.ROOT, env=_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
  seen = []
  deadline = time.time() + 300
  for line in proc.stdout:
    seen.append(line)
    if "[quickstart] train:" in line or time.time() > deadline:
      break
  time.sleep(3)
  os.killpg(proc.pid, signal.SIGKILL)
  proc.wait()
  assert any("[quickstart] data: done" in line for line in seen), "".join(seen)[-3000:]
  assert not os.path.exists(os.path.join(work, "pretraining", "eval_results.txt"))

  result = testing.run_cli(["-m", "official_bert.quickstart",
                            f"--work_dir={work}", *SHORT], timeout=900)
  out = result.stdout
  # Finished stages are reused, not redone.
  for stage in ("corpus", "vocab", "data"):
    assert re.search(rf"\[quickstart\] {stage}: .* exists, reused", out), out[-3000:]
  assert "[quickstart] train: python -m official_bert.run_pretraining" in out
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
               "hub_encoder", "hub_preprocessor", "serving"):
    match = re.search(rf"^  {name} +(\S+)$", out, flags=re.M)
    assert match and os.path.exists(match.group(1)), name
  # A third run redoes nothing but the demo.
  again = testing.run_cli(["-m", "official_bert.quickstart",
                           f"--work_dir={work}", *SHORT], timeout=600).stdout
  for stage in ("corpus", "vocab", "data", "train", "hub", "serving"):
    assert re.search(rf"\[quickstart\] {stage}: .* exists, reused", again), again[-2000:]


@pytest.mark.parametrize("flag,message", [
    ("--model=big", "--model=big is not of the form L<layers>_H<hidden>_A<heads>"),
    ("--corpus=/nonexistent/corpus.txt", "--corpus /nonexistent/corpus.txt does not exist"),
])
def test_bad_flags_are_one_clear_error(tmp_path, flag, message):
  work = tmp_path / "qs"
  result = testing.run_cli(["-m", "official_bert.quickstart",
                            f"--work_dir={work}", flag], check=False, timeout=120)
  assert result.returncode != 0
  assert message in result.stderr
  assert "Traceback" not in result.stderr
  assert not work.exists()  # nothing was started
