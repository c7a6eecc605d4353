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

Features, windows and predictions follow the original (tasks/squad.py).
Writes to --output_dir: ckpt-<step> (a rerun resumes), flags.json,
bert_config.json, predictions.json, nbest_predictions.json, with
--version_2_with_negative null_odds.json (null score minus best span score
per question), and when --predict_file has answers eval_results.txt: the
official evaluation's numbers (tasks/squad_metrics.py; v2.0 with
null_odds.json as the no-answer probabilities, as `evaluate-v2.0.py
dev-v2.0.json predictions.json --na-prob-file null_odds.json`). With
--export_dir, a TF Serving SavedModel: question and context text in, answer
text out (export/squad_serving.py).
"""

import json
import random
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
  """The program's absl flags (defined only when it runs as a program): the
  fine-tuning flags (finetuning_flags.py) with the original's SQuAD
  defaults, and the SQuAD ones, same names and defaults as the original."""
  finetuning_flags.define_flags(
      max_seq_length=384, learning_rate=5e-5, train_batch_size=32,
      predict_batch_size=8, do_eval=False, export_help="If set, export the "
      "fine-tuned model for TF Serving (question and context in, answer "
      "out) here.")
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
  for name in ("doc_stride", "max_query_length", "n_best_size",
               "max_answer_length"):
    if getattr(FLAGS, name) <= 0:
      raise app.UsageError(f"--{name} must be positive, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.eval_every_steps and FLAGS.do_train and not FLAGS.do_predict:
    raise app.UsageError("--eval_every_steps needs --do_predict and a "
                         "--predict_file with answers (the dev set).")
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} leaves no room for the "
        f"context after --max_query_length={FLAGS.max_query_length} and 3 "
        "special tokens; raise --max_seq_length.")


def squad_losses(labels, outputs):
  """{"loss": the mean of the start and end positions' cross-entropies}."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  losses = [ops.mean(keras.losses.sparse_categorical_crossentropy(
      labels[f"{side}_positions"], outputs[f"{side}_logits"], from_logits=True))
            for side in ("start", "end")]
  return {"loss": (losses[0] + losses[1]) / 2.0}


def squad_metric_counts(labels, outputs):
  """Correct/total sums of the argmax start and end (start_accuracy, ...)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  counts = {}
  for side in ("start", "end"):
    predicted = ops.cast(ops.argmax(outputs[f"{side}_logits"], -1), "int32")
    correct = ops.cast(ops.equal(predicted, ops.cast(
        labels[f"{side}_positions"], "int32")), "float32")
    counts[f"{side}_correct"] = ops.sum(correct)
    counts[f"{side}_total"] = ops.cast(ops.shape(correct)[0], "float32")
  return counts


def _read(path, is_training):
  from official_bert.tasks import squad  # pylint: disable=g-import-not-at-top
  skipped = []
  try:
    examples = squad.read_squad_examples(path, is_training,
                                         FLAGS.version_2_with_negative,
                                         skipped)
  except ValueError as e:
    raise app.UsageError(str(e))
  if skipped:  # The original logs "Could not find answer" for each.
    print(f"{path}: skipped {len(skipped)} training question"
          f"{'s' if len(skipped) > 1 else ''} whose answer text is not at "
          f"its answer_start (as the original): {', '.join(skipped[:5])}"
          f"{', ...' if len(skipped) > 5 else ''}", flush=True)
  return examples


def _has_answers(path):
  from official_bert.tasks import squad  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import squad_metrics  # pylint: disable=g-import-not-at-top
  data = squad.load_squad_json(path)
  return data if any(golds for _, golds in squad_metrics.questions(data)) else None


def evaluation(data, predictions, null_odds, step):
  """eval_results.txt's values: the official evaluation of the predictions."""
  from official_bert.tasks import squad_metrics  # pylint: disable=g-import-not-at-top
  if FLAGS.version_2_with_negative:
    result = dict(squad_metrics.evaluate_v2(data, predictions, null_odds))
    result["exact_match"] = result["exact"]
  else:
    # A v2.0 file predicted as v1.1: its impossible questions (no gold
    # answer) cannot be scored by evaluate-v1.1.py, so they are left out.
    data = [{"paragraphs": [
        {"qas": [qa for qa in paragraph["qas"] if qa.get("answers")]}
        for paragraph in article["paragraphs"]]} for article in data]
    result = squad_metrics.evaluate_v1(data, predictions)
  result["global_step"] = step
  return result


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  _check_flags()
  # Read and check the data first (no TensorFlow yet): a bad file fails at
  # once, not after training.
  train_examples = _read(FLAGS.train_file, True) if FLAGS.do_train else []
  predict_examples = (_read(FLAGS.predict_file, False) if FLAGS.do_predict
                      else [])

  # TensorFlow starts here, after the cheap checks.
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import squad  # pylint: disable=g-import-not-at-top
  config, tokenizer = finetuning_flags.load_config_and_vocab(FLAGS)

  def features(examples, is_training):
    return squad.convert_examples_to_features(
        examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
        FLAGS.max_query_length, is_training)

  t0 = time.time()
  if FLAGS.do_train:
    # As the original: shuffled once with a fixed seed before the windows.
    random.Random(FLAGS.seed).shuffle(train_examples)
  train_features = features(train_examples, True) if FLAGS.do_train else []
  predict_features = (features(predict_examples, False) if FLAGS.do_predict
                      else [])
  print(f"Features in {time.time() - t0:.1f} s: train {len(train_examples)} "
        f"questions -> {len(train_features)} windows, predict "
        f"{len(predict_examples)} questions -> {len(predict_features)} "
        "windows", flush=True)

  # As the original: steps from the number of questions, not windows. The
  # span head never reads the pooler: it gets no gradient and stays as
  # loaded (train_step.py skips it, as the original's optimizer does).
  run = finetuner.Finetuner(
      finetuning_flags.driver_config(FLAGS, len(train_examples)),
      lambda kernels: finetuning_models.BertSpanLabeler.from_bert_config(
          config, kernels=kernels),
      squad_losses, squad_metric_counts,
      num_train_examples=len(train_examples), example_name="questions",
      best_metric="f1")
  run.write_run_files(config)
  print(run.describe(), flush=True)
  for feature in (train_features or predict_features)[:2]:  # decoded examples
    n = sum(feature.input_mask)
    example = (train_examples or predict_examples)[feature.example_index]
    print(f"question {example.qas_id} window {feature.doc_span_index}: "
          + " ".join(tokenizer.convert_ids_to_tokens(feature.input_ids[:n]))
          + (f" (answer {feature.start_position}..{feature.end_position})"
             if train_features else ""), flush=True)

  data = _has_answers(FLAGS.predict_file) if FLAGS.do_predict else None
  if FLAGS.eval_every_steps and FLAGS.do_train and data is None:
    raise app.UsageError(f"--predict_file {FLAGS.predict_file} has no "
                         "answers to evaluate with --eval_every_steps; pass "
                         "a dev file with answers.")

  def predict(log=None):
    # Padding positions get very low logits, so no span starts or ends
    # there (with fixed padding they are filtered out by the map instead).
    logits = run.predict(squad.feature_arrays(predict_features),
                         FLAGS.predict_batch_size, fill=-1e4)
    return squad.postprocess(
        predict_examples, predict_features, logits["start_logits"].tolist(),
        logits["end_logits"].tolist(), tokenizer.vocab,
        n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        do_lower_case=FLAGS.do_lower_case,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold, log=log)

  def evaluate(step):
    predictions, _, null_odds = predict()
    return evaluation(data, predictions, null_odds, step)

  run.restore_or_warm_start()
  if FLAGS.do_train:
    if not run.train(*squad.feature_arrays(train_features, True), evaluate):
      return  # SIGTERM: checkpoint saved, rerun resumes.

  summary = []
  if FLAGS.do_predict:
    t0 = time.time()
    log = print if FLAGS.verbose_logging else None
    predictions, nbest, null_odds = predict(log)
    outputs = {"predictions.json": predictions,
               "nbest_predictions.json": nbest}
    if FLAGS.version_2_with_negative:
      outputs["null_odds.json"] = null_odds
    if run.is_chief:
      for name, value in outputs.items():
        run.write(name, json.dumps(value, indent=4) + "\n")
    summary.append(f"{len(predictions)} predictions in "
                   f"{time.time() - t0:.1f} s")
    if data is not None:
      result = evaluation(data, predictions, null_odds, run.step)
      run.write_eval_results(result)
      summary.append(f"exact_match {result['exact_match']:.2f} f1 "
                     f"{result['f1']:.2f}")
  if FLAGS.export_dir and run.is_chief:
    from export import squad_serving  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    example = {k: np.zeros((1, FLAGS.max_seq_length), np.int32) for k in
               ("input_word_ids", "input_mask", "input_type_ids")}
    path = squad_serving.export_squad_model(
        FLAGS.export_dir, run.export_model(example), FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
        n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold)
    summary.append(f"exported {path}")
  print(f"run_squad done at step {run.step}: " + "; ".join(summary)
        + f"; output in {FLAGS.output_dir}", flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
