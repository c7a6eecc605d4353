"""TensorFlow's CPU runtime, chosen before TensorFlow loads: its BFC allocator
for CPU memory, and (for fine-tuning) its oneDNN rewrites.

TensorFlow's default CPU allocator hands every buffer back to `malloc` when
its tensor dies. glibc serves a buffer of more than 32 MB with a fresh `mmap`
and unmaps it on free, so each training step faults such buffers back in
page by page and zeroes them: the masked-LM logits and their gradient
([B * P, V] float32, 78 MB each for a batch of 32 x 20 predictions over a
30,522-word vocabulary), BERT-Base's [B * T, 3072] feed-forward activations
(50 MB at batch 32). TensorFlow's BFC allocator (the one it uses for GPU
memory) keeps freed CPU memory for the next step instead.
`benchmarks/pretraining_benchmark.py --bfc` / `--nobfc` measures the
difference (docs/performance.md).

The training programs call `use_bfc()` first thing in `main`, before
TensorFlow is imported (TensorFlow reads the variable when it creates its CPU
allocator). A user's own TF_CPU_ALLOCATOR_USE_BFC (e.g. `false`) wins.

The fine-tuning programs also call `use_onednn()` before TensorFlow loads.
TensorFlow turns its oneDNN rewrites on by itself only on some CPUs (Intel's
with AVX-512 VNNI and newer); elsewhere, e.g. on an AMD EPYC with AVX2 only,
a MatMul runs as Eigen's contraction over small oneDNN GEMM blocks, and the
steady fine-tuning step on texts near 128 WordPieces was 1.2x slower than
with the rewrites on (2026-11-27; docs/performance.md's git log holds the
run). A user's own TF_ENABLE_ONEDNN_OPTS (e.g. `0`) wins.
"""

import os

ENV = "TF_CPU_ALLOCATOR_USE_BFC"
LIMIT_ENV = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"


def _says_on(name):
  """Whether the environment variable `name` is "1" or "true" (either case,
  spaces around allowed)."""
  return os.environ.get(name, "").strip().lower() in ("1", "true")


def physical_memory_mb():
  """This machine's RAM in MiB (None where sysconf cannot tell)."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 ** 20
  except (AttributeError, ValueError, OSError):
    return None


def use_bfc():
  """Turns the BFC CPU allocator on unless the user set TF_CPU_ALLOCATOR_USE_BFC.

  Its limit (TensorFlow's default: 64 GiB) becomes the machine's RAM, unless
  TF_CPU_BFC_MEM_LIMIT_IN_MB is set: the allocator should refuse nothing
  the machine has. Returns whether BFC is requested.
  """
  os.environ.setdefault(ENV, "true")
  requested = _says_on(ENV)
  ram = physical_memory_mb()
  if requested and ram:
    os.environ.setdefault(LIMIT_ENV, str(ram))
  return requested


def use_onednn():
  """Turns TensorFlow's oneDNN rewrites on unless the user set
  TF_ENABLE_ONEDNN_OPTS; a no-op once TensorFlow has loaded (it reads the
  variable as it loads). Returns whether they are requested."""
  os.environ.setdefault(ONEDNN_ENV, "1")
  return _says_on(ONEDNN_ENV)


def in_use():
  """Whether TensorFlow's CPU allocator is BFC (imports TensorFlow).

  Call it after the distribution strategy is set up: asking starts
  TensorFlow's runtime. Without oneDNN only BFC keeps memory statistics, so
  they decide. With oneDNN on (TensorFlow's default on CPUs with AVX-512) its
  own allocator keeps them too, and pools large buffers as BFC does
  (measured: a freed 100 MB tensor stays mapped either way); there the
  allocator is BFC exactly when TF_CPU_ALLOCATOR_USE_BFC said so as
  TensorFlow created it, which `use_bfc()` sees to before TensorFlow loads.
  tests/cpu_allocator_test.py checks the answer against the allocator's
  behaviour (BFC refuses a buffer over its limit), both ways of oneDNN.
  """
  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  import tensorflow as tf
  from tensorflow.python.util import _pywrap_util_port
  # pylint: enable=g-import-not-at-top,g-direct-tensorflow-import
  try:
    tf.config.experimental.get_memory_info("CPU:0")
  except ValueError:
    return False
  if _pywrap_util_port.IsMklEnabled():  # oneDNN on
    return _says_on(ENV)
  return True
