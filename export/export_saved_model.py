r"""Exports a BERT checkpoint as a TensorFlow Serving model version.

    python -m export.export_saved_model \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --init_checkpoint=/tmp/pretraining_output \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt --do_lower_case=True \
      --max_seq_length=128 --export_dir=/models/bert

writes `/models/bert/<version>/` (the next free version unless --version)
with signatures `serving_default` (text [, text_b] -> pooled_output,
sequence_output) and `serving_ids` (int32 ids -> the same), the vocab as an
asset and warmup requests; serve it with
`tensorflow_model_server --model_name=bert --model_base_path=/models/bert`.
Fine-tuned classifiers are exported from Python with
`export.serving.export_saved_model(..., outputs=serving.classifier_outputs)`.
"""

import json
import time

from absl import flags

from export import saved_model_io
from export import serving
from official_bert import cli

_FLAG_NAMES = ("bert_config_file", "init_checkpoint", "vocab_file",
               "do_lower_case", "max_seq_length", "export_dir", "version",
               "text_pair")


def main(argv):
  del argv
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  start = time.time()
  print("export_saved_model: " + json.dumps(
      {name: FLAGS[name].value for name in _FLAG_NAMES}, sort_keys=True),
        flush=True)
  try:
    path = serving.export_pretrained(
        FLAGS.export_dir, FLAGS.bert_config_file, FLAGS.init_checkpoint,
        FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        seq_length=FLAGS.max_seq_length, text_pair=FLAGS.text_pair,
        version=FLAGS.version,
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
  print(f"Wrote {path}: signatures {serving.SIGNATURE_TEXT}({inputs}) and "
        f"{serving.SIGNATURE_IDS}(input_word_ids, input_mask, input_type_ids)"
        f" -> pooled_output, sequence_output; ops: {len(ops['core'])} core "
        f"TF, {len(ops['tf_text'])} TF Text; {time.time() - start:.1f} s",
        flush=True)


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
  flags.mark_flag_as_required("export_dir")
  flags.adopt_module_key_flags(saved_model_io)  # listed by --help


if __name__ == "__main__":
  define_flags()
  cli.run(main)
