"""The tiny fixtures that the tests and benchmarks/fault_table.py both build.

The sizes (all different, so a swapped axis cannot pass by accident) and
`tiny_config`, the data paths, random pretraining instances as TFRecords
(the data job's format) and a two-class task of the shared corpus as
run_classifier reads it. tests/testing.py, input_pipeline_test.py and
run_classifier_test.py take them from here, so the fault table runs the
programs on the tests' fixtures without importing a test module
(tests/layering_test.py: benchmarks/ and tools/ import no `tests`).
"""

import json
import os
import random

from tools import corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "tests", "testdata")
SHARED_DATA = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
VOCAB = os.path.join(SHARED_DATA, "bert_uncased_vocab.txt")

# Sizes that are all different, so a swapped axis cannot pass by accident.
BATCH, SEQ, VOCAB_SIZE, HIDDEN, HEADS, INTERMEDIATE, LAYERS = 3, 7, 99, 32, 4, 37, 2
PREDS = 3  # masked positions per pretraining instance


def tiny_config(**overrides):
  """A BertConfig with the fixture sizes above (dropout on, as in BERT)."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  kwargs = dict(
      vocab_size=VOCAB_SIZE, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
      num_attention_heads=HEADS, intermediate_size=INTERMEDIATE,
      hidden_act="gelu", hidden_dropout_prob=0.1,
      attention_probs_dropout_prob=0.1, max_position_embeddings=16,
      type_vocab_size=2, initializer_range=0.02)
  kwargs.update(overrides)
  return configs.BertConfig(**kwargs)


# ------------------------------------------------ pretraining records ----
def make_instances(n, seq=SEQ, preds=PREDS, vocab=VOCAB_SIZE, seed=0):
  """n random pretraining instances; weights 1 except the last prediction."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.data import features  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab, (n, seq))
  segments = np.zeros((n, seq), np.int64)
  segments[:, seq // 2:] = 1
  positions = np.stack([np.sort(rng.choice(np.arange(1, seq), preds,
                                           replace=False)) for _ in range(n)])
  masked_ids = np.take_along_axis(ids, positions, 1)
  weights = np.ones((n, preds), np.float32)
  weights[:, -1] = 0.0
  return features.Instances(
      input_ids=ids, input_mask=np.ones((n, seq), np.int64),
      segment_ids=segments, masked_lm_positions=positions,
      masked_lm_ids=masked_ids, masked_lm_weights=weights,
      next_sentence_labels=rng.integers(0, 2, n))


def write_records(path, instances):
  """Writes instances as a TFRecord file (the data job's format)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.data import features  # pylint: disable=g-import-not-at-top
  blob, lengths = features.serialize_examples(instances)
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in features.split_blob(blob, lengths):
      writer.write(record)
  return str(path)


# ------------------------------------------------- classification task ----
# Document ranges of the shared corpus (470 documents in the order of the
# Python docs' source tree): the C API reference and the "What's New" pages.
PARTS = {"c_api": range(1, 63), "whatsnew": range(450, 470)}


def write_classification_task(directory, per_class_train=300,
                              per_class_dev=100, seed=0):
  """train.tsv, dev.csv and test.jsonl of (sentence, part) pairs: which
  part of the Python docs (PARTS) a sentence comes from."""
  import csv  # pylint: disable=g-import-not-at-top
  docs = corpus.documents()
  rng = random.Random(seed)
  rows = {"train": [], "dev": [], "test": []}
  for label, doc_ids in PARTS.items():
    sentences = [s for d in doc_ids for s in docs[d]
                 if 6 <= len(s.split()) <= 30 and "\t" not in s]
    rng.shuffle(sentences)
    n, m = per_class_train, per_class_dev
    rows["train"] += [(s, label) for s in sentences[:n]]
    rows["dev"] += [(s, label) for s in sentences[n:n + m]]
    rows["test"] += [(s, label) for s in sentences[n + m:n + m + 5]]
  for split in rows:
    rng.shuffle(rows[split])
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "train.tsv"), "w", encoding="utf-8") as f:
    f.write("sentence\tpart\n")
    f.writelines(f"{s}\t{label}\n" for s, label in rows["train"])
  with open(os.path.join(directory, "dev.csv"), "w", encoding="utf-8",
            newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["sentence", "part"])
    writer.writerows(rows["dev"])
  with open(os.path.join(directory, "test.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"sentence": s}) + "\n" for s, _ in rows["test"])
  return rows
