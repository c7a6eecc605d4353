"""The model's fast kernels, each beside the Keras formula it replaces.

Every layer with a fast kernel takes `kernels="fast"` or `kernels="keras"`
(`BertEncoder` passes its own to all of them; it is saved in `get_config`):

    "keras"  Keras's formulas and automatic differentiation. What XLA and JAX
             compile well: they fuse the element-wise passes themselves.
    "fast"   the same values with the gradients written out by hand: fewer
             passes over the activations when TensorFlow runs the ops one by
             one (no XLA), as on CPU.

The pairs, fast | keras:

    gelu          gradient Phi(x) + x phi(x), reusing the forward's Phi(x)
                  | keras.activations.gelu(x, approximate=False)
    feed_forward  GELU network with GELU's constants folded into the
                  weights, gradient written out | dense, activation, dense
    layer_norm    gradient written out (one pass back, not through the mean
                  and the variance separately) | ops.layer_normalization
    mlm_logits    the table's gradient as g^T x and the bias's as a row-sum
                  matmul | matmul with the transposed table, plus the bias
    dropout       16 random bits per element, read through an int16 view of
                  int32 draws | the same bits split by shifts (element-wise
                  integer ops only, no bitcast between widths); the same
                  mask from the same seed either way
    sum_rows      a sum over the leading axes as a ones-row matmul (the
                  fast gradients' bias sums) | ops.sum

Invariants (tests/kernels_test.py checks every pair, value and every
gradient): the two give the same value and the same gradients up to rounding;
dropout gives the same mask either way, keeps the expected value, drops at
the rate rounded to a multiple of 1/65536, and its gradient is its
keep-and-scale factor; the variables, and so the checkpoints, do not depend
on the choice. What the fast kernels gain, and what they cost under XLA, is
measured by
`benchmarks/pretraining_benchmark.py` (history in docs/performance.md's git
log).

`resolve()` is how a program chooses, before it builds the model.
"""

import math

import keras
from keras import ops

from official_bert.modeling import activations

KERNELS = ("fast", "keras")


def resolve(requested, jit_compile=False, is_tpu=False, backend=None):
  """The kernels a program should build its model with.

  Args:
    requested: "auto", "fast" or "keras" (e.g. a `--kernels` flag).
    jit_compile: whether XLA compiles the model's forward and backward.
    is_tpu: whether it runs under a TPU strategy (which compiles everything).
    backend: the Keras backend; default `keras.backend.backend()`.

  Returns:
    "fast" or "keras". "auto" is "keras" whenever the model is compiled:
    with `jit_compile`, on TPUs and on any backend but TensorFlow (JAX always
    compiles); the fast kernels were written for, and measured with,
    TensorFlow running ops one by one. An explicit choice is kept.
  """
  if requested not in ("auto",) + KERNELS:
    raise ValueError(f"kernels must be one of auto, fast, keras; got "
                     f"{requested!r}")
  if requested != "auto":
    return requested
  backend = backend or keras.backend.backend()
  compiled = jit_compile or is_tpu or backend != "tensorflow"
  return "keras" if compiled else "fast"


def check(kernels):
  """Validates a layer's `kernels` argument (returns it)."""
  if kernels == "auto":
    raise ValueError("kernels='auto' is resolved by the program that builds "
                     "the model: pass kernels.resolve('auto', jit_compile, "
                     "is_tpu) instead")
  if kernels not in KERNELS:
    raise ValueError(f"kernels must be 'fast' or 'keras', got {kernels!r}")
  return kernels


# --------------------------------------------------------------- GELU ----
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def gelu(x, kernels):
  """Exact GELU, x * Phi(x) (Hugging Face's "gelu")."""
  if kernels == "fast":
    return fast_gelu(x)
  return activations.gelu(x)


def activation(name, kernels):
  """The activation function for a `hidden_act` name, with these kernels."""
  if name == "gelu":
    return fast_gelu if kernels == "fast" else activations.gelu
  return activations.get(name)


def custom_gradient(forward):
  """`keras.ops.custom_gradient` with one calling convention for the gradient.

  `forward(*inputs)` returns `(outputs, grad)` and `grad(upstream)` returns
  the gradients of the inputs, in order. TensorFlow passes the upstream
  gradient positionally and JAX by keyword; this takes either.
  """

  @ops.custom_gradient
  def wrapped(*inputs):
    outputs, grad = forward(*inputs)

    def backend_grad(*args, upstream=None):
      if upstream is None:
        (upstream,) = args
      return grad(upstream)

    return outputs, backend_grad

  return wrapped


@custom_gradient
def fast_gelu(x):
  """GELU with the gradient Phi(x) + x * phi(x), reusing the forward's Phi(x)."""
  cdf = 0.5 * ops.erfc(x * -_SQRT_HALF)  # Phi(x), accurate in the left tail

  def grad(upstream):
    pdf = ops.exp(ops.square(x) * -0.5) * _INV_SQRT_2PI  # phi(x)
    return upstream * (cdf + x * pdf)

  return x * cdf, grad


# ------------------------------------------------------- feed-forward ----
def feed_forward(x, w1, b1, w2, b2, hidden_act, kernels, column_blocks=1):
  """act(x w1 + b1) w2 + b2 for x [..., H]: BERT's feed-forward network.

  All in x's dtype. The fast kernel exists for "gelu" only; other
  activations get the Keras formula with either choice.

  `column_blocks` > 1 (the Keras formula only): the I columns in that many
  blocks, act(x w1[:, j] + b1[j]) w2[j] summed over the blocks j. The same
  value; for inference (see `inference_column_blocks`).
  """
  if kernels == "fast" and hidden_act == "gelu":
    # [..., H] -> [N, H] -> [N, H] -> [..., H]
    rows = ops.reshape(x, (-1, ops.shape(x)[-1]))
    return ops.reshape(_fast_gelu_feed_forward(rows, w1, b1, w2, b2),
                       ops.shape(x))
  act = activations.get(hidden_act)
  width = w1.shape[1] // column_blocks
  # Block j of w1 is [H, k, I/k][:, j]: a copy per call from a [H, I]
  # variable, none when w1 is the reshaped stack of the blocks (serving
  # exports store them so, export/serving_weights.py: TensorFlow's graph
  # optimizer folds the slice of the stack).
  w1_blocks = (ops.reshape(w1, (w1.shape[0], column_blocks, width))
               if column_blocks > 1 else None)
  out = None
  for j in range(column_blocks):
    cols = slice(j * width, (j + 1) * width)
    kernel = w1 if w1_blocks is None else w1_blocks[:, j]
    # ops.add, not +: on TensorFlow a bias added by ops.add is a BiasAdd,
    # which TF fuses into the matmul (Keras's Dense does the same).
    hidden = act(ops.add(ops.matmul(x, kernel), b1[cols]))  # [..., I/k]
    part = ops.matmul(hidden, w2[cols])  # [..., I/k] -> [..., H]
    out = part if out is None else out + part
  return ops.add(out, b2)


def inference_column_blocks(intermediate_size):
  """Blocks of 768 columns for a feed-forward network of >= 3072 columns.

  On CPU, TensorFlow's matmul runs [128, 768] x [768, 3072] (one BERT-Base
  text) at about half the rate of [128, 3072] x [3072, 768]; four
  [768, 768] blocks make BERT-Base's feed-forward network ~24% faster at
  128 rows and cost ~1% at 4,096 (benchmarks/serving_benchmark.py,
  docs/performance.md). Narrower networks gain nothing: 1 block.
  """
  if intermediate_size >= 3072 and intermediate_size % 768 == 0:
    return intermediate_size // 768
  return 1


@custom_gradient
def _fast_gelu_feed_forward(x, w1, b1, w2, b2):
  """GELU(x w1 + b1) w2 + b2 for x [N, H], with the gradient written out.

  With u = -(x w1 + b1) / sqrt(2), GELU is -u * erfc(u) / sqrt(2). The two
  constants are folded into the small kernels and bias: the first matmul
  gives u, the second takes u * erfc(u). So GELU is two element-wise passes
  over the [N, I] activations instead of four, and its derivative in u,
  erfc(u) - 2/sqrt(pi) * u * exp(-u^2), six instead of seven. The biases'
  gradients are row sums as matmuls, and w2's gradient is computed as g^T y
  and transposed (the layout oneDNN ran faster).
  """
  w1 = w1 * -_SQRT_HALF
  b1 = b1 * -_SQRT_HALF
  w2 = w2 * -_SQRT_HALF
  u = ops.matmul(x, w1) + b1
  erfc_u = ops.erfc(u)
  y = u * erfc_u

  def grad(upstream):
    dw2 = ops.transpose(ops.matmul(ops.transpose(upstream), y))
    dy = ops.matmul(upstream, ops.transpose(w2))
    # d(u erfc(u))/du, with exp(-u^2) as a division: no negation pass.
    du = dy * (erfc_u - _TWO_OVER_SQRT_PI * u / ops.exp(ops.square(u)))
    return (ops.matmul(du, ops.transpose(w1)),
            ops.matmul(ops.transpose(x), du) * -_SQRT_HALF,
            sum_rows(du) * -_SQRT_HALF,
            dw2 * -_SQRT_HALF,
            sum_rows(upstream))

  return ops.matmul(y, w2) + b2, grad


# --------------------------------------------------------- LayerNorm ----
def layer_norm(x, gamma, beta, epsilon, kernels):
  """(x - mean) / sqrt(var + epsilon) * gamma + beta over x's last axis.

  The statistics in float32 (or wider); the result in x's dtype.
  """
  if kernels != "fast":
    return ops.layer_normalization(x, gamma, beta, axis=-1, epsilon=epsilon)
  outputs = _fast_layer_norm(ops.cast(x, "float32"),
                             ops.cast(gamma, "float32"),
                             ops.cast(beta, "float32"), epsilon)
  return ops.cast(outputs, x.dtype)


def _fast_layer_norm(x, gamma, beta, epsilon):
  """LayerNorm of float32 x with the gradient written out:

      y = xhat * gamma + beta,   xhat = (x - mean) * inv,
      inv = 1 / sqrt(var + epsilon)
      dx = inv * (g*gamma - mean(g*gamma) - xhat * mean(g*gamma*xhat))
      dgamma = sum(g * xhat),    dbeta = sum(g)
  """

  @custom_gradient
  def normalize(x, gamma, beta):
    mean = ops.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    inv = ops.rsqrt(ops.mean(ops.square(centered), axis=-1, keepdims=True) +
                    epsilon)
    xhat = centered * inv

    def grad(upstream):
      g_xhat = upstream * xhat
      g_gamma = upstream * gamma
      dx = inv * (g_gamma - ops.mean(g_gamma, axis=-1, keepdims=True) -
                  xhat * ops.mean(g_xhat * gamma, axis=-1, keepdims=True))
      return dx, sum_rows(g_xhat), sum_rows(upstream)

    return xhat * gamma + beta, grad

  return normalize(x, gamma, beta)


# ---------------------------------------------------- masked-LM scores ----
def mlm_logits(x, table, bias, kernels):
  """x [N, H] times table [V, H] transposed, plus bias [V]: float32 [N, V].

  x and the table in the compute dtype, the bias and the result float32.
  """
  if kernels != "fast":
    logits = ops.matmul(x, ops.transpose(table))
    return ops.cast(logits, "float32") + ops.cast(bias, "float32")
  return _add_bias(ops.cast(_scores(x, table), "float32"),
                   ops.cast(bias, "float32"))


@custom_gradient
def _scores(x, table):
  """x table^T, the table's gradient as g^T x: autodiff computes it as
  [H, V] and then transposes it, an extra pass over a [V, H] array."""
  def grad(upstream):
    return (ops.matmul(upstream, table),
            ops.matmul(ops.transpose(upstream), x))

  return ops.matmul(x, ops.transpose(table)), grad


@custom_gradient
def _add_bias(logits, bias):
  """[N, V] + [V], the bias's gradient summed as a matmul (`sum_rows`)."""
  return logits + bias, lambda upstream: (upstream, sum_rows(upstream))


# ------------------------------------------------------------ dropout ----
_LEVELS = 65536  # values of a 16-bit draw


def dropout(x, rate, seed, kernels):
  """x with elements zeroed at `rate` and the rest scaled by 1 / (1 - rate).

  Either kernel set: one random int32 decides two neighbouring elements, each
  by its own 16-bit half (read as a signed int16),

      keep = half >= round(rate * 65536) - 32768
      y = x * where(keep, 1 / (1 - rate'), 0)        rate' = round(rate * 65536) / 65536

  so the rate is rounded to a multiple of 1/65536 (0.1 becomes 0.1000061)
  and the expected value of y is x exactly; the gradient is one
  multiplication by the same keep-and-scale tensor. "fast" reads the halves
  through an int16 view of the draws (the cheapest for TensorFlow's ops one
  by one); "keras" splits them with arithmetic shifts, element-wise integer
  ops that any backend and XLA device compiles. Both give the same mask from
  the same seed. Keras's own `keras.random.dropout` draws a float32 per
  element, twice the random bits (under XLA the larger part of dropout's
  cost). A last axis of unknown length (attention's probabilities in a
  graph traced for batches padded to different lengths) has the draws made
  for x flattened, in rows of 16 elements.

  Args:
    x: the tensor (training mode; the caller skips inference and rate 0).
    rate: fraction dropped, in [0, 1].
    seed: a `keras.random.SeedGenerator` (the layer's).
    kernels: "fast" or "keras".
  """
  if not x.shape:
    return keras.random.dropout(x, rate, seed=seed)
  threshold = round(rate * _LEVELS)
  if threshold >= _LEVELS:
    return ops.zeros_like(x)
  last = x.shape[-1]
  if last is None:
    # x flattened, its draws in rows of 16 elements (a static last axis).
    count = ops.size(x)
    keep = _keep(((count + 15) // 16,), 16, threshold, seed, kernels)
    keep = ops.reshape(ops.reshape(keep, (-1,))[:count], ops.shape(x))
  else:
    keep = _keep(tuple(ops.shape(x)[:-1]), last, threshold, seed, kernels)
  scale = _LEVELS / (_LEVELS - threshold)
  factors = ops.where(keep, ops.cast(scale, x.dtype), ops.cast(0, x.dtype))
  return x * factors


def _keep(leading, last, threshold, seed, kernels):
  """Bool `leading + (last,)`: each element kept with probability
  1 - threshold / 65536 (static `last`; see `dropout`)."""
  pairs = (last + 1) // 2
  bits = keras.random.randint(leading + (pairs,), -2**31, 2**31 - 1,
                              dtype="int32", seed=seed)
  bound = threshold - _LEVELS // 2  # on the signed halves
  if kernels == "fast":
    keep = ops.view(bits, "int16") >= bound  # [..., 2 * pairs], each uniform
  else:
    # The low half sign-extended, then the high half: the order of a
    # little-endian view.
    low = ops.right_shift(ops.left_shift(bits, 16), 16)
    high = ops.right_shift(bits, 16)
    keep = ops.reshape(ops.stack([low >= bound, high >= bound], axis=-1),
                       leading + (2 * pairs,))
  if 2 * pairs != last:
    keep = keep[..., :last]
  return keep


# ------------------------------------------------------------ helpers ----
def fused_attention(query, key, value, bias, scale):
  """softmax(q k^T * scale + bias) v as one op: `keras.ops.dot_product_attention`,
  which runs flash or cuDNN's fused attention where the backend has it (JAX
  on a GPU) and its own formula elsewhere. query [B, T, N, D], key and value
  [B, S, N, D], bias broadcastable to [B, N, T, S] -> [B, T, N, D]. The same
  values as the dense formula within rounding (tests/sequence_packing_test.py);
  no dropout of the probabilities."""
  return ops.dot_product_attention(query, key, value, bias=bias, scale=scale)


def sum_rows(x):
  """Sums a [..., H] tensor over every axis but the last, as a matmul.

  A [1, N] x [N, H] product with a row of ones; TensorFlow's CPU reduction
  over the leading axis is the slower (the fast gradients of biases and of
  LayerNorm's gamma and beta use it). The Keras formula is `ops.sum`.
  """
  rows = ops.reshape(x, (-1, x.shape[-1]))
  ones = ops.ones((1, ops.shape(rows)[0]), rows.dtype)
  return ops.matmul(ones, rows)[0]
