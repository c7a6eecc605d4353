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
import re
import shutil

from official_bert import disk_full


@contextlib.contextmanager
def atomic_open(path, mode="w", what="the file"):
  """A file to write `path` through: a temporary name beside it, renamed to
  `path` when the block ends, deleted if it raises. Umask modes (not
  `tempfile`'s 0600). For outputs written piece by piece. A failed write
  (a full disk) raises disk_full.WriteFailed naming `what` and `path`."""
  directory = os.path.dirname(path) or "."
  prefix = f".{os.path.basename(path)}.tmp"
  remove_stale(directory, prefix)
  tmp = os.path.join(directory, f"{prefix}{os.getpid()}")
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


def remove_stale(directory, prefix):
  """Removes the `<prefix><pid>...` files and directories in `directory`
  whose process no longer runs: the temporary names of a write that was
  killed (SIGKILL cannot clean up), found by the rerun."""
  try:
    names = os.listdir(directory)
  except OSError:
    return
  for name in names:
    match = re.match(r"-?(\d+)", name[len(prefix):])
    if (not name.startswith(prefix) or not match or
        process_running(int(match[1]))):
      continue
    path = os.path.join(directory, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      try:
        os.remove(path)
      except OSError:
        pass


def process_running(pid):
  """Whether process `pid` runs on this host (another user's counts)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's
    return True
  return True


def atomic_write(path, text, what="the file"):
  """Writes `text` to `path` through a temporary name; umask modes."""
  with atomic_open(path, what=what) as f:
    f.write(text)
