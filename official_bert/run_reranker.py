"""Fine-tunes BERT into a cross-encoder that reranks a retriever's candidates.

    python -m official_bert.run_reranker --task_data_dir=my_pairs \\
      --retriever=/tmp/pairs_serving \\
      --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
      --vocab_file=$BERT_BASE_DIR/vocab.txt \\
      --init_checkpoint=$BERT_BASE_DIR --do_train --do_eval \\
      --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 \\
      --num_train_epochs=1 --output_dir=/tmp/rerank \\
      --export_dir=/tmp/rerank_serving

--task_data_dir holds `train`, `dev` and `test` files (`.tsv`, `.csv` or
`.jsonl`) in run_embedding's layouts: --anchor_column (the query),
--positive_column and, when the file has them, --negative_column's. With
--retriever (an export with a `sentence_embedding` output: run_embedding's,
or export_saved_model's of a converted sentence-transformers model) each
training query gets --num_negatives negatives mined from its ranking of the
training passages (ranks --negative_rank_range, scoring at most
--max_negative_score and --negative_margin under its positive:
sentence-transformers' reranker guide), and each dev query's top
--rerank_top_k dev passages are reranked; without one, the training file's
negatives are used and every dev passage is reranked
(tasks/reranking/reranking_task.py). --loss: bce (default; positive pairs
weighted by --positive_weight) or listwise (a softmax over each query's
positive and negatives).

Writes to --output_dir: ckpt-<step> (a rerun resumes), flags.json,
bert_config.json, eval_results.txt (eval_mrr_at_10, eval_ndcg_at_10 and,
with a retriever, eval_retriever_mrr_at_10, eval_retriever_ndcg_at_10),
reranker_negatives.tsv (the mined negatives, with --retriever),
reranker_retrieved.json and its record (what the retriever gave: the
negatives, the dev candidates and its figures; a rerun made from the same
retriever, files and settings reuses them without loading it),
test_results.tsv with --do_predict (each test row's score). With
--export_dir, a TF Serving SavedModel (export/rerank_serving.py): `rerank`
(one query, N passages -> N `scores`, `logits`) and `serving_default`
(text, text_b pairs -> the same); --quantize=int8 adds model.tflite when its
dev eval_mrr_at_10 drops by at most --max_quantization_drop.
`export.export_checkpoint --format=huggingface --init_checkpoint=<output_dir>`
writes a BertForSequenceClassification with one label, which
sentence-transformers' CrossEncoder loads.
"""

from absl import app
from absl import flags

from official_bert import cli
from official_bert import finetuning_flags
from official_bert import trainer_flags
from official_bert.tasks.reranking import candidates
from official_bert.tasks.reranking import reranking_task
from official_bert.training import cpu_allocator
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  finetuning_flags.define_flags(
      max_seq_length=128, learning_rate=2e-5, export_help="If set, export "
      "the fine-tuned reranker for TF Serving (rerank: one query and N "
      "passages in, N scores out; serving_default: text pairs) here.",
      task_data_dir_help="Directory with train/dev/test files (.tsv, .csv or "
      ".jsonl) of query (anchor), positive(, negative) texts.")
  # No original program to be faithful to (as run_embedding): Keras's
  # bias-corrected AdamW (epsilon 1e-8, as torch's) reached a higher dev
  # MRR@10 than the original's update with the default loss in each of 3
  # seeds (docs/search.md): it is this program's default.
  FLAGS.set_default("optimizer", "keras_adamw")
  FLAGS.set_default("adam_epsilon", 1e-8)
  flags.DEFINE_string("anchor_column", "anchor", "Column (or JSON key) of "
                      "the query.")
  flags.DEFINE_string("positive_column", "positive", "Column of a passage "
                      "that answers the query.")
  flags.DEFINE_string("negative_column", "negative", "Columns of passages "
                      "that do not, comma-separated, used when the file has "
                      "them: each name is a column, or the columns NAME_1, "
                      "NAME_2, ...")
  flags.DEFINE_enum("loss", "bce", list(reranking_task.LOSSES), "bce: binary "
                    "cross-entropy on each (query, passage) pair (1 positive,"
                    " 0 negative; a batch counts pairs); listwise: softmax "
                    "cross-entropy over each query's positive and its "
                    "negatives (a batch counts queries).")
  flags.DEFINE_float("positive_weight", None, "bce: the weight of a positive "
                     "pair (sentence-transformers' pos_weight); unset: the "
                     "training pairs' negatives per positive.")
  flags.DEFINE_string("retriever", None, "An export with a "
                      "sentence_embedding output (run_embedding's "
                      "--export_dir): it mines the training negatives and "
                      "picks each dev query's candidates. Unset: the "
                      "training file's negatives; every dev passage.")
  flags.DEFINE_integer("rerank_top_k", 100, "With --retriever: each dev "
                       "query's candidates, the retriever's best this many.")
  flags.DEFINE_integer("num_negatives", candidates.NUM_NEGATIVES, "With "
                       "--retriever: negatives mined per training query.")
  flags.DEFINE_list("negative_rank_range", list(map(
      str, candidates.RANK_RANGE)), "With --retriever: FIRST,LAST: negatives "
                    "come from the retriever's ranks FIRST+1 to LAST (its "
                    "positives taken out).")
  flags.DEFINE_float("max_negative_score", candidates.MAX_SCORE, "With "
                     "--retriever: a mined negative's cosine is at most "
                     "this.")
  flags.DEFINE_float("negative_margin", candidates.MARGIN, "With "
                     "--retriever: a mined negative scores at most p - |p| x "
                     "this (p: its query's positive's cosine).")


def _rank_range():
  try:
    first, last = (int(v) for v in FLAGS.negative_rank_range)
  except ValueError:
    first = last = -1
  if not 0 <= first < last:
    raise app.UsageError(f"--negative_rank_range="
                         f"{','.join(FLAGS.negative_rank_range)} must be two "
                         "ranks FIRST,LAST with 0 <= FIRST < LAST, such as "
                         "10,100.")
  return first, last


def _export(model, int8_content=None):
  from export import rerank_serving  # pylint: disable=g-import-not-at-top
  return rerank_serving.export_reranker(
      FLAGS.export_dir, model, FLAGS.vocab_file,
      do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
      int8_content=int8_content)


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  cpu_allocator.use_bfc()  # before TensorFlow loads
  if not FLAGS.task_data_dir:
    raise app.UsageError("--task_data_dir is required.")
  if FLAGS.teacher:  # the task has no distillation loss yet
    raise app.UsageError("run_reranker does not distil from a --teacher yet; "
                         "drop --teacher.")
  finetuning_flags.check_flags(FLAGS, data_paths={"task_data_dir": "dir"})
  if FLAGS.retriever:
    cli.check_input_dir("retriever", FLAGS.retriever)
  for name in ("rerank_top_k", "num_negatives"):
    if getattr(FLAGS, name) < 1:
      raise app.UsageError(f"--{name} must be at least 1, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.positive_weight is not None and FLAGS.positive_weight <= 0:
    raise app.UsageError(f"--positive_weight must be positive, got "
                         f"{FLAGS.positive_weight}.")
  task = reranking_task.RerankingTask(trainer_flags.config_from_flags(
      FLAGS, reranking_task.RerankingConfig, data_dir=FLAGS.task_data_dir,
      splits=finetuning_flags.splits(FLAGS),
      negative_rank_range=_rank_range()))
  finetuning_flags.run(FLAGS, task, "run_reranker", _export)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
