"""Fine-tunes BERT on a sentence (pair) classification or regression task.

google-research/bert's command runs as written, on a GLUE task by name:

    python -m official_bert.run_classifier --task_name=MRPC \\
      --do_train=true --do_eval=true --data_dir=$GLUE_DIR/MRPC \\
      --vocab_file=$BERT_BASE_DIR/vocab.txt \\
      --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
      --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 \\
      --num_train_epochs=3.0 --output_dir=/tmp/mrpc_output/

--task_name is one of tasks/glue.py's (CoLA, MNLI, MNLI-MM, MRPC, XNLI,
SST-2, QQP, QNLI, RTE, WNLI, STS-B; any case), read from --data_dir in the
GLUE download's layout. Without it, any data as files: --task_data_dir (or
--data_dir) holds `train`, `dev` and `test` files (`.tsv`, `.csv` or
`.jsonl`; see classifier_data.py) and column flags name the fields:

    python -m official_bert.run_classifier \\
      --task_data_dir=my_task --text_column=sentence --label_column=label ...

Labels are the GLUE task's, or the training file's distinct values, sorted
(kept in output_dir/label_list.json); STS-B and `--task_type=regression` fit
one number. The loop is the pretraining trainer's (`trainer.py`: any
tf.distribute strategy, mixed precision, resume from --output_dir).

Writes to --output_dir: ckpt-<step> (model, optimizer, step; a rerun
resumes), train/ summaries, flags.json, bert_config.json, label_list.json,
eval_results.txt (`key = value` lines, the original's eval_accuracy,
eval_loss, global_step, loss, and eval_f1, eval_matthews_corrcoef; or for
regression eval_pearson, eval_spearman, eval_mse), test_results.tsv (one line
per test example: the class probabilities tab-separated, in label_list order,
or the predicted value). With --export_dir, a TF Serving SavedModel: raw text
in, probabilities out.
"""

import json
import os
import time

from absl import app
from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert.training import cpu_allocator
from official_bert.training import finetuner
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  finetuning_flags.define_flags(
      max_seq_length=128, learning_rate=5e-5, export_help="If set, export "
      "the fine-tuned model for TF Serving (raw text in, probabilities out) "
      "here.")
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
  flags.DEFINE_string("task_data_dir", None, "Directory with train/dev/test "
                      "files (.tsv, .csv or .jsonl).")
  flags.DEFINE_string("text_column", "sentence", "Column (or JSON key) of the "
                      "text.")
  flags.DEFINE_string("text_b_column", None, "Column of the second text of a "
                      "pair (unset: single sentences).")
  flags.DEFINE_string("label_column", "label", "Column of the label.")
  flags.DEFINE_enum("task_type", "classification",
                    ["classification", "regression"], "Regression fits one "
                    "number per example (mean squared error).")


def _data_dir():
  """--data_dir or --task_data_dir (one of them, or both the same)."""
  if (FLAGS.data_dir and FLAGS.task_data_dir
      and os.path.abspath(FLAGS.data_dir) != os.path.abspath(
          FLAGS.task_data_dir)):
    raise app.UsageError("--data_dir and --task_data_dir name different "
                         "directories; pass one of them.")
  name = "data_dir" if FLAGS.data_dir else "task_data_dir"
  return name, FLAGS.data_dir or FLAGS.task_data_dir


def classifier_losses(labels, logits, regression=False):
  """{"loss": mean cross-entropy (or squared error for regression)}."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  if regression:
    loss = ops.mean(ops.square(logits[:, 0] - ops.cast(labels, "float32")))
  else:
    loss = ops.mean(keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True))
  return {"loss": loss}


def classifier_metric_counts(labels, logits):
  """Correct/total sums (the trainer logs them as label_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  predicted = ops.cast(ops.argmax(logits, -1), "int32")
  correct = ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")
  return {"label_correct": ops.sum(correct),
          "label_total": ops.cast(ops.shape(correct)[0], "float32")}


def eval_results(logits, labels, regression, step):
  """The eval_results.txt values (all prefixed eval_, as the original)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import classifier_metrics  # pylint: disable=g-import-not-at-top
  if regression:
    predictions = logits[:, 0]
    metrics = classifier_metrics.regression_metrics(labels, predictions)
    metrics["loss"] = metrics["mse"]
  else:
    metrics = classifier_metrics.classification_metrics(
        labels, np.argmax(logits, -1), num_classes=logits.shape[-1])
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    metrics["loss"] = float(-np.mean(log_probs[np.arange(len(labels)), labels]))
  result = {f"eval_{k}": v for k, v in metrics.items()}
  # The original's Estimator also reports the mean loss as plain "loss".
  result["loss"] = result["eval_loss"]
  result["global_step"] = step
  return result


def _generic_task(data_dir):
  """(labels or None, read(split)) for files named by column flags."""
  from official_bert.tasks import classifier_data  # pylint: disable=g-import-not-at-top
  columns = classifier_data.Columns(FLAGS.text_column, FLAGS.text_b_column,
                                    FLAGS.label_column)
  regression = FLAGS.task_type == "regression"

  def read(split):
    path = classifier_data.find_split_file(data_dir, split)
    return classifier_data.read_examples(path, columns,
                                         require_label=split != "test")

  saved = os.path.join(FLAGS.output_dir, "label_list.json")
  if regression:
    labels = None
  elif os.path.exists(saved) and not FLAGS.do_train:
    # Eval/predict with a fine-tuned model: its own labels, in its order.
    with open(saved, encoding="utf-8") as f:
      labels = json.load(f)
  elif any(os.path.exists(os.path.join(data_dir, "train" + e))
           for e in classifier_data.EXTENSIONS):
    labels = classifier_data.label_list(read("train"))
  else:
    raise ValueError(f"--task_data_dir {data_dir} has no train file and "
                     f"{saved} does not exist: the labels are unknown; run "
                     "--do_train first or add the train file.")
  return labels, read


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  flag_name, data_dir = _data_dir()
  if not data_dir:
    raise app.UsageError("--data_dir (with --task_name) or --task_data_dir "
                         "is required.")
  finetuning_flags.check_flags(FLAGS, data_paths={flag_name: "dir"})
  from official_bert.tasks import classifier_data  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import glue  # pylint: disable=g-import-not-at-top
  # Read and check every split first (no TensorFlow yet): a bad dev or test
  # file fails at once, not after training.
  try:
    if FLAGS.task_name:
      task = glue.get_task(FLAGS.task_name)
      regression, text_pair = task.regression, task.text_pair
      labels = None if regression else list(task.labels)
      read = lambda split: glue.read_split(task, data_dir, split,
                                           FLAGS.xnli_language)
      task_type = "regression" if regression else "classification"
      what = f"{task.name} ({task_type}, metric {task.metric})"
    else:
      regression = FLAGS.task_type == "regression"
      text_pair = FLAGS.text_b_column is not None
      labels, read = _generic_task(data_dir)
      what = FLAGS.task_type
    if not regression and len(labels) < 2:
      raise ValueError(f"the train file has only the label {labels}; "
                       "classification needs at least two")
    splits = {}
    evaluating = FLAGS.do_eval or (FLAGS.do_train and FLAGS.eval_every_steps)
    for split, wanted in (("train", FLAGS.do_train), ("dev", evaluating),
                          ("test", FLAGS.do_predict)):
      if wanted:
        examples = read(split)
        ids = (None if split == "test" else
               classifier_data.label_ids(examples, labels, regression))
        splits[split] = (examples, ids)
  except (ValueError, UnicodeDecodeError, OSError) as e:
    raise app.UsageError(finetuning_flags.data_error(e))
  num_classes = 1 if regression else len(labels)

  # TensorFlow starts here, after the cheap checks.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  config, tokenizer = finetuning_flags.load_config_and_vocab(FLAGS)
  try:
    splits = {split: (examples, classifier_data.encode(
        examples, tokenizer, FLAGS.max_seq_length), ids)
              for split, (examples, ids) in splits.items()}
  except ValueError as e:
    raise app.UsageError(str(e))

  num_train = len(splits["train"][0]) if FLAGS.do_train else 0
  run = finetuner.Finetuner(
      finetuning_flags.driver_config(FLAGS, num_train),
      lambda kernels: finetuning_models.BertClassifier.from_bert_config(
          config, num_classes, kernels=kernels),
      lambda y, logits: classifier_losses(y, logits, regression),
      None if regression else classifier_metric_counts,
      num_train_examples=num_train,
      best_metric="eval_pearson" if regression else "eval_accuracy")
  run.write_run_files(config, files={} if labels is None else {
      "label_list.json": json.dumps(labels) + "\n"})
  print(f"{what}: labels {labels}, "
        + ", ".join(f"{split} {len(s[0])} examples" for split, s in splits.items())
        + f"; {run.describe()}", flush=True)
  for split, (examples, inputs, _) in list(splits.items())[:1]:
    for i in range(min(2, len(examples))):  # A few decoded examples.
      n = int(inputs["input_mask"][i].sum())
      print(f"{split} example {examples[i].where}: label "
            f"{examples[i].label!r} tokens "
            + " ".join(tokenizer.convert_ids_to_tokens(
                inputs["input_word_ids"][i][:n])), flush=True)

  def evaluate(step):
    _, inputs, ids = splits["dev"]
    logits = run.predict(inputs, FLAGS.eval_batch_size)
    return eval_results(logits, ids, regression, step)

  run.restore_or_warm_start()
  if FLAGS.do_train:
    _, train_inputs, train_labels = splits["train"]
    if not run.train(train_inputs, train_labels, evaluate):
      return  # SIGTERM: checkpoint saved, rerun resumes.

  summary = []
  if FLAGS.do_eval:
    result = evaluate(run.step)
    run.write_eval_results(result)
    key = "eval_pearson" if regression else "eval_accuracy"
    summary.append(f"{key} {result[key]:.4f}")
  if FLAGS.do_predict:
    examples, inputs, _ = splits["test"]
    t0 = time.time()
    logits = run.predict(inputs, FLAGS.predict_batch_size)
    seconds = time.time() - t0
    # str() of each float32, as the original writes its probabilities: the
    # shortest text that reads back to the same float32.
    if regression:
      rows = [str(value) for value in logits[:, 0]]
    else:
      probabilities = tf.nn.softmax(logits, axis=-1).numpy()
      rows = ["\t".join(str(p) for p in row) for row in probabilities]
    if run.is_chief:
      run.write("test_results.tsv", "".join(row + "\n" for row in rows))
    summary.append(f"{len(rows)} test predictions in {seconds:.1f} s")
  if FLAGS.export_dir and run.is_chief:
    from export import serving  # pylint: disable=g-import-not-at-top
    path = serving.export_saved_model(
        FLAGS.export_dir, run.export_model(
            {k: v[:1] for k, v in next(iter(splits.values()))[1].items()}),
        FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
        outputs=(serving.regression_outputs if regression
                 else serving.classifier_outputs),
        text_pair=text_pair)
    summary.append(f"exported {path}")
  print(f"run_classifier done at step {run.step}: " + "; ".join(summary)
        + f"; output in {FLAGS.output_dir}", flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
