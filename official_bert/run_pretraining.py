"""Pretrains BERT (masked LM + next sentence) on create_pretraining_data.py's TFRecords.

The command and flags of google-research/bert's run_pretraining.py, on any
tf.distribute strategy:

    python -m official_bert.run_pretraining \\
      --input_file='/tmp/tf_examples-*.tfrecord' --output_dir=/tmp/pretraining \\
      --bert_config_file=bert_config.json --do_train --do_eval \\
      --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \\
      --num_train_steps=20 --num_warmup_steps=10 --learning_rate=2e-5

Writes to --output_dir: ckpt-<step>.{index,data-*} and `checkpoint`
(model, optimizer, step; rerunning resumes from the latest), train/ and eval/
TensorBoard summaries, flags.json (the resolved flags), bert_config.json
and, with --do_eval, eval_results.txt.

The modern recipe (docs/pretraining.md): --masking=dynamic draws fresh masks
every epoch from the records' tokens (--masked_lm_prob, e.g. 0.3; needs
--vocab_file), --next_sentence_prediction=false trains without the NSP head.
"""

import contextlib
import os
import re
import sys

from absl import app
from absl import flags

from official_bert import cli
from official_bert import tpu_flags
from official_bert import trainer_flags
from official_bert.training import cpu_allocator
from official_bert.training import preemption

FLAGS = flags.FLAGS

# ---- the original's flags, same names and defaults
flags.DEFINE_string("bert_config_file", None,
                    "bert_config.json of the model to pretrain.")
flags.DEFINE_string("input_file", None,
                    "Input TFRecord files: comma-separated globs.")
flags.DEFINE_string("output_dir", None,
                    "Where checkpoints, summaries and results are written; "
                    "rerunning with the same directory resumes.")
flags.DEFINE_string("init_checkpoint", None,
                    "Warm-start the weights (not the optimizer or step) from "
                    "this checkpoint prefix or directory, e.g. phase 1 for "
                    "phase 2, or google-research/bert's bert_model.ckpt. "
                    "Ignored when output_dir holds a checkpoint.")
flags.DEFINE_integer("max_seq_length", 128,
                     "Sequence length of the TFRecords (must match the data).")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Masked-LM predictions per sequence: with "
                     "--masking=static those in the TFRecords (must match the "
                     "data); with --masking=dynamic the most drawn per "
                     "sequence (any number; the records' own is read from "
                     "them).")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to evaluate on --input_file.")
flags.DEFINE_integer("train_batch_size", 32,
                     "Global training batch size (all replicas and "
                     "accumulation steps together).")
flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
flags.DEFINE_integer("num_warmup_steps", 10000,
                     "Steps of linear learning-rate warmup.")
flags.DEFINE_integer("save_checkpoints_steps", 1000,
                     "Save a checkpoint every this many steps.")
flags.DEFINE_integer("max_eval_steps", 100, "Maximum evaluation batches.")
# ---- added: distribution, precision, optimiser, loop (shared with the
# fine-tuning programs: trainer_flags.py)
trainer_flags.define(steps_per_loop=1000, keep_checkpoint_max=5)
flags.DEFINE_integer("gradient_accumulation_steps", 1,
                     "Micro-batches per step (train_batch_size is split).")
# ---- added: continued pretraining of an extend_checkpoint output
flags.DEFINE_integer("freeze_old_embeddings_steps", 0,
                     "With an --init_checkpoint written by extend_checkpoint: "
                     "for this many steps only the new words' rows of the "
                     "word embeddings and masked-LM bias get a gradient "
                     "(the ids in its extend_info.json).")
# ---- added: the modern recipe (RoBERTa's dynamic masking, no NSP)
flags.DEFINE_enum("masking", "static", ["static", "dynamic"],
                  "static: train on the masks the data job wrote (the "
                  "original); dynamic: draw fresh masks for every record in "
                  "every epoch, from the records' original tokens (any "
                  "TFRecords of the data job), a function of --seed, the "
                  "record and the epoch. Evaluation always reads the "
                  "records' masks.")
flags.DEFINE_float("masked_lm_prob", 0.15,
                   "--masking=dynamic: the fraction of tokens predicted "
                   "(MosaicBERT: 0.3); the count per sequence is "
                   "min(--max_predictions_per_seq, max(1, round(tokens x "
                   "rate))), as the data job's.")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "--masking=dynamic: mask a word and its ## pieces together "
                  "(the pieces are read from --vocab_file).")
flags.DEFINE_string("vocab_file", None,
                    "--masking=dynamic: the vocab.txt of the TFRecords, for "
                    "the ids of [MASK], [CLS] and [SEP], the random "
                    "replacements and the ## pieces.")
flags.DEFINE_bool("next_sentence_prediction", True,
                  "False: no next-sentence head and no NSP loss (RoBERTa); "
                  "the records' next_sentence_labels are ignored and "
                  "evaluation reports only the masked-LM metrics.")


def _check_flags():
  """The flag errors one sentence can explain, before TensorFlow starts."""
  tpu_flags.apply(FLAGS)
  if not FLAGS.do_train and not FLAGS.do_eval:
    raise app.UsageError("At least one of --do_train or --do_eval must be set.")
  for name in ("bert_config_file", "input_file", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  cli.check_text_file("bert_config_file", FLAGS.bert_config_file,
                      "a bert_config.json")
  cli.check_output_dir("output_dir", FLAGS.output_dir, create=False)
  for pattern in FLAGS.input_file.split(","):
    if os.path.isdir(pattern.strip()):
      raise app.UsageError(
          f"--input_file={pattern.strip()} is a directory; pass TFRecord "
          f"files or a glob such as {os.path.join(pattern.strip(), '*')}.")
    if cli.blocked_by(pattern.strip()):
      raise cli.missing("input_file", pattern.strip())
  if FLAGS.init_checkpoint and cli.blocked_by(FLAGS.init_checkpoint):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
               "save_checkpoints_steps", "steps_per_loop",
               "gradient_accumulation_steps", "max_seq_length",
               "max_predictions_per_seq", "num_cpu_devices"):
    if getattr(FLAGS, name) <= 0:
      raise app.UsageError(f"--{name} must be positive, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.masking == "dynamic":
    if not FLAGS.vocab_file:
      raise app.UsageError(
          "--masking=dynamic needs --vocab_file (the vocab.txt the TFRecords "
          "were written with), for the id of [MASK] and the random "
          "replacements.")
    cli.check_text_file("vocab_file", FLAGS.vocab_file, "a vocab.txt")
    if not 0.0 < FLAGS.masked_lm_prob <= 1.0:
      raise app.UsageError(f"--masked_lm_prob={FLAGS.masked_lm_prob} must be "
                           "in (0, 1].")
  else:
    for name, default in (("masked_lm_prob", 0.15),
                          ("do_whole_word_mask", False)):
      if getattr(FLAGS, name) != default:
        raise app.UsageError(
            f"--{name} applies to --masking=dynamic; with --masking=static "
            "the records' masks are used (set it in create_pretraining_data "
            "instead).")
  if FLAGS.num_warmup_steps < 0:
    raise app.UsageError(f"--num_warmup_steps={FLAGS.num_warmup_steps} must "
                         "be >= 0.")
  if FLAGS.do_train and FLAGS.num_warmup_steps > FLAGS.num_train_steps:
    # As the original: the rate rises for the whole run and never peaks.
    print(f"run_pretraining: warning: --num_warmup_steps="
          f"{FLAGS.num_warmup_steps} exceeds --num_train_steps="
          f"{FLAGS.num_train_steps}, so the learning rate only reaches "
          f"{FLAGS.num_train_steps / FLAGS.num_warmup_steps:.3g} x "
          "--learning_rate (as in the original).", file=sys.stderr,
          flush=True)


def _check_same_config(config, output_dir):
  """Resuming with another model than the checkpoints' is one sentence."""
  saved_path = os.path.join(output_dir, "bert_config.json")
  if not os.path.exists(saved_path):
    return
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  saved = configs.BertConfig.from_json_file(saved_path)
  if saved.to_dict() != config.to_dict():
    changed = sorted(k for k in set(saved.to_dict()) | set(config.to_dict())
                     if saved.to_dict().get(k) != config.to_dict().get(k))
    raise app.UsageError(
        f"--bert_config_file={FLAGS.bert_config_file} differs from "
        f"{saved_path}, the model of the checkpoints in --output_dir "
        f"({', '.join(changed)}); use a new --output_dir to start fresh, or "
        "the same config to resume.")


def _out_of_vocab_sentence(error, vocab_size):
  """A token id past the embedding table in a record after the first ones
  that were checked at start-up (the CPU's gather reports it)."""
  found = re.search(r"= (\d+) is not in \[0, (\d+)\)", error.message or "")
  if not found or int(found.group(2)) != vocab_size:
    return None
  return (f"--input_file={FLAGS.input_file} holds token id {found.group(1)}, "
          f"but vocab_size is {vocab_size} in --bert_config_file="
          f"{FLAGS.bert_config_file}: the records were written with another "
          "vocab.txt; regenerate them with the model's vocab.txt (training "
          "stopped; the last checkpoint in --output_dir is kept).")


def _corrupt_data_sentence(error):
  kind = "truncated" if "truncated" in error.message else "corrupt"
  return (f"--input_file={FLAGS.input_file} holds a {kind} TFRecord; "
          "regenerate it with create_pretraining_data (training stopped; "
          "the last checkpoint in --output_dir is kept).")


@contextlib.contextmanager
def _record_errors(vocab_size):
  """A corrupt record, or a token id past the vocabulary, met while reading
  --input_file: one sentence (cli.Error) instead of TensorFlow's error."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    yield
  except tf.errors.DataLossError as e:
    raise cli.Error(_corrupt_data_sentence(e)) from None
  except tf.errors.InvalidArgumentError as e:
    sentence = _out_of_vocab_sentence(e, vocab_size)
    if sentence is None:
      raise
    raise cli.Error(sentence) from None


def _freeze_old_embeddings(model):
  """The trainer's gradient transform for --freeze_old_embeddings_steps
  (None when 0): the new word ids come from extend_info.json beside
  --init_checkpoint (docs/domain-adaptation.md)."""
  steps = FLAGS.freeze_old_embeddings_steps
  if steps <= 0:
    return None
  from official_bert.training import extension  # pylint: disable=g-import-not-at-top
  try:
    new_ids = extension.read_new_word_ids(FLAGS.init_checkpoint,
                                          model.encoder.bert_config.vocab_size)
  except ValueError as e:
    raise app.UsageError(f"--freeze_old_embeddings_steps={steps}: {e}")
  return extension.freeze_rows(
      [model.encoder.embeddings.word_embeddings.embeddings,
       model.cls_predictions.output_bias], new_ids, steps)


def pretraining_eval_sums(labels, outputs):
  """Sums for the original's eval metrics (ratios taken over the whole set)."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  weights = ops.cast(labels["masked_lm_weights"], "float32")
  mlm_ce = keras.losses.sparse_categorical_crossentropy(
      labels["masked_lm_ids"], outputs["mlm_logits"], from_logits=True)
  sums = pretrainer.pretraining_metric_counts(labels, outputs)
  sums["masked_lm_loss_sum"] = ops.sum(weights * mlm_ce)
  if "next_sentence_logits" in outputs:  # a model with the NSP head
    nsp_labels = ops.reshape(labels["next_sentence_labels"], (-1,))
    nsp_ce = keras.losses.sparse_categorical_crossentropy(
        nsp_labels, outputs["next_sentence_logits"], from_logits=True)
    sums["next_sentence_loss_sum"] = ops.sum(nsp_ce)
  return sums


def eval_results(sums, step):
  """The original's eval_results.txt values from `pretraining_eval_sums` sums
  (the masked-LM ones alone for a model without the NSP head)."""
  mlm_total = max(sums["masked_lm_total"], 1e-12)
  result = {
      "global_step": step,
      "masked_lm_accuracy": sums["masked_lm_correct"] / mlm_total,
      "masked_lm_loss": sums["masked_lm_loss_sum"] / mlm_total,
  }
  result["loss"] = result["masked_lm_loss"]
  if "next_sentence_loss_sum" in sums:
    nsp_total = max(sums["next_sentence_total"], 1e-12)
    result["next_sentence_accuracy"] = (sums["next_sentence_correct"]
                                        / nsp_total)
    result["next_sentence_loss"] = sums["next_sentence_loss_sum"] / nsp_total
    result["loss"] += result["next_sentence_loss"]
  return result


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  cli.start_tensorflow()  # without its start-up lines
  _check_flags()
  # TensorFlow starts here, after the cheap checks.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.data import features  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import driver as driver_lib  # pylint: disable=g-import-not-at-top
  from official_bert.training import dynamic_masking  # pylint: disable=g-import-not-at-top
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top

  run_config = trainer_flags.driver_config(
      FLAGS, trainer_flags.program_values(FLAGS, [__name__]),
      num_train_steps=FLAGS.num_train_steps,
      num_warmup_steps=FLAGS.num_warmup_steps,
      gradient_accumulation_steps=FLAGS.gradient_accumulation_steps)
  try:
    config = configs.BertConfig.from_json_file(FLAGS.bert_config_file,
                                               "--bert_config_file")
  except (ValueError, TypeError, KeyError) as e:
    raise app.UsageError(str(e))
  if FLAGS.max_seq_length > config.max_position_embeddings:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} exceeds max_position_"
        f"embeddings={config.max_position_embeddings} of "
        f"{FLAGS.bert_config_file}; lower --max_seq_length.")
  # The strategy first: multi-worker collectives must be configured before
  # TensorFlow runs any op (reading the files does).
  driver = driver_lib.Driver(run_config)
  try:
    files = input_pipeline.resolve_input_files(FLAGS.input_file)
    # Dynamic masking draws up to --max_predictions_per_seq from records
    # written with any number of predictions.
    record_predictions = FLAGS.max_predictions_per_seq
    masking = None
    if FLAGS.masking == "dynamic":
      record_predictions = features.record_predictions(files[0])
      masking = dynamic_masking.options_from_vocab(
          FLAGS.vocab_file, FLAGS.masked_lm_prob,
          FLAGS.max_predictions_per_seq, FLAGS.do_whole_word_mask, FLAGS.seed)
    input_pipeline.check_input_files(files, FLAGS.max_seq_length,
                                     record_predictions,
                                     vocab_size=config.vocab_size)
  except ValueError as e:
    raise app.UsageError(str(e))
  if masking and masking.vocab_size > config.vocab_size:
    raise app.UsageError(
        f"--vocab_file={FLAGS.vocab_file} has {masking.vocab_size} tokens, "
        f"more than vocab_size={config.vocab_size} of "
        f"{FLAGS.bert_config_file}; pass the vocab the model was built for.")
  driver.check_init_checkpoint()
  driver.build(
      lambda kernels: pretrainer.BertPretrainer.from_bert_config(
          config, use_next_sentence=FLAGS.next_sentence_prediction,
          kernels=kernels),
      pretrainer.pretraining_losses, pretrainer.pretraining_metric_counts,
      transform_gradients=_freeze_old_embeddings)
  trainer = driver.trainer

  resuming = driver.resuming()
  if resuming:
    _check_same_config(config, FLAGS.output_dir)
  print(f"{len(files)} input files, {driver.describe()}, {driver.kernels} "
        f"kernels, {'BFC' if cpu_allocator.in_use() else 'default'} CPU "
        "allocator", flush=True)
  start = driver.restore_or_init()
  # Written once the checkpoints fit the config: a bad --init_checkpoint
  # leaves nothing in a new --output_dir.
  driver.write_run_files(config, {"kernels": driver.kernels})
  if not resuming and not FLAGS.init_checkpoint:
    print("Starting from scratch (no checkpoint in --output_dir), step 0",
          flush=True)
  step = start
  if FLAGS.do_train:
    train_fn = input_pipeline.pretraining_dataset_fn(
        files, FLAGS.train_batch_size // FLAGS.gradient_accumulation_steps,
        FLAGS.max_seq_length, record_predictions, is_training=True,
        seed=FLAGS.seed, masking=masking)
    with _record_errors(config.vocab_size):
      result = trainer.train_or_exit(train_fn,
                                     global_batch_size=FLAGS.train_batch_size)
    step = result.step
    if result.preempted:
      return
    print(f"Trained steps {start}..{step}: "
          + " ".join(f"{k} {v:.4g}" for k, v in result.metrics.items()),
          flush=True)
  if FLAGS.do_eval:
    eval_fn = input_pipeline.pretraining_dataset_fn(
        files, FLAGS.eval_batch_size, FLAGS.max_seq_length,
        record_predictions, is_training=False)
    with _record_errors(config.vocab_size):
      sums = trainer.evaluate(eval_fn, pretraining_eval_sums,
                              max_steps=FLAGS.max_eval_steps)
    result = eval_results(sums, step)
    if trainer.is_chief:
      driver.write("eval_results.txt", "".join(f"{k} = {result[k]}\n"
                                               for k in sorted(result)))
      writer = tf.summary.create_file_writer(
          os.path.join(FLAGS.output_dir, "eval"))
      with writer.as_default(step=step):
        for key, value in result.items():
          tf.summary.scalar(key, value)
      writer.flush()
    print(f"Eval at step {step} on {sums['eval_steps']} batches: "
          + " ".join(f"{k} {v:.4g}" for k, v in sorted(result.items())),
          flush=True)


if __name__ == "__main__":
  cli.run(main)
