"""A long-document task whose label is one sentence anywhere in the text.

Each document is filler sentences of common words (each word one WordPiece
of BERT's uncased vocab, the period one more) with, at a random place, one
key sentence "the secret color is red ." or "... blue ." that holds the
label. The filler never uses the key words, so only that sentence tells the
label: a model that truncates the document to its first window is right
where the key sentence lies in it and guesses elsewhere, one that reads
every window (run_classifier --doc_stride) can be right everywhere.

    python -m tools.long_document_task --out_dir=/tmp/long_docs \\
      --doc_pieces=800 --train=400 --dev=200 --test=20

writes train.tsv, dev.tsv, test.tsv (`sentence<TAB>label`; test without
labels) for run_classifier's --task_data_dir, and prints how many dev
documents hold their key sentence in the first `--first_window` pieces.
"""

import argparse
import os
import random

FILLER = ("the of and to in is was for on that with as it at by from this "
          "be are or an which have has not but they had been were their more "
          "one all would there can will if about up out so what when some "
          "time only other new like then also into over after").split()
LABELS = ("red", "blue")


def document(rng, pieces, label):
  """(text, the key sentence's first piece): about `pieces` WordPieces."""
  sentences, count = [], 0
  while count < pieces - 6:
    words = [rng.choice(FILLER) for _ in range(rng.randint(6, 14))]
    sentences.append(" ".join(words) + " .")
    count += len(words) + 1
  at = rng.randint(0, len(sentences))
  start = sum(len(s.split()) for s in sentences[:at])
  sentences.insert(at, f"the secret color is {label} .")
  return " ".join(sentences), start


def rows(n, pieces, seed, first_window=None):
  """n (text, label) rows, labels balanced in a random order; with
  `first_window`, also how many have their key sentence whole in the first
  `first_window` pieces."""
  rng = random.Random(seed)
  out, inside = [], 0
  for i in range(n):
    label = LABELS[i % 2]
    text, start = document(rng, rng.randint(pieces * 3 // 4,
                                            pieces * 5 // 4), label)
    inside += first_window is not None and start + 6 <= first_window
    out.append((text, label))
  rng.shuffle(out)
  return (out, inside) if first_window is not None else out


def write_task(directory, train, dev, test, pieces, seed=0):
  """train.tsv, dev.tsv (text, label) and test.tsv (text) in `directory`;
  returns the rows {split: [(text, label)]}."""
  os.makedirs(directory, exist_ok=True)
  splits = {"train": rows(train, pieces, seed),
            "dev": rows(dev, pieces, seed + 1),
            "test": rows(test, pieces, seed + 2)}
  for split, data in splits.items():
    with open(os.path.join(directory, f"{split}.tsv"), "w",
              encoding="utf-8") as f:
      f.write("sentence\tlabel\n" if split != "test" else "sentence\n")
      f.writelines(f"{text}\t{label}\n" if split != "test" else f"{text}\n"
                   for text, label in data)
  return splits


def add_arguments(parser):
  """The task's sizes as flags (this program's and the benchmark's)."""
  parser.add_argument("--doc_pieces", type=int, default=800,
                      help="WordPieces of a document, about (3/4 to 5/4)")
  parser.add_argument("--train", type=int, default=400)
  parser.add_argument("--dev", type=int, default=200)
  parser.add_argument("--seed", type=int, default=0)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out_dir", required=True)
  add_arguments(parser)
  parser.add_argument("--test", type=int, default=20)
  parser.add_argument("--first_window", type=int, default=126,
                      help="WordPieces of the first window (max_seq_length "
                      "- 2), for the truncation baseline")
  return parser.parse_args(argv)


def main():
  args = parse_args()
  write_task(args.out_dir, args.train, args.dev, args.test, args.doc_pieces,
             args.seed)
  _, inside = rows(args.dev, args.doc_pieces, args.seed + 1,
                   args.first_window)
  print(f"wrote {args.out_dir}: {args.train} train, {args.dev} dev, "
        f"{args.test} test documents of ~{args.doc_pieces} WordPieces; "
        f"{inside} dev documents hold the key sentence in their first "
        f"{args.first_window} pieces (truncation's expected accuracy "
        f"{(inside + (args.dev - inside) / 2) / args.dev:.3f})")


if __name__ == "__main__":
  main()
