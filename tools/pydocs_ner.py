"""A CoNLL-format NER task made from the Python docs (rule-labelled).

Sentences of `../shared/data/pydocs_corpus.txt` are split into words (white
space, then leading "(" and trailing punctuation as words of their own, as
CoNLL-2003 writes them) and tagged in BIO by rules:

  FUNC  a call written with empty parentheses: `open()`, `os.path.join()`
  MOD   a dotted lower-case name that is not a call: `os.path`,
        `collections.abc` (each part at least two characters, so "e.g" is
        not one)
  PEP   "PEP" and the number after it: `PEP 8` (B-PEP I-PEP)
  VER   "Python" and the version after it: `Python 3.11` (B-VER I-VER)

Documents are split 8:1:1 into train, dev and test (no document in two
splits); each document starts with a `-DOCSTART-` line, as CoNLL-2003.
Sentences with an entity are all kept, plus as many without one.

    python -m tools.pydocs_ner --output_dir=/tmp/pydocs_ner \
      --max_train_sentences=3000 --max_eval_sentences=600
"""

import os
import random
import re

from tools import corpus as pydocs


_FUNC = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\(\)")
_MOD = re.compile(r"[a-z_][a-z0-9_]+(\.[a-z_][a-z0-9_]+)+")
_NUMBER = re.compile(r"\d+(\.\d+)*")
_LEADING = "(\"'"
_TRAILING = ",.;:!?)\"'"


def words_of(sentence):
  """White-space words with leading "(" and trailing punctuation split off."""
  out = []
  for word in sentence.split():
    lead = []
    while len(word) > 1 and word[0] in _LEADING:
      lead.append(word[0])
      word = word[1:]
    trail = []
    # "open()" keeps its parentheses; "(see os.path)." loses ")" and ".".
    while len(word) > 1 and word[-1] in _TRAILING and not word.endswith("()"):
      trail.append(word[-1])
      word = word[:-1]
    out += lead + [word] + trail[::-1]
  return out


def tag(words):
  """BIO tags of `words` by the rules in the module docstring."""
  tags = ["O"] * len(words)
  for i, word in enumerate(words):
    if tags[i] != "O":
      continue
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if _FUNC.fullmatch(word):
      tags[i] = "B-FUNC"
    elif _MOD.fullmatch(word):
      tags[i] = "B-MOD"
    elif word == "PEP" and _NUMBER.fullmatch(nxt):
      tags[i], tags[i + 1] = "B-PEP", "I-PEP"
    elif word == "Python" and _NUMBER.fullmatch(nxt):
      tags[i], tags[i + 1] = "B-VER", "I-VER"
  return tags


def make_task(corpus, max_sentences=None, seed=0, max_words=40):
  """{split: [(doc_index, [(words, tags), ...]), ...]}."""
  rng = random.Random(seed)
  splits = {"train": [], "dev": [], "test": []}
  for index, doc in enumerate(pydocs.documents(corpus)):
    split = {8: "dev", 9: "test"}.get(index % 10, "train")
    tagged, plain = [], []
    for sentence in doc:
      words = words_of(sentence)
      if not 3 <= len(words) <= max_words:
        continue
      tags = tag(words)
      (tagged if any(t != "O" for t in tags) else plain).append((words, tags))
    rng.shuffle(plain)
    kept = tagged + plain[:len(tagged)]
    # Keep the document's order of sentences.
    order = {id(s): i for i, s in enumerate(tagged + plain)}
    kept.sort(key=lambda s: order[id(s)])
    if kept:
      splits[split].append((index, kept))
  if max_sentences:
    for split, limit in max_sentences.items():
      trimmed, count = [], 0
      for index, sentences in splits[split]:
        if count >= limit:
          break
        trimmed.append((index, sentences[:limit - count]))
        count += len(trimmed[-1][1])
      splits[split] = trimmed
  return splits


def write_task(directory, corpus, max_sentences=None, seed=0):
  """Writes train.txt, dev.txt, test.txt; returns the task."""
  task = make_task(corpus, max_sentences, seed)
  os.makedirs(directory, exist_ok=True)
  for split, docs in task.items():
    with open(os.path.join(directory, f"{split}.txt"), "w",
              encoding="utf-8") as f:
      for _, sentences in docs:
        f.write("-DOCSTART- -X- -X- O\n\n")
        for words, tags in sentences:
          f.writelines(f"{w} {t}\n" for w, t in zip(words, tags))
          f.write("\n")
  return task


def define_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("output_dir", None, "Where train/dev/test.txt go.")
  flags.DEFINE_string("corpus", pydocs.PYDOCS, "The pydocs corpus.")
  flags.DEFINE_integer("max_train_sentences", None, "Keep the first N.")
  flags.DEFINE_integer("max_eval_sentences", None, "Keep the first N of dev "
                       "and of test.")


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  cli.check_output_dir("output_dir", flags.FLAGS.output_dir, create=False)
  cli.check_text_file("corpus", flags.FLAGS.corpus)
  limits = {}
  if flags.FLAGS.max_train_sentences:
    limits["train"] = flags.FLAGS.max_train_sentences
  if flags.FLAGS.max_eval_sentences:
    limits.update(dev=flags.FLAGS.max_eval_sentences,
                  test=flags.FLAGS.max_eval_sentences)
  task = write_task(flags.FLAGS.output_dir, flags.FLAGS.corpus, limits)
  for split, docs in task.items():
    sentences = [s for _, d in docs for s in d]
    tags = [t for _, ts in sentences for t in ts]
    counts = {k: sum(t == f"B-{k}" for t in tags)
              for k in ("FUNC", "MOD", "PEP", "VER")}
    print(f"{split}: {len(docs)} documents, {len(sentences)} sentences, "
          f"{len(tags)} words, entities {counts}")


if __name__ == "__main__":
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  define_flags()
  cli.run(main)
