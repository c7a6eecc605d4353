"""Start-up of every Python process the tests run (conftest.py puts this
folder on PYTHONPATH): TensorFlow starts without two imports that only the
test environment's extra packages cause.

- `import tensorflow` imports `keras.wrappers`, which imports scikit-learn
  (and SciPy) whenever it is installed: ~1.2 s of CPU in a ~4.5 s TensorFlow
  start-up. scikit-learn is here only because two test peers need it
  (seqeval, sentence-transformers).
- `import tensorflow` imports JAX whenever it is installed, twice over:
  `tensorflow.lite.python.util` (for TFLite's JAX converter) and Keras's
  `keras.src.callbacks.orbax_checkpoint` (a monitoring shim): ~0.3-0.5 s
  of CPU. JAX is here only for the model's JAX-backend tests.

Each is paid in every one of the suite's hundreds of processes, on a 2-core
CI machine. A user's `requirements.txt` install has neither package, so this
is that user's start-up. Only the imports made by those modules fail (each
then carries on as without the package: Keras sets `sklearn = None`, TFLite
`_jit = None`, the Orbax callback skips its shim); seqeval,
sentence-transformers and Keras's JAX backend still import them.
"""

import importlib.abc
import sys

# The package, and the modules whose import of it is refused.
_REFUSED = {"sklearn": ("keras.src.wrappers",),
            "jax": ("tensorflow.lite.python.util",
                    "keras.src.callbacks.orbax_checkpoint")}


class _NoTestOnlyImportsInTensorFlowsStartUp(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path=None, target=None):
    importers = _REFUSED.get(name)
    if importers is None:
      return None
    frame = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
      module = frame.f_globals.get("__name__", "")
      if not module.startswith(("importlib", "_frozen_importlib")):
        if module.startswith(importers):
          raise ImportError(f"{name} is not imported for {module} in the "
                            "tests (tests/child_site)")
        return None
      frame = frame.f_back
    return None


sys.meta_path.insert(0, _NoTestOnlyImportsInTensorFlowsStartUp())


def _log_process_start():
  """With OFFICIAL_BERT_PROCESS_LOG set (tests/conftest.py sets it for the
  suite), every Python process started under the tests appends its command
  line to that file: the suite's count of program processes."""
  import os  # pylint: disable=g-import-not-at-top
  path = os.environ.get("OFFICIAL_BERT_PROCESS_LOG")
  if not path:
    return
  try:
    with open("/proc/self/cmdline", "rb") as f:
      argv = f.read().split(b"\0")
    line = " ".join(a.decode("utf-8", "replace") for a in argv if a)
    line = line.replace("\n", "\\n")  # one line per process
  except OSError:
    line = " ".join(sys.argv)
  with open(path, "a", encoding="utf-8") as f:
    f.write(f"{os.getpid()}\t{line[:300]}\n")


_log_process_start()
