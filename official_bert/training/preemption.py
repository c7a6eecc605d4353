"""SIGTERM as a request to checkpoint and stop, recorded from process start.

A preempted machine gets SIGTERM, then SIGKILL some seconds later. Python's
default action for SIGTERM ends the process at once, so a signal that arrives
while a job starts (importing TensorFlow, building the model, tracing the
first step) would kill a worker of a multi-worker job before the others can
agree to stop, and they would wait for it in the next collective. The
command-line programs call `install()` first thing in `main`, before
TensorFlow is imported.

A signal reaches one machine of a multi-worker job (a preempted VM): that
worker alone would start a checkpoint save the others never join, and hang.
So `Trainer` asks `WorkerAgreement.any_requested()` at each loop boundary (and
before the first one): the local flags are summed over all replicas of all
workers, and all of them save and stop at the same boundary. `consume()`
forgets the signal once training has stopped on it.

Training run from Python (a test, a notebook) gets the handler only while
`Trainer.train()` runs (`handled()`): the process's own SIGTERM handling is
back afterwards, and a SIGTERM that arrived meanwhile is raised again once the
checkpoint is saved, so it has its usual effect then (by default the process
ends, as TensorFlow's PreemptionCheckpointHandler exits after its save).

TensorFlow is imported only inside `WorkerAgreement`: this module loads
before it.
"""

import contextlib
import signal
import sys

_requested = False
_received = 0  # SIGTERMs handled so far: handled() re-raises the new ones


def _handler(signum, frame):  # pylint: disable=unused-argument
  global _requested, _received
  _requested = True
  _received += 1
  print("SIGTERM received: checkpointing and stopping at the next loop "
        "boundary.", file=sys.stderr, flush=True)


def install():
  """Records SIGTERM instead of dying on it (main thread only; else a no-op)."""
  try:
    signal.signal(signal.SIGTERM, _handler)
  except ValueError:  # not the main thread: signals cannot be handled here
    pass


@contextlib.contextmanager
def handled():
  """SIGTERM recorded instead of fatal inside the block (see the module
  docstring). When `install()` put the handler in place for the whole
  program, it stays so after the block; off the main thread this is a
  no-op."""
  if signal.getsignal(signal.SIGTERM) is _handler:
    # Installed by the program; put it back all the same: a multi-worker
    # strategy's set-up replaces the process's SIGTERM action below Python
    # (signal.getsignal still names this handler, and SIGTERM goes unseen).
    install()
    yield
    return
  try:
    previous = signal.signal(signal.SIGTERM, _handler)
  except ValueError:  # not the main thread: signals cannot be handled here
    yield
    return
  received = _received
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM,
                  signal.SIG_DFL if previous is None else previous)
    if _received != received:
      clear()  # nothing left pending for a later train()
      signal.raise_signal(signal.SIGTERM)


def requested():
  """True once SIGTERM arrived here and training has not stopped on it yet."""
  return _requested


def clear():
  """Forgets a SIGTERM that training has acted on."""
  global _requested
  _requested = False


class WorkerAgreement:
  """Whether any worker of `strategy` got SIGTERM (see the module docstring).

  Every worker must call `any_requested()` at the same step: with several
  replicas it is a collective (one small all-reduce).
  """

  def __init__(self, strategy):
    self.strategy = strategy
    self._flag_sum = None  # a tf.function, built on first use

  def any_requested(self):
    """True when any worker (this one included) got SIGTERM."""
    if self.strategy.num_replicas_in_sync == 1:
      return requested()
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if self._flag_sum is None:
      strategy = self.strategy

      @tf.function(autograph=False)
      def flag_sum(flag):
        def replica_fn(flag):
          # identity: a copy on this replica's device (the reduction needs one)
          return tf.distribute.get_replica_context().all_reduce(
              tf.distribute.ReduceOp.SUM, tf.identity(flag))
        return strategy.experimental_local_results(
            strategy.run(replica_fn, args=(flag,)))[0]
      self._flag_sum = flag_sum
    flag = tf.constant(1.0 if requested() else 0.0)
    return float(self._flag_sum(flag)) > 0

  def consume(self):
    """Forgets the SIGTERM training stopped on; says where it came from
    ("" here, " (signal on another worker)" otherwise)."""
    here = requested()
    clear()
    return "" if here else " (signal on another worker)"
