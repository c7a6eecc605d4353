"""cpu_allocator: BFC before TensorFlow loads; the user's own setting wins."""

import json
import os
import subprocess
import sys

import pytest

from tests import testing

# Both ways: TensorFlow turns oneDNN on by default on CPUs with AVX-512, and
# its allocator then keeps memory statistics whether BFC is on or not.
ONEDNN = pytest.mark.parametrize("onednn", ["0", "1"])

# Chooses, then loads TensorFlow, allocates, and reports what it got.
_PROBE = """
import json, os
from official_bert.training import cpu_allocator
requested = cpu_allocator.use_bfc()
import tensorflow as tf
x = tf.random.normal((600, 600))
(x @ x).numpy()
try:  # 100 MB: over a 64 MB limit, BFC refuses it; other allocators do not
  refused = float((tf.zeros([25 * 2 ** 20]) + 1.0)[0]) != 1.0
except tf.errors.ResourceExhaustedError:
  refused = True
print(json.dumps({"requested": requested, "in_use": cpu_allocator.in_use(),
                  "limit": os.environ.get(cpu_allocator.LIMIT_ENV),
                  "refused": refused}))
"""


def _probes(*envs):
  """Runs _PROBE once with each env (over an environment without TF_CPU_*
  settings), all at once: a refused allocation waits ~10 s in BFC's retry
  without using the CPU, so the others run meanwhile."""
  procs = []
  for env in envs:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("TF_CPU_")}
    clean.update(env, PYTHONPATH=testing.CHILD_PATH, TF_CPP_MIN_LOG_LEVEL="2")
    procs.append(subprocess.Popen(
        [sys.executable, "-c", _PROBE], cwd=testing.ROOT, env=clean,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  results = []
  try:
    for proc in procs:
      out, err = proc.communicate(timeout=300)
      assert proc.returncode == 0, err[-3000:]
      results.append(json.loads(out.strip().splitlines()[-1]))
  finally:  # a failed or hung probe leaves no other probe running
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  return results


# Each case with oneDNN off and on: TensorFlow's default, BFC turned off by
# the user, and the user's own 64 MB limit (which BFC must keep: a 100 MB
# buffer is then refused).
CASES = {"default": {},
         "off": {"TF_CPU_ALLOCATOR_USE_BFC": "false"},
         "limit": {"TF_CPU_ALLOCATOR_USE_BFC": "true",
                   "TF_CPU_BFC_MEM_LIMIT_IN_MB": "64"}}


@pytest.fixture(scope="module")
def probes():
  """{(case, onednn): what _PROBE reported}: the six probes, all at once."""
  keys = [(case, onednn) for case in CASES for onednn in ("0", "1")]
  return dict(zip(keys, _probes(*[dict(CASES[case],
                                        TF_ENABLE_ONEDNN_OPTS=onednn)
                                   for case, onednn in keys])))


@ONEDNN
def test_bfc_by_default_with_the_machines_memory_as_limit(probes, onednn):
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  got = probes["default", onednn]
  assert got["requested"] and got["in_use"] and not got["refused"]
  assert int(got["limit"]) == cpu_allocator.physical_memory_mb() > 1000


@ONEDNN
def test_the_users_choice_wins(probes, onednn):
  off, limit = probes["off", onednn], probes["limit", onednn]
  assert not off["requested"] and not off["in_use"]
  assert off["limit"] is None
  assert limit["in_use"] and limit["limit"] == "64"


@ONEDNN
def test_in_use_agrees_with_the_allocators_behaviour(probes, onednn):
  """BFC refuses a 100 MB buffer over a 64 MB limit; oneDNN's allocator and
  TensorFlow's default do not. in_use() must say which ran."""
  for case in ("off", "limit"):
    got = probes[case, onednn]
    assert got["refused"] == (case == "limit"), (case, got)
    assert got["in_use"] == got["refused"], (case, got)


# ---- oneDNN's rewrites (fine-tuning turns them on) ----

_ONEDNN_PROBE = """
from official_bert.training import cpu_allocator
requested = cpu_allocator.use_onednn()
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
print(requested, _pywrap_util_port.IsMklEnabled())
"""


def test_use_onednn_turns_the_rewrites_on_as_tensorflow_loads():
  """Unset, TensorFlow loads with oneDNN on. Where TensorFlow would turn it
  on anyway (Intel CPUs with AVX-512 VNNI) this cannot fail; on an AMD EPYC
  with AVX2 it fails without `use_onednn` (measured: False)."""
  env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  env.update(PYTHONPATH=testing.CHILD_PATH, TF_CPP_MIN_LOG_LEVEL="2")
  out = subprocess.run([sys.executable, "-c", _ONEDNN_PROBE],
                       cwd=testing.ROOT, env=env, capture_output=True,
                       text=True, timeout=300, check=True).stdout
  assert out.split() == ["True", "True"], out


@pytest.mark.parametrize("user, requested", [(None, True), ("0", False),
                                             ("false", False), ("1", True)])
def test_the_users_own_onednn_setting_wins(monkeypatch, user, requested):
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
  if user is not None:
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", user)
  assert cpu_allocator.use_onednn() is requested
  assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == (user or "1")


def test_the_fine_tuning_programs_ask_for_onednn_before_tensorflow(
    monkeypatch, tmp_path):
  """run_classifier, run_squad and run_ner load TensorFlow through
  `finetuner.load_config_and_vocab`; it sets the variable first."""
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
  config_file = str(tmp_path / "bert_config.json")
  testing.tiny_config(vocab_size=30522).to_json_file(config_file)
  finetuner.load_config_and_vocab(config_file, testing.VOCAB,
                                  do_lower_case=True, max_seq_length=16)
  assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"


def test_fine_tuning_splits_the_cpu_before_its_tokenizer_starts_tensorflow(
    monkeypatch, tmp_path):
  """--num_cpu_devices with a fine-tuning program: the logical devices are
  made before the tokenizer's first op (after it, TensorFlow refuses:
  "Virtual devices cannot be modified after being initialized")."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  events = []
  monkeypatch.setattr(distribution, "split_cpu",
                      lambda n: events.append(("split", n)))
  real = tokenization.FullTokenizer
  monkeypatch.setattr(tokenization, "FullTokenizer", lambda *a, **k: (
      events.append(("tokenizer",)), real(*a, **k))[1])
  config_file = str(tmp_path / "bert_config.json")
  testing.tiny_config(vocab_size=30522).to_json_file(config_file)
  finetuner.load_config_and_vocab(config_file, testing.VOCAB, True, 16,
                                  num_cpu_devices=2)
  assert events == [("split", 2), ("tokenizer",)]

  # read_and_run passes the run's --num_cpu_devices.
  class Stop(Exception):
    pass

  def load(*args):
    events.append(("load", args[-1]))
    raise Stop

  monkeypatch.setattr(finetuner, "load_config_and_vocab", load)
  task = type("Task", (), {"read": lambda self: None})()
  config = type("Config", (), {"num_cpu_devices": 3})()
  with pytest.raises(Stop):
    finetuner.read_and_run(task, lambda n: config, bert_config_file="c",
                           vocab_file="v", do_lower_case=True,
                           max_seq_length=8)
  assert events[-1] == ("load", 3)
