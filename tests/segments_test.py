"""segments.concat / combine_segments equal tf.concat(axis=1) and TF Text's
combine_segments, and the graphs that use them print no oneDNN ERROR line."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from official_bert.data import segments
from tests import testing


def _ragged(rng, rows, dtype=tf.int64):
  """[rows, (0..5)] with empty rows among them."""
  values = [list(rng.integers(1, 99, rng.integers(0, 6))) for _ in range(rows)]
  return tf.ragged.constant(values, dtype, ragged_rank=1,
                            row_splits_dtype=tf.int64) if rows else (
                                tf.RaggedTensor.from_row_splits(
                                    tf.zeros([0], dtype), [0]))


@pytest.mark.parametrize("rows", [0, 1, 3, 7])
def test_concat_equals_tf_concat(rows):
  rng = np.random.default_rng(rows)
  for _ in range(5):
    parts = [_ragged(rng, rows) for _ in range(3)]
    assert (segments.concat(parts).to_list() ==
            tf.concat(parts, axis=1).to_list())
  # int32 row splits and values, as the exports hand them over.
  parts = [_ragged(rng, rows, tf.int32).with_row_splits_dtype(tf.int32)
           for _ in range(2)]
  assert (segments.concat(parts).to_list() ==
          tf.concat(parts, axis=1).to_list())


@pytest.mark.parametrize("num_segments", [1, 2, 3])
def test_combine_segments_equals_tf_text(num_segments):
  rng = np.random.default_rng(num_segments)
  for rows in (0, 1, 4):
    parts = [_ragged(rng, rows) for _ in range(num_segments)]
    ids, type_ids = segments.combine_segments(parts, 101, 102)
    want_ids, want_types = tf_text.combine_segments(parts, 101, 102)
    assert ids.to_list() == want_ids.to_list()
    assert type_ids.to_list() == want_types.to_list()


_PROBE = """
import sys
import tensorflow as tf
from official_bert.data import segments
spec = tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1)
use_tf_text = sys.argv[1] == "tf_text"
if use_tf_text:
  import tensorflow_text as tf_text
combine = tf_text.combine_segments if use_tf_text else segments.combine_segments
fn = tf.function(lambda a, b: combine([a, b], 101, 102)[0].to_tensor(),
                 input_signature=[spec, spec])
a = tf.ragged.constant([[1, 2], [3]], tf.int64)
print(fn(a, a).numpy().tolist())
"""


def _probe(which):
  env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="0",
             PYTHONPATH=testing.CHILD_PATH)
  return subprocess.run([sys.executable, "-c", _PROBE, which], env=env,
                        capture_output=True, text=True, timeout=300,
                        check=True)


def test_no_onednn_error_line_with_onednn_on():
  """With oneDNN on, TF Text's combine_segments (an int64 Transpose in its
  ragged concat) makes TensorFlow print `ERROR: oneDNN supports DT_INT64
  only on platforms with AVX-512` on CPUs with AVX-512 (measured on an AMD
  EPYC with AVX-512 BF16: the probe with "tf_text" prints it); ours has no
  such op. Where the CPU never makes TensorFlow say it, this cannot fail."""
  ours = _probe("ours")
  assert ours.stdout.strip() == ("[[101, 1, 2, 102, 1, 2, 102], "
                                 "[101, 3, 102, 3, 102, 0, 0]]")
  assert "oneDNN supports" not in ours.stderr, ours.stderr[-2000:]
