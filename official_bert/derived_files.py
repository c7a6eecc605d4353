"""Files a run derives from its inputs, reused by a rerun only when made from
the same inputs: the digests and the check behind embedding's mined hard
negatives (tasks/embedding/hard_negatives.py), a teacher's cached outputs
(training/distillation.py) and what a reranker's retriever gave
(tasks/reranking/reranking_task.py).

A derived file is written beside its record, a JSON of what it was made from
(its `made_from`: {key: value or digest}) and the file's own digest, the
record last (atomic_io), so a crash between the two makes the file again.

    content, record, why = derived_files.reusable(
        output_dir, "x.npz", "x.json", made_from, MADE_FROM, "outputs")
"""

import hashlib
import json
import os

import numpy as np


def digest(*parts):
  """sha256 (hex) of bytes, str, numpy arrays (dtype, shape, bytes) or
  nested lists/dicts of them, in order (dicts by sorted key)."""
  h = hashlib.sha256()

  def add(part):
    if isinstance(part, dict):
      for key in sorted(part):
        add(key)
        add(part[key])
    elif isinstance(part, (list, tuple)):
      for p in part:
        add(p)
    elif isinstance(part, np.ndarray):
      h.update(f"{part.dtype}{part.shape}".encode())
      h.update(np.ascontiguousarray(part).tobytes())
    else:
      h.update(part if isinstance(part, bytes) else str(part).encode())
      h.update(b"\0")
  for part in parts:
    add(part)
  return h.hexdigest()


def file_digest(path):
  """`digest` of a file's bytes."""
  with open(path, "rb") as f:
    return digest(f.read())


def folder_digest(path):
  """sha256 of every file under `path` (names and bytes, sorted), read in
  chunks (an export's variables may be large)."""
  h = hashlib.sha256()
  for root, dirs, names in os.walk(path):
    dirs.sort()
    for name in sorted(names):
      full = os.path.join(root, name)
      h.update(os.path.relpath(full, path).encode() + b"\0")
      with open(full, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
          h.update(chunk)
  return h.hexdigest()


def reusable(output_dir, file_name, record_name, made_from, words,
             content_key, file_changed, inputs_changed="", ignore=()):
  """(content, record, why): the derived file's bytes and its record when
  output_dir holds both, the file unchanged since (its digest is the
  record's `content_key`) and made from `made_from` (but the keys in
  `ignore`); else (None, None, why it is made again, in words: None when
  there is no record). `words`: {made_from key: what it is, in words};
  the reasons read "`file_name` changed since it was `file_changed`" and
  "`words` changed`inputs_changed`"."""
  path, record_path = (os.path.join(output_dir, name)
                       for name in (file_name, record_name))
  if not os.path.exists(record_path):
    return None, None, None
  try:
    with open(record_path, encoding="utf-8") as f:
      old = json.load(f)
    with open(path, "rb") as f:
      content = f.read()
  except (OSError, ValueError):
    return None, None, f"{record_name} or {file_name} cannot be read"
  if digest(content) != old.get(content_key):
    return None, None, f"{file_name} changed since it was {file_changed}"
  changed = [words[key] for key in made_from
             if old.get(key) != made_from[key] and key not in ignore]
  if changed:
    return None, None, " and ".join(changed) + " changed" + inputs_changed
  return content, old, None
