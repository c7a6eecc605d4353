"""Helpers shared by the tests: tiny configs with all-different sizes (from
tools/tiny_fixtures.py), data paths, running programs in the test process."""

import os
import subprocess
import sys

import pytest

from tools import corpus as _corpus
from tools import tiny_fixtures as _fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The start-up every test process gets (sitecustomize.py: see its doc), and
# the PYTHONPATH of a program run by a test that sets its own: the repo and it.
CHILD_SITE = os.path.join(ROOT, "tests", "child_site")
CHILD_PATH = os.pathsep.join([ROOT, CHILD_SITE])
TESTDATA = _fixtures.TESTDATA  # tests/testdata
SHARED_DATA = _fixtures.SHARED_DATA  # ../shared/data
CORPUS = _corpus.PYDOCS  # SHARED_DATA/pydocs_corpus.txt
corpus_documents = _corpus.documents  # (path=CORPUS) -> [[line, ...], ...]
VOCAB = _fixtures.VOCAB  # SHARED_DATA/bert_uncased_vocab.txt

# Sizes that are all different, so a swapped axis cannot pass by accident
# (tools/tiny_fixtures.py, which benchmarks/fault_table.py builds with too).
BATCH, SEQ, VOCAB_SIZE, HIDDEN, HEADS, INTERMEDIATE, LAYERS = (
    _fixtures.BATCH, _fixtures.SEQ, _fixtures.VOCAB_SIZE, _fixtures.HIDDEN,
    _fixtures.HEADS, _fixtures.INTERMEDIATE, _fixtures.LAYERS)
tiny_config = _fixtures.tiny_config  # (**overrides) -> BertConfig


def random_inputs(batch=BATCH, seq=SEQ, vocab=VOCAB_SIZE, seed=0,
                  lengths=None):
  """Encoder inputs with padding and two segments, as numpy int32."""
  import numpy as np
  rng = np.random.default_rng(seed)
  if lengths is None:
    lengths = [seq] + [max(2, seq - 2 - i) for i in range(batch - 1)]
  mask = np.zeros((batch, seq), np.int32)
  type_ids = np.zeros((batch, seq), np.int32)
  for b, n in enumerate(lengths):
    mask[b, :n] = 1
    type_ids[b, n // 2:n] = 1
  ids = rng.integers(1, vocab, size=(batch, seq)).astype(np.int32) * mask
  return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": type_ids}


def original_adam_weight_decay(params, grads_per_step, rates, decayed,
                               weight_decay=0.01):
  """google-research/bert's AdamWeightDecayOptimizer.apply_gradients,
  transcribed from its published source into numpy: no bias correction,
  epsilon 1e-6 outside the square root, decay added to the update."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  params = {k: v.astype(np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in params.items()}
  v = {k: np.zeros_like(p) for k, p in params.items()}
  history = []
  for grads, lr in zip(grads_per_step, rates):
    for name, param in params.items():
      grad = grads[name].astype(np.float64)
      m[name] = 0.9 * m[name] + (1.0 - 0.9) * grad
      v[name] = 0.999 * v[name] + (1.0 - 0.999) * np.square(grad)
      update = m[name] / (np.sqrt(v[name]) + 1e-6)
      if name in decayed:
        update += weight_decay * param
      params[name] = param - lr * update
    history.append({k: p.copy() for k, p in params.items()})
  return history


def assert_pooler_kept_others_trained(before_prefix, after_prefix):
  """The encoder's pooler is in both training checkpoints and unchanged
  between them (a span or token head gives it no gradient: no update, no
  weight decay), while the other model weights changed."""
  import numpy as np
  import tensorflow as tf
  def weights(prefix):
    return {name: tf.train.load_variable(prefix, name)
            for name, _ in tf.train.list_variables(prefix)
            if name.startswith("model/")}
  before, after = weights(before_prefix), weights(after_prefix)
  assert set(before) == set(after)
  pooler = [n for n in before if n.startswith("model/encoder/pooler/")]
  assert len(pooler) == 2, sorted(before)  # kernel and bias
  for name in pooler:
    np.testing.assert_array_equal(before[name], after[name], err_msg=name)
  changed = [n for n in before if n not in pooler and
             not np.array_equal(before[n], after[n])]
  assert len(changed) > len(before) // 2, changed


def assert_one_sentence_last(status, lines, program, expected):
  """The bad-input contract of a program's run: exit status 1, no
  traceback, and the last non-blank line is `<program>: error: ...`
  holding `expected`. `lines` are its output lines (stdout and stderr
  merged, blank ones dropped)."""
  output = "\n".join(lines)
  assert status == 1, output[-3000:]
  assert "Traceback" not in output, output[-3000:]
  assert lines[-1].startswith(f"{program}: error: "), output[-3000:]
  assert expected in lines[-1], lines[-1]


def refused_input(module, argv):
  """Runs `python -m <module> <argv>` in this process (run_program),
  expecting it to refuse its input as `assert_one_sentence_last` says;
  returns that last line."""
  proc = run_program(module, argv, check=False, merge_stderr=True)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  assert_one_sentence_last(proc.returncode, lines, module.split(".")[-1], "")
  return lines[-1]


def _under_ci():
  """Whether the run is CI's (CI=true): what a test needs must be there."""
  return os.environ.get("CI", "").lower() == "true"


def require_shared_data():
  """Skip (with the reason) when ../shared/data is not beside the checkout;
  under CI=true fail instead, so CI cannot pass by skipping these tests."""
  if not (os.path.exists(CORPUS) and os.path.exists(VOCAB)):
    message = f"shared data not found at {SHARED_DATA}"
    if _under_ci():
      pytest.fail(f"{message} (CI=true: tests needing it must run)")
    pytest.skip(message)


def require(module, reason=None):
  """The module `module` (a peer library of requirements-test.txt: torch,
  transformers...), imported, for the tests that compare against it. When
  it cannot be imported: skip, as pytest.importorskip (with `reason` when
  given); under CI=true fail instead, naming the package, so CI cannot
  pass by skipping these tests. At a module's top it skips or fails the
  whole file."""
  __tracebackhide__ = True  # pytest reports the caller's line
  if not _under_ci():
    return pytest.importorskip(module, reason=reason)
  import importlib  # pylint: disable=g-import-not-at-top
  try:
    return importlib.import_module(module)
  except ImportError as e:
    error = e
  package = module.split(".")[0].replace("_", "-")
  pytest.fail(f"{module} cannot be imported ({error}): under CI=true the "
              f"tests needing it must run; install the {package} package "
              f"with requirements-test.txt (pip install -r "
              f"requirements-test.txt)", pytrace=False)


def _program_flags_removed():
  """Removes every flag from the global FlagValues but those every absl
  program has (absl.app's and absl.logging's): a program's `__main__`
  block defines its own there, as in a fresh process. Returns the removed
  Flag objects by name, to put back."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  fv = flags.FLAGS
  keep = {flag.name for module, module_flags in
          fv.flags_by_module_dict().items()
          if module in ("absl.app", "absl.logging", "absl.flags")
          for flag in module_flags}
  removed = {name: fv[name] for name in list(fv)
             if name not in keep and fv[name].name == name}
  for name in list(fv):
    if name not in keep:
      delattr(fv, name)
  return removed


def _restore_flags(removed, was_parsed):
  from absl import flags  # pylint: disable=g-import-not-at-top
  _program_flags_removed()
  for name, flag in removed.items():
    flags.FLAGS[name] = flag
  if was_parsed:
    flags.FLAGS.mark_as_parsed()


class _ProgramExit(BaseException):
  """cli.fail inside run_program: the program's one sentence was printed."""


def check_program_flags(module, argv):
  """Parses `argv` as `python -m <module> <argv>` would, without running the
  program: its own flag definitions (absl, defined by its `__main__` block
  as in run_program; or its argparse `parse_args`) must accept every flag
  and value. Returns the run_program result of the parse: status 0, or 1
  with the program's one sentence."""
  import importlib  # pylint: disable=g-import-not-at-top
  program = importlib.import_module(module)
  if hasattr(program, "parse_args"):  # argparse (squad_evaluate)
    return run_program(module, argv, check=False, merge_stderr=True,
                       main=lambda: program.parse_args(sys.argv[1:]))
  return run_program(module, argv, check=False, merge_stderr=True,
                     parse_only=True)


def _fresh_keras_state():
  """keras.backend.clear_session(free_memory=False) without the eager
  context's clear_kernel_cache(), which it also calls under TensorFlow.

  Keras's state (its layer-name counters, its settings) starts afresh, as
  in a new process. The kernel cache is not Keras's: it holds every
  function TensorFlow has instantiated in this worker, and after a clear
  each one still in use (a fixture's loaded export, a model's traced
  step) is optimized again on its next call: ~0.2 s per signature
  (measured: reranker_test's retrieve-then-rerank block, 6 calls after
  the bad-input runs, 1.2 s -> 0.02 s). Without gc.collect(): a full
  collection of a test worker's heap took ~0.2 s each time, twice per run
  (10 runs 12.4 -> 8.1 s of CPU); Python's own collector frees the run's
  cycles as it goes."""
  import keras  # pylint: disable=g-import-not-at-top
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  eager = context.context()
  eager.clear_kernel_cache = lambda: None  # this instance's, for the call
  try:
    keras.backend.clear_session(free_memory=False)
  finally:
    del eager.clear_kernel_cache  # the class's method again


def run_program(module, argv=(), env=None, check=True, merge_stderr=False,
                cwd=ROOT, parse_only=False, main=None):
  """Runs `python -m <module> <argv>` in this process, as its `__main__`
  (runpy): the program defines its flags afresh, parses `argv` and runs
  `main` as on a command line. Returns a subprocess.CompletedProcess with
  the exit status and what the program printed from Python (stdout, stderr,
  what the logging handlers of absl and TensorFlow wrote); a traceback is
  printed to its stderr as Python would, and is status 1. What C++ writes
  to the file descriptors (TensorFlow's start-up lines) is not captured:
  the tests of that output run processes.

  For what the process itself decides, use `run_cli` (a real process):
  start-up (imports, TensorFlow's settings made before it starts: oneDNN,
  the CPU allocator, logical devices, another Keras backend), signals,
  exit codes set by os._exit. `cli.fail` (which ends a process with
  os._exit) ends only the run here; `env` is set, and `cwd` is the working
  directory, for the run's duration. With `parse_only`, `cli.run` and
  `app.run` only parse the flags (check_program_flags); `main`, when given,
  runs instead of the module."""
  import contextlib  # pylint: disable=g-import-not-at-top
  import io  # pylint: disable=g-import-not-at-top
  import logging  # pylint: disable=g-import-not-at-top
  import random  # pylint: disable=g-import-not-at-top
  import runpy  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  import traceback  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  from official_bert.training import preemption  # pylint: disable=g-import-not-at-top

  argv = [str(a) for a in argv]
  out = io.StringIO()
  err = out if merge_stderr else io.StringIO()

  def fail(message):
    sys.stdout.flush()
    print(f"{cli._program_name()}: error: {message}", file=sys.stderr)  # pylint: disable=protected-access
    raise _ProgramExit(1)

  saved_env = dict(os.environ)
  os.environ.update(env or {})
  saved_argv, saved_cwd = list(sys.argv), os.getcwd()
  saved_fail, saved_sigterm = cli.fail, signal.getsignal(signal.SIGTERM)
  saved_run, saved_app_run = cli.run, app.run
  # Every logging handler that writes to a stream (absl's, TensorFlow's)
  # writes to the run's stderr meanwhile, as a process's would.
  loggers = [logging.getLogger()] + [
      logger for logger in logging.Logger.manager.loggerDict.values()
      if isinstance(logger, logging.Logger)]  # not the placeholders
  handlers = [h for logger in loggers for h in logger.handlers
              if type(h) is logging.StreamHandler or  # pylint: disable=unidiomatic-typecheck
              isinstance(h, absl_logging.PythonHandler)]
  handlers.append(absl_logging.get_absl_handler().python_handler)
  saved_streams = [(h, h.stream) for h in set(handlers)]
  saved_policy = keras.mixed_precision.global_policy()
  saved_random = random.getstate(), np.random.get_state()
  was_parsed = flags.FLAGS.is_parsed()
  removed = _program_flags_removed()
  # Keras's state (layer names) afresh, as in a new process.
  _fresh_keras_state()
  status = 0
  try:
    cli.fail = fail
    if parse_only:
      cli.run = app.run = lambda *args, **kwargs: cli._parse_flags(sys.argv)  # pylint: disable=protected-access
    for h, _ in saved_streams:
      h.stream = err
    os.chdir(cwd)
    sys.argv[:] = [module] + argv  # runpy sets argv[0] to the module's file
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        with warnings.catch_warnings():
          # The module is imported already (by a test, or an earlier run):
          # runpy warns, and runs it afresh as __main__ all the same.
          warnings.filterwarnings("ignore", "'.*' found in sys.modules",
                                  RuntimeWarning)
          if main:
            main()
          else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
      except _ProgramExit as e:
        status = e.args[0]
      except SystemExit as e:
        status = (e.code if isinstance(e.code, int) else
                  0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
          print(e.code, file=sys.stderr)
      except BaseException:  # pylint: disable=broad-except
        traceback.print_exc(file=sys.stderr)
        status = 1
  finally:
    cli.fail, cli.run, app.run = saved_fail, saved_run, saved_app_run
    for h, stream in saved_streams:
      h.stream = stream
    signal.signal(signal.SIGTERM, saved_sigterm)
    preemption.clear()
    os.chdir(saved_cwd)
    sys.argv[:] = saved_argv
    os.environ.clear()
    os.environ.update(saved_env)
    _restore_flags(removed, was_parsed)
    _fresh_keras_state()
    # What a run sets for its process: the precision policy, the seeds.
    keras.mixed_precision.set_global_policy(saved_policy)
    random.setstate(saved_random[0])
    np.random.set_state(saved_random[1])
  proc = subprocess.CompletedProcess(
      ["-m", module] + argv, status, out.getvalue(),
      "" if merge_stderr else err.getvalue())
  if check and status != 0:
    raise AssertionError(
        f"program failed ({status}): {module} {' '.join(argv)}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n"
        f"{proc.stderr[-4000:]}")
  return proc


def _program_module(args):
  """The module that `python <args>` runs as `__main__`, and its argv; None
  for other command lines (`-c`, `-X ...`)."""
  args = [str(a) for a in args]
  if len(args) >= 2 and args[0] == "-m":
    return args[1], args[2:]
  if args and args[0].endswith(".py") and not args[0].startswith("-"):
    path = os.path.relpath(os.path.abspath(os.path.join(ROOT, args[0])), ROOT)
    if not path.startswith(".."):
      return path[:-3].replace(os.sep, "."), args[1:]
  return None


def run_cli(args, timeout=600, env=None, check=True, merge_stderr=False,
            process=False):
  """Runs `python <args>` from the repo root: a program (`-m module` or a
  file of the repo) in this process (`run_program`), unless `process` or
  `env` asks for a real subprocess (what is set before TensorFlow starts
  needs one), which runs anything else too.

  With `merge_stderr`, stderr goes into `stdout` in the order printed (to
  check what a user sees last)."""
  program = None if (process or env) else _program_module(args)
  if program:
    return run_program(program[0], program[1], check=check,
                       merge_stderr=merge_stderr)
  return run_process(args, timeout=timeout, env=env, check=check,
                     merge_stderr=merge_stderr)


def run_process(args, timeout=600, env=None, check=True, merge_stderr=False):
  """Runs `python <args>` from the repo root as a real subprocess."""
  full_env = dict(os.environ)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
  if env:
    full_env.update(env)
  proc = subprocess.run([sys.executable] + list(args), cwd=ROOT, env=full_env,
                        stdout=subprocess.PIPE,
                        stderr=(subprocess.STDOUT if merge_stderr
                                else subprocess.PIPE),
                        text=True, timeout=timeout)
  if check and proc.returncode != 0:
    raise AssertionError(
        f"command failed ({proc.returncode}): {' '.join(args)}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}")
  return proc


def original_feature_spec(seq, preds):
  """google-research/bert run_pretraining.py's reader spec, written out
  independently of official_bert.data.features (so tests compare against it)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return {
      "input_ids": tf.io.FixedLenFeature([seq], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq], tf.int64),
      "masked_lm_positions": tf.io.FixedLenFeature([preds], tf.int64),
      "masked_lm_ids": tf.io.FixedLenFeature([preds], tf.int64),
      "masked_lm_weights": tf.io.FixedLenFeature([preds], tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }


def write_tf1_checkpoint(directory, arrays, config):
  """A checkpoint as google-research/bert's run_pretraining.py writes one:
  tf.compat.v1 variables under the original names, Adam slots, global_step.
  `arrays` maps original names to numpy arrays; returns the prefix."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  with tf.Graph().as_default():
    variables = []
    for name, value in arrays.items():
      variables.append(tf.compat.v1.get_variable(
          name, initializer=tf.constant(value)))
      for slot in ("adam_m", "adam_v"):
        variables.append(tf.compat.v1.get_variable(
            f"{name}/{slot}", initializer=tf.zeros_like(value)))
    tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      saver.save(session, os.path.join(directory, "bert_model.ckpt"))
  config.to_json_file(os.path.join(directory, "bert_config.json"))
  return os.path.join(directory, "bert_model.ckpt")


def flag_defaults(module):
  """{flag: default as text} of every flag a program defines (its
  --helpxml, run as `python -m module` in this process: run_program)."""
  import xml.etree.ElementTree as ET  # pylint: disable=g-import-not-at-top
  out = run_program(module, ["--helpxml"], check=False).stdout
  root = ET.fromstring(out[out.index("<?xml"):])
  return {flag.findtext("name"): flag.findtext("default")
          for flag in root.iter("flag")}


def start_cli(args, stdout=subprocess.DEVNULL):
  """`python <args>` from the repo root as run_cli's, started (a Popen whose
  stderr is piped) for a test to kill."""
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return subprocess.Popen([sys.executable] + list(args), cwd=ROOT, env=env,
                          stdout=stdout, stderr=subprocess.PIPE)


def process_stat(pid):
  """The fields of /proc/<pid>/stat after the command name (state first,
  then the parent's pid, the process group...), or None once it is gone."""
  try:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
      return f.read().rsplit(")", 1)[1].split()
  except OSError:
    return None


def process_running(pid):
  """Whether `pid` exists and is not a zombie."""
  fields = process_stat(pid)
  return fields is not None and fields[0] != "Z"


def sigkill_after_first_checkpoint(proc, directory, timeout=300, name=None):
  """Waits until `directory` holds a `checkpoint` index (naming `name`, e.g.
  "ckpt-16", when given), failing if `proc` exits first or `timeout`
  seconds pass, then SIGKILLs `proc`."""
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  deadline = time.time() + timeout
  index = os.path.join(directory, "checkpoint")

  def reached():
    if not os.path.exists(index):
      return False
    with open(index) as f:
      return name is None or name in f.read()

  while not reached():
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert time.time() < deadline
    time.sleep(0.01)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
