"""A write that fails (a full disk, a quota, `ulimit -f`) as one sentence.

A writer wraps what it writes in `writing(path, what)`: when the block
raises an OSError, or one of TensorFlow's errors whose message says the disk
is full (SaveV2 and TFRecordWriter raise OutOfRangeError "...; File too
large", ResourceExhaustedError, UnknownError), the block's `clean_up()` runs
(temporary files, a half checkpoint) and `WriteFailed` is raised in its
place: what was being written, where, why, and what to do. `cli.run` prints
it as the program's last line (exit status 1, no traceback), naming the flag
that chose the path:

    with disk_full.writing(prefix, "the checkpoint",
                           clean_up=lambda: disk_full.remove_checkpoint(prefix)):
      manager.save(...)

    run_pretraining: error: cannot write the checkpoint /out/ckpt-4: the file
    size limit (ulimit -f) was reached (it needs about 1.2 MB); raise the
    limit or point --output_dir at another disk.

An error raised outside any `writing` block that still says the disk is full
(`reason(e)`) is translated by `cli.run` too (`from_error`), with the path its
message names. Standard library only (atomic_io uses it).
"""

import contextlib
import errno
import glob
import os
import re
import shutil

# errno -> (why, what to do before "or point --flag at another disk").
_FULL = {
    errno.ENOSPC: ("the disk is full", "free space on that disk"),
    errno.EDQUOT: ("the disk quota is used up", "free space within the quota"),
    errno.EFBIG: ("the file size limit (ulimit -f) was reached",
                  "raise the limit"),
}
# What TensorFlow's C++ file writers put in their messages for each errno.
_TF_TEXT = {"No space left": errno.ENOSPC, "quota": errno.EDQUOT,
            "Disk quota": errno.EDQUOT, "File too large": errno.EFBIG}
_OS_TEXT = {os.strerror(number): number for number in _FULL}
# The path in such a message: "<path>; File too large".
_TF_PATH = re.compile(r"(/[^\s;{}]+)(?:\.tempstate\d+)?; (?:File too large|"
                      r"No space left|Disk quota)")


def _tf_error(error):
  return type(error).__module__.startswith("tensorflow")


def _errno(error):
  """The disk-full errno that `error` (or what it was raised from) carries,
  or None."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in _FULL:
      return error.errno
    # TensorFlow's errors, and other libraries' (a Rust writer's) that
    # carry the C library's words.
    message = getattr(error, "message", None) or str(error)
    for text, number in (_TF_TEXT if _tf_error(error) else _OS_TEXT).items():
      if text in message:
        return number
    error = error.__cause__ or error.__context__
  return None


def reason(error):
  """Why `error` is a full disk ("the disk is full", ...), or None."""
  number = _errno(error)
  return _FULL[number][0] if number else None


class WriteFailed(Exception):
  """A write that failed: `sentence(flag)` says what, where, why and what
  to do; `str()` is the sentence without a flag."""

  def __init__(self, what, path, why, advice, needed=None):
    super().__init__(what, path, why, advice, needed)
    self.what, self.path, self.why = what, path, why
    self.advice, self.needed = advice, needed

  def sentence(self, flag=None):
    needed = f" (it needs about {_size(self.needed)})" if self.needed else ""
    where = f"point --{flag} at another disk" if flag else (
        "write to another disk")
    return (f"cannot write {self.what} {self.path}: {self.why}{needed}; "
            f"{self.advice} or {where}.")

  def __str__(self):
    return self.sentence()


def _size(n):
  for unit in ("bytes", "KB", "MB", "GB"):
    if n < 1000 or unit == "GB":
      return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
    n /= 1000
  return None  # unreachable


def _free(path):
  """', N MB free' for the disk holding `path`, or ''."""
  directory = os.path.dirname(os.path.abspath(path))
  while directory and not os.path.isdir(directory):
    directory = os.path.dirname(directory)
  try:
    stat = os.statvfs(directory)
  except OSError:
    return ""
  return f", {_size(stat.f_bavail * stat.f_frsize)} free"


def from_error(error, what="a file", path=None, needed=None):
  """`WriteFailed` for `error` (an OSError or a disk-full TensorFlow error)
  while writing `what` at `path` (else the path the error names), or None
  when `error` is neither."""
  number = _errno(error)
  if number is None and not isinstance(error, OSError):
    return None
  if path is None:
    path = getattr(error, "filename", None)
    match = _TF_PATH.search(getattr(error, "message", str(error)))
    if path is None and match:
      path = match.group(1)
    temp = re.match(r"(.*)_temp/[^/]*$", path or "")  # TensorFlow's checkpoint
    if temp:
      path, what = temp.group(1), "the checkpoint"
  if number is None:  # another OSError: its own words
    why, advice = (error.strerror or str(error)).rstrip("."), (
        "check the disk")
  else:
    why, advice = _FULL[number]
    if number == errno.ENOSPC:
      why += _free(path or ".")
  if callable(needed):
    try:
      needed = needed()
    except Exception:  # pylint: disable=broad-except  # only a hint
      needed = None
  return WriteFailed(what, path or "(unknown path)", why, advice, needed)


@contextlib.contextmanager
def writing(path, what, needed=None, clean_up=None, only_full=False):
  """Runs the block; an OSError or disk-full error in it calls `clean_up()`
  and becomes `WriteFailed` for `what` at `path` (with `only_full`, a
  disk-full error only: the block also reads). `needed`: the bytes the
  write takes, or a function returning them (called only on failure)."""
  try:
    yield
  except WriteFailed:
    if clean_up is not None:
      clean_up()
    raise
  except Exception as e:  # pylint: disable=broad-except
    failed = None if only_full and _errno(e) is None else from_error(
        e, what, path, needed)
    if failed is None:
      raise
    if clean_up is not None:
      clean_up()
    raise failed from None


def clean_up_after(failed):
  """Removes the temporary files of a `from_error` result written outside a
  `writing` block: a checkpoint's, when its path is one."""
  if failed.what == "the checkpoint":
    remove_checkpoint(failed.path)


def remove_checkpoint(prefix):
  """Removes what a failed write of checkpoint `prefix` left: TensorFlow's
  `<prefix>_temp/` directory, the `checkpoint.tmp*` of its index, and the
  prefix's own files unless the directory's `checkpoint` index names it
  (the write then got through, and only the clean-up after it failed)."""
  directory = os.path.dirname(prefix) or "."
  for path in glob.glob(glob.escape(prefix) + "_temp*"):
    shutil.rmtree(path, ignore_errors=True)
  for path in glob.glob(os.path.join(glob.escape(directory), "checkpoint.tmp*")):
    _remove(path)
  if _latest_named(directory) != os.path.basename(prefix):
    for pattern in (".index*", ".data-*"):
      for path in glob.glob(glob.escape(prefix) + pattern):
        _remove(path)


def _latest_named(directory):
  """The checkpoint the `checkpoint` index in `directory` calls latest."""
  try:
    with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
      match = re.search(r'^model_checkpoint_path: "(.*)"$', f.read(), re.M)
  except OSError:
    return None
  return os.path.basename(match.group(1)) if match else None


def _remove(path):
  try:
    os.remove(path)
  except OSError:
    pass
