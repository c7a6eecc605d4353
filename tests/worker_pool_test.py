"""tfrecords/worker_pool.py: a worker that dies is reported, never waited on."""

import gc
import multiprocessing.queues
import os
import signal
import struct
import subprocess
import sys
import time

import pytest

from tests import testing
from tfrecords import worker_pool


def _die_mid_result():
  """In a worker: starts sending a 1 MB result and is SIGKILLed after its
  first bytes, as the OOM killer can stop a worker sending a large window."""
  results = [q for q in gc.get_objects()
             if isinstance(q, multiprocessing.queues.SimpleQueue)]
  assert len(results) == 1, results  # the executor's results pipe
  # multiprocessing.Connection's framing: a 4-byte length, then the bytes.
  os.write(results[0]._writer.fileno(),  # pylint: disable=protected-access
           struct.pack("!i", 1 << 20) + b"x" * 100)
  os.kill(os.getpid(), signal.SIGKILL)


def _die():
  os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("task", [_die, _die_mid_result])
def test_a_dead_worker_is_reported_and_the_pool_closes(task):
  """Without the pool's own check the mid-result death hangs (CPython
  3.11's executor thread waits for the rest of the message forever): the
  pool must raise BrokenPool, name the death and close within seconds."""
  def hung(signum, frame):
    del signum, frame
    raise TimeoutError("the pool waited 60 s for a dead worker")

  pool = worker_pool.Pool(2)
  executor = pool._executor  # pylint: disable=protected-access
  thread, writer = executor._executor_manager_thread, executor._result_queue._writer  # pylint: disable=protected-access
  previous = signal.signal(signal.SIGALRM, hung)
  signal.alarm(60)
  try:
    future = pool.submit(task)
    with pytest.raises(worker_pool.BrokenPool):
      pool.result(future, poll_seconds=0.2)
    assert pool.death().endswith("was killed by SIGKILL"), pool.death()
    pool.close(kill=True)
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    if thread.is_alive():
      # Failed: let the test worker exit (it joins the executor's thread).
      for process in pool._context.started:  # pylint: disable=protected-access
        process.kill()
      writer.close()
  assert all(p.exitcode is not None for p in pool._context.started)  # pylint: disable=protected-access


def test_results_come_back_in_order_of_their_futures():
  pool = worker_pool.Pool(2)
  try:
    futures = [pool.submit(pow, 2, n) for n in range(5)]
    assert [pool.result(f) for f in futures] == [1, 2, 4, 8, 16]
  finally:
    pool.close()


def test_workers_end_when_their_parent_is_killed():
  """A data job SIGKILLed (by a user, by the OOM killer) leaves no worker
  running: each watches the process that started it."""
  code = ("import os, sys\n"
          "from tfrecords import worker_pool\n"
          "pool = worker_pool.Pool(2)\n"
          "pool.result(pool.submit(os.getpid))\n"
          "print(*[p.pid for p in pool._context.started], flush=True)\n"
          "sys.stdin.read()\n")
  proc = subprocess.Popen(
      [sys.executable, "-c", code], cwd=testing.ROOT, stdin=subprocess.PIPE,
      stdout=subprocess.PIPE, text=True)
  workers = set()
  try:
    workers = {int(pid) for pid in proc.stdout.readline().split()}
    assert len(workers) == 2 and proc.pid not in workers, workers
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.time() + 30
    while (time.time() < deadline and
           any(testing.process_running(p) for p in workers)):
      time.sleep(0.1)
    assert not [p for p in workers if testing.process_running(p)]
  finally:
    proc.kill()
    for pid in workers:  # left running (the test failed): they hold stdout
      if testing.process_running(pid):
        os.kill(pid, signal.SIGKILL)
    proc.communicate()

