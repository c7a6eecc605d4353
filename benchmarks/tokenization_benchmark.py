r"""FullTokenizer throughput on a corpus, and its agreement with Hugging Face.

  python -m benchmarks.tokenization_benchmark \
      --corpus=../shared/data/pydocs_corpus.txt \
      --vocab_file=../shared/data/bert_uncased_vocab.txt

Prints lines/s and words/s of `tokenize` and `tokenize_words` (best of
--repeats, big batches inside one tf.function) and the share of lines whose
ids equal `tokenizers.BertWordPieceTokenizer` (without [CLS]/[SEP]).
"""

import time

from absl import app
from absl import flags


def _best_time(fn, batches, repeats):
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    for batch in batches:
      fn(batch)
    best = min(best, time.perf_counter() - start)
  return best


def main(argv):
  del argv
  f = flags.FLAGS
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top

  with open(f.corpus, encoding="utf-8") as corpus:
    lines = [line for line in corpus.read().split("\n") if line.strip()]
  words = sum(len(line.split()) for line in lines)
  tokenizer = tokenization.FullTokenizer(f.vocab_file, f.do_lower_case)
  batches = [tf.constant(lines[i:i + f.batch_size])
             for i in range(0, len(lines), f.batch_size)]
  spec = [tf.TensorSpec([None], tf.string)]
  for name in ("tokenize", "tokenize_words"):
    fn = tf.function(getattr(tokenizer, name), input_signature=spec)
    fn(batches[0])  # Trace once.
    seconds = _best_time(fn, batches, f.repeats)
    print(f"{name}: {len(lines)} lines, {words} words in {seconds:.2f} s = "
          f"{len(lines) / seconds:,.0f} lines/s, {words / seconds:,.0f} words/s "
          f"(batch {f.batch_size})")

  try:
    from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("agreement: skipped (pip install tokenizers)")
    return
  ours = []
  for batch in batches:
    ours += tokenizer.tokenize(batch).to_list()
  reference = BertWordPieceTokenizer(f.vocab_file, lowercase=f.do_lower_case)
  theirs = reference.encode_batch(lines, add_special_tokens=False)
  same = sum(a == b.ids for a, b in zip(ours, theirs))
  print(f"agreement with tokenizers.BertWordPieceTokenizer: {same}/{len(lines)} "
        f"lines = {same / len(lines):.4%}")


if __name__ == "__main__":
  flags.DEFINE_string("corpus", "../shared/data/pydocs_corpus.txt",
                      "Text file, one sentence per line.")
  flags.DEFINE_string("vocab_file", "../shared/data/bert_uncased_vocab.txt",
                      "BERT vocab.txt.")
  flags.DEFINE_bool("do_lower_case", True, "Uncased tokenization.")
  flags.DEFINE_integer("batch_size", 16384, "Lines per tokenize call.")
  flags.DEFINE_integer("repeats", 3, "Timed passes over the corpus; best kept.")
  app.run(main)
