"""SIGTERM as a request to checkpoint and stop, recorded from process start.

A preempted machine gets SIGTERM, then SIGKILL some seconds later. Python's
default action for SIGTERM ends the process at once, so a signal that arrives
while a job starts (importing TensorFlow, building the model, tracing the
first step) would kill a worker of a multi-worker job before the others can
agree to stop, and they would wait for it in the next collective. The
command-line programs call `install()` first thing in `main`, before
TensorFlow is imported; `Trainer` reads `requested()` at each loop boundary
(and before the first one) and calls `clear()` once it has stopped on it.

No TensorFlow here: this module loads before it.
"""

import signal
import sys

_requested = False


def _handler(signum, frame):  # pylint: disable=unused-argument
  global _requested
  _requested = True
  print("SIGTERM received: checkpointing and stopping at the next loop "
        "boundary.", file=sys.stderr, flush=True)


def install():
  """Records SIGTERM instead of dying on it (main thread only; else a no-op)."""
  try:
    signal.signal(signal.SIGTERM, _handler)
  except ValueError:  # not the main thread: signals cannot be handled here
    pass


def requested():
  """True once SIGTERM arrived and no `Trainer.train` has stopped on it yet."""
  return _requested


def clear():
  """Forgets a SIGTERM that a `Trainer.train` has acted on."""
  global _requested
  _requested = False
