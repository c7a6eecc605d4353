"""Reading a sequence at a few positions (the masked-LM positions, [CLS])."""

from keras import ops


def gather_positions(sequence, positions):
  """[B, T, H] at int [B, P] positions -> [B, P, H].

  As google-research/bert's `gather_indexes`: one gather from the flattened
  [B*T, H] sequence at the row offsets b*T + p, all in int32. (Keras's
  `ops.take_along_axis` would broadcast the positions to [B, P, H] and, on
  TensorFlow, transpose them as int64, an op oneDNN reports with an ERROR
  line on CPUs with AVX-512 before falling back to Eigen.)
  """
  shape = ops.shape(sequence)
  batch, length, width = shape[0], shape[1], sequence.shape[-1]
  positions = ops.cast(positions, "int32")
  # [B, 1]: the first row of each sequence in the flattened [B*T, H].
  offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * length, 1)
  flat = ops.reshape(sequence, (-1, width))  # [B*T, H]
  rows = ops.take(flat, ops.reshape(positions + offsets, (-1,)), axis=0)
  num_positions = positions.shape[1]
  if num_positions is None:
    num_positions = ops.shape(positions)[1]
  return ops.reshape(rows, (-1, num_positions, width))  # [B, P, H]
