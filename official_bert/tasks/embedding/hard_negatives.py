"""Hard negatives mined by the model itself (`--mine_hard_negatives=K`).

Before training, the weights training starts from embed the training file's
anchors and its passages (every positive and every negative of its
negative columns); each anchor searches the passages by cosine and keeps
its K best-ranked candidates that are not its answer. This is
sentence-transformers' `util.mine_hard_negatives` with
`output_format="n-tuple"` and `sampling_strategy="top"`:

  * an anchor that has several rows (several positives) is searched once,
    and none of its positives is ever its negative; nor is its own text;
  * near-duplicates of the positive are skipped: a candidate scoring above
    `p - |p| * relative_margin`, p the anchor's lowest positive score, is
    left out (sentence-transformers' `relative_margin`): so is every
    candidate the model ranks above the positive, likely an unlabelled
    answer;
  * the K best that remain are the row's negatives; an anchor with fewer
    than K such candidates is dropped, with all its rows (as
    sentence-transformers drops it in its n-tuple format).

Defaults, and why they differ from `mine_hard_negatives`'s own: its
`relative_margin` and `absolute_margin` default to None (no margin: the
top-ranked non-positive texts, which in real data are often unlabelled
answers); we take `relative_margin=0.05` (`--hard_negative_margin`), the
setting its docstring recommends, NV-Retriever's "TopK-PercPos (95%)".
`range_min=0` and `sampling_strategy="top"` are its defaults. Its
`range_max` (None: derived as `10 K + the most positives per anchor` when a
margin is set, the candidates a FAISS search returns) has no equivalent
here: every passage is scored (numpy, in chunks of anchors) and the margin
filters the whole row, so no valid candidate is lost to a window.
`max_score`, `min_score` and a cross-encoder rescoring are not offered.

The mined rows are written as `hard_negatives.tsv` (`anchor`, `positive`,
`negative_1` ... `negative_K`: the layout run_embedding reads) beside
`hard_negatives.json`, what they were made from (`record`): the training
file, its columns and encoding, the starting weights, the pooling, K and the
margin, and the digest of the .tsv itself. A rerun reuses the file when
they are unchanged; a rerun that resumes from its own checkpoint compares
all but the weights (its checkpoints were trained on that file). Mined
again at the start of epoch E > 1 (`--remine_every_epoch`, by the weights
trained so far), they are `hard_negatives_epoch_E.tsv` and `.json`
(`file_names`).

Shapes: A anchors, C passages (the corpus), H hidden size, K negatives.
"""

import dataclasses
import json
import os

import numpy as np

from official_bert import derived_files

FILE = "hard_negatives.tsv"
RECORD = "hard_negatives.json"
RELATIVE_MARGIN = 0.05  # NV-Retriever's TopK-PercPos (95%), see above


@dataclasses.dataclass(frozen=True)
class Mined:
  """`mine`'s answer: negatives int [A, K] (passage indices, -1 where
  fewer than K candidates remained), scores float32 [A, K] (their cosines),
  positive_scores [A] (each anchor's lowest positive cosine) and skipped
  (candidates left out as near-duplicates of the positive)."""
  negatives: np.ndarray
  scores: np.ndarray
  positive_scores: np.ndarray
  skipped: int


def _unit(x):
  x = np.asarray(x, np.float32)
  return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def mine(anchors, corpus, positives, own_text, num_negatives,
         relative_margin=RELATIVE_MARGIN, chunk_elements=1 << 24):
  """Each anchor's `num_negatives` best passages by cosine (a `Mined`).

  Args:
    anchors: float [A, H], one vector per distinct anchor.
    corpus: float [C, H], one vector per distinct passage.
    positives: A lists of passage indices: each anchor's positives, never
      its negatives; the margin is taken from the lowest of their scores.
    own_text: int [A]: the passage index of the anchor's own text (never its
      negative), -1 when the corpus lacks it.
    num_negatives: K.
    relative_margin: candidates scoring above `p - |p| * relative_margin`
      are skipped (None: no margin).
    chunk_elements: at most this many scores [anchors, C] at once.
  """
  a, c = _unit(anchors), _unit(corpus)
  k = min(num_negatives, len(c))
  negatives = np.full((len(a), num_negatives), -1, np.int64)
  scores = np.full((len(a), num_negatives), -np.inf, np.float32)
  positive_scores = np.zeros(len(a), np.float32)
  skipped = 0
  step = max(1, chunk_elements // max(len(c), 1))
  for start in range(0, len(a), step):
    s = a[start:start + step] @ c.T                            # [n, C]
    rows = np.arange(len(s))
    for i in rows:  # its positives: scored, then never candidates
      answers = positives[start + i]
      positive_scores[start + i] = s[i, answers].min()
      s[i, answers] = -np.inf
    own = np.asarray(own_text[start:start + step])
    s[rows[own >= 0], own[own >= 0]] = -np.inf              # its own text
    if relative_margin is not None:
      p = positive_scores[start:start + step]
      near = s > (p - np.abs(p) * relative_margin)[:, None]
      skipped += int(near.sum())
      s[near] = -np.inf
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]            # [n, k]
    top_scores = np.take_along_axis(s, top, axis=1)
    by_score = np.argsort(-top_scores, axis=1, kind="stable")
    top = np.take_along_axis(top, by_score, axis=1)
    top_scores = np.take_along_axis(top_scores, by_score, axis=1)
    negatives[start:start + step, :k] = np.where(np.isfinite(top_scores),
                                                  top, -1)
    scores[start:start + step, :k] = top_scores
  return Mined(negatives, scores, positive_scores, skipped)


def mine_rows(texts, embed, num_negatives, relative_margin=RELATIVE_MARGIN):
  """(rows, summary): the training rows with mined negatives.

  `texts` {"anchor": [N], "positive": [N], any "negative..." roles: [N]}
  (the training file's columns); `embed(role_rows)` -> float [len, H]: the
  vectors of the texts at [(role, row), ...]. Rows: (anchor, positive,
  negative_1, ..., negative_K) tuples, one per distinct (anchor, positive)
  pair in the order of the file, without the anchors that had fewer than K
  candidates; the summary is their counts and mean cosines in words.
  """
  anchor_at, passage_at = {}, {}  # text -> (role, row) of its first row
  for row, text in enumerate(texts["anchor"]):
    anchor_at.setdefault(text, ("anchor", row))
  passage_roles = ["positive"] + [r for r in texts
                                  if r.startswith("negative")]
  for role in passage_roles:
    for row, text in enumerate(texts[role]):
      passage_at.setdefault(text, (role, row))
  anchors, passages = list(anchor_at), list(passage_at)
  anchor_index = {text: i for i, text in enumerate(anchors)}
  passage_index = {text: i for i, text in enumerate(passages)}
  pairs = list(dict.fromkeys(zip(texts["anchor"], texts["positive"])))
  positives = [[] for _ in anchors]
  for anchor, positive in pairs:
    positives[anchor_index[anchor]].append(passage_index[positive])
  own_text = np.array([passage_index.get(text, -1) for text in anchors])
  mined = mine(embed([anchor_at[t] for t in anchors]),
               embed([passage_at[t] for t in passages]), positives,
               own_text, num_negatives, relative_margin)
  complete = (mined.negatives >= 0).all(axis=1)
  rows = [(anchor, positive) + tuple(
      passages[j] for j in mined.negatives[anchor_index[anchor]])
          for anchor, positive in pairs if complete[anchor_index[anchor]]]
  summary = (
      f"{len(rows)} rows, {num_negatives} negatives each, from "
      f"{len(anchors)} anchors among {len(passages)} passages; "
      f"{int((~complete).sum())} anchors without {num_negatives} "
      f"candidates dropped; {mined.skipped:,} candidates skipped as "
      f"scoring above the positive or within the margin "
      f"({relative_margin}) below it; mean cosine positive "
      f"{float(mined.positive_scores.mean()):.3f}, negative "
      f"{_mean_finite(mined.scores):.3f}")
  return rows, summary


def _mean_finite(x):
  finite = x[np.isfinite(x)]
  return float(finite.mean()) if finite.size else float("nan")


# ------------------------------------------------------------- the file ----
def tsv_cell(text):
  """`text` as a TSV cell: tabs and line breaks as spaces (the tokenizer
  reads every one of them as a space: the same model inputs)."""
  return text.replace("\t", " ").replace("\n", " ").replace("\r", " ")


def file_names(epoch=0):
  """(the mined file, its record) for the epoch of index `epoch` (0: the
  first, mined before training)."""
  if not epoch:
    return FILE, RECORD
  stem = f"hard_negatives_epoch_{epoch + 1}"
  return f"{stem}.tsv", f"{stem}.json"


def tsv_text(rows, num_negatives):
  """hard_negatives.tsv's text: a header row, then one row per tuple."""
  header = ["anchor", "positive"] + [f"negative_{i}" for i in
                                     range(1, num_negatives + 1)]
  return "".join("\t".join(tsv_cell(t) for t in row) + "\n"
                 for row in [header] + list(rows))


# What a record's entries are, in words (the line that says why a rerun
# mines again names them).
MADE_FROM = {
    "training_file": "the training file",
    "columns": "the columns",
    "encoding": ("the encoding (the vocabulary, --do_lower_case or "
                 "--max_seq_length)"),
    "starting_weights": "the weights training starts from",
    "pooling": "the pooling",
    "num_negatives": "--mine_hard_negatives",
    "relative_margin": "--hard_negative_margin",
}


def record(training_file, columns, encoded, weights, pooling, num_negatives,
           relative_margin):
  """What the mined file is made from ({MADE_FROM key: value}): the
  training file's digest (its path), its columns, its encoded inputs'
  digest (`encoded`: arrays), the starting weights' digest (`weights`: the
  model's get_weights()), the pooling, K and the margin."""
  return {"training_file": derived_files.file_digest(training_file),
          "columns": list(columns),
          "encoding": derived_files.digest(encoded),
          "starting_weights": derived_files.digest(weights),
          "pooling": pooling, "num_negatives": num_negatives,
          "relative_margin": relative_margin}


def reusable(output_dir, made_from, resumed, epoch=0):
  """(rows, why): the epoch's mined file's rows (tuples of texts;
  hard_negatives.tsv for the first, `file_names`) when output_dir holds
  one made from `made_from` (a `record`: all of it but the starting
  weights when the run `resumed` past the epoch's start) and unchanged
  since; else (None, why it is mined again, in words: None when there is
  no file)."""
  content, _, why = derived_files.reusable(
      output_dir, *file_names(epoch), made_from, MADE_FROM, "mined_file",
      file_changed="mined", inputs_changed=" since it was mined",
      ignore=("starting_weights",) if resumed else ())
  if content is None:
    return None, why
  lines = content.decode("utf-8").splitlines()[1:]
  return [tuple(line.split("\t")) for line in lines if line], None


def written(rows, made_from, epoch=0):
  """{file name: text}: the epoch's hard_negatives.tsv, then its
  hard_negatives.json (`file_names`; `made_from`, a `record`, and the
  .tsv's digest: written second, so a rerun after a crash between the two
  mines again)."""
  text = tsv_text(rows, made_from["num_negatives"])
  made = dict(made_from,
              mined_file=derived_files.digest(text.encode("utf-8")))
  name, record_name = file_names(epoch)
  return {name: text, record_name: json.dumps(made, indent=2,
                                               sort_keys=True) + "\n"}
