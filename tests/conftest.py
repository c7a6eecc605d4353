"""pytest set-up shared by every test: quiet TensorFlow, markers, the repo on sys.path."""

import os
import re
import sys
import tempfile

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
# The process count of the run (see `pytest_terminal_summary`): every Python
# process started under the tests appends a line to this file
# (tests/child_site/sitecustomize.py). The controller sets it; xdist's workers
# and the programs they start inherit it.
if "OFFICIAL_BERT_PROCESS_LOG" not in os.environ:
  _fd, _path = tempfile.mkstemp(prefix="official_bert_processes_", suffix=".log")
  os.close(_fd)
  os.environ["OFFICIAL_BERT_PROCESS_LOG"] = _path


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "slow: takes more than a few seconds; still runs in CI")


def _process_counts(path):
  """(xdist workers, other Python processes) started under the run."""
  try:
    with open(path, encoding="utf-8") as f:
      lines = [line.split("\t", 1)[1] for line in f
               if re.match(r"\d+\t", line)]
  except OSError:
    return 0, 0
  # execnet starts each xdist worker as `python -u -c "import sys;exec(...)"`.
  workers = sum("exec(eval(sys.stdin.readline()))" in line for line in lines)
  return workers, len(lines) - workers


def pytest_terminal_summary(terminalreporter):
  if os.environ.get("PYTEST_XDIST_WORKER"):
    return
  workers, programs = _process_counts(os.environ["OFFICIAL_BERT_PROCESS_LOG"])
  terminalreporter.write_line(
      f"processes: {programs} Python processes started by the tests "
      f"(besides {workers} test workers); each listed in "
      f"{os.environ['OFFICIAL_BERT_PROCESS_LOG']}")
