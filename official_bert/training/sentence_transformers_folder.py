"""A sentence-transformers model folder, and the pooling a checkpoint records.

A sentence-transformers model is a folder whose `modules.json` lists its
modules in order, each with its `type` (`sentence_transformers.models.
Transformer`, `...Pooling`, `...Normalize`) and its `path`, a subfolder
("" for the folder itself):

    modules.json           [{"idx": 0, "type": "...Transformer", "path": ""},
                            {"idx": 1, "type": "...Pooling",
                             "path": "1_Pooling"}]
    config.json, model.safetensors, vocab.txt...
                           the BERT, as Hugging Face saves it
    1_Pooling/config.json  its pooling mode: {"pooling_mode": "mean"}
                           (sentence-transformers 6), or earlier versions'
                           one bool per mode: "pooling_mode_mean_tokens"...

(export/hf_export.py writes one.) Our checkpoints record the pooling of
the sentence embedding as `pooling.json` ({"pooling": "mean"} or "cls")
beside them: run_embedding writes it in its output_dir, convert_checkpoint
beside a converted sentence-transformers model. A run starting from a
checkpoint uses its pooling (`resolve_pooling`), and export_checkpoint
--format=sentence_transformers writes it back into the folder's Pooling
module.
"""

import json
import os

POOLING_FILE = "pooling.json"
# sentence-transformers' Pooling modes -> ours (its other modes: none here).
# modeling/sentence_embedder.POOLINGS, without loading Keras (run_embedding
# defines its --pooling choices from it before TensorFlow starts;
# tests/embedding_test.py checks they are equal).
POOLINGS = ("mean", "cls")
_ST_POOLINGS = {"mean": "mean", "cls": "cls", "pooling_mode_mean_tokens":
                "mean", "pooling_mode_cls_token": "cls"}


def _json_file(path):
  """`path`'s JSON value (ValueError naming the file when it cannot be)."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f"cannot read {path}: {e}") from None


# ------------------------------------------------- our pooling.json ----
def read_pooling(directory):
  """The pooling recorded in `directory`/pooling.json, or None."""
  path = os.path.join(directory, POOLING_FILE)
  if not os.path.isfile(path):
    return None
  pooling = _json_file(path)
  pooling = pooling.get("pooling") if isinstance(pooling, dict) else None
  if pooling not in POOLINGS:
    raise ValueError(f"{path} should be {{\"pooling\": \"mean\"}} or "
                     f"\"cls\", not {pooling!r}")
  return pooling


def pooling_json(pooling):
  """pooling.json's text for `pooling` ("mean" or "cls")."""
  return json.dumps({"pooling": pooling}) + "\n"


def checkpoint_dir(path):
  """The directory of a checkpoint path (a directory, a prefix, or a prefix
  in a run's best/), where its run's files are."""
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  if os.path.basename(os.path.normpath(directory)) == "best":
    directory = os.path.dirname(os.path.normpath(directory))
  return directory


def resolve_pooling(pooling, output_dir, init_checkpoint):
  """(pooling, where it comes from, in words): `pooling` when given, else
  the run's own (output_dir/pooling.json: a rerun), else the starting
  checkpoint's (pooling.json beside it), else "mean"."""
  if pooling:
    return pooling, "--pooling"
  for directory, what in ((output_dir, "--output_dir"),
                          (init_checkpoint and checkpoint_dir(
                              init_checkpoint), "--init_checkpoint")):
    found = directory and read_pooling(directory)
    if found:
      return found, f"{what}'s {POOLING_FILE}"
  return "mean", "the default"


# ------------------------------------- a sentence-transformers folder ----
def sentence_transformers_module(directory, kind):
  """The folder of the module of `kind` ("Transformer", "Pooling") that a
  sentence-transformers model's modules.json lists; None when `directory`
  has no modules.json or it lists no such module."""
  path = os.path.join(directory, "modules.json")
  if not os.path.isfile(path):
    return None
  for module in _json_file(path):
    if str(module.get("type", "")).endswith(kind):
      return os.path.join(directory, module.get("path", ""))
  return None


def sentence_transformers_pooling(directory):
  """(pooling or None, note): a sentence-transformers model directory's
  pooling (its Pooling module's config.json); (None, None) when
  `directory` has no Pooling module, (None, why) when its pooling is one
  run_embedding does not compute."""
  folder = sentence_transformers_module(directory, "Pooling")
  if folder is None:
    return None, None
  config_path = os.path.join(folder, "config.json")
  config = _json_file(config_path)
  modes = config.get("pooling_mode")  # sentence-transformers 6's key
  if modes is None:  # earlier versions: one bool per mode
    modes = [k for k, v in config.items()
             if k.startswith("pooling_mode_") and v is True]
  modes = [modes] if isinstance(modes, str) else list(modes)
  if len(modes) != 1 or modes[0] not in _ST_POOLINGS:
    return None, (f"{config_path}: pooling {modes} is not mean or cls, which "
                  "run_embedding computes; pass --pooling")
  return _ST_POOLINGS[modes[0]], None
