"""Long texts for run_classifier: windows over a text, one prediction per text.

With `--doc_stride`, a text longer than `--max_seq_length` is not truncated:
its WordPieces are covered by windows of at most `seq_length - 2` pieces
(`[CLS] pieces [SEP]`), the k-th starting at piece `k * doc_stride`, the last
ending at the text's last piece (as run_squad's windows over a context,
`squad_windows.py`); a text that fits is one window, packed as without
windows. The model runs on every window; a text's logits are its windows'
combined by `aggregation`, "max" (per class, the largest over the windows)
or "mean".

Training fits each window to its text's label (`--window_training=windows`)
or each text's windows combined as in prediction (`=documents`: `documents`
lays a text's windows out as one example [M, T], and
`finetuning_models.BertDocumentClassifier` combines their logits before the
loss).

The same two functions run in training, evaluation and prediction
(`classification_task.ClassificationTask.encode`, `evaluate`, `predict`)
and in the exported model's text signature (`export/serving.py`), so they
cannot disagree on where a window starts:

    windowing = Windowing(seq_length=128, doc_stride=64, aggregation="max")
    inputs, text = windowing.pack(pieces, cls_id, sep_id)  # [W, T], [W]
    logits = windowing.combine(model(inputs), text, num_texts)  # [B, C]

Shape legend: B texts, N pieces of a text, W windows, T seq_length,
C classes (labels).
"""

import dataclasses

# finetuning_models.WINDOW_AGGREGATIONS (not imported here: the flags are
# defined before Keras loads; long_document_test checks they are equal).
AGGREGATIONS = ("max", "mean")
TRAININGS = ("windows", "documents")


@dataclasses.dataclass(frozen=True)
class Windowing:
  """Windows of `seq_length` (with [CLS] and [SEP]) every `doc_stride`
  pieces, their logits combined by `aggregation` ("max" or "mean")."""
  seq_length: int
  doc_stride: int
  aggregation: str = "max"

  def __post_init__(self):
    if self.seq_length < 3:
      raise ValueError(f"--max_seq_length={self.seq_length} leaves no room "
                       "for text besides [CLS] and [SEP]")
    if not 1 <= self.doc_stride <= self.seq_length - 2:
      raise ValueError(f"--doc_stride={self.doc_stride} must be between 1 "
                       f"and --max_seq_length - 2 = {self.seq_length - 2} "
                       "(a larger stride would skip pieces between windows)")
    if self.aggregation not in AGGREGATIONS:
      raise ValueError(f"--window_aggregation={self.aggregation!r} is not "
                       f"one of {list(AGGREGATIONS)}")

  def starts(self, pieces):
    """(text [W], start [W], length [W]) int64 for int RaggedTensor
    `pieces` [B, (N)]: each window's text, its first piece (counted in its
    text) and how many pieces it holds, in text order then window order."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    budget = self.seq_length - 2
    num_pieces = tf.cast(pieces.row_lengths(), tf.int64)            # [B]
    count = 1 + (tf.maximum(num_pieces - budget, 0) + self.doc_stride - 1
                 ) // self.doc_stride                               # [B]
    text = tf.repeat(tf.range(tf.size(count, out_type=tf.int64)), count)
    start = tf.ragged.range(count).flat_values * self.doc_stride     # [W]
    length = tf.minimum(tf.gather(num_pieces, text) - start, budget)
    return text, start, length

  def pack(self, pieces, cls_id, sep_id, pad_multiple=None):
    """The windows' model inputs and texts.

    Args:
      pieces: int RaggedTensor [B, (N)], each text's WordPieces.
      cls_id, sep_id: the special ids.
      pad_multiple: pad to the longest window rounded up to a multiple of
        this (default seq_length: every window padded to seq_length).

    Returns:
      ({"input_word_ids", "input_mask", "input_type_ids": int32 [W, T]},
       text int32 [W]: the text each window belongs to).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from official_bert.data import segment_packing  # pylint: disable=g-import-not-at-top
    pieces = pieces.with_row_splits_dtype(tf.int64)
    text, start, length = self.starts(pieces)
    first = tf.gather(pieces.row_splits[:-1], text) + start          # [W]
    index = tf.ragged.range(first, first + length)                   # [W, (n)]
    window_pieces = tf.gather(pieces.flat_values, index)
    inputs = segment_packing.pack_to_longest(
        [window_pieces], self.seq_length, cls_id, sep_id,
        pad_multiple=pad_multiple or self.seq_length)
    return inputs, tf.cast(text, tf.int32)

  def combine(self, logits, text, num_texts):
    """Logits [W, C] of the windows -> [B, C] of the texts (`text` [W]:
    each window's text; every text has at least one window), as training
    combines them (`finetuning_models.combine_windows`)."""
    from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
    return finetuning_models.combine_windows(logits, text, num_texts,
                                             self.aggregation)


def encode(examples, tokenizer, windowing, batch_size=8192):
  """The windows of `examples`' texts (`classifier_data.Example`s, single
  texts): ({name: int32 [W, T]}, text int32 [W], the example each window
  belongs to), every window padded to seq_length. A text without
  WordPieces is a ValueError naming its file and line."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = ("input_word_ids", "input_mask", "input_type_ids")
  chunks = {name: [np.zeros((0, windowing.seq_length), np.int32)]
            for name in names}
  texts = [np.zeros((0,), np.int32)]
  for first in range(0, len(examples), batch_size):
    batch = examples[first:first + batch_size]
    pieces = tokenizer.tokenize(tf.constant([e.text for e in batch]))
    empty = np.flatnonzero(pieces.row_lengths().numpy() == 0)
    if len(empty):
      raise ValueError(f"{batch[empty[0]].where}: the text is empty (no "
                       "WordPieces); --doc_stride needs a text in every "
                       "example: fill it in or drop the row")
    inputs, text = windowing.pack(pieces, tokenizer.cls_id, tokenizer.sep_id)
    for name in names:
      chunks[name].append(inputs[name].numpy())
    texts.append(text.numpy() + first)
  return ({name: np.concatenate(chunks[name]) for name in names},
          np.concatenate(texts))


def documents(inputs, text, num_texts):
  """Windows [W, T] (`encode`'s, in text order) -> documents [D, M, T]:
  row d holds text d's windows first, then all-zero windows up to M, the
  most windows of any text (`BertDocumentClassifier`'s training inputs:
  `--window_training=documents`)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  counts = np.bincount(text, minlength=num_texts)                  # [D]
  # Each window's place in its text: its index less its text's first.
  place = np.arange(len(text)) - np.repeat(np.cumsum(counts) - counts,
                                           counts)                 # [W]
  most = max(counts.max(initial=0), 1)                             # M
  out = {}
  for name, value in inputs.items():
    out[name] = np.zeros((num_texts, most, value.shape[-1]), value.dtype)
    out[name][text, place] = value
  return out
