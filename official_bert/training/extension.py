"""Growing a trained BERT: domain words as new vocabulary rows, longer texts
as more position rows, and old rows frozen while the new ones learn.

Works on the weights keyed by original name (`checkpoint_names`), so it
serves our checkpoints, google-research/bert's and converted Hugging Face
ones alike (`extend_checkpoint.py` is the program):

    tokenizer = tokenization.FullTokenizer("vocab.txt", do_lower_case=True)
    plan = extension.plan_words(tokenizer, ["glycolysis", "kinase"],
                                vocab_size=30522)
    arrays = extension.extend_arrays(arrays, plan, max_position_embeddings=1024)

New words go first into `[unusedN]` slots (in id order), then after the last
line of vocab.txt. Each new word's row of the word embeddings (and of the
masked-LM output bias) is the mean of the rows of the WordPieces the old
tokenizer splits it into, so the model starts from what it already read for
that word. Position rows past the old table repeat it (row i = old row
i mod old length), so rows 0..old-1 are untouched: every input the old model
could take gives exactly the old outputs.
"""

import dataclasses
import json
import os
import re

import numpy as np
import tensorflow as tf

from official_bert.data import tokenization

WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
POSITION_EMBEDDINGS = "bert/embeddings/position_embeddings"
MLM_BIAS = "cls/predictions/output_bias"
UNUSED = re.compile(r"^\[unused\d+\]$")
# Written beside the extended checkpoint: what changed, and the new word ids
# that run_pretraining --freeze_old_embeddings_steps leaves trainable.
INFO_FILE = "extend_info.json"


@dataclasses.dataclass
class WordPlan:
  """Where each new word goes and what initialises it.

  vocab: the new vocab.txt lines (old ids kept; slots renamed, words appended).
  added: [(word, id, old piece ids)], in the order the words were given.
  slots: how many of `added` took an [unusedN] slot (the first ones).
  known: words given that the vocabulary already holds (skipped).
  not_one_word: entries the basic tokenizer splits into several words (or
    none), which no WordPiece token can match (skipped).
  vocab_size: rows of the new embedding table (at least len(vocab)).
  """
  vocab: list
  added: list
  slots: int
  known: list
  not_one_word: list
  vocab_size: int

  @property
  def new_ids(self):
    return [i for _, i, _ in self.added]


def normalize_words(entries, do_lower_case):
  """Entries (str) -> (words, not_one_word): each entry as the tokenizer's
  basic step sees it (cleaned; lower-cased and accents stripped when
  uncased), kept when it is exactly one word, in order, without repeats."""
  if not entries:
    return [], []
  split = tokenization.split_words(tokenization.normalize(
      tf.constant(entries), do_lower_case)).to_list()
  words, rejected, seen = [], [], set()
  for entry, pieces in zip(entries, split):
    if len(pieces) != 1:
      rejected.append(entry)
      continue
    word = pieces[0].decode("utf-8")
    if word not in seen:
      seen.add(word)
      words.append(word)
  return words, rejected


def plan_words(tokenizer, entries, vocab_size, max_new_words=None):
  """A `WordPlan` adding `entries` (str) to `tokenizer`'s vocabulary.

  Args:
    tokenizer: the old `FullTokenizer` (its casing normalises the entries).
    entries: candidate words, most wanted first.
    vocab_size: rows of the old embedding table (>= the vocab's lines; rows
      past the last line are unreachable and are used before new ones).
    max_new_words: keep at most this many new words (None: all).
  """
  vocab = tokenizer.vocab
  if len(vocab) > vocab_size:
    raise ValueError(f"the vocabulary has {len(vocab)} lines but the "
                     f"checkpoint only {vocab_size} word-embedding rows")
  words, not_one_word = normalize_words(list(entries), tokenizer.do_lower_case)
  present = set(vocab)
  known = [w for w in words if w in present]
  new = [w for w in words if w not in present]
  if max_new_words is not None:
    new = new[:max_new_words]
  pieces = (tokenizer.tokenize(tf.constant(new)).to_list() if new else [])
  slots = [i for i, token in enumerate(vocab) if UNUSED.match(token)]
  vocab = list(vocab)
  added = []
  for n, (word, ids) in enumerate(zip(new, pieces)):
    if n < len(slots):
      index = slots[n]
      vocab[index] = word
    else:
      index = len(vocab)
      vocab.append(word)
    added.append((word, index, list(ids)))
  return WordPlan(vocab, added, min(len(new), len(slots)), known,
                  not_one_word, max(vocab_size, len(vocab)))


def extend_rows(table, plan):
  """[V, ...] old table -> [plan.vocab_size, ...]: each new word's row the
  mean of its old pieces' rows (read from the old table), others kept."""
  grown = np.zeros((plan.vocab_size,) + table.shape[1:], table.dtype)
  grown[:len(table)] = table
  for _, index, ids in plan.added:
    grown[index] = table[ids].mean(axis=0)
  return grown


def extend_positions(table, max_position_embeddings):
  """[P, H] -> [N, H], N >= P: row i is old row i mod P (rows < P kept).

  Copying, not interpolating: the old rows stay exactly as trained (every
  input up to P tokens gives the old outputs) and each new row is a position
  embedding the model has learned to read; Longformer (Beltagy et al., 2020,
  section 5) extended RoBERTa's 512 positions this way and found it far
  better than a random start.
  """
  old = table.shape[0]
  if max_position_embeddings < old:
    raise ValueError(f"max_position_embeddings={max_position_embeddings} is "
                     f"smaller than the checkpoint's {old}")
  return table[np.arange(max_position_embeddings) % old]


def extend_arrays(arrays, plan=None, max_position_embeddings=None):
  """Original-name arrays -> new arrays with `plan`'s words and the longer
  position table (either may be None: unchanged). Not modified in place."""
  arrays = dict(arrays)
  if plan is not None:
    arrays[WORD_EMBEDDINGS] = extend_rows(arrays[WORD_EMBEDDINGS], plan)
    if MLM_BIAS in arrays:
      arrays[MLM_BIAS] = extend_rows(arrays[MLM_BIAS], plan)
  if max_position_embeddings is not None:
    arrays[POSITION_EMBEDDINGS] = extend_positions(
        arrays[POSITION_EMBEDDINGS], max_position_embeddings)
  return arrays


def freeze_rows(variables, trainable_rows, num_steps):
  """A trainer `transform_gradients` that zeroes the gradient of every row
  of `variables` but `trainable_rows` while the step is below `num_steps`.

  Args:
    variables: the [V, H] word embeddings and the [V] masked-LM bias (the
      same objects as in `model.trainable_variables`).
    trainable_rows: ids that keep their gradient (the new words').
    num_steps: steps with the old rows frozen; then every row trains.

  A zero gradient leaves Adam's moments at zero, so the frozen rows do not
  move, except through decoupled weight decay (`--weight_decay`), which
  shrinks every decayed weight by lr * decay per step, gradient or not.
  """
  if not variables:
    return None
  size = int(variables[0].shape[0])
  keep = np.zeros([size], np.float32)
  keep[list(trainable_rows)] = 1.0
  keep = tf.constant(keep)
  targets = {id(v) for v in variables}

  def transform(grads, model_variables, step):
    mask = tf.where(step < num_steps, keep, tf.ones_like(keep))  # [V]
    result = []
    for grad, variable in zip(grads, model_variables):
      if grad is not None and id(variable) in targets:
        shape = [size] + [1] * (len(grad.shape) - 1)
        grad = grad * tf.cast(tf.reshape(mask, shape), grad.dtype)
      result.append(grad)
    return result

  return transform


def read_new_word_ids(init_checkpoint, vocab_size):
  """The `new_word_ids` of the INFO_FILE beside `init_checkpoint` (a
  directory or a prefix), checked against the model's `vocab_size`."""
  if not init_checkpoint:
    raise ValueError("it needs --init_checkpoint, a checkpoint written by "
                     f"extend_checkpoint (with its {INFO_FILE})")
  directory = (init_checkpoint if os.path.isdir(init_checkpoint)
               else os.path.dirname(init_checkpoint))
  path = os.path.join(directory, INFO_FILE)
  try:
    with open(path, encoding="utf-8") as f:
      info = json.load(f)
    ids = [int(i) for i in info["new_word_ids"]]
  except FileNotFoundError:
    raise ValueError(f"{path} does not exist; pass as --init_checkpoint the "
                     "output_dir of extend_checkpoint") from None
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f"cannot read the new word ids of {path} "
                     f"({type(e).__name__}: {e}); rerun "
                     "extend_checkpoint") from None
  if info.get("vocab_size") != vocab_size or not all(
      0 <= i < vocab_size for i in ids):
    raise ValueError(f"{path} is for vocab_size {info.get('vocab_size')}, "
                     f"the model has {vocab_size}; pass the bert_config.json "
                     "that extend_checkpoint wrote beside it")
  return ids
