"""A cross-encoder that reranks a retriever's candidates: run_reranker's task.

Data: `train`, `dev` and `test` files found as run_classifier finds them
(text_files.py), in run_embedding's layouts: a query column (`anchor`), a
relevant passage (`positive`) and, optionally, negative columns (`negative`,
or `negative_1` ... `negative_K`). A query on several rows has several
positives. With a retriever (`--retriever`, retriever.py), each training
query's negatives are mined from its ranking of the training passages as
sentence-transformers' reranker guide mines them (candidates.py), and each
dev query's candidates are its top `rerank_top_k` dev passages; without one,
the training file's negative columns are the negatives and each dev query's
candidates are every dev passage (in the file's order).

Model (modeling/cross_encoder.py): `[CLS] query [SEP] passage [SEP]`, one
logit from the pooled [CLS] output; the score is its sigmoid.

Losses:
  bce       (default) sentence-transformers' BinaryCrossEntropyLoss: each
            (query, passage) pair, label 1 for a positive and 0 for a
            negative, shuffled; the positives weighted by `positive_weight`
            (its `pos_weight`; default the training pairs' negatives per
            positive, as its guide passes num_negatives).
  listwise  each row's group (its positive first, then its K negatives):
            softmax cross-entropy over the group's logits with the positive
            as the class; a batch counts queries.

Evaluation: each dev query's candidates reordered by score: eval_mrr_at_10
(the best metric) and eval_ndcg_at_10, beside the retriever's own order's
eval_retriever_mrr_at_10 and eval_retriever_ndcg_at_10 (with a retriever),
and the two orders fused by reciprocal rank fusion (candidates.fused):
eval_fused_mrr_at_10, eval_fused_ndcg_at_10.
Prediction: the test file's (query, passage) rows scored, test_results.tsv.
Export (`export_spec`): text pairs in, `scores` and `logits` out
(export/rerank_serving.py adds the `rerank` signature: one query, N
passages).

Shapes: N pairs, Q queries, G = 1 + K passages per group, T positions.
"""

import dataclasses
import json
import os
import re
import time
from typing import Optional

import numpy as np

from official_bert import derived_files
from official_bert.data import text_files
from official_bert.tasks.reranking import candidates as candidates_lib
from official_bert.tasks.reranking import retriever as retriever_lib
from official_bert.training import task as task_lib

LOSSES = ("bce", "listwise")
NEGATIVES_FILE = "reranker_negatives.tsv"
# What the retriever gave a training run (its training negatives, its dev
# candidates and figures), reused by a rerun made from the same retriever,
# files and settings: a resumed or evaluation-only run neither loads the
# retriever nor embeds the passages again. The record is written last.
RETRIEVED_FILE, RETRIEVED_RECORD = ("reranker_retrieved.json",
                                    "reranker_retrieved_record.json")
RETRIEVED_FROM = {
    "retriever": "the retriever (--retriever)",
    "columns": "the columns",
    "train_file": "the training file",
    "mining": ("the mining (--num_negatives, --negative_rank_range, "
               "--max_negative_score, --negative_margin)"),
    "dev_file": "the dev file",
    "rerank_top_k": "--rerank_top_k",
}


@dataclasses.dataclass(frozen=True)
class RerankingConfig:
  """A reranker run's data and modes, with the flags' names.

  splits: the splits the run reads ("train", "dev", "test").
  anchor_column, positive_column, negative_column: the files' columns
    (negative_column: comma-separated names, each a column or the numbered
    columns NAME_1, NAME_2, ...; used when the file has them).
  loss: "bce" or "listwise"; positive_weight: bce's weight of a positive
    pair (None: the training pairs' negatives per positive).
  retriever: an export with a sentence_embedding output, or None;
    vocab_file: the reranker's, which the retriever must share.
  rerank_top_k: the dev candidates per query, with a retriever.
  num_negatives, negative_rank_range, max_negative_score, negative_margin:
    the mining's (candidates.mine), with a retriever.
  """
  data_dir: str
  output_dir: str
  splits: tuple = ("train", "dev")
  anchor_column: str = "anchor"
  positive_column: str = "positive"
  negative_column: str = "negative"
  loss: str = "bce"
  positive_weight: Optional[float] = None
  retriever: Optional[str] = None
  vocab_file: Optional[str] = None
  rerank_top_k: int = 100
  num_negatives: int = candidates_lib.NUM_NEGATIVES
  negative_rank_range: tuple = candidates_lib.RANK_RANGE
  max_negative_score: float = candidates_lib.MAX_SCORE
  negative_margin: float = candidates_lib.MARGIN


# ------------------------------------------------------- loss, metrics ----
def bce_losses(labels, logits, positive_weight=1.0):
  """{"loss": the mean of -[w y log s(x) + (1 - y) log(1 - s(x))]} over
  the pairs (torch's BCEWithLogitsLoss with pos_weight w): logits [B, 1],
  labels float [B] (1 positive, 0 negative)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  x = logits[:, 0]
  y = ops.cast(labels, "float32")
  loss = (positive_weight * y * ops.softplus(-x)
          + (1.0 - y) * ops.softplus(x))
  return {"loss": ops.mean(loss)}


def listwise_losses(labels, logits):
  """{"loss": the mean softmax cross-entropy of each group's logits [B, G]
  with its positive (labels int [B], its index) as the class}."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  return {"loss": ops.mean(keras.losses.sparse_categorical_crossentropy(
      labels, logits, from_logits=True))}


def metric_counts(labels, logits, loss):
  """bce: pairs on the right side of 0 (logged as pair_accuracy);
  listwise: groups whose positive scores highest (top1_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  if loss == "bce":
    right = ops.equal(logits[:, 0] > 0, ops.cast(labels, "float32") > 0.5)
    name = "pair"
  else:
    right = ops.equal(ops.cast(ops.argmax(logits, -1), "int32"),
                      ops.cast(labels, "int32"))
    name = "top1"
  return {f"{name}_correct": ops.sum(ops.cast(right, "float32")),
          f"{name}_total": ops.cast(ops.shape(right)[0], "float32")}


def rerank_outputs(logits):
  """The export's outputs (TF ops): logits [B, 1] -> `scores` [B] (their
  sigmoid, as CrossEncoder.predict) and `logits` [B]."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x = tf.cast(logits, tf.float32)[:, 0]
  return {"scores": tf.sigmoid(x), "logits": x}


def negative_columns(spec, row):
  """The file's negative columns (a list, [] for none): each
  comma-separated name of `spec` when the file has that column, else its
  numbered columns NAME_1, NAME_2, ... in order."""
  found = []
  for name in (n.strip() for n in (spec or "").split(",") if n.strip()):
    if name in row:
      found.append(name)
    else:
      found += [c for _, c in sorted(
          (int(m.group(1)), c) for c in row
          for m in [re.fullmatch(re.escape(name) + r"_(\d+)", c)] if m)]
  return found


@dataclasses.dataclass
class Split:
  """A split read: rows (where, query, positive, [negatives]); after
  `encode`, its pairs' inputs and what evaluation or training needs."""
  rows: list
  inputs: Optional[dict] = None
  labels: Optional[np.ndarray] = None
  candidates: Optional[list] = None   # dev: Q arrays of passage indices
  relevant: Optional[list] = None     # dev: Q sets of passage indices
  said: str = ""


# ------------------------------------------------------------------ task ----
class RerankingTask:
  """run_reranker's task (a training/task.py `FinetuningTask`)."""

  best_metric = "eval_mrr_at_10"
  metric_range = 1.0
  prepares_every_epoch = False  # its negatives are mined once, in encode
  num_distill_texts = 0  # run_reranker takes no --distill_data

  def __init__(self, config):
    if config.loss not in LOSSES:
      raise ValueError(f"loss must be one of {list(LOSSES)}, got "
                       f"{config.loss!r}")
    self.config = config
    self.splits = {}
    self.tokenizer = None
    self.retriever_dir = None
    self.positive_weight = config.positive_weight
    self.retriever_metrics = {}
    self.mined = {}  # the training rows' mined negatives, for the file
    self.retrieved = {}  # what the retriever gave, by split (RETRIEVED_FILE)
    self.retrieved_from = None  # its record, when this run ran it

  @property
  def example_name(self):
    return "pairs" if self.config.loss == "bce" else "queries"

  # ---------------------------------------------------- preprocessing ----
  def read(self):
    """Reads every split and checks the retriever (ValueError: one sentence
    naming the file and line)."""
    for split in self.config.splits:
      self.splits[split] = Split(self._read_split(split))
    if self.config.retriever:
      self.retriever_dir = retriever_lib.check(self.config.retriever,
                                               self.config.vocab_file)
    if "train" in self.splits and not self.config.retriever and not any(
        negatives for _, _, _, negatives in self.splits["train"].rows):
      path = text_files.find_split_file(self.config.data_dir, "train")
      raise ValueError(
          f"{path} has no negatives (no column {self.config.negative_column!r}"
          f" nor {self.config.negative_column}_1, ...) and no --retriever "
          "mines them; add negative columns or pass --retriever")

  def _read_split(self, split):
    config = self.config
    path = text_files.find_split_file(config.data_dir, split)
    rows = text_files.read_rows(path, {})
    text_files.check_columns(rows, {config.anchor_column: "--anchor_column",
                                    config.positive_column:
                                        "--positive_column"})
    negatives = negative_columns(config.negative_column, rows[0][1])
    read = []
    for where, row in rows:
      query = text_files.cell_text(row[config.anchor_column])
      positive = text_files.cell_text(row[config.positive_column])
      if not query.strip():
        raise ValueError(f"{where}: the query ({config.anchor_column!r}) is "
                         "empty; fill it or drop the row")
      if not positive.strip():
        raise ValueError(
            f"{where}: the query {query[:40]!r} has no positive (its "
            f"{config.positive_column!r} is empty); every row needs a "
            "passage that answers its query: fill it or drop the row")
      texts = [text_files.cell_text(row.get(c, "")) for c in negatives]
      read.append((where, query, positive, [t for t in texts if t.strip()]))
    return read

  def encode(self, tokenizer, max_seq_length):
    """Mines the training negatives and the dev candidates (with a
    retriever), then packs every (query, passage) pair as `[CLS] query
    [SEP] passage [SEP]` (text_files.encode)."""
    self.tokenizer = tokenizer
    retriever = None
    if self.retriever_dir:
      made_from = self._retrieved_made_from()
      self.retrieved = self._reusable_retrieved(made_from) or {}
      if not self.retrieved:
        retriever = retriever_lib.Retriever(self.retriever_dir)
        self.retrieved_from = made_from

    def encode_pairs(pairs):
      return text_files.encode([text_files.Example(q, p, None, w)
                                for w, q, p in pairs], tokenizer,
                               max_seq_length)

    if "train" in self.splits:
      self._encode_train(retriever, encode_pairs)
    if "dev" in self.splits:
      self._encode_dev(retriever, encode_pairs)
    if "test" in self.splits:
      split = self.splits["test"]
      split.inputs = encode_pairs([(w, q, p) for w, q, p, _ in split.rows])

  def _encode_train(self, retriever, encode_pairs):
    config = self.config
    split = self.splits["train"]
    positives, own = {}, {}  # query -> its positives; text -> passage index
    for _, query, positive, negatives in split.rows:
      positives.setdefault(query, set()).add(positive)
      for text in [positive] + negatives:
        own.setdefault(text, len(own))
    row_negatives = [negatives for _, _, _, negatives in split.rows]
    if "train" in self.retrieved:  # [query, its negatives], in order
      by_query = dict(self.retrieved["train"]["negatives"])
      row_negatives = [by_query[q] for _, q, _, _ in split.rows]
      self.mined = by_query
      split.said = self.retrieved["train"]["said"]
    elif retriever is not None:
      queries, passages = list(positives), list(own)
      t0 = time.time()
      scores = candidates_lib.cosine(retriever.embed(queries),
                                     retriever.embed(passages))
      mined, skipped = candidates_lib.mine(
          scores, [[own[p] for p in positives[q]] for q in queries],
          np.array([own.get(q, -1) for q in queries]), config.num_negatives,
          config.negative_rank_range, config.max_negative_score,
          config.negative_margin)
      by_query = {q: [passages[j] for j in m] for q, m in zip(queries, mined)}
      row_negatives = [by_query[q] for _, q, _, _ in split.rows]
      self.mined = by_query
      counts = np.array([len(m) for m in mined])
      split.said = (
          f"mined by {self.retriever_dir} in {time.time() - t0:.1f} s: "
          f"{counts.sum()} negatives for {len(queries)} queries among "
          f"{len(passages)} passages (ranks {config.negative_rank_range[0] + 1}"
          f"..{config.negative_rank_range[1]}, score <= "
          f"{config.max_negative_score}, {config.negative_margin} under the "
          f"positive; {skipped:,} candidates over those limits; "
          f"{int((counts < config.num_negatives).sum())} queries with fewer "
          f"than {config.num_negatives})")
      self.retrieved["train"] = {"negatives": list(by_query.items()),
                                 "said": split.said}
    if config.loss == "bce":
      pairs = {}
      for (where, query, positive, _), negatives in zip(split.rows,
                                                         row_negatives):
        pairs.setdefault((query, positive), (where, 1.0))
        for text in negatives:
          if text not in positives[query]:
            pairs.setdefault((query, text), (where, 0.0))
      split.inputs = encode_pairs([(w, q, p) for (q, p), (w, _)
                                   in pairs.items()])
      split.labels = np.array([y for _, y in pairs.values()], np.float32)
      positive_pairs = float(split.labels.sum())
      if self.positive_weight is None:
        self.positive_weight = max(
            1.0, (len(split.labels) - positive_pairs) / positive_pairs)
      return
    k = max(len(n) for n in row_negatives)
    groups = [(where, query, [positive] + negatives)
              for (where, query, positive, _), negatives in zip(
                  split.rows, row_negatives) if len(negatives) == k]
    if not k or not groups:
      raise ValueError(f"{split.rows[0][0].rsplit(':', 1)[0]}: no query has "
                       "negatives to make a listwise group of; use --loss=bce"
                       " or add negatives")
    dropped = len(split.rows) - len(groups)
    split.said += ("; " if split.said else "") + (
        f"listwise groups of {k + 1} passages, {dropped} rows with fewer "
        f"than {k} negatives left out")
    flat = encode_pairs([(w, q, p) for w, q, texts in groups
                         for p in texts])                      # [Q * G, T]
    split.inputs = {name: a.reshape(len(groups), k + 1, -1)
                    for name, a in flat.items()}               # [Q, G, T]
    split.labels = np.zeros(len(groups), np.int32)  # the positive: first

  def _encode_dev(self, retriever, encode_pairs):
    config = self.config
    split = self.splits["dev"]
    relevant, index, where = {}, {}, {}
    for w, query, positive, negatives in split.rows:
      for text in [positive] + negatives:
        index.setdefault(text, len(index))
      relevant.setdefault(query, set()).add(index[positive])
      where.setdefault(query, w)
    queries, passages = list(relevant), list(index)
    if "dev" in self.retrieved:
      dev = self.retrieved["dev"]
      split.candidates = [np.array(c, np.int64) for c in dev["candidates"]]
      self.retriever_metrics = dict(dev["metrics"])
      split.said = dev["said"]
    elif retriever is not None:
      scores = candidates_lib.cosine(retriever.embed(queries),
                                     retriever.embed(passages))
      split.candidates = candidates_lib.top_candidates(scores,
                                                       config.rerank_top_k)
      found = candidates_lib.ranking_metrics(split.candidates,
                                             list(relevant.values()))
      self.retriever_metrics = {f"eval_retriever_{k}": v
                                for k, v in found.items()}
      split.said = (f"the retriever's top {config.rerank_top_k} of "
                    f"{len(passages)} passages per query")
      self.retrieved["dev"] = {
          "candidates": [[int(j) for j in c] for c in split.candidates],
          "metrics": self.retriever_metrics, "said": split.said}
    else:
      split.candidates = [np.arange(len(passages))] * len(queries)
      split.said = f"every one of the {len(passages)} passages per query"
    split.relevant = list(relevant.values())
    split.inputs = encode_pairs([(where[q], q, passages[j])
                                 for q, c in zip(queries, split.candidates)
                                 for j in c])

  def _retrieved_made_from(self):
    """What the retriever's outputs are made from (RETRIEVED_FROM keys): the
    retriever's digest, the columns, each file's digest (None for a split
    this run does not read) and the settings."""
    config = self.config

    def file_digest(split):
      return (derived_files.file_digest(text_files.find_split_file(
          config.data_dir, split)) if split in self.splits else None)
    return {"retriever": derived_files.folder_digest(self.retriever_dir),
            "columns": [config.anchor_column, config.positive_column,
                        config.negative_column],
            "train_file": file_digest("train"),
            "mining": [config.num_negatives, list(config.negative_rank_range),
                       config.max_negative_score, config.negative_margin],
            "dev_file": file_digest("dev"),
            "rerank_top_k": config.rerank_top_k}

  def _reusable_retrieved(self, made_from):
    """RETRIEVED_FILE's contents when output_dir holds one made from
    `made_from` for the splits this run reads (None otherwise); either way
    a line says which."""
    output_dir = self.config.output_dir
    if not output_dir:
      return None
    ignore = [k for split, keys in (("train", ("train_file", "mining")),
                                    ("dev", ("dev_file", "rerank_top_k")))
              if split not in self.splits for k in keys]
    content, _, why = derived_files.reusable(
        output_dir, RETRIEVED_FILE, RETRIEVED_RECORD, made_from,
        RETRIEVED_FROM, "retrieved_file", file_changed="written",
        inputs_changed=" since the retriever ran", ignore=ignore)
    path = os.path.join(output_dir, RETRIEVED_FILE)
    if content is None:
      if why:
        print(f"retriever: {path}: {why}; running the retriever again",
              flush=True)
      return None
    print(f"retriever: reused {path} (made from the same retriever, files "
          "and settings)", flush=True)
    return json.loads(content)

  def retrieved_files(self):
    """{file name: text}: RETRIEVED_FILE and then its record, when this run
    ran the retriever ({} otherwise)."""
    if self.retrieved_from is None:
      return {}
    text = json.dumps(self.retrieved, sort_keys=True) + "\n"
    made = dict(self.retrieved_from, retrieved_file=derived_files.digest(
        text.encode("utf-8")))
    return {RETRIEVED_FILE: text,
            RETRIEVED_RECORD: json.dumps(made, indent=2, sort_keys=True)
                              + "\n"}

  @property
  def num_train_examples(self):
    split = self.splits.get("train")
    return 0 if split is None or split.labels is None else len(split.labels)

  def run_files(self):
    return {}

  def log_start(self, run_description):
    config = self.config
    loss = config.loss
    if config.loss == "bce" and self.positive_weight is not None:
      loss += f", positives weighted {self.positive_weight:g}"  # training
    parts = []
    for name, split in self.splits.items():
      count = (f"{self.num_train_examples} {self.example_name}"
               if name == "train" else
               f"{len(split.relevant)} queries" if name == "dev" else
               f"{len(split.rows)} pairs")
      parts.append(f"{name} {count}" + (f" ({split.said})" if split.said
                                        else ""))
    print(f"reranker ({loss}): " + ", ".join(parts)
          + f"; {run_description}", flush=True)
    for name, split in list(self.splits.items())[:1]:
      ids, mask = (split.inputs[k].reshape(-1, split.inputs[k].shape[-1])
                   for k in ("input_word_ids", "input_mask"))
      for i in range(min(2, len(ids))):
        print(f"{name} pair {i}: " + " ".join(
            self.tokenizer.convert_ids_to_tokens(ids[i][:mask[i].sum()])),
              flush=True)

  # ------------------------------------------------- model and losses ----
  def build_model(self, bert_config, kernels):
    from official_bert.modeling import cross_encoder  # pylint: disable=g-import-not-at-top
    return cross_encoder.BertCrossEncoder.from_bert_config(
        bert_config, 1, kernels=kernels)

  def losses(self, labels, outputs):
    if self.config.loss == "bce":
      return bce_losses(labels, outputs, self.positive_weight or 1.0)
    return listwise_losses(labels, outputs)

  def metric_counts(self, labels, outputs):
    return metric_counts(labels, outputs, self.config.loss)

  def train_data(self):
    """bce: (pairs' inputs [N, T], labels float32 [N]); listwise: (groups'
    inputs [Q, G, T], the positive's index int32 [Q], 0)."""
    split = self.splits["train"]
    return split.inputs, split.labels

  def in_batch_loss(self):
    return None  # each pair's (group's) loss reads its own logits

  def train_order(self, batch_size, seed, num_examples):
    del batch_size, seed, num_examples  # shuffled by the finetuner
    return None

  def prepare_training(self, predict, model, resumed, epoch):
    """The mined negatives (with a retriever), written for the reader as
    reranker_negatives.tsv: query, then its negatives. Mined from the
    retriever in `encode`, the same on every run of the same inputs."""
    del predict, model, resumed, epoch
    if not self.mined:
      return {}
    width = max(len(n) for n in self.mined.values())
    header = ["query"] + [f"negative_{i}" for i in range(1, width + 1)]
    clean = lambda t: " ".join(t.split())
    return {NEGATIVES_FILE: "".join(
        "\t".join(clean(t) for t in row) + "\n"
        for row in [header] + [[q] + n for q, n in self.mined.items()]),
            **self.retrieved_files()}

  def teacher_outputs(self, predict):
    """Not offered: a reranker is not distilled here (ValueError)."""
    del predict
    raise ValueError("run_reranker does not distil from a --teacher yet; "
                     "drop --teacher")

  def distill_losses(self, labels, teacher, outputs, temperature, labelled):
    """The bce label loss over the labelled pairs, and the mean squared
    error of the logits to the teacher's (sentence-transformers' MSELoss
    for cross-encoders); no temperature. Unused while teacher_outputs
    refuses."""
    from keras import ops  # pylint: disable=g-import-not-at-top
    del temperature
    x, y = outputs[:, 0], ops.cast(labels, "float32")
    weight = self.positive_weight or 1.0
    label = weight * y * ops.softplus(-x) + (1.0 - y) * ops.softplus(x)
    labelled = ops.cast(labelled, "float32")
    return {"label_loss": ops.sum(label * labelled)
                          / ops.maximum(ops.sum(labelled), 1.0),
            "distill_loss": ops.mean(ops.square(x - teacher[:, 0]))}

  def init_head(self, model):
    """Nothing: the head keeps its initializers."""

  def example_inputs(self):
    split = next(iter(self.splits.values()))
    return {k: v.reshape(-1, v.shape[-1])[:1] for k, v in
            split.inputs.items()}

  # ------------------------------------------ evaluation and prediction ----
  def _dev_scores(self, predict):
    """Each dev query's candidates' logits (a list of Q float arrays)."""
    split = self.splits["dev"]
    logits = predict(split.inputs)[:, 0]
    ends = np.cumsum([len(c) for c in split.candidates])
    return np.split(logits, ends[:-1])

  def evaluate(self, predict, step):
    """Each dev query's candidates reranked by the model's logits."""
    split = self.splits["dev"]
    scores = self._dev_scores(predict)
    found = candidates_lib.ranking_metrics(
        candidates_lib.reranked(split.candidates, scores), split.relevant)
    result = {f"eval_{k}": v for k, v in found.items()}
    result.update(self.retriever_metrics)
    if self.retriever_metrics:  # the two orders fused (candidates.fused)
      both = candidates_lib.ranking_metrics(
          candidates_lib.reranked(split.candidates,
                                  candidates_lib.fused(scores)),
          split.relevant)
      result.update({f"eval_fused_{k}": v for k, v in both.items()})
    result["eval_num_queries"] = len(split.relevant)
    result["eval_candidates_per_query"] = float(np.mean(
        [len(c) for c in split.candidates]))
    result["global_step"] = step
    return result

  def eval_summary(self, result):
    said = (f"eval_mrr_at_10 {result['eval_mrr_at_10']:.4f} "
            f"eval_ndcg_at_10 {result['eval_ndcg_at_10']:.4f}")
    if "eval_retriever_mrr_at_10" in result:
      said += (" (retriever alone: eval_mrr_at_10 "
               f"{result['eval_retriever_mrr_at_10']:.4f}; the two fused: "
               f"{result['eval_fused_mrr_at_10']:.4f})")
    return said

  def predict(self, predict, step):
    """({"test_results.tsv": one line per test row: its pair's score (the
    sigmoid of its logit)}, the summary's words, no eval result)."""
    del step
    t0 = time.time()
    logits = predict(self.splits["test"].inputs)[:, 0]
    seconds = time.time() - t0
    scores = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    return ({"test_results.tsv": "".join(f"{s:.8g}\n" for s in scores)},
            f"{len(scores)} test pairs scored in {seconds:.1f} s", None)

  def tune(self, predict):
    del predict  # nothing to choose on dev: the scores order the candidates
    return {}

  # ----------------------------------------------------------- export ----
  def export_spec(self):
    """Text pairs in, `scores` and `logits` [B] out; model.tflite answers
    the model's logits [B, 1]."""
    return task_lib.ExportSpec(outputs=rerank_outputs, text_pair=True)
