"""BERT's weight initializer."""

import keras


def truncated_normal(stddev):
  """Truncated normal with `stddev` (`initializer_range`), as the original.

  A fresh object on each call, so no two layers share one (a shared seeded
  initializer would give them equal weights).
  """
  return keras.initializers.TruncatedNormal(stddev=stddev)
