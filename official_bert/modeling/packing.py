"""Removing padding from the position-wise work (serving's packed path).

In a batch padded to its longest row most positions can be padding: for 32
real sentences of the pydocs corpus, 2.8x as many positions as tokens (see
docs/performance.md). Dense layers, LayerNorm and the feed-forward network
treat every position alone, so they can run on the tokens only, packed into
[N, H]; only attention needs the [B, T] layout, for its scores and context.
This is the "remove padding" of NVIDIA FasterTransformer (the "effective
transformer"); here it is gathers in keras.ops (attention gathers q, k
and v into [B, T] and its context back).

    tokens, slots = pack_indices(mask)      # [N], [B * T]
    packed = pack(x, tokens)                # [B, T, H] -> [N, H]
    padded = unpack(packed, slots, mask)    # [N, H] -> [B, T, H], 0 at padding
    rows = gather_packed(packed, (tokens, slots), mask, positions)  # [B, P, H]
"""

from keras import ops

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
  tokens = ops.cast(ops.nonzero(flat)[0], "int32")  # [N]
  count = ops.shape(tokens)[0]
  # [B * T]: the k-th token is packed row k (cumsum counts it as k + 1).
  slots = ops.where(flat > 0, ops.cumsum(flat) - 1, count)
  return tokens, ops.cast(slots, "int32")


def pack(x, tokens):
  """[B, T, D] -> [N, D]: the rows at the token positions."""
  return ops.take(ops.reshape(x, (-1, ops.shape(x)[-1])), tokens, axis=0)


def unpack(packed, slots, mask, zero_padding=True):
  """[N, D] -> [B, T, D] laid out as `mask` ([B, T]).

  Padding positions get zeros, or with `zero_padding=False` a copy of some
  token's row: for a caller that masks them anyway (attention's keys get the
  -10000 bias), which saves copying `packed` to append the zero row.
  """
  # One shape op per tensor (each call is a Shape op and a slice per
  # unknown axis in a traced graph).
  count, width = ops.shape(packed)
  if zero_padding:
    zeros = ops.zeros((1, width), packed.dtype)
    rows = ops.take(ops.concatenate([packed, zeros], axis=0), slots, axis=0)
  else:
    rows = ops.take(packed, ops.minimum(slots, count - 1), axis=0)
  batch, length = ops.shape(mask)
  return ops.reshape(rows, (batch, length, width))


def gather_packed(packed, packing, mask, positions):
  """[N, D] -> [B, P, D]: the packed rows of int [B, P] `positions` (in the
  [B, T] layout of `mask`; each must be a token, e.g. [CLS] at 0)."""
  # Each position's packed row, read from `slots` laid out [B, T, 1].
  slots = ops.reshape(packing[1], tuple(ops.shape(mask)) + (1,))
  rows = positions_lib.gather_positions(slots, positions)[:, :, 0]  # [B, P]
  return ops.take(packed, rows, axis=0)
