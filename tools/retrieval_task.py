"""A retrieval task for run_embedding: sentences and their rewordings.

From the shared Python-docs corpus (tools/corpus.py): each anchor is a
sentence (6 to 40 words), its positive the same sentence reworded: words
swapped for others of the same sense (retrieval_synonyms.tsv), about a fifth of the rest
dropped, neighbouring words swapped now and then. The training file's hard
negative is another sentence of the same document (the same topic, not the
same statement). Train, dev and test come from different documents.

    python -m tools.retrieval_task --out_dir=/tmp/pairs --train=2000 --dev=500

With --next_sentence the positive is instead the sentence that follows the
anchor in its document: the words rarely overlap, so retrieval is hard from
the start (all-MiniLM-L6-v2: dev MRR@10 ~0.3, against ~0.99 on rewordings;
docs/search.md). With --context the positive is the passage around the
anchor, the anchor left out (the Inverse Cloze Task of Lee et al., 2019,
ORQA): up to CONTEXT sentences before it and CONTEXT after, the passages of
one document never sharing a sentence, the training file's negative another
such passage of the same document (all-MiniLM-L6-v2: dev MRR@10 ~0.45).

writes train.tsv (anchor, positive, negative), dev.tsv (anchor, positive)
and test.tsv (anchor).
"""

import argparse
import os
import random

from tools import corpus

# word -> words of the same sense: tools/retrieval_synonyms.tsv (a tab
# between them).
SYNONYMS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "retrieval_synonyms.tsv")


def synonyms(path=SYNONYMS_FILE):
  with open(path, encoding="utf-8") as f:
    return dict(line.rstrip("\n").split("\t") for line in f if line.strip())


def reword(sentence, rng, table):
  """The sentence with synonyms (`table`) swapped in, about a fifth of its
  other words dropped and a few neighbours swapped (never empty)."""
  words = []
  for word in sentence.split():
    key = word.lower()
    if key in table and rng.random() < 0.8:
      words.extend(table[key].split())
    elif rng.random() >= 0.2:
      words.append(word)
  for i in range(len(words) - 1):
    if rng.random() < 0.1:
      words[i], words[i + 1] = words[i + 1], words[i]
  return " ".join(words) or sentence


def _clean(text):
  return " ".join(text.replace("\t", " ").split())


# Sentences on each side of a --context anchor that make its passage.
CONTEXT = 2


def _context_pairs(docs, n, rng, negatives):
  """n (anchor, passage[, negative passage]) rows (see the module's
  docstring), or fewer when the documents run out."""
  candidates = [(d, s) for d, doc in enumerate(docs) for s, sentence in
                enumerate(doc) if 6 <= len(sentence.split()) <= 40
                and len(doc) > 2 * CONTEXT]
  rng.shuffle(candidates)
  used = set()  # (document, sentence) in a row already
  seen, out = set(), []

  def window(d, s):
    return [(d, i) for i in range(max(0, s - CONTEXT),
                                  min(len(docs[d]), s + CONTEXT + 1))]

  def passage(cells, leave_out):
    return _clean(" ".join(docs[d][i] for d, i in cells if i != leave_out))

  for d, s in candidates:
    cells = window(d, s)
    if used.intersection(cells):
      continue
    row = (_clean(docs[d][s]), passage(cells, s))
    if negatives:  # a passage of the same document that shares nothing
      others = [w for w in (window(d, i) for i in range(len(docs[d])))
                if not used.intersection(w) and not set(w) & set(cells)]
      if not others:
        continue
      other = rng.choice(others)
      row += (passage(other, None),)
    if seen.intersection(row):  # a text of another row (or twice here)
      continue
    if negatives:
      used.update(other)
    used.update(cells)
    seen.update(row)
    out.append(row)
    if len(out) == n:
      break
  return out


def pairs(docs, n, rng, negatives, next_sentence=False, context=False):
  """n (anchor, positive[, negative]) rows from `docs` (shuffled): the
  positive a rewording of the anchor, or with `next_sentence` the sentence
  after it (of 4 words or more), or with `context` the passage around it
  (`_context_pairs`)."""
  if context:
    out = _context_pairs(docs, n, rng, negatives)
    if len(out) == n:
      return out
    raise ValueError(f"the corpus holds {len(out)} usable passages for "
                     f"{n} rows; ask for fewer")
  table = synonyms()
  candidates = [(d, s) for d, doc in enumerate(docs) for s, sentence in
                enumerate(doc) if 6 <= len(sentence.split()) <= 40
                and len(doc) > 1 and not (next_sentence and (
                    s + 1 == len(doc) or len(doc[s + 1].split()) < 4))]
  rng.shuffle(candidates)
  seen, out = set(), []
  for d, s in candidates:
    anchor = _clean(docs[d][s])
    if anchor in seen:
      continue
    if next_sentence:  # each text once, an anchor or a positive
      positive = _clean(docs[d][s + 1])
      if positive in seen or positive == anchor:
        continue
      seen.add(positive)
    seen.add(anchor)
    row = (anchor, positive if next_sentence
           else _clean(reword(anchor, rng, table)))
    if negatives:
      others = [t for t in docs[d]
                if _clean(t) not in row[:1 + next_sentence]]
      if not others:
        continue
      row += (_clean(rng.choice(others)),)
    out.append(row)
    if len(out) == n:
      return out
  raise ValueError(f"the corpus holds {len(out)} usable sentences for "
                   f"{n} rows; ask for fewer")


def write_task(directory, train, dev, test, seed=0, path=corpus.PYDOCS,
               next_sentence=False, context=False):
  """train.tsv, dev.tsv and test.tsv in `directory`, from separate
  documents (`next_sentence`, `context`: see `pairs`); returns {split:
  rows}."""
  if next_sentence and context:
    raise ValueError("--next_sentence and --context are two tasks; pass "
                     "one of them.")
  docs = corpus.documents(path)
  rng = random.Random(seed)
  order = list(range(len(docs)))
  rng.shuffle(order)
  # A tenth of the documents for dev, a tenth for test, the rest train.
  tenth = len(order) // 10
  parts = {"dev": order[:tenth], "test": order[tenth:2 * tenth],
           "train": order[2 * tenth:]}
  splits = {}
  for split, n in (("train", train), ("dev", dev), ("test", test)):
    split_docs = [docs[i] for i in parts[split]]
    splits[split] = pairs(split_docs, n, rng, negatives=split == "train",
                          next_sentence=next_sentence, context=context)
  os.makedirs(directory, exist_ok=True)
  headers = {"train": "anchor\tpositive\tnegative", "dev": "anchor\tpositive",
             "test": "anchor"}
  for split, rows in splits.items():
    width = len(headers[split].split("\t"))
    with open(os.path.join(directory, f"{split}.tsv"), "w",
              encoding="utf-8") as f:
      f.write(headers[split] + "\n")
      f.writelines("\t".join(row[:width]) + "\n" for row in rows)
  return splits


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out_dir", required=True)
  parser.add_argument("--train", type=int, default=2000)
  parser.add_argument("--dev", type=int, default=500)
  parser.add_argument("--test", type=int, default=100)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--next_sentence", action="store_true",
                      help="The positive is the sentence after the anchor, "
                      "not a rewording of it (a hard task).")
  parser.add_argument("--context", action="store_true",
                      help="The positive is the passage around the anchor, "
                      "the anchor left out (the Inverse Cloze Task).")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  try:
    write_task(args.out_dir, args.train, args.dev, args.test, args.seed,
               next_sentence=args.next_sentence, context=args.context)
  except ValueError as e:  # one sentence with the fix, status 1
    raise SystemExit(str(e)) from None
  print(f"wrote {args.out_dir}: {args.train} train (with a hard negative), "
        f"{args.dev} dev, {args.test} test pairs")


if __name__ == "__main__":
  main()
