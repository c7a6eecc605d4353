"""Labelled text for run_classifier: TSV, CSV or JSONL files to model inputs.

A task directory holds `train`, `dev` and `test` files, each `<split>.tsv`,
`<split>.csv` or `<split>.jsonl`. TSV and CSV files start with a header row
naming the columns; JSONL files hold one object per line. The text, optional
second text and label columns are named by `Columns` (run_classifier's
`--text_column`, `--text_b_column`, `--label_column`). The test split may lack
labels.

Every problem in a file is one `ValueError` sentence naming the file, the
line and the fix: an empty file, a missing column, a ragged TSV row, a bad
JSON line, a dev label that training never saw, a non-numeric regression
label.

    columns = Columns(text="sentence", label="label")
    train = read_examples(find_split_file(data_dir, "train"), columns)
    labels = label_list(train)
    features = encode(train, tokenizer, max_seq_length=128)
"""

import contextlib
import csv
import dataclasses
import json
import os

import numpy as np

EXTENSIONS = (".tsv", ".csv", ".jsonl")


@dataclasses.dataclass(frozen=True)
class Columns:
  text: str = "sentence"
  text_b: str | None = None
  label: str = "label"


@dataclasses.dataclass(frozen=True)
class Example:
  text: str
  text_b: str | None
  label: str | None
  where: str  # "file:line", for error messages.


def find_split_file(data_dir, split, names=None, extensions=EXTENSIONS):
  """The one `<name><extension>` of `split` in `data_dir` (names default to
  the split's own: `<split>.{tsv,csv,jsonl}`)."""
  candidates = [name + ext for name in (names or [split])
                for ext in extensions]
  found = [c for c in candidates if os.path.isfile(os.path.join(data_dir, c))]
  if not found:
    raise ValueError(f"--task_data_dir {data_dir} has no {split} file; "
                     f"expected one of {candidates}")
  if len(found) > 1:
    raise ValueError(f"--task_data_dir {data_dir} has several {split} files "
                     f"{found}; keep one")
  return os.path.join(data_dir, found[0])


def read_examples(path, columns, require_label=True):
  """Reads `Example`s from a TSV, CSV or JSONL file (by its extension)."""
  wanted = [columns.text] + ([columns.text_b] if columns.text_b else [])
  if require_label:
    wanted.append(columns.label)
  examples = []
  for where, row in read_rows(path, dict(zip(wanted, _flags_for(
      columns, require_label)))):
    label = row.get(columns.label)
    examples.append(Example(
        text=cell_text(row[columns.text]),
        text_b=cell_text(row[columns.text_b]) if columns.text_b else None,
        label=None if label is None else cell_text(label),
        where=where))
  return examples


def read_rows(path, wanted):
  """[("file:line", {column: value})] of a TSV, CSV or JSONL file's rows,
  each holding every column of `wanted` ({column: the flag naming it})."""
  with utf8_errors(path):
    rows = list(_rows(path))
  if not rows:
    raise ValueError(f"{path} is empty: it needs "
                     + ("a header row and " if not path.endswith(".jsonl")
                        else "") + "at least one example")
  rows = [(f"{path}:{line}", row) for line, row in rows]
  check_columns(rows, wanted)
  return rows


def check_columns(rows, wanted):
  """ValueError naming the first of `rows` (read_rows') that lacks a
  column of `wanted` ({column: the flag naming it})."""
  for where, row in rows:
    for name, flag in wanted.items():
      if name not in row:
        raise ValueError(f"{where}: no column {name!r} (found "
                         f"{sorted(row)}); name the right one with {flag}")


@contextlib.contextmanager
def utf8_errors(path):
  """Turns a UnicodeDecodeError while reading `path` into a ValueError
  sentence naming the file."""
  try:
    yield
  except UnicodeDecodeError as e:
    raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte "
                     f"{e.start}); convert it to UTF-8") from None


def label_list(examples):
  """The sorted distinct labels of the training examples."""
  return sorted({example.label for example in examples})


def label_ids(examples, labels, regression=False):
  """Label ids (int32) for classification or float32 values for regression."""
  if regression:
    values = []
    for example in examples:
      try:
        values.append(float(example.label))
      except ValueError:
        raise ValueError(f"{example.where}: label {example.label!r} is not a "
                         "number; regression (--num_labels=1) needs numeric "
                         "labels") from None
    return np.array(values, np.float32)
  index = {label: i for i, label in enumerate(labels)}
  ids = []
  for example in examples:
    if example.label not in index:
      raise ValueError(f"{example.where}: label {example.label!r} is not "
                       f"among the training labels {labels}; fix the file or "
                       "train on data that has it")
    ids.append(index[example.label])
  return np.array(ids, np.int32)


def encode(examples, tokenizer, max_seq_length, batch_size=8192):
  """Packs examples as `[CLS] a [SEP] (b [SEP])`, int32 arrays [N, T].

  The exported model's packing (`segment_packing.pack_to_longest`, TF ops),
  every row padded to T = `max_seq_length`. As google-research/bert's
  `convert_single_example`: a pair is truncated one token at a time from
  the longer side (b on ties) until it fits; a second text without
  WordPieces (empty or whitespace) packs as a single text, `[CLS] a [SEP]`
  (the original's `if tokens_b:`).
  """
  pair = bool(examples) and examples[0].text_b is not None
  if max_seq_length < 3 + pair:
    raise ValueError(f"--max_seq_length={max_seq_length} leaves no room for "
                     "text besides [CLS] and [SEP]")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.data import segment_packing  # pylint: disable=g-import-not-at-top
  names = ("input_word_ids", "input_mask", "input_type_ids")
  chunks = {name: [np.zeros((0, max_seq_length), np.int32)] for name in names}
  for start in range(0, len(examples), batch_size):
    batch = examples[start:start + batch_size]
    texts = [[e.text for e in batch]] + (
        [[e.text_b or "" for e in batch]] if pair else [])
    packed = segment_packing.pack_to_longest(
        [tokenizer.tokenize(tf.constant(t, tf.string)) for t in texts],
        max_seq_length, tokenizer.cls_id, tokenizer.sep_id,
        pad_multiple=max_seq_length)
    for name in names:
      chunks[name].append(packed[name].numpy())
  return {name: np.concatenate(chunks[name]) for name in names}


def _truncate_pair(a, b, budget):
  """What packing keeps of a pair of piece lists `a`, `b` (b not empty)
  in `budget` pieces: `segment_packing.trim_pair` on Python lists."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.data import segment_packing  # pylint: disable=g-import-not-at-top
  a, b = segment_packing.trim_pair(
      tf.ragged.constant([a], tf.int64), tf.ragged.constant([b], tf.int64),
      budget + 3)
  return a.to_list()[0], b.to_list()[0]


def cell_text(value):
  """A cell as text (JSON lists and objects as JSON)."""
  return value if isinstance(value, str) else json.dumps(value) if isinstance(
      value, (list, dict)) else str(value)


def _flags_for(columns, require_label):
  flags = ["--text_column"] + (["--text_b_column"] if columns.text_b else [])
  return flags + (["--label_column"] if require_label else [])


def _rows(path):
  """Yields (line number, dict) for each example row of `path`."""
  if path.endswith(".jsonl"):
    with open(path, encoding="utf-8") as f:
      for line, text in enumerate(f, 1):
        if not text.strip():
          continue
        try:
          row = json.loads(text)
        except json.JSONDecodeError as e:
          raise ValueError(f"{path}:{line}: not valid JSON ({e.msg}); each "
                           "line must be one JSON object") from None
        if not isinstance(row, dict):
          raise ValueError(f"{path}:{line}: a JSON {type(row).__name__}, "
                           "not an object; each line must be one JSON object")
        yield line, row
    return
  with open(path, encoding="utf-8", newline="") as f:
    if path.endswith(".csv"):
      rows = csv.reader(f)
      reader = ((rows.line_num, fields) for fields in rows)
    else:  # GLUE's TSVs: tab-separated, no quoting.
      reader = ((n, line.rstrip("\r\n").split("\t"))
                for n, line in enumerate(f, 1))
    header = None
    for line, fields in reader:
      if not any(field.strip() for field in fields):
        continue
      if header is None:
        header = fields
        continue
      if len(fields) != len(header):
        raise ValueError(f"{path}:{line}: {len(fields)} fields, but the "
                         f"header has {len(header)} ({header}); fix the row "
                         "(a tab or comma inside a text?)")
      yield line, dict(zip(header, fields))
