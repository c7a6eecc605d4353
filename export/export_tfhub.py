r"""Exports a BERT checkpoint as the two TF-Hub text modules.

    python -m export.export_tfhub \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json \
      --init_checkpoint=/tmp/pretraining_output \
      --vocab_file=uncased_L-12_H-768_A-12/vocab.txt --do_lower_case=True \
      --export_dir=/tmp/bert_hub

writes `<export_dir>/encoder` (reusable SavedModel, with `.mlm` when the
checkpoint has the masked-LM head) and `<export_dir>/preprocessor`, loadable
with `hub.KerasLayer(...)` (tf_keras) or `keras.layers.TFSMLayer(...)`.
Each directory appears only when complete.
"""

import json
import os
import shutil
import time

from absl import flags

from official_bert import cli

if __name__ == "__main__":
  cli.start_tensorflow()  # before the exporters import it: no start-up lines

# pylint: disable=g-import-not-at-top,wrong-import-position
from export import saved_model_io
from export import tfhub_modules


def export_tfhub(bert_config_file, init_checkpoint, vocab_file, export_dir,
                 do_lower_case=True, seq_length=tfhub_modules.DEFAULT_SEQ_LENGTH,
                 log=None):
  """Writes `<export_dir>/encoder` and `<export_dir>/preprocessor`.

  Returns:
    (encoder_path, preprocessor_path, has_mlm). `log(message)`, when given,
    is told about each step.
  Raises:
    ValueError: bad config/checkpoint/vocab, or an existing output.
  """
  encoder_path = os.path.join(export_dir, "encoder")
  preprocessor_path = os.path.join(export_dir, "preprocessor")
  for path in (encoder_path, preprocessor_path):
    if os.path.exists(path):
      raise ValueError(f"{path} already exists; remove it or pass another "
                       "--export_dir")
  log = log or (lambda message: None)
  log(f"restoring {init_checkpoint}")
  encoder, mlm_head = saved_model_io.load_pretrained(
      bert_config_file, init_checkpoint)
  saved_model_io.check_vocab(vocab_file, encoder.vocab_size)
  if seq_length > encoder.max_position_embeddings:
    raise ValueError(f"--seq_length={seq_length} exceeds the model's "
                     f"max_position_embeddings="
                     f"{encoder.max_position_embeddings}")
  module = tfhub_modules.EncoderModule(encoder, vocab_file, do_lower_case,
                                       mlm_head)
  log("tracing the encoder (training=True/False" +
      (", .mlm" if mlm_head is not None else "") + f"), writing {encoder_path}")
  saved_model_io.atomic_save(module, encoder_path)
  preprocessor = tfhub_modules.PreprocessorModule(vocab_file, do_lower_case,
                                                  seq_length)
  log(f"tracing the preprocessor, writing {preprocessor_path}")
  try:
    saved_model_io.atomic_save(preprocessor, preprocessor_path)
  except BaseException:  # a full disk: both modules, or neither
    shutil.rmtree(encoder_path, ignore_errors=True)
    raise
  return encoder_path, preprocessor_path, mlm_head is not None


def main(argv):
  del argv
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  start = time.time()
  print("export_tfhub: " + json.dumps(
      {name: FLAGS[name].value for name in _FLAG_NAMES}, sort_keys=True),
        flush=True)
  # Before the checkpoint is restored: a path that cannot be written fails
  # now, not after the restore (nothing is created here).
  cli.check_output_dir("export_dir", FLAGS.export_dir, create=False)
  try:
    encoder_path, preprocessor_path, has_mlm = export_tfhub(
        FLAGS.bert_config_file, FLAGS.init_checkpoint, FLAGS.vocab_file,
        FLAGS.export_dir, FLAGS.do_lower_case, FLAGS.seq_length,
        log=lambda message: print(f"[{time.time() - start:6.1f} s] {message}",
                                  flush=True))
  except (ValueError, OSError) as e:
    # One sentence naming the file or flag, as the last line printed.
    raise cli.Error(saved_model_io.sentence(e)) from None
  ops = saved_model_io.op_types(preprocessor_path)
  print(f"Wrote encoder {encoder_path} ({'with' if has_mlm else 'without'} "
        f".mlm) and preprocessor {preprocessor_path} (seq_length "
        f"{FLAGS.seq_length}; ops: {len(ops['core'])} core TF, "
        f"{len(ops['tf_text'])} TF Text) in {time.time() - start:.1f} s",
        flush=True)


_FLAG_NAMES = ("bert_config_file", "init_checkpoint", "vocab_file",
               "do_lower_case", "export_dir", "seq_length")


def define_flags():
  saved_model_io.define_model_flags()
  flags.DEFINE_string("export_dir", None,
                      "Writes <export_dir>/encoder and <export_dir>/preprocessor.")
  flags.DEFINE_integer("seq_length", tfhub_modules.DEFAULT_SEQ_LENGTH,
                       "Length the preprocessor packs to by default.")
  flags.mark_flag_as_required("export_dir")
  flags.adopt_module_key_flags(saved_model_io)  # listed by --help


if __name__ == "__main__":
  define_flags()
  cli.run(main)
