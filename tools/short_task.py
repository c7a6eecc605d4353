"""The fine-tuning benchmarks' classification tasks, made from the shared corpus.

  short   real short sentences of the Python docs (4-60 words), an SST-2-like
          rule label: "1" when a negative or error word is in it;
  long    consecutive sentences of one document packed to 118..126
          WordPieces, labelled by the half of the docs they come from;
  hidden_topic  (4 classes) the short sentences that name words of exactly
          one of HIDDEN_TOPICS, with those words deleted: the label is the
          topic the rest of the sentence is about (class, error, file or
          string), the same number of each; hard for a shallow model;
  topics  (multi-label) the short sentences, each labelled with every topic
          of TOPICS it names a word of (`error|file`; none: an empty label),
          for run_classifier --task_type=multi_label.

All are written as the `sentence<TAB>label` TSV files that run_classifier's
`--task_data_dir` reads. `hf_features` turns our encoded arrays into
Hugging Face features (unpadded: a collator pads each batch).
"""

import random
import re

from tools import corpus

NEGATIVE = {"not", "no", "never", "cannot", "error", "errors", "fail",
            "fails", "failed", "failure", "deprecated", "invalid", "raise",
            "raises", "raised", "exception", "warning", "unless", "without"}


TOPICS = {
    "class": {"class", "classes", "object", "objects", "instance",
              "instances", "method", "methods"},
    "error": {"error", "errors", "exception", "exceptions", "raise",
              "raises", "raised"},
    "file": {"file", "files", "path", "paths", "directory", "filename"},
    "function": {"function", "functions", "call", "called", "callable",
                 "argument", "arguments"},
    "string": {"string", "strings", "str", "bytes", "unicode", "character",
               "characters"},
}


HIDDEN_TOPICS = ("class", "error", "file", "string")


def _hidden_topic_rows(docs, rng):
  """(text without its topic words, topic) rows, as many of each topic."""
  by_topic = {t: [] for t in HIDDEN_TOPICS}
  for doc in docs:
    for s in doc:
      if 4 <= len(s.split()) <= 60 and "\t" not in s:
        words = set(re.findall(r"[a-z']+", s.lower()))
        hit = [t for t in HIDDEN_TOPICS if words & TOPICS[t]]
        if len(hit) == 1:
          text = re.sub(r"\b(%s)\b" % "|".join(sorted(TOPICS[hit[0]])), "",
                        s, flags=re.I)
          text = " ".join(text.split())
          if len(text.split()) >= 4:
            by_topic[hit[0]].append((text, hit[0]))
  each = min(len(rows) for rows in by_topic.values())
  rows = []
  for topic in HIDDEN_TOPICS:
    rng.shuffle(by_topic[topic])
    rows += by_topic[topic][:each]
  return rows


def classification_data(kind, tokenizer, n_train, n_predict, seed):
  """(train, dev) lists of (text, label) of the short, hidden_topic, long or
  topics task.

  `tokenizer` (a FullTokenizer) is only used by the long task. Raises
  ValueError when the corpus holds fewer texts than asked for.
  """
  docs = corpus.documents()
  rng = random.Random(seed)
  rows = []
  if kind == "hidden_topic":
    rows = _hidden_topic_rows(docs, rng)
  elif kind in ("short", "topics"):
    for doc in docs:
      for s in doc:
        if 4 <= len(s.split()) <= 60 and "\t" not in s:
          words = set(re.findall(r"[a-z']+", s.lower()))
          label = ("1" if words & NEGATIVE else "0") if kind == "short" else (
              "|".join(t for t in sorted(TOPICS) if words & TOPICS[t]))
          rows.append((s, label))
  else:  # consecutive sentences up to 118..126 pieces
    for i, doc in enumerate(docs):
      label = "1" if i < len(docs) // 2 else "0"
      text, pieces = [], 0
      doc = [s for s in doc if "\t" not in s]
      if not doc:
        continue
      counts = tokenizer.tokenize(doc).row_lengths().numpy()
      for s, n in zip(doc, counts):
        if pieces + n > 126:
          if pieces >= 118:
            rows.append((" ".join(text), label))
          text, pieces = [], 0
          if n > 126:
            continue
        text.append(s)
        pieces += n
  rng.shuffle(rows)
  need = n_train + n_predict
  if len(rows) < need:
    raise ValueError(f"the corpus has {len(rows)} {kind} texts, fewer than "
                     f"{need}; ask for fewer training or dev examples.")
  return rows[:n_train], rows[n_train:need]


def write_tsv(path, rows, with_label=True):
  with open(path, "w", encoding="utf-8") as f:
    f.write("sentence\tlabel\n" if with_label else "sentence\n")
    for text, label in rows:
      f.write(f"{text}\t{label}\n" if with_label else f"{text}\n")


def hf_features(inputs, extra=None):
  """Our encoded arrays as HF features, without the padding (the collator
  pads each batch to its longest)."""
  rows = []
  for i in range(len(inputs["input_mask"])):
    n = int(inputs["input_mask"][i].sum())
    row = {"input_ids": inputs["input_word_ids"][i][:n].tolist(),
           "token_type_ids": inputs["input_type_ids"][i][:n].tolist(),
           "attention_mask": [1] * n}
    for key, values in (extra or {}).items():
      row[key] = int(values[i])
    rows.append(row)
  return rows
