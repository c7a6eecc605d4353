r"""Exports a BERT checkpoint as a TensorFlow Serving model version.

    python -m export.export_saved_model \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --init_checkpoint=/tmp/pretraining_output \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt --do_lower_case=True \
      --max_seq_length=128 --export_dir=/models/bert

writes `/models/bert/<version>/` (the next free version unless --version)
with signatures `serving_default` (text [, text_b] -> pooled_output,
sequence_output, input_mask, sentence_embedding; the texts are padded to the
longest of the request, at most --max_seq_length), `serving_ids` (int32 ids
-> the same) and, when the checkpoint has a masked-LM head, `fill_mask`
(text with [MASK] -> the top --fill_mask_top_k tokens per [MASK]), the vocab
as an asset and warmup requests; serve it with
`tensorflow_model_server --model_name=bert --model_base_path=/models/bert`.
Fine-tuned classifiers are exported from Python with
`export.serving.export_saved_model(..., outputs=serving.classifier_outputs)`.
"""

import json
import os
import time

from absl import flags

from official_bert import cli

if __name__ == "__main__":
  cli.start_tensorflow()  # before the exporters import it: no start-up lines

# pylint: disable=g-import-not-at-top,wrong-import-position
from export import litert_int8
from export import quantize_flag
from export import saved_model_io
from export import serving

_FLAG_NAMES = ("bert_config_file", "init_checkpoint", "vocab_file",
               "do_lower_case", "max_seq_length", "export_dir", "version",
               "text_pair", "dynamic_length", "pad_multiple",
               "normalize_embedding", "fill_mask", "fill_mask_top_k",
               "remove_padding", "weights_dtype", "xla_single_text", "quantize",
               "litert")


def main(argv):
  del argv
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  start = time.time()
  print("export_saved_model: " + json.dumps(
      {name: FLAGS[name].value for name in _FLAG_NAMES}, sort_keys=True),
        flush=True)
  # Before the checkpoint is restored: a path that cannot be written fails
  # now, not after the restore (nothing is created here).
  cli.check_output_dir("export_dir", FLAGS.export_dir, create=False)
  try:
    path = serving.export_pretrained(
        FLAGS.export_dir, FLAGS.bert_config_file, FLAGS.init_checkpoint,
        FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        seq_length=FLAGS.max_seq_length, text_pair=FLAGS.text_pair,
        version=FLAGS.version, dynamic_length=FLAGS.dynamic_length,
        pad_multiple=FLAGS.pad_multiple,
        normalize_embedding=FLAGS.normalize_embedding,
        fill_mask=FLAGS.fill_mask, top_k=FLAGS.fill_mask_top_k,
        remove_padding=FLAGS.remove_padding,
        weights_dtype=FLAGS.weights_dtype,
        xla_single_text=FLAGS.xla_single_text, quantize=FLAGS.quantize,
        litert=FLAGS.litert,
        log=lambda message: print(f"[{time.time() - start:6.1f} s] {message}",
                                  flush=True))
  except (ValueError, OSError) as e:
    # One sentence naming the file or flag, as the last line printed.
    raise cli.Error(saved_model_io.sentence(e)) from None
  ops = saved_model_io.op_types(path)
  if ops["other"]:
    print(f"WARNING: ops outside core TF and TF Text: {ops['other']}",
          flush=True)
  inputs = "text, text_b" if FLAGS.text_pair else "text"
  fill_mask = ""
  if serving.SIGNATURE_FILL_MASK in _signature_names(path):
    fill_mask = (f"; {serving.SIGNATURE_FILL_MASK}(text) -> top_k_tokens, "
                 "top_k_probabilities, top_k_ids, mask_positions")
  print(f"Wrote {path}: signatures {serving.SIGNATURE_TEXT}({inputs}) and "
        f"{serving.SIGNATURE_IDS}(input_word_ids, input_mask, input_type_ids)"
        f" -> pooled_output, sequence_output, input_mask, sentence_embedding"
        f"{fill_mask}; ops: {len(ops['core'])} core "
        f"TF, {len(ops['tf_text'])} TF Text; {time.time() - start:.1f} s",
        flush=True)
  if FLAGS.quantize == "int8" or FLAGS.litert:
    kind = "int8 weights" if FLAGS.quantize == "int8" else "float32 weights"
    print(f"Wrote {os.path.join(path, litert_int8.LITERT_FILE)}: "
          f"{serving.SIGNATURE_IDS} with {kind} (LiteRT; serve it with "
          f"--prefer_tflite_model=true)", flush=True)


def _signature_names(path):
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  proto = saved_model_pb2.SavedModel()
  with open(os.path.join(path, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  return set(proto.meta_graphs[0].signature_def)


def define_flags():
  saved_model_io.define_model_flags()
  flags.DEFINE_integer("max_seq_length", 128,
                       "Text requests are packed (and truncated) to this.")
  flags.DEFINE_string("export_dir", None,
                      "Model base path; the version is a subdirectory.")
  flags.DEFINE_integer("version", None,
                       "Version number (default: next free one).")
  flags.DEFINE_bool("text_pair", False,
                    "serving_default also takes text_b (sentence pairs).")
  flags.DEFINE_bool("dynamic_length", True,
                    "Pad text requests to their longest text (at most "
                    "--max_seq_length); false: always to --max_seq_length.")
  flags.DEFINE_integer("pad_multiple", serving.DEFAULT_PAD_MULTIPLE,
                       "With --dynamic_length, round the padded length up "
                       "to a multiple of this.")
  flags.DEFINE_bool("normalize_embedding", False,
                    "L2-normalise the sentence_embedding output.")
  flags.DEFINE_bool("fill_mask", True,
                    "Add the fill_mask signature when the checkpoint has a "
                    "masked-LM head.")
  flags.DEFINE_integer("fill_mask_top_k", serving.DEFAULT_TOP_K,
                       "Tokens fill_mask returns per [MASK].")
  flags.DEFINE_bool("remove_padding", True,
                    "Run the encoder's position-wise layers on the tokens "
                    "only (not the padding); the same outputs at the tokens, "
                    "0 in sequence_output at padding positions.")
  flags.DEFINE_enum("weights_dtype", "float32", list(serving.WEIGHTS_DTYPES),
                    "bfloat16: weights and activations in bfloat16 (half "
                    "the size; faster only on CPUs with AVX512-BF16/AMX).")
  flags.DEFINE_bool("xla_single_text", False,
                    "A request of one text runs the model XLA-compiled, "
                    "padded to a multiple of 16 (outputs cut back; same "
                    "values within 1e-5); serve with tensorflow_model_server"
                    " --xla_cpu_compilation_enabled=true.")
  quantize_flag.define("int8: also write <version>/model.tflite, "
                       "serving_ids with int8 weights per channel (LiteRT; "
                       "TF Serving serves it with --prefer_tflite_model="
                       "true).")
  flags.DEFINE_bool("litert", False, "Also write <version>/model.tflite, "
                    "serving_ids as a LiteRT model (TF Serving "
                    "--prefer_tflite_model=true): float32 (XNNPACK: one "
                    "text's fastest float32 path on a CPU), or with "
                    "--quantize=int8 its int8 weights (written anyway).")
  flags.mark_flag_as_required("export_dir")
  flags.adopt_module_key_flags(saved_model_io)  # listed by --help


if __name__ == "__main__":
  define_flags()
  cli.run(main)
