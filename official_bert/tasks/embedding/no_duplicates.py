"""Training batches in which no text appears twice: run_embedding's order.

With in-batch negatives, every passage of a batch is a candidate for every
anchor. A text that two rows of one batch hold (the same positive, a
positive that is another row's negative, the same anchor with two answers)
becomes a negative of a row it answers. sentence-transformers'
`NoDuplicatesBatchSampler` prevents it; `order` is its algorithm on
token ids:

  each epoch, a seeded permutation of the rows; a batch takes rows in that
  order, deferring any row that shares a text with the batch so far (the
  deferred rows are tried first for the next batch, in their order).

Texts are compared as the model sees them (their token ids: two spellings
that tokenize alike are one text; every column counts, anchors too, as in
sentence-transformers). Two differences: the order holds full batches only
(the trainer drops a short one), and an epoch ends at the first batch it
cannot fill: the rows left (fewer than a batch, unless the file repeats
texts a lot) wait for the next epoch's permutation; sentence-transformers
with `drop_last` keeps trying the deferred rows and drops each short batch.

    order = no_duplicates.order(row_texts, batch_size=32, seed=12345,
                                num_examples=steps * 32)
"""

import numpy as np


def epoch_batches(row_texts, permutation, batch_size):
  """The full batches (lists of row indices) of one epoch: `permutation`'s
  rows in order, a row sharing a text with its batch deferred (see above)."""
  batches, deferred = [], []
  position = 0
  while True:
    batch, seen, skipped = [], set(), []
    for row in deferred:
      if len(batch) < batch_size and seen.isdisjoint(row_texts[row]):
        batch.append(row)
        seen.update(row_texts[row])
      else:
        skipped.append(row)
    while len(batch) < batch_size and position < len(permutation):
      row = permutation[position]
      position += 1
      if seen.isdisjoint(row_texts[row]):
        batch.append(row)
        seen.update(row_texts[row])
      else:
        skipped.append(row)
    if len(batch) < batch_size:
      return batches
    batches.append(batch)
    deferred = skipped


def order(row_texts, batch_size, seed, num_examples):
  """Row indices (int64), whole batches, epoch after epoch until at least
  `num_examples`: each epoch `epoch_batches` of the permutation seeded by
  (seed, epoch), so a resumed run rebuilds the same order. `row_texts[i]`:
  the set of row i's text ids. ValueError when an epoch has no full batch."""
  out, total, epoch = [], 0, 0
  while total < num_examples:
    permutation = np.random.default_rng([seed, epoch]).permutation(
        len(row_texts))
    batches = epoch_batches(row_texts, permutation, batch_size)
    if not batches:
      raise ValueError(f"no batch of {batch_size} rows without a repeated "
                       f"text among {len(row_texts)} rows")
    out.extend(batches)
    total += len(batches) * batch_size
    epoch += 1
  return np.array(out, np.int64).reshape(-1)
