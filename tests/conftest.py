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


# The modules with the longest tests (their tests' CPU time, 2026-11-26,
# docs/performance.md#the-test-suites-time), run first: xdist hands tests out
# in collection order, and a 60 s test handed out last keeps one worker busy
# while the other has finished. Each module's tests stay together (module
# fixtures are built once per worker); the other modules follow in their
# usual order. A module missing here only runs later.
HEAVY_FIRST = (
    "readme_snippets_test.py", "run_pretraining_test.py", "trainer_test.py",
    "original_readme_test.py", "extend_checkpoint_test.py",
    "serving_test.py", "quickstart_test.py", "bad_input_test.py",
    "tfhub_modules_test.py", "dynamic_masking_test.py",
    "export_checkpoint_test.py", "padding_programs_test.py",
    "create_pretraining_data_beam_dask_test.py",
    "eval_while_training_test.py", "run_ner_test.py", "run_squad_test.py",
    "run_classifier_test.py")


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
