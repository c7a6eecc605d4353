"""Several sequences in one row: the attention mask and positions of a
packed row (static shapes, what jax.jit and XLA compile).

A packed row holds whole sequences one after another, each `[CLS] ... [SEP]`
as the data job writes it, then padding. `input_sequence_ids` int [B, T]
numbers them: 1 for the first sequence of the row, 2 for the second, ...,
0 for padding. Within a row a position attends only to the keys of its own
sequence (a block-diagonal mask), and positions restart at 0 with each
sequence, so every sequence gets the outputs it would get alone in a padded
row (tests/sequence_packing_test.py). This is RoBERTa's and ModernBERT's
packing for masked-LM pretraining (no next-sentence pairs); the padding-free
path of `packing.py` is the other way to skip padding, with data-dependent
shapes.

Shape legend: B rows, T positions (queries), S positions (keys).
"""

from keras import ops


def attention_mask(sequence_ids):
  """int [B, T] sequence ids -> int32 [B, T, S]: 1 where query t and key s
  are positions of the same sequence (s not padding). A padding query (id 0)
  sees every real key of its row, as in an unpacked row, whose padding
  positions the original's mask lets attend to every token."""
  ids = ops.cast(sequence_ids, "int32")
  query = ops.expand_dims(ids, 2)  # [B, T, 1]
  key = ops.expand_dims(ids, 1)  # [B, 1, S]
  same = ops.logical_or(ops.equal(query, key), ops.equal(query, 0))
  return ops.cast(ops.logical_and(same, ops.greater(key, 0)), "int32")


def position_ids(sequence_ids):
  """int [B, T] sequence ids -> int32 [B, T]: each position's index within
  its own sequence (its index in the row less the number of real positions
  of the row's earlier sequences); padding keeps its row index."""
  ids = ops.cast(sequence_ids, "int32")
  index = ops.broadcast_to(ops.arange(ops.shape(ids)[1], dtype="int32"),
                           ops.shape(ids))
  # [B, T, S]: key s is a real position of an earlier sequence than t's.
  earlier = ops.logical_and(
      ops.less(ops.expand_dims(ids, 1), ops.expand_dims(ids, 2)),
      ops.greater(ops.expand_dims(ids, 1), 0))
  before = ops.sum(ops.cast(earlier, "int32"), axis=-1)
  return ops.where(ops.greater(ids, 0), index - before, index)


def gather_query_rows(mask, positions):
  """[B, T, S] attention mask at int [B, P] query positions -> [B, P, S]
  (the last block run at a few positions: the masked-LM ones, [CLS])."""
  from official_bert.modeling import positions as positions_lib  # pylint: disable=g-import-not-at-top
  rows = positions_lib.gather_positions(ops.cast(mask, "float32"), positions)
  return ops.cast(rows, "int32")
