"""Removing padding from the position-wise work (serving's packed path).

In a batch padded to its longest row most positions can be padding: for 32
real sentences of the pydocs corpus, 2.8x as many positions as tokens (see
docs/performance.md). Dense layers, LayerNorm and the feed-forward network
treat every position alone, so they can run on the tokens only, packed into
[N, H]; only attention needs the [B, T] layout, for its scores and context.
This is the "remove padding" of NVIDIA FasterTransformer (the "effective
transformer"); here it is gathers in keras.ops (attention gathers q, k
and v into [B, T] and its context back).

    packing = pack_indices(mask)             # ([N], [B * T])
    packed = pack(x, packing)                # [B, T, H] -> [N, H]
    padded = unpack(packed, packing, mask)   # [N, H] -> [B, T, H], 0 at padding
    rows = spread(packed, packing)           # the same, [B * T, H]
    rows = gather_packed(packed, packing, mask, positions)  # [B, P, H]

`pack`, `unpack` and `spread` take the model's `kernels` (see kernels.py).
The gradient of a gather is a scatter-add, which TensorFlow runs on CPU as
an UnsortedSegmentSum at several times a gather's cost. With
kernels="fast" each one's gradient is the other's gather instead: the two
are inverse permutations on the token positions, so the values are the
same (see `unpack` for the one condition on padding).
"""

from keras import ops

from official_bert.modeling import kernels as kernels_lib
from official_bert.modeling import positions as positions_lib


def pack_indices(mask):
  """Where the tokens are, both ways.

  Args:
    mask: int or bool [B, T], nonzero at tokens (any pattern).

  Returns:
    `(tokens, slots)`: int32 [N], the flat index (row * T + position) of
    each token in row-major order; int32 [B * T], each position's row in the
    packed [N, H] tensor, and N (a row of zeros `unpack` appends) at padding.
  """
  flat = ops.cast(ops.not_equal(ops.reshape(mask, (-1,)), 0), "int32")
  size = ops.shape(flat)[0]
  count = ops.sum(flat)
  # [B * T]: the k-th token is packed row k (cumsum counts it as k + 1).
  slots = ops.where(flat > 0, ops.cumsum(flat) - 1, count)
  # [N]: each token's flat index written at its slot, padding's (as zeros)
  # at slot N, which is cut off. (Not `ops.nonzero`: on TensorFlow its
  # unstack has no LiteRT builtin, and the int8 export converts this.)
  index = ops.where(flat > 0, ops.arange(size, dtype="int32"), 0)
  tokens = ops.scatter(ops.expand_dims(slots, -1), index, (size + 1,))[:count]
  return tokens, ops.cast(slots, "int32")


def _with_zero_row(rows):
  """[N, D] -> [N + 1, D]: a row of zeros appended (where `slots` points
  padding)."""
  return ops.concatenate([rows, ops.zeros((1, ops.shape(rows)[1]),
                                          rows.dtype)], axis=0)


def pack(x, packing, kernels="keras"):
  """[B, T, D] -> [N, D]: the rows at the token positions.

  With kernels="fast" the gradient, [B * T, D] with zeros at padding, is
  the upstream gradient spread back (`spread`, a gather through `slots`).
  """
  tokens = packing[0]
  rows = ops.reshape(x, (-1, ops.shape(x)[-1]))  # [B * T, D]
  if kernels_lib.check(kernels) != "fast":
    return ops.take(rows, tokens, axis=0)

  @kernels_lib.custom_gradient
  def take(rows):
    return (ops.take(rows, tokens, axis=0),
            lambda upstream: spread(upstream, packing))

  return take(rows)


def unpack(packed, packing, mask, zero_padding=True, kernels="keras"):
  """[N, D] -> [B, T, D] laid out as `mask` ([B, T]).

  Padding positions get zeros, or with `zero_padding=False` a copy of some
  token's row: for a caller that masks them anyway (attention's keys get the
  -10000 bias), which saves copying `packed` to append the zero row.

  With kernels="fast" the gradient is the upstream gradient at the token
  positions (a gather through `tokens`: `pack`'s value). With zeros at
  padding that is the exact gradient. With `zero_padding=False` it leaves
  out what reaches the padding positions' copies, so the caller must give
  them none: attention does (a key at -10000 has probability exactly 0 in
  float32, so its key and value get gradient 0, and a padding query's
  context is dropped by `pack`).
  """
  # One shape op per tensor (each call is a Shape op and a slice per
  # unknown axis in a traced graph).
  batch, length = ops.shape(mask)
  rows = spread(packed, packing, zero_padding, kernels)
  return ops.reshape(rows, (batch, length, ops.shape(packed)[-1]))


def spread(packed, packing, zero_padding=True, kernels="keras"):
  """`unpack` flat: [N, D] -> [B * T, D], for a caller that reshapes it
  itself (attention, to [B, T, heads, D] with the shape it already has)."""
  tokens, slots = packing

  def rows(packed):
    if zero_padding:
      return ops.take(_with_zero_row(packed), slots, axis=0)
    count = ops.shape(packed)[0]
    return ops.take(packed, ops.minimum(slots, count - 1), axis=0)

  if kernels_lib.check(kernels) != "fast":
    return rows(packed)

  @kernels_lib.custom_gradient
  def take(packed):
    return rows(packed), lambda upstream: ops.take(upstream, tokens, axis=0)

  return take(packed)


def gather_packed(packed, packing, mask, positions):
  """[N, D] -> [B, P, D]: the packed rows of int [B, P] `positions` (in the
  [B, T] layout of `mask`; each must be a token, e.g. [CLS] at 0)."""
  # Each position's packed row, read from `slots` laid out [B, T, 1].
  slots = ops.reshape(packing[1], tuple(ops.shape(mask)) + (1,))
  rows = positions_lib.gather_positions(slots, positions)[:, :, 0]  # [B, P]
  return ops.take(packed, rows, axis=0)
