r"""Exports a checkpoint for Hugging Face, sentence-transformers or google-research/bert.

    python -m export.export_checkpoint --format=huggingface \
      --bert_config_file=bert_base/bert_config.json \
      --init_checkpoint=bert_base/bert_model.ckpt \
      --vocab_file=bert_base/vocab.txt --do_lower_case=True \
      --export_dir=/tmp/bert_hf

Formats (`--export_dir` must not exist; it appears only when complete):
  huggingface            model.safetensors + config.json + tokenizer files;
                         the checkpoint's head picks the class: pretraining ->
                         BertForPreTraining, encoder -> BertModel,
                         run_classifier -> BertForSequenceClassification
                         (problem_type regression for one output), run_squad
                         -> BertForQuestionAnswering, run_ner ->
                         BertForTokenClassification, run_reranker ->
                         BertForSequenceClassification with one label
                         (sentence-transformers' CrossEncoder loads it),
                         labels from the run's label_list.json
                         (export/checkpoint_heads.py).
  sentence_transformers  the encoder as BertModel plus modules.json,
                         1_Pooling (mean over the mask, as the serving
                         export's sentence_embedding; or the pooling.json
                         beside the checkpoint: run_embedding's, or a
                         converted sentence-transformers model's),
                         2_Normalize with --normalize_embedding; any head's
                         encoder exports.
  google_tf1             bert_model.ckpt under google-research/bert's
                         variable names and layouts (tf.raw_ops.SaveV2: plain
                         names, no object graph), bert_config.json, vocab.txt.
                         NER heads have no original names and are refused.
"""

import json
import os
import shutil
import time

from absl import flags

from official_bert import cli

FORMATS = ("huggingface", "sentence_transformers", "google_tf1")
_FLAG_NAMES = ("format", "bert_config_file", "init_checkpoint", "vocab_file",
               "do_lower_case", "export_dir", "task", "max_seq_length",
               "normalize_embedding")
TF1_PREFIX = "bert_model.ckpt"


def export(export_dir, fmt, bert_config_file, init_checkpoint, vocab_file,
           do_lower_case=True, task=None, max_seq_length=None,
           normalize_embedding=False, log=print):
  """Writes `export_dir` in format `fmt`; returns the `ExportedModel`.

  Raises ValueError (one sentence) for bad input; nothing is left behind.
  """
  from export import checkpoint_heads  # pylint: disable=g-import-not-at-top
  from export import hf_export  # pylint: disable=g-import-not-at-top
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  from official_bert.training import sentence_transformers_folder as st_folder  # pylint: disable=g-import-not-at-top
  if fmt not in FORMATS:
    raise ValueError(f"--format={fmt} is not one of {', '.join(FORMATS)}")
  export_dir = os.path.abspath(export_dir)
  if os.path.exists(export_dir):
    raise ValueError(f"--export_dir {export_dir} already exists; remove it "
                     "or choose another path")
  model = checkpoint_heads.read(bert_config_file, init_checkpoint, task)
  saved_model_io.check_vocab(vocab_file, model.config.vocab_size)
  if fmt == "google_tf1" and model.task == "ner":
    raise ValueError(f"checkpoint {model.prefix} holds an NER head, which "
                     "google-research/bert has no names for; export it with "
                     "--format=huggingface")
  if fmt == "sentence_transformers":
    if max_seq_length is None:
      max_seq_length = min(128, model.config.max_position_embeddings)
    if max_seq_length > model.config.max_position_embeddings:
      raise ValueError(
          f"--max_seq_length={max_seq_length} exceeds max_position_embeddings"
          f"={model.config.max_position_embeddings} of {bert_config_file}; "
          "lower --max_seq_length")
    if model.task != "encoder":
      log(f"note: the {model.task} head is not part of a sentence-"
          "transformers model; its encoder is exported")
    pooling = st_folder.read_pooling(
        st_folder.checkpoint_dir(model.prefix)) or "mean"
    log(f"pooling: {pooling}")
  with saved_model_io.atomic_dir(export_dir) as tmp:
    if fmt == "huggingface":
      hf_export.write_huggingface(model, tmp, vocab_file, do_lower_case)
    elif fmt == "sentence_transformers":
      hf_export.write_sentence_transformers(
          model, tmp, vocab_file, do_lower_case, max_seq_length,
          normalize_embedding, pooling)
    else:
      write_tf1(model, tmp, vocab_file)
  return model


def write_tf1(model, directory, vocab_file):
  """`bert_model.ckpt.{index,data-*}` with the original's plain names.

  tf.train.Checkpoint would key each tensor by its object path; SaveV2
  writes the given names, as tf.compat.v1.train.Saver did for the original.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import checkpoint_heads  # pylint: disable=g-import-not-at-top
  arrays = checkpoint_heads.float32(model.arrays)
  names = sorted(arrays)
  tf.raw_ops.SaveV2(prefix=os.path.join(directory, TF1_PREFIX),
                    tensor_names=names, shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(arrays[name]) for name in names])
  model.config.to_json_file(os.path.join(directory, "bert_config.json"))
  with open(vocab_file, "rb") as src, open(
      os.path.join(directory, "vocab.txt"), "wb") as dst:
    shutil.copyfileobj(src, dst)


def main(argv):
  del argv
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  start = time.time()
  print("export_checkpoint: " + json.dumps(
      {name: FLAGS[name].value for name in _FLAG_NAMES}, sort_keys=True),
        flush=True)
  # Paths first, before TensorFlow starts.
  for name in ("bert_config_file", "vocab_file"):
    cli.check_input_file(name, getattr(FLAGS, name))
  if cli.blocked_by(FLAGS.init_checkpoint):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  if os.path.exists(FLAGS.export_dir):
    raise cli.Error(f"--export_dir={FLAGS.export_dir} already exists; "
                    "remove it or choose another path.")
  cli.check_output_dir("export_dir", FLAGS.export_dir, create=False)
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  try:
    model = export(FLAGS.export_dir, FLAGS.format, FLAGS.bert_config_file,
                   FLAGS.init_checkpoint, FLAGS.vocab_file,
                   do_lower_case=FLAGS.do_lower_case, task=FLAGS.task,
                   max_seq_length=FLAGS.max_seq_length,
                   normalize_embedding=FLAGS.normalize_embedding)
  except (ValueError, OSError) as e:
    raise cli.Error(saved_model_io.sentence(e)) from None
  what = model.task + (f" (labels {model.labels})" if model.labels else "")
  print(f"Wrote {FLAGS.export_dir}: {FLAGS.format}, {what} from "
        f"{model.prefix}, {len(model.arrays)} tensors; "
        f"{time.time() - start:.1f} s", flush=True)


def define_flags():
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  saved_model_io.define_model_flags()
  flags.DEFINE_enum("format", None, list(FORMATS), "What to write.")
  flags.DEFINE_string("export_dir", None,
                      "The directory to write; must not exist yet.")
  flags.DEFINE_enum("task", None, ["classifier", "regression", "squad", "ner",
                                   "reranker"],
                    "The fine-tuning program of a fine-tuned checkpoint "
                    "moved without its run's flags.json (default: read "
                    "from flags.json beside the checkpoint).")
  flags.DEFINE_integer("max_seq_length", None, "sentence_transformers: the "
                       "longest input, in tokens (default 128, or the "
                       "model's max_position_embeddings if smaller).")
  flags.DEFINE_bool("normalize_embedding", False, "sentence_transformers: "
                    "L2-normalise the embedding (adds 2_Normalize), as the "
                    "serving export's --normalize_embedding.")
  flags.mark_flags_as_required(["format", "export_dir"])
  flags.adopt_module_key_flags(saved_model_io)


if __name__ == "__main__":
  cli.start_tensorflow()  # the exporters' flags import it: no start-up lines
  define_flags()
  cli.run(main)
