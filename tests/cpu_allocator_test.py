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


def _probe(env):
  """Runs _PROBE with `env` over an environment without TF_CPU_* settings."""
  clean = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPU_")}
  clean.update(env, PYTHONPATH=testing.CHILD_PATH, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=testing.ROOT,
                        env=clean, capture_output=True, text=True,
                        timeout=300, check=True)
  return json.loads(proc.stdout.strip().splitlines()[-1])


@ONEDNN
def test_bfc_by_default_with_the_machines_memory_as_limit(onednn):
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  got = _probe({"TF_ENABLE_ONEDNN_OPTS": onednn})
  assert got["requested"] and got["in_use"] and not got["refused"]
  assert int(got["limit"]) == cpu_allocator.physical_memory_mb() > 1000


@ONEDNN
def test_the_users_choice_wins(onednn):
  got = _probe({"TF_CPU_ALLOCATOR_USE_BFC": "false",
                "TF_ENABLE_ONEDNN_OPTS": onednn})
  assert not got["requested"] and not got["in_use"]
  assert got["limit"] is None
  got = _probe({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "4096",
                "TF_ENABLE_ONEDNN_OPTS": onednn})
  assert got["in_use"] and got["limit"] == "4096"


@ONEDNN
def test_in_use_agrees_with_the_allocators_behaviour(onednn):
  """BFC refuses a 100 MB buffer over a 64 MB limit; oneDNN's allocator and
  TensorFlow's default ignore the limit. in_use() must say which ran."""
  for bfc in ("true", "false"):
    got = _probe({"TF_CPU_ALLOCATOR_USE_BFC": bfc,
                  "TF_CPU_BFC_MEM_LIMIT_IN_MB": "64",
                  "TF_ENABLE_ONEDNN_OPTS": onednn})
    assert got["refused"] == (bfc == "true"), got
    assert got["in_use"] == got["refused"], got
