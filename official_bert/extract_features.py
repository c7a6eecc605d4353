r"""Extracts BERT's per-token vectors (and a pooled sentence vector) as JSONL.

The original extract_features.py's command and output format:

    python -m official_bert.extract_features \
      --input_file=sentences.txt --output_file=features.jsonl \
      --vocab_file=bert_base/vocab.txt --bert_config_file=bert_base/bert_config.json \
      --init_checkpoint=bert_base --layers=-1,-2,-3,-4 --max_seq_length=128

--input_file: one text per line; `text_a ||| text_b` for a pair. Each output
line is one input line:

    {"linex_index": 0,
     "features": [{"token": "[CLS]",
                   "layers": [{"index": -1, "values": [0.12, ...]}, ...]},
                  ...],
     "pooled_output": [0.53, ...]}

Layers are counted from the end (-1 = the last encoder layer); values are
rounded to 6 decimals, as the original writes them. The file appears only
when complete.
"""

import json
import os
import re
import time

from absl import app
from absl import flags

from official_bert import cli
from official_bert import tpu_flags

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  flags.DEFINE_string("input_file", None, "Text, one example per line "
                      "(`a ||| b` for a pair).")
  flags.DEFINE_string("output_file", None, "Where to write the JSONL.")
  flags.DEFINE_string("layers", "-1,-2,-3,-4", "Comma-separated encoder layers, "
                      "-1 being the last.")
  flags.DEFINE_string("bert_config_file", None, "The model's bert_config.json.")
  flags.DEFINE_string("vocab_file", None, "The model's vocab.txt.")
  flags.DEFINE_string("init_checkpoint", None, "Any official_bert checkpoint "
                      "(pretraining, converted or fine-tuned), prefix or directory.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased models).")
  flags.DEFINE_integer("max_seq_length", 128, "Longer inputs are truncated.")
  flags.DEFINE_integer("batch_size", 32, "Batch size for inference.")
  tpu_flags.define(extract_features=True)


def parse_layers(text, num_layers):
  """"-1,-2" -> [-1, -2], each checked against the model's depth."""
  try:
    layers = [int(part) for part in text.split(",") if part.strip()]
  except ValueError:
    raise ValueError(f"--layers={text!r} must be comma-separated integers "
                     "such as -1,-2,-3,-4") from None
  bad = [i for i in layers if not -num_layers <= i < num_layers]
  if not layers or bad:
    raise ValueError(f"--layers={text!r}: the model has {num_layers} layers, "
                     f"so each index must be in [-{num_layers}, "
                     f"{num_layers - 1}]")
  return layers


def read_input(path):
  """`Example`s of the input file (text_b for `a ||| b` lines)."""
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top
  examples = []
  with open(path, "rb") as f:
    for number, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8").strip()
      except UnicodeDecodeError:
        raise ValueError(f"--input_file {path} line {number} is not UTF-8 "
                         "text; convert the file to UTF-8") from None
      if not line:
        continue
      a, _, b = line.partition(" ||| ")
      examples.append(text_files.Example(a, b or None, None,
                                              f"{path}:{number}"))
  if not examples:
    raise ValueError(f"--input_file {path} holds no text; write one example "
                     "per line")
  return examples


def encode_mixed(examples, tokenizer, max_seq_length):
  """Packs single texts and pairs together (encode takes one kind at a time)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top
  groups = {}
  for i, example in enumerate(examples):
    groups.setdefault(example.text_b is None, []).append(i)
  out = {}
  for indices in groups.values():
    packed = text_files.encode([examples[i] for i in indices], tokenizer,
                                    max_seq_length)
    for name, values in packed.items():
      out.setdefault(name, np.zeros((len(examples), max_seq_length), np.int32))
      out[name][indices] = values
  return out


def main(argv):
  del argv
  tpu_flags.apply(FLAGS)
  for name in ("input_file", "output_file", "bert_config_file", "vocab_file",
               "init_checkpoint"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  cli.check_text_file("input_file", FLAGS.input_file,
                      "UTF-8 text, one example per line")
  cli.check_text_file("bert_config_file", FLAGS.bert_config_file,
                      "a bert_config.json")
  cli.check_input_file("vocab_file", FLAGS.vocab_file)
  cli.check_output_file("output_file", FLAGS.output_file)
  # A prefix or a directory: only a directory that hides it is checked here.
  if cli.blocked_by(FLAGS.init_checkpoint):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  try:
    examples = read_input(FLAGS.input_file)
  except ValueError as e:
    raise app.UsageError(str(e))
  # TensorFlow starts here, after the cheap checks (without its start-up
  # lines).
  cli.start_tensorflow()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import kernels as kernels_lib  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top

  try:
    config = configs.BertConfig.from_json_file(FLAGS.bert_config_file,
                                               "--bert_config_file")
    layers = parse_layers(FLAGS.layers, config.num_hidden_layers)
    if FLAGS.max_seq_length > config.max_position_embeddings:
      raise ValueError(f"--max_seq_length={FLAGS.max_seq_length} exceeds "
                       f"max_position_embeddings="
                       f"{config.max_position_embeddings}; lower it")
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file,
                                           FLAGS.do_lower_case)
    encoder = encoder_lib.BertEncoder.from_bert_config(
        config, kernels=kernels_lib.resolve("auto"))  # run by tf.function
    prefix = checkpoints.restore_encoder(encoder, FLAGS.init_checkpoint)
    _check_depth(prefix, config.num_hidden_layers)
    inputs = encode_mixed(examples, tokenizer, FLAGS.max_seq_length)
  except (ValueError, TypeError, KeyError) as e:
    raise app.UsageError(str(e))

  @tf.function
  def run(batch):
    out = encoder(batch, training=False)
    return ([tf.cast(out["encoder_outputs"][i], tf.float32) for i in layers],
            tf.cast(out["pooled_output"], tf.float32))

  directory = os.path.dirname(os.path.abspath(FLAGS.output_file))
  os.makedirs(directory, exist_ok=True)
  start, last_report, n = time.time(), time.time(), len(examples)
  with cli.atomic_open(FLAGS.output_file, what="the features") as f:
    for begin in range(0, n, FLAGS.batch_size):
      batch = {k: v[begin:begin + FLAGS.batch_size] for k, v in inputs.items()}
      layer_values, pooled = run(batch)
      layer_values = [v.numpy() for v in layer_values]
      pooled = pooled.numpy()
      for row in range(len(batch["input_mask"])):
        length = int(batch["input_mask"][row].sum())
        tokens = tokenizer.convert_ids_to_tokens(
            batch["input_word_ids"][row][:length])
        features = [{"token": token, "layers": [
            {"index": index, "values": _rounded(values[row, t])}
            for index, values in zip(layers, layer_values)]}
                    for t, token in enumerate(tokens)]
        f.write(json.dumps({"linex_index": begin + row, "features": features,
                            "pooled_output": _rounded(pooled[row])}) + "\n")
      done = min(begin + FLAGS.batch_size, n)
      if time.time() - last_report > 10 or done == n:
        rate = done / max(time.time() - start, 1e-9)
        print(f"{done}/{n} examples, {rate:.1f} examples/s, "
              f"ETA {(n - done) / rate:.0f} s", flush=True)
        last_report = time.time()
  print(f"Wrote {n} examples (layers {layers}, {config.hidden_size} values "
        f"each) from {prefix} to {FLAGS.output_file} in "
        f"{time.time() - start:.1f} s", flush=True)


def _check_depth(prefix, num_layers):
  """A config with fewer layers than the checkpoint restores without error
  (the deeper layers are just not read) and would write the vectors of a
  truncated model: refuse it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  found = {int(m.group(1)) for name, _ in tf.train.list_variables(prefix)
           if not name.startswith("optimizer")
           for m in [re.search(r"(?:^|/)layer_(\d+)/", name)] if m}
  if found and max(found) + 1 != num_layers:
    raise ValueError(f"checkpoint {prefix} has {max(found) + 1} encoder "
                     f"layers but --bert_config_file={FLAGS.bert_config_file} "
                     f"says num_hidden_layers={num_layers}; pass the "
                     "bert_config.json the checkpoint was trained with")


def _rounded(vector):
  return [round(float(x), 6) for x in vector]


if __name__ == "__main__":
  define_flags()
  cli.run(main)
