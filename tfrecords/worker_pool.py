"""The data job's worker processes: a spawn pool that says which worker died.

`concurrent.futures.ProcessPoolExecutor` (not `multiprocessing.Pool`, which
waits forever for a result whose worker the OOM killer took) over a spawn
context whose processes

  * start with the parent's `__main__` hidden: a spawned worker re-imports
    the parent's `__main__` module, and when that is a user's script that
    imports TensorFlow every worker would pay its ~0.7 GB and seconds of
    import (the tasks are functions of tfrecords.instances, found by their
    module name). Processes are spawned on demand (on `submit`, also to
    replace one), so the hiding wraps each start, not just the pool's
    creation;
  * end when the process that started them is gone (SIGKILLed, say): none
    is left running for nothing, holding its memory;
  * are remembered, so a broken pool can be told apart by exit status
    (`death()`: "pid 1234 was killed by SIGKILL"), and so a dead worker is
    seen by the caller itself (`result()`): CPython's executor finds it only
    when its own thread is free, and that thread waits forever for the rest
    of a result whose sender was killed while sending it (CPython 3.11, a
    large result: the OOM killer's SIGKILL mid-send hung the data job).

This module imports nothing heavy: a spawned worker unpickles its Process
object, so it imports this module before anything else.
"""

import concurrent.futures
import concurrent.futures.process
import contextlib
import multiprocessing.context
import os
import signal
import sys
import threading
import time

BrokenPool = concurrent.futures.process.BrokenProcessPool


@contextlib.contextmanager
def _main_hidden():
  """`__main__` without `__file__`/`__spec__`: spawn then imports no script."""
  main = sys.modules["__main__"]
  saved = {k: main.__dict__[k] for k in ("__file__", "__spec__")
           if k in main.__dict__}
  try:
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    yield
  finally:
    main.__dict__.pop("__spec__", None)
    main.__dict__.update(saved)


class _Process(multiprocessing.context.SpawnProcess):
  """A spawned process that starts with `__main__` hidden (module level:
  the child unpickles it by name)."""

  def start(self):
    with _main_hidden():
      super().start()


class _Context(multiprocessing.context.SpawnContext):
  """The spawn context, whose processes are `_Process`es it remembers."""

  def __init__(self):
    super().__init__()
    self.started = []

  def Process(self, *args, **kwargs):  # pylint: disable=invalid-name
    process = _Process(*args, **kwargs)
    self.started.append(process)
    return process


def _watch_parent(parent, poll_seconds=0.5):
  """In a worker: exits as soon as `parent` is no longer its parent."""
  while os.getppid() == parent:
    time.sleep(poll_seconds)
  os._exit(1)  # pylint: disable=protected-access  # nothing of ours to flush


def _start_worker(parent, initializer, initargs):
  """A worker's first step: the parent watch, then the caller's
  initializer."""
  threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                   name="watch_parent").start()
  if initializer is not None:
    initializer(*initargs)


class Pool:
  """`num_workers` spawned processes, each running `initializer(*initargs)`
  first; started now, so their start-up overlaps the caller's own imports.

  Use `submit(fn, *args)` (a Future), then `close()`; after a `BrokenPool`
  error from a Future, `death()` describes the worker that died.
  """

  def __init__(self, num_workers, initializer=None, initargs=()):
    self.num_workers = num_workers
    self._context = _Context()
    self._executor = concurrent.futures.ProcessPoolExecutor(
        num_workers, mp_context=self._context, initializer=_start_worker,
        initargs=(os.getpid(), initializer, initargs))
    # Each submit spawns a process while none is idle: start them all.
    for _ in range(num_workers):
      self._executor.submit(os.getpid)

  def submit(self, fn, *args):
    return self._executor.submit(fn, *args)

  def result(self, future, poll_seconds=0.5):
    """`future.result()`, or BrokenPool as soon as a worker has died."""
    while True:
      try:
        return future.result(timeout=poll_seconds)
      except concurrent.futures.TimeoutError:
        if any(p.exitcode is not None for p in self._context.started):
          raise BrokenPool("a worker process died") from None

  def death(self):
    """Which worker died and how, e.g. "process 1234 was killed by SIGKILL".

    The pool SIGTERMs the other workers once one died, so a SIGTERM is
    named only when nothing else is."""
    # The pool's own thread may be reaping the dead one right now (its
    # exit code is then unknown for a moment): look again for up to 2 s.
    for _ in range(40):
      dead = [p for p in self._context.started if p.exitcode]  # polls
      if any(p.exitcode != -signal.SIGTERM for p in dead):
        break
      time.sleep(0.05)
    dead.sort(key=lambda p: p.exitcode == -signal.SIGTERM)
    for process in dead[:1]:
      code = process.exitcode
      if code < 0:
        try:
          how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
          how = f"was killed by signal {-code}"
      else:
        how = f"exited with status {code}"
      return f"process {process.pid} {how}"
    return "process exited abruptly"

  def close(self, kill=False):
    """Stops the workers (at once when `kill`) and frees the pool's
    semaphores, so a program that exits right after prints no resource
    tracker warning after its last line."""
    if kill:
      for process in self._context.started:
        if process.exitcode is None:
          process.kill()
      for process in self._context.started:
        process.join()
      # With every worker gone, this process holds the last writing end of
      # the results pipe: closing it ends, with EOF, the executor thread's
      # wait for a result cut off mid-message, so shutdown can join it.
      self._executor._result_queue._writer.close()  # pylint: disable=protected-access
    self._executor.shutdown(wait=True, cancel_futures=True)
    for process in self._context.started:
      process.join()
    self._executor = None
