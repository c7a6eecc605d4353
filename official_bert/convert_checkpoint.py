r"""Converts released BERT weights into an official_bert checkpoint.

Sources (detected from what `--source` holds):
  * google-research/bert: a TF1 checkpoint (`bert_model.ckpt` prefix, or the
    directory holding it) with its `bert_config.json` (and `vocab.txt`).
    Adam slots (`*/adam_m`, `*/adam_v`) and `global_step` are skipped.
  * Hugging Face: a directory with `config.json` and `model.safetensors` or
    `pytorch_model.bin` (BertModel, BertForPreTraining or BertForMaskedLM
    names, with or without the `bert.` prefix).
  * sentence-transformers: such a directory with `modules.json` (the BERT in
    it or in its Transformer module's folder); its Pooling module's mode
    (mean or cls) is written as `pooling.json`, which run_embedding and
    export_checkpoint --format=sentence_transformers read.

Output, in `--output_dir`: a release folder (training/release_folder.py):
`bert_model.ckpt.*` (a `BertPretrainer`, plus a `checkpoint` index so the
directory itself resolves), `bert_config.json` and `vocab.txt`.
`run_pretraining.py --init_checkpoint`, `run_classifier.py --init_checkpoint`
and the exporters take either the directory or the prefix.

    python -m official_bert.convert_checkpoint \
      --source=uncased_L-12_H-768_A-12 --output_dir=/tmp/bert_base

The renaming itself is `checkpoint_names.py` (the project's one name table).
A config that does not fit the weights is one error listing missing tensors
and shape mismatches; tensors the model has no place for are listed.
"""

import dataclasses
import json
import math
import os
import time

import numpy as np

from official_bert import cli
from official_bert.training import checkpoint_names
from official_bert.training import checkpoints
from official_bert.training import release_folder
from official_bert import configs
from official_bert.modeling import pretrainer as pretrainer_lib
from official_bert.training import sentence_transformers_folder as st_folder

_HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclasses.dataclass
class Source:
  """Weights read from a source, keyed by original (TF1) name."""
  kind: str                 # "tf1" or "hf"
  path: str                 # the checkpoint prefix or weights file read
  config: configs.BertConfig
  arrays: dict
  ignored: list             # source tensors that are not model weights
  vocab_file: str | None


@dataclasses.dataclass
class ConversionResult:
  prefix: str
  source: Source
  num_tensors: int
  unused: list              # source tensors the model has no variable for
  heads: str                # which pretraining heads came from the source
  pooling: str | None = None  # a sentence-transformers model's (pooling.json)
  pooling_note: str | None = None  # why its pooling was not recorded


def read_tf1_checkpoint(path, bert_config_file=None, vocab_file=None):
  """Reads a google-research/bert checkpoint (prefix or its directory)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  prefix = path
  if os.path.isdir(path):
    prefix = tf.train.latest_checkpoint(path) or os.path.join(
        path, release_folder.PREFIX_NAME)
  if not tf.io.gfile.exists(prefix + ".index"):
    raise ValueError(f"--source {path}: no TF1 checkpoint found (expected "
                     f"{prefix}.index) and no Hugging Face config.json; pass "
                     "the bert_model.ckpt prefix or a model directory")
  directory = os.path.dirname(prefix)
  bert_config_file = bert_config_file or os.path.join(directory,
                                                      "bert_config.json")
  config = configs.BertConfig.from_json_file(bert_config_file)
  arrays, ignored = checkpoints.read_original(prefix)
  return Source("tf1", prefix, config, arrays, ignored,
                _existing(vocab_file, os.path.join(directory, "vocab.txt")))


def read_hf_directory(directory, vocab_file=None):
  """Reads a Hugging Face BERT directory (config.json + weights)."""
  config_path = os.path.join(directory, "config.json")
  config = config_from_hf(config_path)
  for name in _HF_WEIGHT_FILES:
    weights = os.path.join(directory, name)
    if os.path.exists(weights):
      break
  else:
    raise ValueError(f"--source {directory} has config.json but no "
                     f"{' or '.join(_HF_WEIGHT_FILES)}; save the model with "
                     "save_pretrained()")
  try:
    if weights.endswith(".safetensors"):
      from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
      state = load_file(weights)
    else:
      state = _load_torch_state_dict(weights)
  except ValueError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"cannot read {weights}: {type(e).__name__}: {e}") from None
  arrays, ignored = checkpoint_names.from_hf_state_dict(state)
  return Source("hf", weights, config, arrays, ignored,
                _existing(vocab_file, os.path.join(directory, "vocab.txt")))


def config_from_hf(config_path):
  """The bert_config.json keys of a Hugging Face `config.json`."""
  try:
    with open(config_path, encoding="utf-8") as f:
      values = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read {config_path}: {e}") from None
  model_type = values.get("model_type", "bert")
  if model_type != "bert":
    raise ValueError(f"{config_path}: model_type is {model_type!r}; only "
                     "BERT checkpoints convert (model_type 'bert')")
  position = values.get("position_embedding_type", "absolute")
  if position != "absolute":
    raise ValueError(f"{config_path}: position_embedding_type {position!r} "
                     "is not BERT's; only 'absolute' converts")
  epsilon = values.get("layer_norm_eps", configs.LAYER_NORM_EPSILON)
  if not math.isclose(epsilon, configs.LAYER_NORM_EPSILON, rel_tol=1e-6):
    raise ValueError(f"{config_path}: layer_norm_eps is {epsilon}; the model "
                     f"computes LayerNorm with BERT's "
                     f"{configs.LAYER_NORM_EPSILON}, so only "
                     f"layer_norm_eps={configs.LAYER_NORM_EPSILON} converts")
  keys = [f.name for f in dataclasses.fields(configs.BertConfig)
          if f.name != "extra"]
  missing = [key for key in keys if key not in values]
  if missing:
    raise ValueError(f"{config_path} lacks the BERT config keys {missing}")
  try:
    return configs.BertConfig(**{key: values[key] for key in keys})
  except ValueError as e:
    raise ValueError(f"{config_path}: {e}") from None


def read_source(path, bert_config_file=None, vocab_file=None):
  """A `Source` from a HF directory or a TF1 checkpoint, by what `path` holds."""
  if os.path.isdir(path):  # a sentence-transformers model: its BERT's folder
    path = st_folder.sentence_transformers_module(
        path, "Transformer") or path
  if os.path.isdir(path) and os.path.exists(os.path.join(path, "config.json")):
    return read_hf_directory(path, vocab_file)
  if not os.path.exists(path) and not os.path.exists(path + ".index"):
    raise ValueError(f"--source {path} does not exist; pass a TF1 checkpoint "
                     "prefix (bert_model.ckpt) or a model directory")
  return read_tf1_checkpoint(path, bert_config_file, vocab_file)


def build_model(source):
  """A `BertPretrainer` holding the source's weights; returns (model, unused, heads).

  A source without the MLM head (e.g. HF `BertModel`) fills the encoder
  only; `convert` then writes the encoder alone, so no tool mistakes the
  untrained heads for trained ones (an exporter would add `.mlm`).
  """
  arrays = source.arrays
  has_mlm = any(name.startswith("cls/predictions/") for name in arrays)
  has_nsp = any(name.startswith("cls/seq_relationship/") for name in arrays)
  what = f"{source.kind} weights {source.path}"
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      source.config, use_next_sentence=has_nsp or not has_mlm)
  if has_mlm:
    unused = checkpoint_names.assign_original(model, arrays, what)
    heads = "encoder, masked-LM head" + (", next-sentence head" if has_nsp
                                         else "")
  else:
    unused = checkpoint_names.assign_original(model.encoder, arrays, what)
    heads = ("encoder only: the source has no pretraining heads, none "
             "written")
  return model, unused, heads


def convert(source_path, output_dir, bert_config_file=None, vocab_file=None):
  """Converts `source_path` into `output_dir`; returns a `ConversionResult`."""
  source = read_source(source_path, bert_config_file, vocab_file)
  model, unused, heads = build_model(source)
  pooling, pooling_note = (None, None)
  if os.path.isdir(source_path):
    pooling, pooling_note = st_folder.sentence_transformers_pooling(
        source_path)
  files = {}
  if pooling:
    files[st_folder.POOLING_FILE] = st_folder.pooling_json(pooling)
  # An encoder-only source's weights are written without heads.
  prefix = release_folder.write(
      output_dir, model.encoder if heads.startswith("encoder only") else model,
      source.config, source.vocab_file, files)
  return ConversionResult(prefix, source, len(source.arrays) - len(unused),
                          unused, heads, pooling, pooling_note)


def _existing(preferred, default):
  if preferred:
    if not os.path.exists(preferred):
      raise ValueError(f"--vocab_file {preferred} does not exist")
    return preferred
  return default if os.path.exists(default) else None


def _load_torch_state_dict(path):
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ValueError(f"{path} is a PyTorch file and torch is not installed: "
                     "pip install torch, or save the model as "
                     "model.safetensors") from None
  state = torch.load(path, map_location="cpu", weights_only=True)
  return {k: v.float().numpy() if v.is_floating_point() else v.numpy()
          for k, v in state.items()}


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  start = time.time()
  # Paths first, before TensorFlow starts (--source may be a prefix).
  for name in ("bert_config_file", "vocab_file"):
    if getattr(FLAGS, name):
      cli.check_input_file(name, getattr(FLAGS, name))
  if cli.blocked_by(FLAGS.source):
    raise cli.missing("source", FLAGS.source)
  cli.check_output_dir("output_dir", FLAGS.output_dir, create=False)
  cli.start_tensorflow()  # without its start-up lines
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    result = convert(FLAGS.source, FLAGS.output_dir, FLAGS.bert_config_file,
                     FLAGS.vocab_file)
  except ValueError as e:
    raise cli.Error(str(e)) from None
  except OSError as e:
    raise cli.Error(f"cannot read or write {e.filename}: {e.strerror}; check "
                    "--source and --output_dir") from None
  except (tf.errors.OpError, IndexError) as e:  # truncated or corrupted
    message = str(getattr(e, "message", e)).strip().splitlines()
    raise cli.Error(f"cannot read --source {FLAGS.source}: "
                    f"{message[0][:300] if message else type(e).__name__}; "
                    "pass a complete checkpoint") from None
  source = result.source
  logging.info("config: %s", json.dumps(source.config.to_dict(), sort_keys=True))
  if source.ignored:
    print(f"skipped {len(source.ignored)} non-weight tensors "
          f"(optimizer slots, step): {source.ignored[:6]}"
          + (" ..." if len(source.ignored) > 6 else ""))
  if result.unused:
    print(f"unused source tensors ({len(result.unused)}): {result.unused}")
  if result.pooling:
    print(f"sentence-transformers pooling: {result.pooling} (written to "
          f"{st_folder.POOLING_FILE})")
  if result.pooling_note:
    print(f"note: {result.pooling_note}")
  if source.vocab_file is None:
    print("note: no vocab.txt found beside the source; pass --vocab_file to "
          "copy one into the output")
  total = sum(int(np.prod(a.shape)) for a in source.arrays.values())
  print(f"converted {source.kind} {source.path}: {result.num_tensors} tensors "
        f"({total / 1e6:.1f}M values; {result.heads}) -> {result.prefix} "
        f"in {time.time() - start:.1f} s")


def _define_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("source", None, "A google-research/bert checkpoint "
                      "(bert_model.ckpt prefix or its directory) or a Hugging "
                      "Face BERT directory (config.json + model.safetensors or "
                      "pytorch_model.bin).")
  flags.DEFINE_string("output_dir", None, "Where to write bert_model.ckpt, "
                      "bert_config.json and vocab.txt.")
  flags.DEFINE_string("bert_config_file", None, "For a TF1 checkpoint: its "
                      "bert_config.json (default: beside the checkpoint).")
  flags.DEFINE_string("vocab_file", None, "vocab.txt to copy into output_dir "
                      "(default: the one beside the source, if any).")
  flags.mark_flags_as_required(["source", "output_dir"])


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
