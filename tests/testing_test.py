"""The test set-up itself: tests/testing.py's require_shared_data (skip
locally, fail under CI=true) and pytest.ini's limit on a hung test.

Bugs caught: CI passing green because every test needing ../shared/data
skipped (the data missing from the CI checkout); a hung test holding the
whole run until CI's limit (pytest-timeout missing from requirements-test.txt
or its settings from pytest.ini)."""

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


def test_a_hung_test_fails_with_its_stacks_printed(pytestconfig):
  assert pytestconfig.pluginmanager.hasplugin("timeout")
  assert float(pytestconfig.getini("timeout")) == 600
  assert pytestconfig.getini("timeout_method") == "thread"  # ends C++ waits too
  assert float(pytestconfig.getini("faulthandler_timeout")) == 540
