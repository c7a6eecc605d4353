"""The quickstart's embedded corpus: docstrings of Python's standard library.

Needs no download: the text is read at run time from the `.py` files of the
running interpreter's standard library (with `ast`, nothing is imported).
Each module is one document; its module, class and function docstrings are
split into sentences, one per line, the input format of
`create_pretraining_data.py`.
"""

import ast
import os
import re
import sysconfig

from official_bert import cli

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages",
              "__pycache__", "turtledemo", "tkinter", "ensurepip"}


def _module_files(stdlib):
  for dirpath, dirnames, filenames in os.walk(stdlib):
    dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
    for name in sorted(filenames):
      if name.endswith(".py"):
        yield os.path.join(dirpath, name)


def _sentences(docstring):
  for paragraph in re.split(r"\n\s*\n", docstring):
    lines = [line.strip() for line in paragraph.splitlines()]
    # Skip code examples, tables and argument lists laid out as columns.
    if any(line.startswith((">>>", "...", "$", "|", "+-")) for line in lines):
      continue
    text = " ".join(line for line in lines if line)
    if len(text.split()) < 4:
      continue
    for sentence in _SENTENCE_END.split(text):
      sentence = sentence.strip()
      if len(sentence.split()) >= 3:
        yield sentence


def documents(stdlib=None, max_documents=None):
  """Yields one list of sentences per standard-library module."""
  stdlib = stdlib or sysconfig.get_paths()["stdlib"]
  count = 0
  for path in _module_files(stdlib):
    if max_documents is not None and count >= max_documents:
      return
    try:
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    except (SyntaxError, UnicodeDecodeError, ValueError):
      continue
    sentences = []
    for node in ast.walk(tree):
      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                           ast.AsyncFunctionDef)):
        docstring = ast.get_docstring(node)
        if docstring:
          sentences.extend(_sentences(docstring))
    if len(sentences) >= 2:
      count += 1
      yield sentences


def write_corpus(path, stdlib=None, max_documents=None):
  """Writes the corpus (one sentence a line, blank line between documents).

  Returns (documents, sentences). Written to a temporary name, then renamed.
  """
  num_docs = num_sentences = 0
  with cli.atomic_open(path) as f:
    for sentences in documents(stdlib, max_documents):
      f.write("\n".join(sentences) + "\n\n")
      num_docs += 1
      num_sentences += len(sentences)
  return num_docs, num_sentences
