"""The GLUE (and XNLI) tasks by name, in the files their downloads hold.

`run_classifier --task_name=MRPC --data_dir=$GLUE_DIR/MRPC` reads a task's
files here, with the column positions, headers and labels of
google-research/bert's processors (CoLA, MNLI, MRPC, XNLI) and of the
processors Model Garden and Hugging Face's run_glue add for the rest of GLUE
(SST-2, QQP, QNLI, RTE, WNLI, STS-B, MNLI mismatched).

Every file is read as the original reads it: tab-separated, no quoting (a `"`
is an ordinary character, csv.QUOTE_NONE), a header row skipped where the
download has one (CoLA's train and dev have none). Labels are the task's
fixed list, not the training file's. Test files carry no labels (XNLI's do,
and are ignored for prediction).

    task = glue.get_task("MRPC")
    train = glue.read_split(task, "/data/glue/MRPC", "train")
    labels = task.labels   # ["0", "1"]

Problems are one `ValueError` sentence naming the file, line and the fix.
"""

import csv
import dataclasses
import os

from official_bert.data import text_files


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where one split's fields are: a file and 0-based column positions."""
  file: str
  text: int
  text_b: int | None = None
  label: int | None = None  # None: no labels (test files)
  header: bool = True


@dataclasses.dataclass(frozen=True)
class Task:
  """One task: its splits' layouts, labels and official metric."""
  name: str
  train: Layout
  dev: Layout
  test: Layout
  labels: tuple | None  # None: regression
  metric: str  # the headline key of eval_results.txt (without eval_)
  # XNLI: dev/test rows are kept only when column 0 is this language.
  language_column: int | None = None
  # QQP's download has a few rows with missing fields; the reference
  # processors skip them.
  skip_short_rows: bool = False

  @property
  def regression(self):
    return self.labels is None

  @property
  def text_pair(self):
    return self.train.text_b is not None


_NLI = ("contradiction", "entailment", "neutral")
_ENTAIL = ("entailment", "not_entailment")
_BINARY = ("0", "1")


def _mnli(dev, test):
  # index, promptID, pairID, genre, 4 parse columns, sentence1, sentence2,
  # (label1..5 and) gold_label last.
  return dict(train=Layout("train.tsv", 8, 9, -1), dev=Layout(dev, 8, 9, -1),
              test=Layout(test, 8, 9), labels=_NLI, metric="accuracy")


def _index_pair(labels):
  # index, sentence1 (question), sentence2 (sentence), label.
  return dict(train=Layout("train.tsv", 1, 2, -1),
              dev=Layout("dev.tsv", 1, 2, -1), test=Layout("test.tsv", 1, 2),
              labels=labels, metric="accuracy")


TASKS = {task.name: task for task in [
    # sentence_source, label, original mark, sentence; no header row except
    # in test.tsv (index, sentence).
    Task("CoLA", train=Layout("train.tsv", 3, label=1, header=False),
         dev=Layout("dev.tsv", 3, label=1, header=False),
         test=Layout("test.tsv", 1), labels=_BINARY,
         metric="matthews_corrcoef"),
    Task("MNLI", **_mnli("dev_matched.tsv", "test_matched.tsv")),
    Task("MNLI-MM", **_mnli("dev_mismatched.tsv", "test_mismatched.tsv")),
    # Quality, #1 ID, #2 ID, #1 String, #2 String; test: index, #1 ID, ...
    Task("MRPC", train=Layout("train.tsv", 3, 4, 0),
         dev=Layout("dev.tsv", 3, 4, 0), test=Layout("test.tsv", 3, 4),
         labels=_BINARY, metric="f1"),
    # XNLI: training on MultiNLI's machine translation (premise, hypo,
    # label); dev/test: language, gold_label, 4 more, sentence1, sentence2.
    Task("XNLI",
         train=Layout("multinli/multinli.train.{language}.tsv", 0, 1, 2),
         dev=Layout("xnli.dev.tsv", 6, 7, 1),
         test=Layout("xnli.test.tsv", 6, 7), labels=_NLI, metric="accuracy",
         language_column=0),
    # sentence, label; test: index, sentence.
    Task("SST-2", train=Layout("train.tsv", 0, label=1),
         dev=Layout("dev.tsv", 0, label=1), test=Layout("test.tsv", 1),
         labels=_BINARY, metric="accuracy"),
    # id, qid1, qid2, question1, question2, is_duplicate; test: id, q1, q2.
    Task("QQP", train=Layout("train.tsv", 3, 4, 5),
         dev=Layout("dev.tsv", 3, 4, 5), test=Layout("test.tsv", 1, 2),
         labels=_BINARY, metric="f1", skip_short_rows=True),
    Task("QNLI", **_index_pair(_ENTAIL)),
    Task("RTE", **_index_pair(_ENTAIL)),
    Task("WNLI", **_index_pair(_BINARY)),
    # index, genre, filename, year, old_index, source1, source2, sentence1,
    # sentence2, score (test: no score).
    Task("STS-B", train=Layout("train.tsv", 7, 8, -1),
         dev=Layout("dev.tsv", 7, 8, -1), test=Layout("test.tsv", 7, 8),
         labels=None, metric="pearson"),
]}
# The original's lower-case names and Hugging Face's (sts-b, sst-2, mnli-mm)
# and the GLUE download's directory names (SST-2, STS-B) all resolve.
_ALIASES = {name.lower().replace("-", ""): name for name in TASKS}


def get_task(name):
  """The `Task` for a name in any case, with or without a hyphen."""
  key = name.lower().replace("-", "").replace("_", "")
  if key not in _ALIASES:
    raise ValueError(f"--task_name={name} is not a known task; use one of "
                     f"{', '.join(TASKS)} (or leave it unset and give "
                     "--task_data_dir with column flags)")
  return TASKS[_ALIASES[key]]


def split_path(task, data_dir, split, language="zh"):
  """The path of `split`'s file in `data_dir` (it must exist)."""
  layout = getattr(task, split)
  path = os.path.join(data_dir, layout.file.format(language=language))
  if not os.path.isfile(path):
    raise ValueError(f"--data_dir {data_dir} has no {split} file "
                     f"{layout.file.format(language=language)} for "
                     f"--task_name={task.name}; point --data_dir at the "
                     f"task's GLUE download (e.g. glue_data/{task.name})")
  return path


def read_split(task, data_dir, split, language="zh"):
  """`text_files.Example`s of a split (test examples have no label)."""
  layout = getattr(task, split)
  path = split_path(task, data_dir, split, language)
  # Fields a row needs: up to the last fixed column, one more for a label
  # read from the end (-1).
  needed = 1 + max(c for c in (layout.text, layout.text_b, layout.label)
                   if c is not None and c >= 0) + (layout.label == -1)
  with text_files.utf8_errors(path):
    rows = list(_read_tsv(path))
  examples = []
  for line, fields in rows:
    if line == 1 and layout.header:
      continue
    if not any(field.strip() for field in fields):
      continue
    if len(fields) < needed:
      if task.skip_short_rows:
        continue
      raise ValueError(f"{path}:{line}: {len(fields)} tab-separated fields, "
                       f"but {task.name}'s {split} file has at least "
                       f"{needed}; is this the {task.name} download "
                       "(a text with a tab or newline inside?)")
    if (task.language_column is not None and split != "train"
        and fields[task.language_column] != language):
      continue
    label = None if layout.label is None else fields[layout.label]
    if task.name == "XNLI" and label == "contradictory":
      label = "contradiction"  # MultiNLI's translated training file's spelling
    if label is not None and not task.regression and label not in task.labels:
      raise ValueError(f"{path}:{line}: label {label!r} is not one of "
                       f"{task.name}'s labels {list(task.labels)}; is this "
                       f"the {task.name} download?")
    examples.append(text_files.Example(
        text=fields[layout.text],
        text_b=None if layout.text_b is None else fields[layout.text_b],
        label=label, where=f"{path}:{line}"))
  if not examples:
    raise ValueError(f"{path} has no examples"
                     + (f" for language {language!r} (--xnli_language)"
                        if task.language_column is not None else "")
                     + "; check the file")
  return examples


def _read_tsv(path):
  """Yields (line number, fields): tab-separated, no quoting, as the
  original's csv.reader(delimiter="\\t", quotechar=None)."""
  with open(path, encoding="utf-8", newline="") as f:
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    for fields in reader:
      yield reader.line_num, fields
