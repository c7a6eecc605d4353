"""Writing a file whole: a temporary name beside it, then a rename.

A reader never sees half a file; the file gets the modes the umask gives,
like any file `open()` creates (a model server running as another user can
read it). Standard library only, so the model's config can use it without
the programs' absl (`cli` re-exports both functions).

    with atomic_io.atomic_open("out.jsonl") as f:  # written piece by piece
      ...
    atomic_io.atomic_write("bert_config.json", text)
"""

import contextlib
import os

from official_bert import disk_full


@contextlib.contextmanager
def atomic_open(path, mode="w", what="the file"):
  """A file to write `path` through: a temporary name beside it, renamed to
  `path` when the block ends, deleted if it raises. Umask modes (not
  `tempfile`'s 0600). For outputs written piece by piece. A failed write
  (a full disk) raises disk_full.WriteFailed naming `what` and `path`."""
  directory = os.path.dirname(path) or "."
  tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}")
  try:
    with disk_full.writing(path, what):
      f = open(tmp, mode, encoding=None if "b" in mode else "utf-8")  # pylint: disable=consider-using-with
    try:
      # The caller's block may read files too: only a full disk there is
      # this write's failure.
      with disk_full.writing(path, what, only_full=True):
        yield f
      with disk_full.writing(path, what):
        f.close()  # writes what is buffered
    finally:
      if not f.closed:  # its error is the one raised, not close()'s retry
        try:
          f.close()
        except OSError:
          pass
    with disk_full.writing(path, what):
      os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def atomic_write(path, text, what="the file"):
  """Writes `text` to `path` through a temporary name; umask modes."""
  with atomic_open(path, what=what) as f:
    f.write(text)
