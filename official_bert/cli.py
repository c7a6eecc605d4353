"""What every command-line program shares: how it fails and how it writes.

A program's bad input ends in one sentence naming the flag or file and the
fix, as the last line printed, with exit status 1: no usage dump, no
traceback. Programs raise `app.UsageError` (or `cli.Error`) with that
sentence and start with `cli.run(main)` instead of `app.run(main)`.

Files are written under a temporary name in the same directory, then renamed,
so a reader never sees half a file; they get the modes the umask gives, like
any file `open()` creates (a model server running as another user can read
them).
"""

import os
import re
import sys
import tempfile

from absl import app
from absl import flags

from official_bert import atomic_io
from official_bert import disk_full


class Error(Exception):
  """Bad input a user can fix: the message is the one sentence printed."""


def _program_name():
  name = os.path.basename(sys.argv[0]) if sys.argv else "official_bert"
  return name[:-3] if name.endswith(".py") else name


def fail(message):
  """Prints `message` as the last line, on stderr, and exits with status 1."""
  sys.stdout.flush()
  print(f"{_program_name()}: error: {message}", file=sys.stderr, flush=True)
  os._exit(1)  # pylint: disable=protected-access  # no atexit noise after it


# TensorFlow's start-up lines on a healthy machine. It prints them from C++ as
# it loads, before absl's logging is set up (TF_CPP_MIN_LOG_LEVEL cannot hide
# them), once for each of its two libraries.
STARTUP_NOISE = re.compile("|".join((
    r"^WARNING: All log messages before absl::InitializeLog\(\)",
    r"^[IW]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\] ",  # C++ INFO/WARNING
    r"^To enable the following instructions: .* rebuild TensorFlow",
)))
# ERROR-level, but what a machine without a GPU says: TensorFlow reports it
# right after saying it found no CUDA driver. Dropped only after that line.
NO_DRIVER = re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers")
CUINIT = re.compile(r"^E\d{4} .* cuda_platform\.cc:\d+\] failed call to "
                    r"cuInit: .*\(303\)$")


def startup_lines_shown(lines):
  """`lines` of TensorFlow's start-up output less its healthy-machine noise:
  any other line (a real error, a warning from Python) is kept."""
  no_driver = False
  for line in lines:
    no_driver = no_driver or bool(NO_DRIVER.search(line))
    if STARTUP_NOISE.match(line) or (no_driver and CUINIT.match(line)):
      continue
    yield line


def start_tensorflow():
  """Imports TensorFlow and finds its devices, showing what it prints then
  less `startup_lines_shown`'s noise. Programs call it before anything
  imports TensorFlow (after `cpu_allocator.use_bfc()`, which must come
  first); a no-op once TensorFlow is loaded.

  Its stderr goes to a temporary file meanwhile (no thread, no pipe to
  fill), written back line by line when the import ends or fails. Listing
  the physical devices is what probes CUDA; it leaves logical device
  configuration possible.
  """
  if "tensorflow" in sys.modules:
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf.config.list_physical_devices()
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = captured.read().decode("utf-8", "replace")
      sys.stderr.writelines(startup_lines_shown(text.splitlines(True)))
      sys.stderr.flush()


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(f"{str(e).rstrip('.')}; run with --help for the flags.")


def run(main):
  """`app.run(main)` where a UsageError or cli.Error is one sentence, and so
  is a write that failed (a full disk: disk_full.py), naming the flag that
  chose the path."""

  def guarded(argv):
    try:
      return main(argv)
    except (app.UsageError, Error) as e:
      fail(str(e))
    except disk_full.WriteFailed as e:
      fail(e.sentence(_flag_for(e.path)))
    except Exception as e:  # pylint: disable=broad-except
      if disk_full.reason(e) is None:
        raise
      failed = disk_full.from_error(e)
      disk_full.clean_up_after(failed)
      fail(failed.sentence(_flag_for(failed.path)))

  app.run(guarded, flags_parser=_parse_flags)


def _flag_for(path):
  """The flag whose value `path` is, or lies under (a directory), or
  extends (a shard "-00000-of-00004", a suffix): the output flag that chose
  it, or None."""
  best, best_length = None, 0
  path = os.path.abspath(path)
  for name, value in flags.FLAGS.flag_values_dict().items():
    if not isinstance(value, str) or not value or _remote(value):
      continue
    for part in value.split(","):
      part = os.path.abspath(part.strip()) if part.strip() else ""
      if (part and path.startswith(part) and len(part) > best_length and
          path[len(part):len(part) + 1] in ("", os.sep, "-", ".")):
        best, best_length = name, len(part)
  return best


def check_positive(flag_values, names):
  """Each flag of `names` (skipping those set to None) is above 0, else one
  sentence naming the first that is not."""
  for name in names:
    value = getattr(flag_values, name)
    if value is not None and value <= 0:
      raise Error(f"--{name} must be positive, got {value}.")


# atomic_open, atomic_write: official_bert/atomic_io.py (no absl there, so
# the model's config can write files the same way).
atomic_open = atomic_io.atomic_open
atomic_write = atomic_io.atomic_write

# ------------------------------------------------------------ path checks ----
# Each returns the path or raises Error with one sentence naming the flag.
# Cheap (no TensorFlow): call them first in main(). Local paths only; a
# path with "://" (gs://, ...) is left to the program's own reader.

def _remote(path):
  return "://" in str(path)


def blocked_by(path):
  """The directory above `path` that cannot be searched (so `path` looks
  missing although it may exist), or None."""
  if not path or _remote(path):
    return None
  parent = _existing_ancestor(path)
  if os.path.isdir(parent) and not os.access(parent, os.X_OK):
    return parent
  return None


def _existing_ancestor(path):
  """The nearest existing path above `path` (a directory, or a file in the
  way; at worst the root)."""
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  return parent


def missing(flag, path):
  """The Error for a --flag path that is not there: "does not exist", or
  the unreadable directory that hides it."""
  blocked = blocked_by(path)
  if blocked:
    return Error(f"--{flag}={path} cannot be reached: {blocked} is not "
                 "readable; check its permissions.")
  return Error(f"--{flag}={path} does not exist; check the path.")


def check_input_file(flag, path):
  """An existing, readable regular file for --flag."""
  if not path:
    raise Error(f"--{flag} is required.")
  if _remote(path):
    return path
  if os.path.isdir(path):
    raise Error(f"--{flag}={path} is a directory; pass a file.")
  if not os.path.exists(path):
    raise missing(flag, path)
  if not os.access(path, os.R_OK):
    raise Error(f"--{flag}={path} is not readable; check its permissions.")
  return path


def check_input_dir(flag, path):
  """An existing, readable directory for --flag."""
  if not path:
    raise Error(f"--{flag} is required.")
  if _remote(path):
    return path
  if os.path.exists(path) and not os.path.isdir(path):
    raise Error(f"--{flag}={path} is a file, not a directory; pass a "
                "directory.")
  if not os.path.exists(path):
    raise missing(flag, path)
  if not os.access(path, os.R_OK | os.X_OK):
    raise Error(f"--{flag}={path} is not readable; check its permissions.")
  return path


def _writable_parent(flag, path, what):
  """The nearest existing ancestor of `path` must be a writable directory."""
  parent = _existing_ancestor(path)
  if not os.path.isdir(parent):
    raise Error(f"--{flag}={path}: {parent} is a file, so the {what} cannot "
                "be created there; choose another path.")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise Error(f"--{flag}={path}: {parent} is not writable; choose a "
                f"{what} you can write to.")


def check_output_dir(flag, path, create=True):
  """A directory for --flag that can be written (created when `create`)."""
  if not path:
    raise Error(f"--{flag} is required.")
  if _remote(path):
    return path
  if os.path.exists(path):
    if not os.path.isdir(path):
      raise Error(f"--{flag}={path} is a file, not a directory; pass a "
                  "directory (it is created if missing).")
    if not os.access(path, os.W_OK | os.X_OK):
      raise Error(f"--{flag}={path} is not writable; choose a directory "
                  "you can write to.")
    return path
  _writable_parent(flag, path, "directory")
  if create:
    try:
      os.makedirs(path, exist_ok=True)
    except OSError as e:
      raise Error(f"--{flag}={path} cannot be created ({e.strerror}); choose "
                  "another directory.") from None
  return path


def check_output_file(flag, path):
  """A path for --flag where a file can be written (its directory created
  by the program): not a directory, parent writable."""
  if not path:
    raise Error(f"--{flag} is required.")
  if _remote(path):
    return path
  if os.path.isdir(path):
    raise Error(f"--{flag}={path} is a directory; pass a file path.")
  if os.path.exists(path) and not os.access(path, os.W_OK):
    raise Error(f"--{flag}={path} is not writable; check its permissions or "
                "choose another path.")
  _writable_parent(flag, path, "file")
  return path


def mostly_undecodable(flag, path, undecodable, total):
  """The sentence for --flag's text file when more than half of its `total`
  lines are not UTF-8 (a few are dropped, as the original does), else None."""
  if undecodable * 2 <= total:
    return None
  return (f"--{flag}={path}: {undecodable} of its {total} lines are not UTF-8 "
          "text; convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8), one "
          "sentence per line.")


# Bytes of a text file sniffed for binary content.
SNIFF_BYTES = 1 << 16


def binary_reason(data):
  """Why `data` (bytes) is not text, or None: NUL bytes, or more than a
  quarter of it undecodable as UTF-8 (a few bad bytes are dropped, as the
  original does)."""
  if b"\0" in data:
    return "holds NUL bytes"
  text = data.decode("utf-8", "replace")
  bad = text.count("\ufffd") - data.decode("utf-8", "ignore").count("\ufffd")
  if len(data) >= 64 and bad > len(data) // 4:
    return f"is mostly not UTF-8 text ({bad} of the first {len(data)} bytes)"
  return None


def check_text_file(flag, path, expected="UTF-8 text, one sentence per line"):
  """check_input_file, and its start must look like UTF-8 text."""
  check_input_file(flag, path)
  if _remote(path):
    return path
  with open(path, "rb") as f:
    reason = binary_reason(f.read(SNIFF_BYTES))
  if reason:
    raise Error(f"--{flag}={path} {reason}: it is not a text file; pass "
                f"{expected}.")
  return path
