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

import os
import sys

from absl import app
from absl import flags

from official_bert import cli
from official_bert import tpu_flags
from official_bert import trainer_flags
from official_bert.tasks.pretraining import pretraining_task
from official_bert.training import cpu_allocator
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  # ---- the original's flags, same names and defaults (those the fine-tuning
  # programs share: trainer_flags.py)
  trainer_flags.define_run()
  flags.DEFINE_string("input_file", None,
                      "Input TFRecord files: comma-separated globs.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Masked-LM predictions per sequence: with "
                       "--masking=static those in the TFRecords (must match "
                       "the data); with --masking=dynamic the most drawn per "
                       "sequence (any number; the records' own is read from "
                       "them).")
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
  flags.DEFINE_integer("num_warmup_steps", 10000,
                       "Steps of linear learning-rate warmup.")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum evaluation batches.")
  # ---- added: distribution, precision, optimiser, loop (shared with the
  # fine-tuning programs: trainer_flags.py)
  trainer_flags.define(steps_per_loop=1000, keep_checkpoint_max=5)
  flags.DEFINE_integer("gradient_accumulation_steps", 1,
                       "Micro-batches per step (train_batch_size is split).")
  # ---- added: continued pretraining of an extend_checkpoint output
  flags.DEFINE_integer("freeze_old_embeddings_steps", 0,
                       "With an --init_checkpoint written by "
                       "extend_checkpoint: for this many steps only the new "
                       "words' rows of the word embeddings and masked-LM bias "
                       "get a gradient (the ids in its extend_info.json).")
  # ---- added: the modern recipe (RoBERTa's dynamic masking, no NSP)
  flags.DEFINE_enum("masking", "static", ["static", "dynamic"],
                    "static: train on the masks the data job wrote (the "
                    "original); dynamic: draw fresh masks for every record "
                    "in every epoch, from the records' original tokens (any "
                    "TFRecords of the data job), a function of --seed, the "
                    "record and the epoch. Evaluation always reads the "
                    "records' masks.")
  flags.DEFINE_float("masked_lm_prob", 0.15,
                     "--masking=dynamic: the fraction of tokens predicted "
                     "(MosaicBERT: 0.3); the count per sequence is "
                     "min(--max_predictions_per_seq, max(1, round(tokens x "
                     "rate))), as the data job's.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "--masking=dynamic: mask a word and its ## pieces "
                    "together (the pieces are read from --vocab_file).")
  flags.DEFINE_bool("next_sentence_prediction", True,
                    "False: no next-sentence head and no NSP loss (RoBERTa); "
                    "the records' next_sentence_labels are ignored and "
                    "evaluation reports only the masked-LM metrics.")
  flags.DEFINE_bool("pack_sequences", False,
                    "Read the records into rows of several sequences each "
                    "(first fit over 1,000 records at a time; each sequence "
                    "attends only to itself, its positions restart): fewer "
                    "padding positions, fewer steps per epoch. Masked-LM "
                    "only: needs --next_sentence_prediction=false.")


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
  if FLAGS.pack_sequences and FLAGS.next_sentence_prediction:
    raise app.UsageError("--pack_sequences puts several sequences in a row, "
                         "which has no one next-sentence label: pass "
                         "--next_sentence_prediction=false.")
  for pattern in FLAGS.input_file.split(","):
    if os.path.isdir(pattern.strip()):
      raise app.UsageError(
          f"--input_file={pattern.strip()} is a directory; pass TFRecord "
          f"files or a glob such as {os.path.join(pattern.strip(), '*')}.")
    if cli.blocked_by(pattern.strip()):
      raise cli.missing("input_file", pattern.strip())
  if FLAGS.init_checkpoint and cli.blocked_by(FLAGS.init_checkpoint):
    raise cli.missing("init_checkpoint", FLAGS.init_checkpoint)
  cli.check_positive(FLAGS, (
      "train_batch_size", "eval_batch_size", "num_train_steps",
      "save_checkpoints_steps", "steps_per_loop", "gradient_accumulation_steps",
      "max_seq_length", "max_predictions_per_seq", "num_cpu_devices"))
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


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  _check_flags()
  # TensorFlow starts here, after the cheap checks (without its start-up
  # lines).
  cli.start_tensorflow()
  run_config = trainer_flags.driver_config(
      FLAGS, trainer_flags.program_values(FLAGS, [__name__]),
      num_train_steps=FLAGS.num_train_steps,
      num_warmup_steps=FLAGS.num_warmup_steps,
      gradient_accumulation_steps=FLAGS.gradient_accumulation_steps)
  pretraining_task.run(run_config, trainer_flags.config_from_flags(
      FLAGS, pretraining_task.PretrainingConfig))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
