"""Fine-tunes BERT on SQuAD v1.1 / v2.0 and predicts answers.

The command and flags of google-research/bert's run_squad.py, on the
pretraining trainer's loop (`training/trainer.py`: any tf.distribute
strategy, mixed precision, XLA, resume from --output_dir):

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
import os
import random
import time

from absl import app
from absl import flags

from official_bert import cli
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  # ---- the original's flags, same names and defaults
  flags.DEFINE_string("bert_config_file", None, "The bert_config.json of the "
                      "pretrained model.")
  flags.DEFINE_string("vocab_file", None, "The vocab.txt of the pretrained model.")
  flags.DEFINE_string("output_dir", None, "Where checkpoints and predictions go.")
  flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. "
                      "train-v1.1.json.")
  flags.DEFINE_string("predict_file", None, "SQuAD json for predictions, e.g. "
                      "dev-v1.1.json (with answers: also evaluated).")
  flags.DEFINE_string("init_checkpoint", None, "Pretrained (or converted) "
                      "checkpoint, a prefix or a directory; its encoder is "
                      "loaded, the span head starts fresh.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased models).")
  flags.DEFINE_integer("max_seq_length", 384, "Tokens per window (question, "
                       "context piece and 3 special tokens).")
  flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of two "
                       "windows over a long context.")
  flags.DEFINE_integer("max_query_length", 64, "Question pieces kept; longer "
                       "questions are truncated.")
  flags.DEFINE_bool("do_train", False, "Whether to fine-tune on --train_file.")
  flags.DEFINE_bool("do_predict", False, "Whether to predict --predict_file.")
  flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
  flags.DEFINE_integer("predict_batch_size", 8, "Batch size for predictions.")
  flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate (AdamW).")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training "
                     "questions.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the steps with "
                     "linear learning-rate warmup.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval.")
  flags.DEFINE_integer("n_best_size", 20, "Candidate starts and ends per "
                       "window, and answers kept in nbest_predictions.json.")
  flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.")
  flags.DEFINE_bool("verbose_logging", False, "Log why an answer's text could "
                    "not be aligned with the context.")
  flags.DEFINE_bool("version_2_with_negative", False, "SQuAD v2.0: questions "
                    "may have no answer.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0, "v2.0: answer nothing "
                     "when the null score exceeds the best span's by more.")
  # ---- shared with run_classifier.py: distribution, precision, loop
  flags.DEFINE_enum("distribution_strategy", "default",
                    ["default", "one_device", "mirrored", "multi_worker_mirrored",
                     "tpu"], "tf.distribute strategy (see distribution.py).")
  flags.DEFINE_integer("num_gpus", None, "GPUs for mirrored (default all).")
  flags.DEFINE_integer("num_cpu_devices", 1, "Split the CPU into this many "
                       "devices (mirrored replicas without GPUs).")
  flags.DEFINE_string("tpu", None, "TPU name or grpc:// address.")
  flags.DEFINE_enum("mixed_precision", "float32",
                    ["float32", "mixed_bfloat16", "mixed_float16"],
                    "Keras dtype policy.")
  flags.DEFINE_bool("jit_compile", False, "Compile the train step with XLA.")
  flags.DEFINE_integer("steps_per_loop", 100, "Steps per progress line.")
  flags.DEFINE_float("max_grad_norm", 1.0, "Global-norm gradient clipping.")
  flags.DEFINE_float("weight_decay", 0.01, "AdamW weight decay.")
  flags.DEFINE_integer("seed", 12345, "Seed of initialisation, dropout, shuffle.")
  flags.DEFINE_string("export_dir", None, "If set, export the fine-tuned model "
                      "for TF Serving (question and context in, answer out).")


def _check_flags():
  """The flag errors one sentence can explain, before TensorFlow starts."""
  if not (FLAGS.do_train or FLAGS.do_predict):
    raise app.UsageError("At least one of --do_train or --do_predict must be "
                         "set.")
  if FLAGS.do_train and not FLAGS.train_file:
    raise app.UsageError("--do_train needs --train_file.")
  if FLAGS.do_predict and not FLAGS.predict_file:
    raise app.UsageError("--do_predict needs --predict_file.")
  for name in ("bert_config_file", "vocab_file", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  cli.check_output_dir("output_dir", FLAGS.output_dir, create=False)
  for name in ("bert_config_file", "vocab_file", "train_file",
               "predict_file", "init_checkpoint"):
    if getattr(FLAGS, name) and cli.blocked_by(getattr(FLAGS, name)):
      raise cli.missing(name, getattr(FLAGS, name))
  for name in ("bert_config_file", "vocab_file"):
    if not os.path.exists(getattr(FLAGS, name)):
      raise app.UsageError(f"--{name} {getattr(FLAGS, name)} does not exist.")
  cli.check_text_file("bert_config_file", FLAGS.bert_config_file,
                      "a bert_config.json")
  for name in ("train_batch_size", "predict_batch_size", "doc_stride",
               "save_checkpoints_steps", "steps_per_loop", "max_seq_length",
               "max_query_length", "n_best_size", "max_answer_length",
               "num_cpu_devices"):
    if getattr(FLAGS, name) <= 0:
      raise app.UsageError(f"--{name} must be positive, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} leaves no room for the "
        f"context after --max_query_length={FLAGS.max_query_length} and 3 "
        "special tokens; raise --max_seq_length.")
  if FLAGS.num_train_epochs <= 0:
    raise app.UsageError("--num_train_epochs must be positive, got "
                         f"{FLAGS.num_train_epochs}.")
  if not 0 <= FLAGS.warmup_proportion < 1:
    raise app.UsageError("--warmup_proportion must be in [0, 1), got "
                         f"{FLAGS.warmup_proportion}.")


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


def predict_logits(model, inputs, batch_size):
  """Start and end logits (float32 numpy [N, T]) of `model` on `inputs`."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size)
  step = tf.function(lambda batch: model(batch, training=False))
  starts, ends = [], []
  for batch in dataset:
    out = step(batch)
    starts.append(out["start_logits"].numpy())
    ends.append(out["end_logits"].numpy())
  return np.concatenate(starts), np.concatenate(ends)


def _read(path, is_training):
  from official_bert.tasks import squad  # pylint: disable=g-import-not-at-top
  try:
    return squad.read_squad_examples(path, is_training,
                                     FLAGS.version_2_with_negative)
  except ValueError as e:
    raise app.UsageError(str(e))


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
    result = squad_metrics.evaluate_v1(data, predictions)
  result["global_step"] = step
  return result


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  _check_flags()
  # Read and check the data first (no TensorFlow yet): a bad file fails at
  # once, not after training.
  train_examples = _read(FLAGS.train_file, True) if FLAGS.do_train else []
  predict_examples = (_read(FLAGS.predict_file, False) if FLAGS.do_predict
                      else [])

  # TensorFlow starts here, after the cheap checks.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import squad  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  from official_bert.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  if FLAGS.num_cpu_devices > 1:
    distribution.split_cpu(FLAGS.num_cpu_devices)
  try:
    config = configs.BertConfig.from_json_file(FLAGS.bert_config_file)
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file,
                                           FLAGS.do_lower_case)
  except (ValueError, TypeError, KeyError) as e:
    raise app.UsageError(str(e))
  if tokenizer.vocab_size > config.vocab_size:
    raise app.UsageError(
        f"--vocab_file {FLAGS.vocab_file} has {tokenizer.vocab_size} tokens, "
        f"more than vocab_size={config.vocab_size} of "
        f"{FLAGS.bert_config_file}; pass the model's own vocab.txt.")
  if FLAGS.max_seq_length > config.max_position_embeddings:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} exceeds max_position_"
        f"embeddings={config.max_position_embeddings} of "
        f"{FLAGS.bert_config_file}; lower --max_seq_length.")
  # Made once the model's files are known good: bad input leaves nothing.
  os.makedirs(FLAGS.output_dir, exist_ok=True)

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

  try:
    strategy = distribution.get_strategy(
        FLAGS.distribution_strategy, FLAGS.num_gpus, FLAGS.tpu)
    distribution.check_jit_compile(strategy, FLAGS.jit_compile)
  except ValueError as e:
    raise app.UsageError(str(e))
  replicas = strategy.num_replicas_in_sync
  if FLAGS.do_train and FLAGS.train_batch_size % replicas:
    raise app.UsageError(
        f"--train_batch_size={FLAGS.train_batch_size} is not divisible by "
        f"{replicas} replicas; use a multiple of {replicas}.")
  # As the original: steps from the number of questions, not windows.
  num_train_steps = max(1, int(len(train_examples) / FLAGS.train_batch_size
                               * FLAGS.num_train_epochs))
  num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)

  keras.utils.set_random_seed(FLAGS.seed)
  distribution.set_mixed_precision(FLAGS.mixed_precision)
  with strategy.scope():
    model = finetuning_models.BertSpanLabeler.from_bert_config(config)
    # The span head reads sequence_output only: the pooler gets no gradient
    # (the original's optimizer skips it), so it is not trained.
    model.encoder.pooler.trainable = False
    optimizer = optimization.create_optimizer(
        "adamw", FLAGS.learning_rate, num_train_steps, num_warmup_steps,
        weight_decay=FLAGS.weight_decay, mixed_precision=FLAGS.mixed_precision)
  trainer = trainer_lib.Trainer(
      strategy, model, optimizer, squad_losses,
      trainer_lib.TrainConfig(
          output_dir=FLAGS.output_dir, num_train_steps=num_train_steps,
          steps_per_loop=FLAGS.steps_per_loop,
          save_checkpoints_steps=FLAGS.save_checkpoints_steps,
          max_grad_norm=FLAGS.max_grad_norm, jit_compile=FLAGS.jit_compile,
          keep_checkpoints=2),
      metric_fn=squad_metric_counts)

  if trainer.is_chief:
    ours = next(module_flags for module_flags in
                FLAGS.flags_by_module_dict().values()
                if any(f.name == "doc_stride" for f in module_flags))
    resolved = {f.name: f.value for f in ours}
    resolved.update(num_replicas=replicas, num_train_steps=num_train_steps,
                    num_warmup_steps=num_warmup_steps)
    cli.atomic_write(os.path.join(FLAGS.output_dir, "flags.json"),
                     json.dumps(resolved, indent=2, sort_keys=True) + "\n")
    config.to_json_file(os.path.join(FLAGS.output_dir, "bert_config.json"))
  print(f"{replicas} replicas ({FLAGS.distribution_strategy}), "
        f"{FLAGS.mixed_precision}, {model.count_params():,} parameters",
        flush=True)
  for feature in (train_features or predict_features)[:2]:  # decoded examples
    n = sum(feature.input_mask)
    example = (train_examples or predict_examples)[feature.example_index]
    print(f"question {example.qas_id} window {feature.doc_span_index}: "
          + " ".join(tokenizer.convert_ids_to_tokens(feature.input_ids[:n]))
          + (f" (answer {feature.start_position}..{feature.end_position})"
             if train_features else ""), flush=True)

  def warm_start():
    if not FLAGS.init_checkpoint:
      if FLAGS.do_train:
        print("No --init_checkpoint: fine-tuning from random weights.")
      return
    try:
      prefix = checkpoints.restore_encoder(model.encoder, FLAGS.init_checkpoint)
    except ValueError as e:
      raise app.UsageError(f"--init_checkpoint: {e}")
    print(f"Initialised the encoder from {prefix}", flush=True)

  start = trainer.restore_or_init(init_fn=warm_start)
  step = start
  if not FLAGS.do_train and start == 0:
    print("Warning: no fine-tuned checkpoint in --output_dir; the span head "
          "is untrained.", flush=True)
  if FLAGS.do_train:
    train_inputs, train_labels = squad.feature_arrays(train_features, True)
    num_windows = len(train_features)

    def train_fn(input_context):
      batch = input_context.get_per_replica_batch_size(FLAGS.train_batch_size)
      data = tf.data.Dataset.from_tensor_slices((train_inputs, train_labels))
      data = data.shard(input_context.num_input_pipelines,
                        input_context.input_pipeline_id)
      # Seeded and repeated: a resumed run sees what an uninterrupted one would.
      data = data.shuffle(num_windows, seed=FLAGS.seed).repeat()
      return data.batch(batch, drop_remainder=True).prefetch(2)

    t0 = time.time()
    result = trainer.train_or_exit(train_fn,
                                   global_batch_size=FLAGS.train_batch_size)
    step = result.step
    if result.preempted:
      return
    print(f"Trained steps {start}..{step} ({num_train_steps} = "
          f"{len(train_examples)} questions x {FLAGS.num_train_epochs} epochs "
          f"/ batch {FLAGS.train_batch_size}) in {time.time() - t0:.1f} s: "
          + " ".join(f"{k} {v:.4g}" for k, v in result.metrics.items()),
          flush=True)

  summary = []
  if FLAGS.do_predict:
    t0 = time.time()
    start_logits, end_logits = predict_logits(
        model, squad.feature_arrays(predict_features), FLAGS.predict_batch_size)
    log = print if FLAGS.verbose_logging else None
    predictions, nbest, null_odds = squad.postprocess(
        predict_examples, predict_features, start_logits.tolist(),
        end_logits.tolist(), tokenizer.vocab, n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        do_lower_case=FLAGS.do_lower_case,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold, log=log)
    outputs = {"predictions.json": predictions,
               "nbest_predictions.json": nbest}
    if FLAGS.version_2_with_negative:
      outputs["null_odds.json"] = null_odds
    data = _has_answers(FLAGS.predict_file)
    if trainer.is_chief:
      for name, value in outputs.items():
        cli.atomic_write(os.path.join(FLAGS.output_dir, name),
                         json.dumps(value, indent=4) + "\n")
    summary.append(f"{len(predictions)} predictions in "
                   f"{time.time() - t0:.1f} s")
    if data is not None:
      result = evaluation(data, predictions, null_odds, step)
      if trainer.is_chief:
        cli.atomic_write(os.path.join(FLAGS.output_dir, "eval_results.txt"),
                         "".join(f"{k} = {result[k]}\n" for k in sorted(result)))
      print("Eval: " + " ".join(f"{k} {v:.4g}" for k, v in result.items()),
            flush=True)
      summary.append(f"exact_match {result['exact_match']:.2f} f1 "
                     f"{result['f1']:.2f}")
  if FLAGS.export_dir and trainer.is_chief:
    from export import squad_serving  # pylint: disable=g-import-not-at-top
    path = squad_serving.export_squad_model(
        FLAGS.export_dir, model, FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
        n_best_size=FLAGS.n_best_size,
        max_answer_length=FLAGS.max_answer_length,
        version_2_with_negative=FLAGS.version_2_with_negative,
        null_score_diff_threshold=FLAGS.null_score_diff_threshold)
    summary.append(f"exported {path}")
  print(f"run_squad done at step {step}: " + "; ".join(summary)
        + f"; output in {FLAGS.output_dir}", flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
