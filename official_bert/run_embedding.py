"""Fine-tunes BERT into a sentence embedding model for search.

    python -m official_bert.run_embedding --task_data_dir=my_pairs \\
      --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
      --vocab_file=$BERT_BASE_DIR/vocab.txt \\
      --init_checkpoint=$BERT_BASE_DIR --do_train --do_eval \\
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 \\
      --num_train_epochs=1 --output_dir=/tmp/pairs --export_dir=/tmp/pairs_serving

--task_data_dir holds `train`, `dev` and `test` files (`.tsv`, `.csv` or
`.jsonl`, as run_classifier reads them) with the columns --anchor_column,
--positive_column and, when the training file has them, --negative_column's
(hard negatives). Training is sentence-transformers'
MultipleNegativesRankingLoss: each anchor against every positive (and hard
negative) of its batch, cosine x 20, cross-entropy
(tasks/embedding/embedding_task.py), in batches that repeat no text.
--mine_hard_negatives=K mines K hard negatives per anchor with the weights
training starts from (tasks/embedding/hard_negatives.py) into
output_dir/hard_negatives.tsv, which training then reads; with
--remine_every_epoch, again at each later epoch's start. --pooling: mean
(over the tokens) or cls; unset, the run's own, the --init_checkpoint's
pooling.json (convert_checkpoint writes one for a sentence-transformers
model) or mean.

Writes to --output_dir: ckpt-<step> (a rerun resumes), flags.json,
bert_config.json, pooling.json, eval_results.txt (eval_mrr_at_10,
eval_recall_at_1, eval_recall_at_10 of each dev anchor searching every dev
positive by cosine), test_embeddings.tsv with --do_predict (one line per
test anchor), hard_negatives.tsv and hard_negatives.json (what it was mined
from) with --mine_hard_negatives (and hard_negatives_epoch_E.tsv and .json
for each later epoch E with --remine_every_epoch). With --export_dir, a TF
Serving SavedModel: raw text in, `sentence_embedding` out; --quantize=int8
adds model.tflite (ids in, `sentence_embedding` out, int8 weights) when its
dev eval_mrr_at_10 (or --best_metric) drops by at most
--max_quantization_drop, and the int8_* keys to eval_results.txt. `export.export_checkpoint
--format=sentence_transformers --init_checkpoint=<output_dir>` writes it for
sentence-transformers, with its pooling.
"""

from absl import app
from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert import trainer_flags
from official_bert.tasks.embedding import embedding_task
from official_bert.tasks.embedding import hard_negatives
from official_bert.training import cpu_allocator
from official_bert.training import preemption
from official_bert.training import sentence_transformers_folder

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  finetuning_flags.define_flags(
      max_seq_length=128, learning_rate=2e-5, export_help="If set, export "
      "the fine-tuned model for TF Serving (raw text in, sentence_embedding "
      "out) here.", task_data_dir_help="Directory with train/dev/test files "
      "(.tsv, .csv or .jsonl) of anchor/positive(/negative) texts.")
  # The original has no embedding program to be faithful to; on a hard
  # retrieval task Keras's bias-corrected AdamW (epsilon 1e-8, as torch's)
  # reached a higher dev MRR@10 than the original's update in each of 3
  # seeds (docs/sentence-embeddings.md): it is this program's default.
  FLAGS.set_default("optimizer", "keras_adamw")
  FLAGS.set_default("adam_epsilon", 1e-8)
  flags.DEFINE_string("anchor_column", "anchor", "Column (or JSON key) of "
                      "the anchor (the query).")
  flags.DEFINE_string("positive_column", "positive", "Column of the text "
                      "the anchor should find.")
  flags.DEFINE_string("negative_column", "negative", "Columns of hard "
                      "negatives, comma-separated, used when the training "
                      "file has them: each name is a column, or (when the "
                      "file has none of that name) the columns NAME_1, "
                      "NAME_2, ... (the layout --mine_hard_negatives "
                      "writes).")
  flags.DEFINE_integer("mine_hard_negatives", 0, "K > 0: before training, "
                       "the weights training starts from rank the training "
                       "passages for each anchor, and training reads each "
                       "row with its K best that are not its answer "
                       "(output_dir/hard_negatives.tsv, reused by a rerun "
                       "when made from the same inputs).")
  flags.DEFINE_bool("remine_every_epoch", False, "With "
                    "--mine_hard_negatives: mine them again at the start of "
                    "every later epoch E, with the weights trained so far "
                    "(output_dir/hard_negatives_epoch_E.tsv); the learning "
                    "rate's schedule stays the whole run's.")
  flags.DEFINE_float("hard_negative_margin", hard_negatives.RELATIVE_MARGIN,
                     "With --mine_hard_negatives: a candidate scoring above "
                     "p - |p| x this (p: the positive's cosine) is a "
                     "near-duplicate of the answer, never a negative "
                     "(sentence-transformers' relative_margin).")
  flags.DEFINE_integer("mini_batch_size", 0, "M > 0: the loss over the "
                       "whole --train_batch_size (every pair against every "
                       "passage of the batch), its gradient computed M pairs "
                       "at a time (GradCache: a large batch's gradient in "
                       "the memory of M); M divides the batch of each "
                       "replica.")
  flags.DEFINE_enum("pooling", None,
                    list(sentence_transformers_folder.POOLINGS), "How "
                    "tokens become one vector: mean (over the tokens) or cls "
                    "(the [CLS] position's output). Unset: the run's own, "
                    "--init_checkpoint's pooling.json, or mean.")


def _export(task, model, int8_content=None):
  from export import serving  # pylint: disable=g-import-not-at-top
  return serving.export_saved_model(
      FLAGS.export_dir, model, FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
      outputs=task.export_spec().outputs,
      xla_single_text=FLAGS.xla_single_text, int8_content=int8_content)


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  if not FLAGS.task_data_dir:
    raise app.UsageError("--task_data_dir is required.")
  finetuning_flags.check_flags(FLAGS, data_paths={"task_data_dir": "dir"})
  if FLAGS.group_by_length:
    raise app.UsageError("--group_by_length would fill each batch with texts "
                         "of one length, the in-batch negatives too; drop "
                         "it.")
  if FLAGS.mine_hard_negatives < 0 or FLAGS.hard_negative_margin < 0:
    raise app.UsageError(
        "--mine_hard_negatives and --hard_negative_margin must be 0 or more, "
        f"got {FLAGS.mine_hard_negatives} and {FLAGS.hard_negative_margin}.")
  if FLAGS.mini_batch_size < 0 or (
      FLAGS.mini_batch_size and FLAGS.train_batch_size % FLAGS.mini_batch_size):
    raise app.UsageError(
        f"--mini_batch_size={FLAGS.mini_batch_size} does not divide "
        f"--train_batch_size={FLAGS.train_batch_size}; pass a divisor of the "
        "batch (or 0 for none).")
  if FLAGS.remine_every_epoch and not FLAGS.mine_hard_negatives:
    raise app.UsageError("--remine_every_epoch mines the negatives again "
                         "every epoch: pass --mine_hard_negatives=K too.")
  if FLAGS.remine_every_epoch and FLAGS.teacher:
    raise app.UsageError("--teacher's outputs are computed once for the "
                         "training rows, which --remine_every_epoch mines "
                         "anew every epoch; drop one of them.")
  if FLAGS.mine_hard_negatives and not FLAGS.do_train:
    raise app.UsageError("--mine_hard_negatives mines the training file's "
                         "negatives: pass --do_train.")
  try:
    pooling, origin = sentence_transformers_folder.resolve_pooling(
        FLAGS.pooling, FLAGS.output_dir, FLAGS.init_checkpoint)
  except ValueError as e:
    raise app.UsageError(str(e))
  print(f"pooling: {pooling} ({origin})", flush=True)
  task = embedding_task.EmbeddingTask(trainer_flags.config_from_flags(
      FLAGS, embedding_task.EmbeddingConfig, data_dir=FLAGS.task_data_dir,
      splits=finetuning_flags.splits(FLAGS), pooling=pooling))
  finetuning_flags.run(FLAGS, task, "run_embedding",
                       lambda model, int8: _export(task, model, int8))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
