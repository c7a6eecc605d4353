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
