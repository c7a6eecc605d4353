"""Tests for official_bert/cli.py's one atomic write (no TensorFlow).

Bugs caught: a temporary file made by `tempfile` (mode 0600, so a model
server running as another user cannot read the output), a half-written
output left under the final name when writing fails, a temporary file left
behind, and a writer (BertConfig.to_json_file) that bypasses the function.
"""

import os
import stat

import pytest

from official_bert import cli
from tests import testing


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
  old = os.umask(request.param)
  yield request.param
  os.umask(old)


def _mode(path):
  return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_write_writes_the_text_with_umask_modes(tmp_path, umask):
  path = tmp_path / "out.txt"
  cli.atomic_write(str(path), "héllo\n")
  assert path.read_text(encoding="utf-8") == "héllo\n"
  assert _mode(path) == 0o666 & ~umask
  assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_open_failure_keeps_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / "out.txt"
  path.write_text("old\n")
  with pytest.raises(RuntimeError):
    with cli.atomic_open(str(path)) as f:
      f.write("half")
      f.flush()
      # Until the block ends the final name still holds the old content.
      assert path.read_text() == "old\n"
      raise RuntimeError("disk full")
  assert path.read_text() == "old\n"
  assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_open_binary(tmp_path, umask):
  path = tmp_path / "out.bin"
  with cli.atomic_open(str(path), "wb") as f:
    f.write(b"\x00\x01")
  assert path.read_bytes() == b"\x00\x01"
  assert _mode(path) == 0o666 & ~umask


def test_bert_config_is_written_with_umask_modes(tmp_path, umask):
  path = str(tmp_path / "bert_config.json")
  testing.tiny_config().to_json_file(path)
  assert _mode(path) == 0o666 & ~umask
  assert os.listdir(tmp_path) == ["bert_config.json"]
