"""Sentence embeddings trained for search: run_embedding's task.

Data: `train`, `dev` and `test` files found as run_classifier finds them
(text_files.py: `.tsv`, `.csv` or `.jsonl`), with an anchor column, a
positive column (a text the anchor should find) and, when the training
file has them, negative columns (hard negatives: texts it should not;
`negative_columns`). The model (`BertSentenceEmbedder`) pools the encoder's
last layer, by `pooling` ("mean" over the mask, or "cls"), into one vector
per text. With `mine_hard_negatives` = K, the weights training starts from
mine K hard negatives per anchor before training (hard_negatives.py), and
training reads those rows instead.

Loss: sentence-transformers' `MultipleNegativesRankingLoss` (its defaults):
each anchor's cosine similarity with every positive of the batch (and every
hard negative of every row) times `SCALE`, cross-entropy with its own
positive as the class. Batches repeat no text (no_duplicates.py, as
sentence-transformers' NoDuplicatesBatchSampler). Evaluation: retrieval on
dev, each anchor against every dev positive by cosine
(`retrieval_metrics`): eval_mrr_at_10 (the best metric), eval_recall_at_1,
eval_recall_at_10. Prediction: the test anchors' vectors,
test_embeddings.tsv. Export (`export_spec`): `sentence_embedding`.

The pooling is recorded as `pooling.json` ({"pooling": "mean"}) beside a
run's checkpoints (training/sentence_transformers_folder.py, which
convert_checkpoint and export_checkpoint read and write it with): a run
starting from one uses its pooling (`resolve_pooling` there).

    task = EmbeddingTask(EmbeddingConfig(data_dir="pairs", output_dir="/tmp/e",
                                         splits=("train", "dev")))
    task.read(); task.encode(tokenizer, max_seq_length=128)
    finetuner.run_task(task, driver_config, bert_config, program=..., ...)
"""

import dataclasses
import os
import re
import time
from typing import Optional

import numpy as np

from official_bert.data import text_files
from official_bert.tasks.embedding import hard_negatives
from official_bert.tasks.embedding import no_duplicates
from official_bert.training import distillation
from official_bert.training import sentence_transformers_folder as st_folder
from official_bert.training import task as task_lib

SCALE = 20.0  # sentence-transformers' scale (temperature 0.05)
ROLES = ("anchor", "positive", "negative")


@dataclasses.dataclass(frozen=True)
class EmbeddingConfig:
  """An embedding run's data and modes, with the flags' names.

  splits: the splits the run reads ("train", "dev", "test": those
    finetuning_flags.splits names).
  anchor_column, positive_column: the files' columns.
  negative_column: the training file's negative columns, comma-separated;
    each name is a column, or, when the file has none of that name, the
    columns `<name>_1`, `<name>_2`, ... (the mined layout); used when the
    file has them (`negative_columns`).
  pooling: "mean" or "cls" (sentence_transformers_folder.resolve_pooling's
    answer).
  mine_hard_negatives: K > 0: mine K hard negatives per anchor before
    training (hard_negatives.py) into output_dir/hard_negatives.tsv.
  remine_every_epoch: with mine_hard_negatives, mine them again at the
    start of every later epoch E, by the weights trained so far, into
    output_dir/hard_negatives_epoch_E.tsv (`prepares_every_epoch`).
  hard_negative_margin: the mining's relative margin.
  distill_data: a file of unlabelled texts, one per line, each a training
    row of that text in every role that only the distillation loss reads
    (training/distillation.py).
  mini_batch_size: 0, or M: the loss over the whole batch, its gradient
    computed M pairs at a time (GradCache; `in_batch_loss`).
  """
  data_dir: str
  output_dir: str
  splits: tuple = ("train", "dev")
  anchor_column: str = "anchor"
  positive_column: str = "positive"
  negative_column: str = "negative"
  pooling: str = "mean"
  mine_hard_negatives: int = 0
  remine_every_epoch: bool = False
  hard_negative_margin: float = hard_negatives.RELATIVE_MARGIN
  distill_data: Optional[str] = None
  mini_batch_size: int = 0


# ------------------------------------------------------- loss, metrics ----
def _unit(x):
  from keras import ops  # pylint: disable=g-import-not-at-top
  norm = ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True))
  return x / ops.maximum(norm, 1e-12)  # torch's F.normalize


def ranking_scores(outputs, scale=SCALE):
  """[B, B * (1 + M)]: each anchor's cosine with every positive of the
  batch, then every negative of each of the M negative roles (`outputs`'
  keys starting with "negative"), times `scale`."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  candidates = [outputs["positive"]] + [
      outputs[role] for role in sorted(outputs) if role.startswith("negative")]
  candidates = ops.concatenate(candidates, axis=0)        # [B * (1 + M), H]
  return scale * ops.matmul(_unit(outputs["anchor"]),
                            ops.transpose(_unit(candidates)))


def ranking_losses(labels, outputs, scale=SCALE):
  """{"loss": MultipleNegativesRankingLoss}: the mean cross-entropy of each
  anchor's scores (`ranking_scores`) with its own positive (column i of
  row i) as the class. `labels` are unused (the pairs are the labels)."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  del labels
  scores = ranking_scores(outputs, scale)
  target = ops.arange(ops.shape(scores)[0])
  return {"loss": ops.mean(keras.losses.sparse_categorical_crossentropy(
      target, scores, from_logits=True))}


def ranking_metric_counts(labels, outputs):
  """Anchors whose own positive scores highest in the batch (the trainer
  logs them as in_batch_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  del labels
  scores = ranking_scores(outputs)
  right = ops.equal(ops.argmax(scores, -1),
                    ops.arange(ops.shape(scores)[0]))
  return {"in_batch_correct": ops.sum(ops.cast(right, "float32")),
          "in_batch_total": ops.cast(ops.shape(scores)[0], "float32")}


def retrieval_metrics(queries, documents, k=10):
  """{"mrr_at_<k>", "recall_at_1", "recall_at_<k>", "num_examples"} of
  each query (row i of `queries` [N, H]) searching `documents` [N, H] by
  cosine, document i being its one relevant document. Its rank: 1 + the
  documents scoring higher, and those scoring the same that come before it
  (ties by position)."""
  q = np.asarray(queries, np.float64)
  d = np.asarray(documents, np.float64)
  q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
  d = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
  scores = q @ d.T                                            # [N, N]
  own = np.diag(scores)[:, None]
  before = np.arange(len(d))[None, :] < np.arange(len(q))[:, None]
  rank = 1 + np.sum((scores > own) | ((scores == own) & before), axis=1)
  return {f"mrr_at_{k}": float(np.mean(np.where(rank <= k, 1.0 / rank, 0))),
          "recall_at_1": float(np.mean(rank == 1)),
          f"recall_at_{k}": float(np.mean(rank <= k)),
          "num_examples": len(q)}


def negative_columns(spec, first_row):
  """The training file's negative columns (a list, [] for none): for each
  comma-separated name of `spec` (--negative_column), that column when the
  file has it, else its numbered columns `<name>_1`, `<name>_2`, ... in
  order (hard_negatives.tsv's). `first_row`: read_rows' (where, {column:
  value}). A name found nowhere is an error when another one is found;
  when none is, the file has no hard negatives (the default's meaning)."""
  where, row = first_row
  found, missing = [], []
  for name in (n.strip() for n in (spec or "").split(",")):
    if not name:
      continue
    numbered = sorted((int(m.group(1)), column) for column in row
                      for m in [re.fullmatch(re.escape(name) + r"_(\d+)",
                                             column)] if m)
    if name in row:
      found.append(name)
    elif numbered:
      found += [column for _, column in numbered]
    else:
      missing.append(name)
  if found and missing:
    raise ValueError(f"{where}: no column {missing[0]!r} nor "
                     f"{missing[0]}_1, {missing[0]}_2, ... (found "
                     f"{sorted(row)}); name the negative columns with "
                     "--negative_column")
  return found


# ------------------------------------------------------------------ task ----
class EmbeddingTask:
  """run_embedding's task (a training/task.py `FinetuningTask`)."""

  example_name = "pairs"
  best_metric = "eval_mrr_at_10"
  metric_range = 1.0

  def __init__(self, config):
    self.config = config
    # + the negative roles ("negative", or "negative_1" ... "negative_M")
    # of the training file's negative columns.
    self.roles = ROLES[:2]
    self.splits = {}  # split -> (wheres, {role: texts}, {role: inputs})
    self.tokenizer = None
    self.train_path = None
    self.train_rows_file = None  # what training reads: train_path or mined
    self.negative_names = []  # the training file's negative columns
    self.distill_texts = 0  # --distill_data's rows: train's last
    # The training file's (split, roles) once mining replaced them.
    self._unmined = None

  # ---------------------------------------------------- preprocessing ----
  def read(self):
    """Reads every split the run needs (ValueError: one sentence naming the
    file and line)."""
    for split in self.config.splits:
      self.splits[split] = self._read_split(split)
    if self.config.distill_data and "train" in self.splits:
      self._add_distill_data(self.config.distill_data)

  def _add_distill_data(self, path):
    """--distill_data's lines as training rows: the text in every role."""
    if self.config.mine_hard_negatives:
      raise ValueError("--distill_data's texts have no pairs to mine "
                       "negatives for: drop --mine_hard_negatives or "
                       "--distill_data")
    wheres, texts, _ = self.splits["train"]
    with open(path, encoding="utf-8") as f:
      lines = [(f"{path}:{n}", line.strip()) for n, line in enumerate(f, 1)
               if line.strip()]
    if not lines:
      raise ValueError(f"--distill_data {path} has no text; write one text "
                       "per line")
    for role in texts:
      texts[role].extend(text for _, text in lines)
    wheres.extend(where for where, _ in lines)
    self.distill_texts = len(lines)

  def _read_split(self, split):
    config = self.config
    path = text_files.find_split_file(config.data_dir, split)
    columns = {"anchor": config.anchor_column}
    if split != "test":
      columns["positive"] = config.positive_column
    rows = text_files.read_rows(path, {})  # the file, read once
    if split == "train":
      self.train_path = self.train_rows_file = path
      negatives = negative_columns(config.negative_column, rows[0])
      roles = (["negative"] if len(negatives) == 1 else
               [f"negative_{i}" for i in range(1, len(negatives) + 1)])
      columns.update(zip(roles, negatives))
      self.roles = ROLES[:2] + tuple(roles)
      self.negative_names = negatives
    text_files.check_columns(rows, {
        name: f"--{role.split('_')[0]}_column"
        for role, name in columns.items()})
    texts = {role: [] for role in columns}
    for where, row in rows:
      for role, name in columns.items():
        text = text_files.cell_text(row[name])
        if not text.strip():
          raise ValueError(f"{where}: the {role} ({name!r}) is empty; every "
                           f"pair needs an anchor and a positive"
                           + (" and this file's negatives a negative"
                              if len(columns) > 2 else "")
                           + "; fill it or drop the row")
        texts[role].append(text)
    return [w for w, _ in rows], texts, None

  def encode(self, tokenizer, max_seq_length):
    """Packs each text as `[CLS] text [SEP]` (text_files.encode)."""
    self.tokenizer = tokenizer
    for split, (wheres, texts, _) in list(self.splits.items()):
      inputs = {role: text_files.encode(
          [text_files.Example(t, None, None, w)
           for t, w in zip(role_texts, wheres)], tokenizer, max_seq_length)
                for role, role_texts in texts.items()}
      self.splits[split] = (wheres, texts, inputs)

  @property
  def num_train_examples(self):
    return len(self.splits["train"][0]) if "train" in self.splits else 0

  def run_files(self):
    return {st_folder.POOLING_FILE: st_folder.pooling_json(
        self.config.pooling)}

  def log_start(self, run_description):
    negatives = len(self.roles) - 2
    said = (f"{negatives} hard negative column{'s' * (negatives > 1)}"
            if negatives else "no hard negatives")
    if self.config.mine_hard_negatives:
      said += f"; {self.config.mine_hard_negatives} to mine"
      if self.config.remine_every_epoch:
        said += " at every epoch's start"
    if self.config.mini_batch_size:
      said += (f"; each batch's gradient {self.config.mini_batch_size} pairs "
               "at a time (GradCache)")
    print(f"embedding ({self.config.pooling} pooling, in-batch negatives, "
          f"{said}, batches without a repeated text): "
          + ", ".join(f"{split} {len(s[0])} pairs"
                      for split, s in self.splits.items())
          + f"; {run_description}", flush=True)
    if self.num_distill_texts:
      print(f"distill_data: {self.num_distill_texts} texts from "
            f"{self.config.distill_data}", flush=True)
    for split, (wheres, texts, inputs) in list(self.splits.items())[:1]:
      for i in range(min(2, len(wheres))):
        tokens = {}
        for role in texts:
          ids = inputs[role]["input_word_ids"][i]
          n = int(inputs[role]["input_mask"][i].sum())
          tokens[role] = " ".join(self.tokenizer.convert_ids_to_tokens(
              ids[:n]))
        print(f"{split} example {wheres[i]}: " + " | ".join(
            f"{role}: {t}" for role, t in tokens.items()), flush=True)

  # ------------------------------------------------- model and losses ----
  def build_model(self, bert_config, kernels):
    from official_bert.modeling import sentence_embedder  # pylint: disable=g-import-not-at-top
    return sentence_embedder.BertSentenceEmbedder.from_bert_config(
        bert_config, self.config.pooling, kernels=kernels)

  def losses(self, labels, outputs):
    return ranking_losses(labels, outputs)

  def metric_counts(self, labels, outputs):
    return ranking_metric_counts(labels, outputs)

  def in_batch_loss(self):
    """Each anchor against every positive and negative of the global batch
    (gathered across replicas), in chunks of mini_batch_size pairs when
    set."""
    return task_lib.InBatchLoss(own_outputs=("anchor",),
                                mini_batch_size=self.config.mini_batch_size)

  @property
  def num_distill_texts(self):
    return self.distill_texts

  def teacher_outputs(self, predict):
    """The teacher's embeddings {role: [N, H]} of the training rows' texts
    (after mining: the mined rows')."""
    _, _, inputs = self.splits["train"]
    return {role: predict(inputs[role]) for role in self.roles}

  def distill_losses(self, labels, teacher, outputs, temperature, labelled):
    """The ranking loss over the labelled anchors (every row's texts stay
    candidates), and the mean squared error of every text's embedding to
    the teacher's (sentence-transformers' MSELoss); no temperature."""
    import keras  # pylint: disable=g-import-not-at-top
    from keras import ops  # pylint: disable=g-import-not-at-top
    del labels, temperature
    scores = ranking_scores(outputs)
    label = keras.losses.sparse_categorical_crossentropy(
        ops.arange(ops.shape(scores)[0]), scores, from_logits=True)
    rows = ops.shape(outputs["anchor"])[0]
    # This replica's rows come first where candidates are gathered.
    mse = [ops.mean(ops.square(outputs[role][:rows] - teacher[role]))
           for role in sorted(teacher)]
    return {"label_loss": distillation.weighted_mean(label, labelled),
            "distill_loss": sum(mse[1:], mse[0]) / len(mse)}

  def train_data(self):
    """({<role>_<input name>: int32 [N, T]}, unused labels [N])."""
    _, _, inputs = self.splits["train"]
    flat = {f"{role}_{name}": array for role in self.roles
            for name, array in inputs[role].items()}
    return flat, np.zeros(self.num_train_examples, np.int32)

  def train_order(self, batch_size, seed, num_examples):
    """The rows in batches that repeat no text (no_duplicates.py): each
    row's texts compared by their token ids, every role."""
    _, _, inputs = self.splits["train"]
    row_texts = [set() for _ in range(self.num_train_examples)]
    for role in self.roles:
      for texts, ids in zip(row_texts, inputs[role]["input_word_ids"]):
        texts.add(hash(ids.tobytes()))
    try:
      return no_duplicates.order(row_texts, batch_size, seed, num_examples)
    except ValueError as e:
      raise ValueError(
          f"{self.train_rows_file}: {e}: a text twice in a batch would be "
          "its own negative; lower --train_batch_size") from None

  @property
  def prepares_every_epoch(self):
    """With remine_every_epoch (and mine_hard_negatives): every epoch
    trains on negatives its starting weights mined."""
    return bool(self.config.mine_hard_negatives
                and self.config.remine_every_epoch)

  def prepare_training(self, predict, model, resumed, epoch):
    """With mine_hard_negatives = K: the training rows become the file's
    rows with K negatives mined by `model` as it starts training (or, with
    remine_every_epoch, as it starts epoch `epoch`: its weights then the
    previous epoch's last; the embeddings through `predict`,
    hard_negatives.py), reused from output_dir when made from the same
    inputs (on a run resumed past that point: whatever the weights, which
    were trained on it). Returns the files to write ({} when reused, or
    without mining)."""
    config = self.config
    k = config.mine_hard_negatives
    if not k:
      return {}
    if self._unmined is None:
      self._unmined = self.splits["train"], self.roles
    else:  # mined again from the training file, not the last epoch's rows
      self.splits["train"], self.roles = self._unmined
    _, texts, inputs = self.splits["train"]
    made_from = hard_negatives.record(
        self.train_path, [config.anchor_column, config.positive_column]
        + self.negative_names, [inputs[r][n] for r in self.roles
                                 for n in sorted(inputs[r])],
        model.get_weights(), config.pooling, k, config.hard_negative_margin)
    name = hard_negatives.file_names(epoch)[0]
    path = os.path.join(config.output_dir, name)
    weights = (f"the weights epoch {epoch} ended with" if epoch else
               "the weights training starts from")
    gather = self._gatherer()
    rows, why = hard_negatives.reusable(config.output_dir, made_from, resumed,
                                        epoch)
    files = {}
    if rows is not None:
      print(f"hard negatives: reused {path} (made from the same training "
            "file and settings"
            + (", and this run resumes from checkpoints trained on it)"
               if resumed else " and " + (weights if epoch else
                                           "starting weights") + ")"),
            flush=True)
    else:
      if why:
        print(f"hard negatives: {path}: {why}; mining again", flush=True)
      t0 = time.time()
      rows, summary = hard_negatives.mine_rows(
          texts, lambda where: predict(gather(where)), k,
          config.hard_negative_margin)
      if not rows:
        raise ValueError(
            f"{self.train_path}: no anchor has {k} candidates below the "
            f"margin ({summary}); lower --mine_hard_negatives or "
            "--hard_negative_margin")
      files = hard_negatives.written(rows, made_from, epoch)
      print(f"hard negatives: mined {summary} in {time.time() - t0:.1f} s "
            f"({weights}), written to {path}", flush=True)
    self._train_on(rows, k, gather, name)
    return files

  def _train_on(self, rows, k, gather, name):
    """Training reads `rows` (the tuples of texts of the mined file `name`)
    from now on: the roles anchor, positive, negative_1 ... negative_K,
    their inputs the training file's (`gather`, `_gatherer`'s)."""
    _, texts, _ = self.splits["train"]
    found = {}  # a text as the .tsv holds it -> (role, row)
    for role in self.roles:
      for row, text in enumerate(texts[role]):
        found.setdefault(hard_negatives.tsv_cell(text), (role, row))
    roles = ROLES[:2] + tuple(f"negative_{i}" for i in range(1, k + 1))
    columns = list(zip(*rows)) if rows else [()] * len(roles)
    where = {role: [found[text] for text in column]
             for role, column in zip(roles, columns)}
    new_texts = {role: [texts[r][i] for r, i in where[role]]
                 for role in roles}
    new_inputs = {role: gather(where[role]) for role in roles}
    self.roles = roles
    self.train_rows_file = os.path.join(self.config.output_dir, name)
    self.splits["train"] = ([f"{self.train_rows_file}:{line}" for line in
                             range(2, len(rows) + 2)], new_texts, new_inputs)

  def _gatherer(self):
    """gather(where) -> {input name: int32 [len(where), T]}: the encoded
    training texts at `where` [(role, row)]."""
    _, _, inputs = self.splits["train"]
    offset = {role: i * self.num_train_examples
              for i, role in enumerate(self.roles)}
    flat = {name: np.concatenate([inputs[r][name] for r in self.roles])
            for name in inputs["anchor"]}                   # [R * N, T]

    def gather(where):
      index = np.array([offset[role] + row for role, row in where], np.int64)
      return {name: array[index] for name, array in flat.items()}
    return gather

  def init_head(self, model):
    """Nothing: the embedding model has no head (its output is the
    encoder's pooled tokens)."""

  def example_inputs(self):
    inputs = next(iter(self.splits.values()))[2]["anchor"]
    return {name: array[:1] for name, array in inputs.items()}

  # ------------------------------------------ evaluation and prediction ----
  def evaluate(self, predict, step):
    """Retrieval on dev: every anchor against every dev positive."""
    _, _, inputs = self.splits["dev"]
    metrics = retrieval_metrics(predict(inputs["anchor"]),
                                predict(inputs["positive"]))
    result = {f"eval_{k}": v for k, v in metrics.items()}
    result["global_step"] = step
    return result

  def eval_summary(self, result):
    return (f"eval_mrr_at_10 {result['eval_mrr_at_10']:.4f} "
            f"eval_recall_at_1 {result['eval_recall_at_1']:.4f}")

  def predict(self, predict, step):
    """({"test_embeddings.tsv": one line per test anchor, its vector's
    values tab-separated}, the summary's words, no eval result)."""
    del step
    t0 = time.time()
    vectors = predict(self.splits["test"][2]["anchor"])
    seconds = time.time() - t0
    rows = ["\t".join(str(v) for v in row) for row in vectors]
    return ({"test_embeddings.tsv": "".join(row + "\n" for row in rows)},
            f"{len(rows)} test predictions in {seconds:.1f} s", None)

  def tune(self, predict):
    del predict  # nothing to choose on dev: retrieval ranks by cosine alone
    return {}

  # ----------------------------------------------------------- export ----
  def export_spec(self):
    """`sentence_embedding` float32 [B, H] out, from the SavedModel and
    from model.tflite alike."""
    return task_lib.ExportSpec(outputs=sentence_embedding_outputs,
                               int8_outputs=sentence_embedding_outputs)


def sentence_embedding_outputs(vectors):
  """The export's outputs: `sentence_embedding` float32 [B, H]."""
  return {"sentence_embedding": vectors}
