"""Fine-tunes BERT on a sentence (pair) classification or regression task.

google-research/bert's command runs as written, on a GLUE task by name:

    python -m official_bert.run_classifier --task_name=MRPC \\
      --do_train=true --do_eval=true --data_dir=$GLUE_DIR/MRPC \\
      --vocab_file=$BERT_BASE_DIR/vocab.txt \\
      --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
      --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 \\
      --num_train_epochs=3.0 --output_dir=/tmp/mrpc_output/

--task_name is one of tasks/classification/glue.py's (CoLA, MNLI, MNLI-MM, MRPC, XNLI,
SST-2, QQP, QNLI, RTE, WNLI, STS-B; any case), read from --data_dir in the
GLUE download's layout. Without it, any data as files: --task_data_dir (or
--data_dir) holds `train`, `dev` and `test` files (`.tsv`, `.csv` or
`.jsonl`; see data/text_files.py) and column flags name the fields:

    python -m official_bert.run_classifier \\
      --task_data_dir=my_task --text_column=sentence --label_column=label ...

Labels are the GLUE task's, or the training file's distinct values, sorted
(kept in output_dir/label_list.json); STS-B and `--task_type=regression` fit
one number. `--task_type=multi_label`: zero or more labels per example,
joined by --label_separator (tasks/classification/multi_label_task.py: a sigmoid per
label; eval_micro_f1, eval_macro_f1, eval_f1_<label>, eval_subset_accuracy;
--tune_thresholds). `--doc_stride=N`: a text longer than --max_seq_length
is read as windows N WordPieces apart whose logits are combined
(--window_aggregation; tasks/classification/classifier_windows.py), not truncated; training
fits each window (--window_training=windows) or each text's combined
windows (=documents). The
loop is the pretraining trainer's (`trainer.py`: any tf.distribute
strategy, mixed precision, resume from --output_dir).

Writes to --output_dir: ckpt-<step> (model, optimizer, step; a rerun
resumes), train/ summaries, flags.json, bert_config.json, label_list.json,
eval_results.txt (`key = value` lines, the original's eval_accuracy,
eval_loss, global_step, loss, and eval_f1, eval_matthews_corrcoef; or for
regression eval_pearson, eval_spearman, eval_mse), test_results.tsv (one line
per test example: the class probabilities tab-separated, in label_list order,
or the predicted value). With --export_dir, a TF Serving SavedModel: raw text
in, probabilities out.
"""

import os

from absl import app
from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert import trainer_flags
from official_bert.tasks.classification import classification_task
from official_bert.tasks.classification import classifier_windows
from official_bert.tasks.classification import multi_label_task
from official_bert.training import cpu_allocator
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  finetuning_flags.define_flags(
      max_seq_length=128, learning_rate=5e-5, export_help="If set, export "
      "the fine-tuned model for TF Serving (raw text in, probabilities out) "
      "here.", task_data_dir_help="Directory with train/dev/test files "
      "(.tsv, .csv or .jsonl).")
  # ---- a GLUE task by name, as the original
  flags.DEFINE_string("task_name", None, "A GLUE task (CoLA, MNLI, MNLI-MM, "
                      "MRPC, XNLI, SST-2, QQP, QNLI, RTE, WNLI, STS-B) read "
                      "from --data_dir in its download's layout.")
  flags.DEFINE_string("data_dir", None, "The task's directory (the GLUE "
                      "download's, with --task_name; else as "
                      "--task_data_dir).")
  flags.DEFINE_string("xnli_language", "zh", "XNLI: the language of dev/test "
                      "examples and of multinli.train.<language>.tsv.")
  # ---- any other task: files and their columns
  flags.DEFINE_string("text_column", "sentence", "Column (or JSON key) of the "
                      "text.")
  flags.DEFINE_string("text_b_column", None, "Column of the second text of a "
                      "pair (unset: single sentences).")
  flags.DEFINE_string("label_column", "label", "Column of the label.")
  flags.DEFINE_enum("task_type", "classification",
                    ["classification", "regression", "multi_label"],
                    "Regression fits one number per example (mean squared "
                    "error); multi_label gives each example zero or more "
                    "labels (a sigmoid per label).")
  flags.DEFINE_string("label_separator", "|", "multi_label: what joins an "
                      "example's labels in --label_column (an empty cell: "
                      "no label).")
  flags.DEFINE_bool("tune_thresholds", False, "multi_label: tune each "
                    "label's threshold on dev for its F1 (needs --do_eval; "
                    "kept in output_dir/thresholds.json and used by the "
                    "export), instead of 0.5.")
  # ---- long texts: windows instead of truncation
  flags.DEFINE_integer("doc_stride", None, "Read a text longer than "
                       "--max_seq_length as windows of --max_seq_length "
                       "starting every this many WordPieces, and predict "
                       "from all of them (single texts only; unset: "
                       "truncate).")
  flags.DEFINE_enum("window_aggregation", "max",
                    list(classifier_windows.AGGREGATIONS), "With "
                    "--doc_stride: how a text's windows' logits combine.")
  flags.DEFINE_enum("window_training", "windows",
                    list(classifier_windows.TRAININGS), "With --doc_stride:"
                    " fit each window to its text's label (windows), or "
                    "each text's windows' combined logits (documents: "
                    "--train_batch_size then counts texts, each with all "
                    "its windows).")


def _data_dir():
  """--data_dir or --task_data_dir (one of them, or both the same)."""
  if (FLAGS.data_dir and FLAGS.task_data_dir
      and os.path.abspath(FLAGS.data_dir) != os.path.abspath(
          FLAGS.task_data_dir)):
    raise app.UsageError("--data_dir and --task_data_dir name different "
                         "directories; pass one of them.")
  name = "data_dir" if FLAGS.data_dir else "task_data_dir"
  return name, FLAGS.data_dir or FLAGS.task_data_dir


def _export(task, model, int8_content=None):
  """The TF Serving SavedModel's path: raw text in, probabilities and the
  label names (or the value) out; with `int8_content`, its model.tflite."""
  from export import serving  # pylint: disable=g-import-not-at-top
  spec = task.export_spec()
  return serving.export_saved_model(
      FLAGS.export_dir, model, FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
      outputs=spec.outputs, text_pair=spec.text_pair,
      windowing=spec.windowing, xla_single_text=FLAGS.xla_single_text,
      int8_content=int8_content)


def _check_task_flags():
  """The multi-label and window flags' errors, as one sentence each."""
  multi_label = FLAGS.task_type == "multi_label"
  if FLAGS.tune_thresholds and not multi_label:
    raise app.UsageError("--tune_thresholds needs --task_type=multi_label.")
  if FLAGS.tune_thresholds and not FLAGS.do_eval:
    raise app.UsageError("--tune_thresholds tunes on dev: it needs "
                         "--do_eval.")
  if multi_label and FLAGS.task_name:
    raise app.UsageError("--task_type=multi_label reads --task_data_dir "
                         "files; a GLUE --task_name has single labels.")
  if FLAGS.window_training == "documents" and FLAGS.doc_stride is None:
    raise app.UsageError("--window_training=documents trains on a text's "
                         "windows: it needs --doc_stride.")
  if FLAGS.xla_single_text and FLAGS.doc_stride is not None:
    raise app.UsageError("--xla_single_text runs one text as one window; "
                         "with --doc_stride a text is several: drop one of "
                         "them.")
  if FLAGS.doc_stride is not None:  # pairs: the task says (GLUE's too)
    try:
      classifier_windows.Windowing(FLAGS.max_seq_length, FLAGS.doc_stride,
                                   FLAGS.window_aggregation)
    except ValueError as e:
      raise app.UsageError(f"{e}.") from None


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  flag_name, data_dir = _data_dir()
  if not data_dir:
    raise app.UsageError("--data_dir (with --task_name) or --task_data_dir "
                         "is required.")
  finetuning_flags.check_flags(FLAGS, data_paths={flag_name: "dir"})
  _check_task_flags()
  task_class = (multi_label_task.MultiLabelTask
                if FLAGS.task_type == "multi_label"
                else classification_task.ClassificationTask)
  task = task_class(trainer_flags.config_from_flags(
      FLAGS, classification_task.ClassificationConfig, data_dir=data_dir))
  finetuning_flags.run(FLAGS, task, "run_classifier",
                       lambda model, int8: _export(task, model, int8))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
