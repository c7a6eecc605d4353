"""Fine-tunes BERT for named-entity recognition on CoNLL-2003-style files.

    python -m official_bert.run_ner --task_data_dir=conll2003 \\
      --bert_config_file=bert_base/bert_config.json \\
      --vocab_file=bert_base/vocab.txt --init_checkpoint=bert_base \\
      --do_train --do_eval --do_predict --max_seq_length=128 \\
      --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=3 \\
      --output_dir=/tmp/ner --export_dir=/tmp/ner_serving

--task_data_dir holds `train`, `dev` (or `valid`) and `test` files (no
extension, `.txt` or `.conll`): one word per line with its tag in the last
column, a blank line between sentences, `-DOCSTART-` lines skipped (see
tasks/ner/ner_data.py). Tags are the training file's (label_list.json); the loss and
the prediction use each word's first WordPiece; long sentences are split into
windows of --max_seq_length. The flags and the loop are run_classifier's
(finetuning_flags.py, training/finetuner.py: strategy, mixed precision, XLA,
resume from --output_dir).

Writes to --output_dir: ckpt-<step>, flags.json, bert_config.json,
label_list.json, eval_results.txt (entity-level eval_precision, eval_recall,
eval_f1 as conlleval, eval_accuracy over words, eval_loss, eval_f1_<TYPE>,
global_step, loss), test_predictions.txt (`word gold predicted` per line,
a blank line between sentences: conlleval's input). With --export_dir, a TF
Serving SavedModel: raw text in, words, tags and offsets out
(export/ner_serving.py).
"""

from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert import trainer_flags
from official_bert.tasks.ner import ner_task
from official_bert.training import cpu_allocator
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  finetuning_flags.define_flags(
      max_seq_length=128, learning_rate=5e-5, export_help="If set, export "
      "the fine-tuned model for TF Serving (raw text in, words, tags and "
      "character offsets out) here.", task_data_dir_help="Directory with the "
      "train, dev (or valid) and test CoNLL files.")


def _export(task, model, int8_content=None):
  """The TF Serving SavedModel's path: raw text in, words, tags and offsets
  out; with `int8_content`, its model.tflite."""
  from export import ner_serving  # pylint: disable=g-import-not-at-top
  from export import serving  # pylint: disable=g-import-not-at-top
  return serving.export_with_int8(
      lambda export_dir, version: ner_serving.export_ner_model(
          export_dir, model, list(task.export_spec().labels),
          FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
          seq_length=FLAGS.max_seq_length, version=version,
          xla_single_text=FLAGS.xla_single_text),
      FLAGS.export_dir, int8_content)


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  finetuning_flags.check_flags(FLAGS, data_paths={"task_data_dir": "dir"})
  task = ner_task.NerTask(trainer_flags.config_from_flags(
      FLAGS, ner_task.NerConfig, data_dir=FLAGS.task_data_dir))
  finetuning_flags.run(FLAGS, task, "run_ner",
                       lambda model, int8: _export(task, model, int8))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
