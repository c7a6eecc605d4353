"""Tests for official_bert/cli.py (no TensorFlow in this process): the one
atomic write, the path checks (one sentence naming the flag, per case), and
TensorFlow's start-up lines kept out of what a program prints.

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


# TensorFlow's start-up output on a machine without a GPU, as 2.21 prints it.
_STARTUP = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795620730.331912   10022 port.cc:153] oneDNN custom operations are on. You may see slightly different numerical results.
I0000 00:00:1795620730.332289   10022 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
I0000 00:00:1795620730.374237   10022 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.
E0000 00:00:1795620731.258145   10022 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
"""


def test_startup_lines_shown_drops_only_tensorflows_healthy_start_up():
  assert not list(cli.startup_lines_shown(_STARTUP.splitlines(True)))
  real = ["E0000 00:00:1.0  1 cuda_platform.cc:52] failed call to cuInit: "
          "INTERNAL: CUDA error: UNKNOWN ERROR (303)\n",
          "E0000 00:00:1.0  1 some_kernel.cc:9] something real broke\n",
          "Traceback (most recent call last):\n"]
  # The cuInit failure is only noise after TensorFlow said it found no CUDA
  # driver (a machine with a GPU and a broken driver must show it).
  assert list(cli.startup_lines_shown(real)) == real
  assert list(cli.startup_lines_shown(_STARTUP.splitlines(True) + real[1:])) \
      == real[1:]


def test_start_tensorflow_prints_no_start_up_block():
  """A program that starts TensorFlow through cli.start_tensorflow shows none
  of its start-up lines (TensorFlow prints them twice, before absl logging
  is set up, whatever TF_CPP_MIN_LOG_LEVEL says), but what follows."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ("import sys\nfrom official_bert import cli\ncli.start_tensorflow()\n"
          "import tensorflow as tf\nprint('devices', len(tf.config.list_"
          "physical_devices('CPU')), file=sys.stderr)\n")
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  env["PYTHONPATH"] = testing.CHILD_PATH
  proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=testing.ROOT,
                        capture_output=True, text=True, timeout=300,
                        check=True)
  assert proc.stderr.splitlines() == ["devices 1"], proc.stderr[-3000:]


def test_programs_define_and_check_their_flags_before_tensorflow_loads():
  """Importing a program (its modules, what defines and checks its flags)
  loads no TensorFlow: --help and bad flags answer at once, and settings
  made before TensorFlow starts (the allocator, oneDNN) still take. One
  fresh interpreter imports them all."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  programs = ["official_bert.run_classifier", "official_bert.run_ner",
              "official_bert.run_squad", "official_bert.run_embedding",
              "official_bert.run_pretraining", "official_bert.finetuning_flags"]
  code = ("import importlib, sys\n"
          f"for name in {programs!r}:\n"
          "  importlib.import_module(name)\n"
          "  if 'tensorflow' in sys.modules:\n"
          "    print(name)\n"
          "    break\n")
  proc = subprocess.run([sys.executable, "-c", code], cwd=testing.ROOT,
                        capture_output=True, text=True, timeout=120,
                        check=True)
  assert proc.stdout == "", f"{proc.stdout.strip()} imports TensorFlow"
