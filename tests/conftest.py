"""pytest set-up shared by every test: quiet TensorFlow, markers, the repo on sys.path."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
# Every Python process started from here (xdist's workers, the programs
# under test) starts with tests/child_site/sitecustomize.py: see its doc.
from tests import testing  # pylint: disable=g-import-not-at-top,wrong-import-position
if testing.CHILD_SITE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
  os.environ["PYTHONPATH"] = os.pathsep.join(
      p for p in (testing.CHILD_SITE, os.environ.get("PYTHONPATH")) if p)


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "slow: takes more than a few seconds; still runs in CI")
