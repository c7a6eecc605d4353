"""Fine-tunes BERT on SQuAD v1.1 / v2.0 and predicts answers.

The command and flags of google-research/bert's run_squad.py, on the
fine-tuning loop run_classifier and run_ner share (training/finetuner.py: any
tf.distribute strategy, mixed precision, XLA, --kernels, resume from
--output_dir):

    python -m official_bert.run_squad \\
      --vocab_file=bert_base/vocab.txt \\
      --bert_config_file=bert_base/bert_config.json \\
      --init_checkpoint=bert_base --do_train --train_file=train-v1.1.json \\
      --do_predict --predict_file=dev-v1.1.json --train_batch_size=12 \\
      --learning_rate=3e-5 --num_train_epochs=2.0 --max_seq_length=384 \\
      --doc_stride=128 --output_dir=/tmp/squad_base/

Features, windows and predictions follow the original (tasks/squad/squad_data.py,
squad_answers.py).
Writes to --output_dir: ckpt-<step> (a rerun resumes), flags.json,
bert_config.json, predictions.json, nbest_predictions.json, with
--version_2_with_negative null_odds.json (null score minus best span score
per question), and when --predict_file has answers eval_results.txt: the
official evaluation's numbers (tasks/squad/squad_metrics.py; v2.0 with
null_odds.json as the no-answer probabilities, as `evaluate-v2.0.py
dev-v2.0.json predictions.json --na-prob-file null_odds.json`). With
--export_dir, a TF Serving SavedModel: question and context text in, answer
text out (export/squad_serving.py).
"""

from absl import app
from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert import trainer_flags
from official_bert.tasks.squad import squad_task
from official_bert.training import cpu_allocator
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program): the
  fine-tuning flags (finetuning_flags.py) with the original's SQuAD
  defaults, and the SQuAD ones, same names and defaults as the original."""
  finetuning_flags.define_flags(
      max_seq_length=384, learning_rate=5e-5, train_batch_size=32,
      predict_batch_size=8, do_eval=False, export_help="If set, export the "
      "fine-tuned model for TF Serving (question and context in, answer "
      "out) here.", max_quantization_drop=0.01)
  flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. "
                      "train-v1.1.json.")
  flags.DEFINE_string("predict_file", None, "SQuAD json for predictions, e.g. "
                      "dev-v1.1.json (with answers: also evaluated).")
  flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of two "
                       "windows over a long context.")
  flags.DEFINE_integer("max_query_length", 64, "Question pieces kept; longer "
                       "questions are truncated.")
  flags.DEFINE_integer("n_best_size", 20, "Candidate starts and ends per "
                       "window, and answers kept in nbest_predictions.json.")
  flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.")
  flags.DEFINE_bool("verbose_logging", False, "Log why an answer's text could "
                    "not be aligned with the context.")
  flags.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0: questions "
                    "may have no answer.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0, "v2.0: answer nothing "
                     "when the null score exceeds the best span's by more.")


def _check_flags():
  """The flag errors one sentence can explain, before TensorFlow starts."""
  finetuning_flags.check_flags(
      FLAGS, mode_paths={"do_train": ("train_file", "file"),
                         "do_predict": ("predict_file", "file")})
  cli.check_positive(FLAGS, ("doc_stride", "max_query_length", "n_best_size",
                            "max_answer_length"))
  if FLAGS.eval_every_steps and FLAGS.do_train and not FLAGS.do_predict:
    raise app.UsageError("--eval_every_steps needs --do_predict and a "
                         "--predict_file with answers (the dev set).")
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} leaves no room for the "
        f"context after --max_query_length={FLAGS.max_query_length} and 3 "
        "special tokens; raise --max_seq_length.")


def _export(model, int8_content=None):
  """The TF Serving SavedModel's path: question and context text in, answer
  text out (export/squad_serving.py); with `int8_content`, its
  model.tflite."""
  from export import serving  # pylint: disable=g-import-not-at-top
  from export import squad_serving  # pylint: disable=g-import-not-at-top
  # The exporter's arguments of these names are the flags'.
  answers = {name: FLAGS[name].value for name in (
      "doc_stride", "max_query_length", "n_best_size", "max_answer_length",
      "version_2_with_negative", "null_score_diff_threshold",
      "xla_single_text")}
  return serving.export_with_int8(
      lambda export_dir, version: squad_serving.export_squad_model(
          export_dir, model, FLAGS.vocab_file,
          do_lower_case=FLAGS.do_lower_case,
          seq_length=FLAGS.max_seq_length, version=version, **answers),
      FLAGS.export_dir, int8_content)


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  _check_flags()
  task = squad_task.SquadTask(trainer_flags.config_from_flags(
      FLAGS, squad_task.SquadConfig))
  finetuning_flags.run(FLAGS, task, "run_squad", _export)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
