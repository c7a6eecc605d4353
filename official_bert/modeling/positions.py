"""Reading a sequence at a few positions (the masked-LM positions, [CLS])."""

from keras import ops


def gather_positions(sequence, positions):
  """[B, T, H] at int [B, P] positions -> [B, P, H] (one gather per row)."""
  positions = ops.cast(positions, "int32")
  return ops.take_along_axis(sequence, positions[:, :, None], axis=1)
