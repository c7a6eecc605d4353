"""tests/testing.py's require_shared_data: skip locally, fail under CI=true.

Bug caught: CI passing green because every test needing ../shared/data
skipped (the data missing from the CI checkout)."""

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
