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

import contextlib
import os
import sys

from absl import app
from absl import flags


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


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(f"{e}; run with --help for the flags.")


def run(main):
  """`app.run(main)` where a UsageError or cli.Error is one sentence."""

  def guarded(argv):
    try:
      return main(argv)
    except (app.UsageError, Error) as e:
      fail(str(e))

  app.run(guarded, flags_parser=_parse_flags)


@contextlib.contextmanager
def atomic_open(path, mode="w"):
  """A file to write `path` through: a temporary name beside it, renamed to
  `path` when the block ends, deleted if it raises. Umask modes (not
  `tempfile`'s 0600). For outputs written piece by piece."""
  directory = os.path.dirname(path) or "."
  tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}")
  try:
    with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
      yield f
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def atomic_write(path, text):
  """Writes `text` to `path` through a temporary name; umask modes."""
  with atomic_open(path) as f:
    f.write(text)
