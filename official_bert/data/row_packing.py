"""Packing pretraining examples into rows of several sequences (numpy).

Records written one sequence per row are mostly padding when sequences are
short (the data job's short_seq_prob, documents' last segments; Graphcore
measured more than half of Wikipedia's tokens at seq 512 as padding).
`pack` puts several examples into one row of the same fixed length: each
keeps its tokens, segment ids and masked positions (shifted to where it
starts), and `input_sequence_ids` numbers them (1, 2, ...; 0 for padding),
which the model reads as a block-diagonal attention mask and positions
restarting per sequence (modeling/sequence_packing.py), so each sequence is
trained on as if it were alone. Packed rows train masked-LM only: a row has
no one next-sentence label (RoBERTa and ModernBERT pack and drop NSP).

The choice of rows is first-fit decreasing over a window of examples (the
longest first, each into the first row with room for its tokens and its
masked positions), deterministic for a window. `row_predictions` is a row's
masked-position slots: the examples' own `max_predictions_per_seq` plus one
per extra sequence by default (a short sequence rounds its 15% up).

    inputs, labels = row_packing.pack(inputs, labels, max_seq_length=128,
                                      row_predictions=23)

Shapes: N examples in, R rows out; T positions; P masked slots per example,
Q per row.
"""

import numpy as np

SEQUENCE_IDS = "input_sequence_ids"
# The most sequences a packed row holds (a bound on the masked slots).
MAX_SEQUENCES_PER_ROW = 8
INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
LABEL_KEYS = ("masked_lm_ids", "masked_lm_weights")


def default_row_predictions(max_predictions_per_seq, max_sequences_per_row):
  """The masked slots of a packed row: one example's, plus one for each
  further sequence (each sequence rounds its share of masks up)."""
  return max_predictions_per_seq + max_sequences_per_row - 1


def plan(lengths, predictions, max_seq_length, row_predictions,
         max_sequences_per_row):
  """First-fit decreasing: a list of rows, each a list of example indices in
  the order they sit in the row. `lengths` and `predictions` int [N]."""
  order = np.argsort(-np.asarray(lengths), kind="stable")
  rows, free_tokens, free_slots = [], [], []
  for i in order:
    length, count = int(lengths[i]), int(predictions[i])
    if length > max_seq_length or count > row_predictions:
      raise ValueError(f"an example of {length} tokens and {count} masked "
                       f"positions does not fit a row of {max_seq_length} "
                       f"tokens and {row_predictions} masked slots")
    for r, members in enumerate(rows):
      if (free_tokens[r] >= length and free_slots[r] >= count
          and len(members) < max_sequences_per_row):
        members.append(int(i))
        free_tokens[r] -= length
        free_slots[r] -= count
        break
    else:
      rows.append([int(i)])
      free_tokens.append(max_seq_length - length)
      free_slots.append(row_predictions - count)
  return rows


def pack(inputs, labels, max_seq_length, row_predictions,
         max_sequences_per_row=MAX_SEQUENCES_PER_ROW):
  """Packs a window of examples into rows (see the module docstring).

  Args:
    inputs: numpy {input_word_ids, input_mask, input_type_ids: [N, T],
      masked_lm_positions: [N, P]} (the pipeline's names).
    labels: numpy {masked_lm_ids: [N, P], masked_lm_weights: [N, P]} (any
      next_sentence_labels are dropped).
    max_seq_length: T of the rows (at least the examples').
    row_predictions: Q, the masked slots of a row.
    max_sequences_per_row: the most sequences one row holds.

  Returns:
    (inputs, labels) of R rows: inputs as above plus input_sequence_ids
    int32 [R, T], masked_lm_positions [R, Q]; labels masked_lm_ids [R, Q],
    masked_lm_weights float32 [R, Q], next_sentence_labels int32 [R] (0:
    unused, there is no NSP head).
  """
  mask = np.asarray(inputs["input_mask"])
  lengths = mask.sum(1).astype(np.int64)
  weights = np.asarray(labels["masked_lm_weights"])
  predictions = (weights > 0).sum(1)
  rows = plan(lengths, predictions, max_seq_length, row_predictions,
              max_sequences_per_row)
  num_rows = len(rows)
  out = {key: np.zeros((num_rows, max_seq_length), np.int32)
         for key in INPUT_KEYS + (SEQUENCE_IDS,)}
  out["masked_lm_positions"] = np.zeros((num_rows, row_predictions), np.int32)
  out_labels = {"masked_lm_ids": np.zeros((num_rows, row_predictions),
                                          np.int32),
                "masked_lm_weights": np.zeros((num_rows, row_predictions),
                                              np.float32),
                "next_sentence_labels": np.zeros((num_rows,), np.int32)}
  for r, members in enumerate(rows):
    start = slot = 0
    for k, i in enumerate(members):
      length = int(lengths[i])
      for key in INPUT_KEYS:
        out[key][r, start:start + length] = inputs[key][i, :length]
      out[SEQUENCE_IDS][r, start:start + length] = k + 1
      real = weights[i] > 0
      count = int(real.sum())
      out["masked_lm_positions"][r, slot:slot + count] = (
          np.asarray(inputs["masked_lm_positions"])[i][real] + start)
      out_labels["masked_lm_ids"][r, slot:slot + count] = np.asarray(
          labels["masked_lm_ids"])[i][real]
      out_labels["masked_lm_weights"][r, slot:slot + count] = weights[i][real]
      start += length
      slot += count
  return out, out_labels


def padding_share(lengths, max_seq_length):
  """The share of positions that are padding when each of `lengths` has a
  row of max_seq_length."""
  lengths = np.asarray(lengths)
  return 1.0 - lengths.sum() / (len(lengths) * max_seq_length)
