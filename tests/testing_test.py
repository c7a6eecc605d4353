"""The test set-up itself: tests/testing.py's require_shared_data and
require (skip locally, fail under CI=true) and pytest.ini's limit on a hung
test.

Bugs caught: CI passing green because every test needing ../shared/data
skipped (the data missing from the CI checkout), or every test comparing
against a peer library (torch, transformers...) skipped (the package missing
from requirements-test.txt, or a new test calling pytest.importorskip); a
hung test holding the whole run until CI's limit (pytest-timeout missing
from requirements-test.txt or its settings from pytest.ini)."""

import os

import pytest

from tests import testing


def test_missing_shared_data_fails_under_ci_and_skips_otherwise(
    monkeypatch, tmp_path):
  monkeypatch.setattr(testing, "CORPUS", str(tmp_path / "no_corpus.txt"))
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception, match="CI=true"):
    testing.require_shared_data()
  monkeypatch.delenv("CI")
  with pytest.raises(pytest.skip.Exception, match="shared data not found"):
    testing.require_shared_data()



def test_a_missing_peer_library_fails_under_ci_and_skips_otherwise(
    monkeypatch):
  missing = "official_bert_no_such_peer.numpy"
  monkeypatch.setenv("CI", "true")
  with pytest.raises(pytest.fail.Exception,
                     match="install the official-bert-no-such-peer package "
                     "with requirements-test.txt"):
    testing.require(missing)
  assert testing.require("numpy").__name__ == "numpy"
  monkeypatch.delenv("CI")
  with pytest.raises(pytest.skip.Exception, match="no_such_peer"):
    testing.require(missing)
  with pytest.raises(pytest.skip.Exception, match="^not here$"):
    testing.require(missing, reason="not here")
  assert testing.require("numpy").__name__ == "numpy"


def test_no_test_skips_on_a_missing_library_behind_cis_back():
  """Every test needing a peer library asks testing.require, which fails
  under CI=true, never pytest.importorskip, which would skip there too."""
  tests = os.path.join(testing.ROOT, "tests")
  found = []
  for name in sorted(os.listdir(tests)):
    if name.endswith(".py") and name != "testing_test.py":
      with open(os.path.join(tests, name), encoding="utf-8") as f:
        found += [f"{name}:{i}" for i, line in enumerate(f, 1)
                  if "importorskip(" in line and
                  "return pytest.importorskip(" not in line]
  assert found == []

def test_a_hung_test_fails_with_its_stacks_printed(pytestconfig):
  assert pytestconfig.pluginmanager.hasplugin("timeout")
  assert float(pytestconfig.getini("timeout")) == 600
  assert pytestconfig.getini("timeout_method") == "thread"  # ends C++ waits too
  assert float(pytestconfig.getini("faulthandler_timeout")) == 540


_IMPORTS = """
import sys
import tensorflow
from keras.src.wrappers import fixes
print(int("sklearn" in sys.modules), int(fixes.sklearn is None))
print(int("jax" in sys.modules))
import sklearn.metrics
import jax.numpy
print(int("sklearn" in sys.modules), int("jax" in sys.modules))
"""


@pytest.mark.parametrize("path", ["inherited", "CHILD_PATH"])
def test_programs_start_tensorflow_without_scikit_learn_and_jax(path):
  """tests/child_site: TensorFlow's start-up skips the ~1.2 s of Keras's
  scikit-learn wrappers and TFLite's and Keras's JAX imports in every
  process a test starts (xdist's workers and the programs: PYTHONPATH from
  conftest.py, or testing.CHILD_PATH where a test sets its own), while
  scikit-learn still imports for seqeval and JAX for the JAX backend."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ)
  if path == "CHILD_PATH":
    env["PYTHONPATH"] = testing.CHILD_PATH
  out = subprocess.run([sys.executable, "-c", _IMPORTS], cwd=testing.ROOT,
                       env=env, capture_output=True, text=True, timeout=300,
                       check=True).stdout.split()
  assert out == ["0", "1", "0", "1", "1"]
