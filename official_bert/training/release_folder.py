"""A release folder: the files a converted or extended BERT consists of.

convert_checkpoint and extend_checkpoint write one with `write`; it has the
names of google-research/bert's released model folders, so a program takes
it as --init_checkpoint (the folder itself resolves) with the config and
vocabulary beside it:

    bert_model.ckpt.index       the weights: a tf.train.Checkpoint whose
    bert_model.ckpt.data-*      `model` is a BertPretrainer (model/encoder/...,
                                model/cls_predictions/...), or, for a model
                                without pretraining heads, model/encoder/...
                                alone (checkpoints.restore_model initialises
                                the heads; no tool takes untrained heads for
                                trained ones)
    checkpoint                  the index naming bert_model.ckpt by a relative
                                path, so the folder resolves wherever it is
                                moved or copied
    bert_config.json            the model's configs.BertConfig
    vocab.txt                   its WordPiece vocabulary, one token a line
                                (absent when none is known)
    pooling.json, ...           what the program adds: convert_checkpoint the
                                pooling of a sentence-transformers source,
                                extend_checkpoint its extend_info.json
"""

import contextlib
import os
import shutil

import tensorflow as tf

from official_bert import cli
from official_bert.modeling import encoder as encoder_lib
from official_bert.training import checkpoints

PREFIX_NAME = "bert_model.ckpt"


def write(directory, model, config, vocab=None, files=None, temporary=False):
  """Writes a release folder in `directory`; returns the checkpoint prefix.

  Args:
    directory: the folder, created when missing.
    model: a BertPretrainer, written whole, or a BertEncoder, written as the
      encoder of one (model/encoder/...).
    config: its configs.BertConfig.
    vocab: a vocab.txt to copy byte for byte (nothing is done when it is
      the folder's own), a list of tokens, or None (no vocab.txt).
    files: {name: text} of the other files.
    temporary: `directory` is a temporary folder the caller renames into
      place once complete (saved_model_io.atomic_dir: a failed write removes
      it and names the final folder). Otherwise each file appears complete
      (TensorFlow writes the checkpoint then renames it, the others are
      written through a temporary name), and a failed checkpoint write
      removes its leftovers and names the checkpoint.
  """
  os.makedirs(directory, exist_ok=True)
  if isinstance(model, encoder_lib.BertEncoder):
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=model))
  else:
    root = tf.train.Checkpoint(model=model)
  prefix = os.path.join(directory, PREFIX_NAME)
  with (contextlib.nullcontext() if temporary else
        checkpoints.writing(root, prefix)):
    prefix = root.write(prefix)
  # The index after the checkpoint's files: the folder resolves only once
  # they are complete.
  cli.atomic_write(os.path.join(directory, "checkpoint"),
                   f'model_checkpoint_path: "{PREFIX_NAME}"\n'
                   f'all_model_checkpoint_paths: "{PREFIX_NAME}"\n')
  config.to_json_file(os.path.join(directory, "bert_config.json"))
  target = os.path.join(directory, "vocab.txt")
  if isinstance(vocab, str):
    if os.path.abspath(vocab) != os.path.abspath(target):
      with open(vocab, "rb") as src, cli.atomic_open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
  elif vocab is not None:
    cli.atomic_write(target, "".join(token + "\n" for token in vocab))
  for name, text in (files or {}).items():
    cli.atomic_write(os.path.join(directory, name), text)
  return prefix
