"""Start-up of every Python process the tests run (conftest.py puts this
folder on PYTHONPATH): Keras's scikit-learn wrappers do without scikit-learn.

`import tensorflow` imports `keras.wrappers`, which imports scikit-learn
(and SciPy) whenever it is installed: ~1.2 s of CPU in a ~4.5 s TensorFlow
start-up, in each of the suite's hundreds of processes, on a 2-core CI
machine. scikit-learn is here only because two test peers need it
(seqeval, sentence-transformers); a user's `requirements.txt` install has
none, so this is that user's start-up. Only the import made by
`keras.src.wrappers` fails (Keras then sets `sklearn = None`, as without
it); seqeval and sentence-transformers still import it.
"""

import importlib.abc
import sys


class _NoSklearnForKerasWrappers(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path=None, target=None):
    if name != "sklearn":
      return None
    frame = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
      module = frame.f_globals.get("__name__", "")
      if not module.startswith(("importlib", "_frozen_importlib")):
        if module.startswith("keras.src.wrappers"):
          raise ImportError("scikit-learn is not imported for Keras's "
                            "wrappers in the tests (tests/child_site)")
        return None
      frame = frame.f_back
    return None


sys.meta_path.insert(0, _NoSklearnForKerasWrappers())
