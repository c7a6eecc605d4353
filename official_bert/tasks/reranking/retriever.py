"""The reranker's retriever: a bi-encoder export that embeds raw text.

`--retriever=EXPORT_DIR` names a TF Serving SavedModel whose
`serving_default` signature takes `text` [B] and returns a
`sentence_embedding` [B, H]: run_embedding's `--export_dir`, or
`export.export_saved_model`'s of a converted sentence-transformers model.
EXPORT_DIR is a version directory (it holds saved_model.pb) or the model's
base path (its newest numbered version is read).

Checked before TensorFlow starts (`check`): that there is a SavedModel, and
that its vocabulary (the asset its tokenizer reads) is the reranker's
`--vocab_file`, line for line; when opened (`Retriever`, from
saved_model.pb before it loads): that its serving_default takes `text` and
returns a `sentence_embedding`. Each is one sentence naming the file (and
the line).
"""

import os
import re

import numpy as np

BATCH = 64  # texts per request


def version_dir(path):
  """The SavedModel directory of `path` (ValueError: one sentence)."""
  if os.path.isfile(os.path.join(path, "saved_model.pb")):
    return path
  versions = sorted((int(name), name) for name in (
      os.listdir(path) if os.path.isdir(path) else [])
                    if re.fullmatch(r"\d+", name) and os.path.isfile(
                        os.path.join(path, name, "saved_model.pb")))
  if not versions:
    raise ValueError(f"--retriever {path} holds no SavedModel (no "
                     "saved_model.pb, nor numbered versions with one); pass "
                     "run_embedding's --export_dir or one of its versions")
  return os.path.join(path, versions[-1][1])


def check(path, vocab_file):
  """The retriever's version directory, once its vocabulary asset is
  `vocab_file`'s (ValueError: one sentence naming the file and line)."""
  version = version_dir(path)
  assets = os.path.join(version, "assets")
  names = sorted(n for n in (os.listdir(assets) if os.path.isdir(assets)
                             else []) if n.endswith(".txt"))
  if len(names) != 1:
    raise ValueError(f"--retriever {version}: no vocabulary (one .txt file "
                     f"in assets/, found {names}); pass a text export "
                     "(run_embedding's --export_dir)")
  theirs = os.path.join(assets, names[0])
  with open(theirs, encoding="utf-8") as f, open(
      vocab_file, encoding="utf-8") as g:
    a, b = f.read().splitlines(), g.read().splitlines()
  for line, (x, y) in enumerate(zip(a + [None] * len(b), b + [None] * len(a)),
                                1):
    if x != y:
      raise ValueError(
          f"{theirs}:{line}: the retriever's vocabulary has {x!r} where "
          f"--vocab_file {vocab_file} has {y!r}; the retriever must share "
          "the reranker's vocabulary: pass its model's vocab.txt or a "
          "retriever trained from the same model")
  return version


class Retriever:
  """A loaded retriever: `embed(texts)` -> float32 [N, H].

  ValueError (one sentence naming the file) when its serving_default has no
  `sentence_embedding` output."""

  def __init__(self, version):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
    from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
    self.path = version
    # The signature read from saved_model.pb, before loading (restoring the
    # weights, rebuilding the functions: seconds for a real model).
    path = os.path.join(version, "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
      saved.ParseFromString(f.read())
    serve = saved.meta_graphs[0].signature_def.get("serving_default")
    outputs = sorted(serve.outputs) if serve is not None else []
    inputs = sorted(serve.inputs) if serve is not None else []
    if "sentence_embedding" not in outputs or inputs != ["text"]:
      raise ValueError(
          f"--retriever {path}: its serving_default takes {inputs} and "
          f"returns {outputs}, not text in and sentence_embedding out; pass "
          "run_embedding's export or export_saved_model's of a "
          "sentence-transformers model")
    self._serve = tf.saved_model.load(version).signatures["serving_default"]
    self._tf = tf

  def embed(self, texts):
    out = [self._serve(text=self._tf.constant(texts[i:i + BATCH]))[
        "sentence_embedding"].numpy() for i in range(0, len(texts), BATCH)]
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)
