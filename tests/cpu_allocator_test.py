"""cpu_allocator: BFC before TensorFlow loads; the user's own setting wins."""

import json
import os
import subprocess
import sys

from tests import testing

# Chooses, then loads TensorFlow, allocates, and reports what it got.
_PROBE = """
import json, os
from official_bert.training import cpu_allocator
requested = cpu_allocator.use_bfc()
import tensorflow as tf
x = tf.random.normal((600, 600))
(x @ x).numpy()
print(json.dumps({"requested": requested, "in_use": cpu_allocator.in_use(),
                  "limit": os.environ.get(cpu_allocator.LIMIT_ENV)}))
"""


def _probe(env):
  """Runs _PROBE with `env` over an environment without TF_CPU_* settings."""
  clean = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPU_")}
  clean.update(env, PYTHONPATH=testing.ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=testing.ROOT,
                        env=clean, capture_output=True, text=True,
                        timeout=300, check=True)
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bfc_by_default_with_the_machines_memory_as_limit():
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  got = _probe({})
  assert got["requested"] and got["in_use"]
  assert int(got["limit"]) == cpu_allocator.physical_memory_mb() > 1000


def test_the_users_choice_wins():
  got = _probe({"TF_CPU_ALLOCATOR_USE_BFC": "false"})
  assert not got["requested"] and not got["in_use"]
  assert got["limit"] is None
  got = _probe({"TF_CPU_BFC_MEM_LIMIT_IN_MB": "4096"})
  assert got["in_use"] and got["limit"] == "4096"
