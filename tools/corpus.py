"""The shared Python-docs corpus that the task generators read.

`../shared/data/pydocs_corpus.txt` beside the clone: one sentence a line, a
blank line between documents (the format of `--input_file` everywhere).
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYDOCS = os.path.normpath(
    os.path.join(ROOT, "..", "shared", "data", "pydocs_corpus.txt"))


def documents(path=PYDOCS):
  """The documents of a corpus file: a list of documents, each a list of
  its stripped non-blank lines."""
  docs, current = [], []
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if line:
        current.append(line)
      elif current:
        docs.append(current)
        current = []
  if current:
    docs.append(current)
  return docs
