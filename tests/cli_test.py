"""Tests for official_bert/cli.py (no TensorFlow): the one atomic write, and
the path checks (one sentence naming the flag, per case).

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



def _error(check, *args):
  with pytest.raises(cli.Error) as info:
    check(*args)
  message = str(info.value)
  assert "\n" not in message
  return message


def test_input_file_checks(tmp_path):
  good = tmp_path / "a.txt"
  good.write_text("x\n")
  assert cli.check_input_file("input_file", str(good)) == str(good)
  assert "--input_file is required" in _error(cli.check_input_file,
                                              "input_file", None)
  assert "does not exist" in _error(cli.check_input_file, "input_file",
                                    str(tmp_path / "missing"))
  # A directory is not "missing": the sentence says what it is.
  message = _error(cli.check_input_file, "corpus", str(tmp_path))
  assert message.startswith(f"--corpus={tmp_path} is a directory")


def test_input_dir_checks(tmp_path):
  (tmp_path / "f").write_text("x")
  assert cli.check_input_dir("d", str(tmp_path)) == str(tmp_path)
  assert "is a file, not a directory" in _error(cli.check_input_dir, "d",
                                                str(tmp_path / "f"))
  assert "does not exist" in _error(cli.check_input_dir, "d",
                                    str(tmp_path / "nope"))


def test_output_dir_checks(tmp_path):
  a_file = tmp_path / "f"
  a_file.write_text("x")
  assert "--output_dir=" in _error(cli.check_output_dir, "output_dir",
                                   str(a_file))
  assert "is a file, not a directory" in _error(
      cli.check_output_dir, "output_dir", str(a_file))
  # Below a file: the file is named.
  message = _error(cli.check_output_dir, "output_dir", str(a_file / "sub"))
  assert f"{a_file} is a file" in message
  created = tmp_path / "new" / "deeper"
  cli.check_output_dir("output_dir", str(created))
  assert created.is_dir()
  # umask modes, not a temporary directory's 0700.
  umask = os.umask(0)
  os.umask(umask)
  assert (created.stat().st_mode & 0o777) == 0o777 & ~umask


def test_output_file_checks(tmp_path):
  a_file = tmp_path / "f"
  a_file.write_text("x")
  assert "is a directory" in _error(cli.check_output_file, "output_file",
                                    str(tmp_path))
  assert f"{a_file} is a file" in _error(cli.check_output_file, "output_file",
                                         str(a_file / "out.txt"))
  assert cli.check_output_file("output_file", str(tmp_path / "new" / "o"))


# Unreadable and unwritable paths: tests/permissions_test.py (in a process
# without root's override, so they also run as root).


def test_text_file_check(tmp_path):
  text = tmp_path / "text.txt"
  # Latin-1 accents here and there are text (the bytes are dropped later).
  text.write_bytes("Plain sentence.\n".encode() * 50 + "café\n".encode("latin-1"))
  assert cli.check_text_file("input_file", str(text)) == str(text)
  assert "holds NUL bytes" in _error(cli.check_text_file, "input_file",
                                     "/bin/ls" if os.path.exists("/bin/ls")
                                     else __file__ + "c")
  utf16 = tmp_path / "utf16.txt"
  utf16.write_text("One sentence a line.\n" * 20, encoding="utf-16")
  assert "holds NUL bytes" in _error(cli.check_text_file, "corpus", str(utf16))
  noise = tmp_path / "noise.bin"
  noise.write_bytes(bytes(range(128, 256)) * 40)
  message = _error(cli.check_text_file, "corpus", str(noise))
  assert "is mostly not UTF-8 text" in message and "--corpus=" in message
