"""Tests for official_bert/training/dynamic_masking.py through the input pipeline.

The statistics run on records the data job writes from the shared corpus
(40 documents, 664 records of 128 tokens), read over two epochs in file
order (shuffle buffer 1, one batch per epoch). What each test would catch:

- the rate: a count taken without rounding or from the wrong length
  (padding counted), a cap not applied;
- 80/10/10: swapped thresholds (10/80/10), random ids from a wrong range;
- specials: [CLS]/[SEP]/padding not excluded from the candidates;
- whole words: `##` pieces not joined, or the words' taking stopped at the
  first word that overshoots instead of skipping it;
- epochs: a key without the epoch (same masks every epoch) or without the
  file (two copies of a file masked alike);
- the original tokens: masks drawn on the masked input instead of the
  restored one ([MASK] as a label).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from official_bert.training import dynamic_masking
from official_bert.training import input_pipeline
from tests import input_pipeline_test
from tests import run_pretraining_test
from tests import testing

L, P_RECORDS, DOCUMENTS = 128, 20, 40


@pytest.fixture(scope="module")
def corpus_records(tmp_path_factory):
  """(path, original ids [N, L], input_mask [N, L]) of the data job's records
  on 40 documents of the shared corpus."""
  testing.require_shared_data()
  from tfrecords import create_pretraining_data as cpd  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("dynamic")
  corpus = root / "corpus.txt"
  corpus.write_text("\n\n".join("\n".join(doc) for doc in
                                testing.corpus_documents()[:DOCUMENTS]) + "\n")
  path = str(root / "records.tfrecord")
  cpd.create_pretraining_data(cpd.JobConfig(
      input_files=[str(corpus)], output_files=[path], vocab_file=testing.VOCAB,
      max_seq_length=L, max_predictions_per_seq=P_RECORDS, dupe_factor=1))
  (inputs, labels), = input_pipeline.pretraining_dataset(
      [path], 100000, L, P_RECORDS, is_training=False)
  # The tokens before masking, rebuilt here with numpy.
  ids = inputs["input_word_ids"].numpy().copy()
  rows, slots = np.nonzero(labels["masked_lm_weights"].numpy() > 0)
  ids[rows, inputs["masked_lm_positions"].numpy()[rows, slots]] = (
      labels["masked_lm_ids"].numpy()[rows, slots])
  return path, ids, inputs["input_mask"].numpy()


def _vocab():
  with open(testing.VOCAB, encoding="utf-8") as f:
    return [line.strip() for line in f]


def _epochs(path, n, prob=0.15, whole_word=False, seed=7, preds=48, files=1):
  """Two epochs of dynamically masked records in file order: a list of two
  dicts of numpy arrays (inputs and labels merged)."""
  options = dynamic_masking.options_from_vocab(testing.VOCAB, prob, preds,
                                               whole_word, seed)
  dataset = input_pipeline.pretraining_dataset(
      [path] * files, n * files, L, P_RECORDS, is_training=True, seed=1,
      shuffle_buffer=1, masking=options)
  out = []
  for inputs, labels in dataset.take(2):
    out.append({k: v.numpy() for k, v in {**inputs, **labels}.items()})
  return out


def _chosen(epoch):
  """bool [N, L]: the positions each record predicts."""
  chosen = np.zeros(epoch["input_word_ids"].shape, bool)
  rows, slots = np.nonzero(epoch["masked_lm_weights"] > 0)
  chosen[rows, epoch["masked_lm_positions"][rows, slots]] = True
  return chosen


@pytest.mark.parametrize("prob", [0.15, 0.3])
def test_rate_80_10_10_and_no_special_token_over_two_epochs(corpus_records,
                                                             prob):
  path, original, input_mask = corpus_records
  n = len(original)
  vocab = _vocab()
  cls_id, sep_id, mask_id = (vocab.index(t) for t in ("[CLS]", "[SEP]",
                                                      "[MASK]"))
  counts, random_ids = np.zeros(3), []
  for epoch in _epochs(path, n, prob):
    weights = epoch["masked_lm_weights"]
    real = weights > 0
    # Every record predicts exactly the data job's count.
    lengths = input_mask.sum(1)
    want = [min(48, max(1, round(k * prob))) for k in lengths.tolist()]
    np.testing.assert_array_equal(real.sum(1), want)
    assert abs(weights.sum() / lengths.sum() - prob) < 0.005
    # Real predictions first, positions ascending and unique, labels the
    # original tokens, the rest of the input unchanged.
    np.testing.assert_array_equal(real, np.sort(real, 1)[:, ::-1])
    positions = epoch["masked_lm_positions"]
    for row in range(n):
      k = real[row].sum()
      assert np.all(np.diff(positions[row, :k]) > 0)
      assert np.all(positions[row, k:] == 0)
    rows, slots = np.nonzero(real)
    at = positions[rows, slots]
    np.testing.assert_array_equal(epoch["masked_lm_ids"][rows, slots],
                                  original[rows, at])
    chosen = _chosen(epoch)
    np.testing.assert_array_equal(
        np.where(chosen, 0, epoch["input_word_ids"]),
        np.where(chosen, 0, original))
    # Never [CLS], [SEP] or padding.
    labels = original[rows, at]
    assert not np.isin(labels, [cls_id, sep_id]).any()
    assert np.all(input_mask[rows, at] == 1)
    shown = epoch["input_word_ids"][rows, at]
    replaced = (shown != mask_id) & (shown != labels)
    counts += [np.sum(shown == mask_id), np.sum(shown == labels),
               np.sum(replaced)]
    random_ids.append(shown[replaced])
  share = counts / counts.sum()
  np.testing.assert_allclose(share, [0.8, 0.1, 0.1], atol=0.01)
  # Random ids are uniform over the vocab: mean (V - 1) / 2, every tenth
  # of the range about as often.
  random_ids = np.concatenate(random_ids)
  assert abs(random_ids.mean() / (len(vocab) - 1) - 0.5) < 0.03
  tenths = np.bincount(random_ids * 10 // len(vocab), minlength=10)
  assert tenths.min() > 0.7 * len(random_ids) / 10, tenths


def test_epochs_differ_and_one_seed_repeats(corpus_records):
  path, original, _ = corpus_records
  n = len(original)
  first, second = _epochs(path, n)
  again = _epochs(path, n)
  for a, b in zip((first, second), again):
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  one, two = _chosen(first), _chosen(second)
  differ = np.any(one != two, axis=1)
  # A record with a handful of tokens can draw the same position twice.
  assert differ.mean() > 0.98, differ.mean()
  other_seed = _chosen(_epochs(path, n, seed=8)[0])
  assert np.any(one != other_seed, axis=1).mean() > 0.98


def test_two_copies_of_a_file_get_different_masks(corpus_records):
  """The file's index is part of the key (the records of two files are
  interleaved one by one: rows 2i and 2i+1 hold record i of each)."""
  path, original, _ = corpus_records
  first, _ = _epochs(path, len(original), files=2)
  np.testing.assert_array_equal(first["input_mask"][0::2],
                                first["input_mask"][1::2])
  chosen = _chosen(first)
  assert np.any(chosen[0::2] != chosen[1::2], axis=1).mean() > 0.98


def test_whole_words_are_masked_whole(corpus_records):
  path, original, input_mask = corpus_records
  vocab = _vocab()
  piece = np.array([t.startswith("##") for t in vocab])[original]
  special = np.isin(original, [vocab.index("[CLS]"), vocab.index("[SEP]")])
  # A ## piece continues the word before it when that is a candidate.
  joins = piece & (input_mask == 1) & ~special
  joins[:, 1:] &= (input_mask[:, :-1] == 1) & ~special[:, :-1]
  joins[:, 0] = False
  assert joins.sum() > 500  # the corpus has split words to test on
  lengths = input_mask.sum(1)
  total = 0
  for epoch in _epochs(path, len(original), whole_word=True):
    chosen = _chosen(epoch)
    # Each joined piece is chosen exactly when the piece before it is.
    np.testing.assert_array_equal(chosen[:, 1:][joins[:, 1:]],
                                  chosen[:, :-1][joins[:, 1:]])
    want = np.minimum(48, np.maximum(1, np.round(lengths * 0.15)))
    got = chosen.sum(1)
    assert np.all(got <= want)
    # Skipping a word that overshoots (not stopping there) fills the count.
    assert np.mean(got == want) > 0.97, np.mean(got == want)
    total += got.sum()
  assert abs(total / (2 * lengths.sum()) - 0.15) < 0.005


def test_greedy_take_skips_a_word_that_does_not_fit():
  """The original's loop: sizes 2, 3, 1, 1 with budget 4 take 2, 1, 1."""
  taken = dynamic_masking._take_greedily(  # pylint: disable=protected-access
      tf.constant([2, 3, 1, 1, 0]), tf.constant(4))
  np.testing.assert_array_equal(taken, [True, False, True, True, False])
  taken = dynamic_masking._take_greedily(  # pylint: disable=protected-access
      tf.constant([3, 3, 2, 1, 0]), tf.constant(3))
  np.testing.assert_array_equal(taken, [True, False, False, False, False])


def test_vocab_without_mask_token_is_one_sentence(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[MASK\]"):
    dynamic_masking.options_from_vocab(str(vocab), 0.15, 20, False, 1)


# ---------------------------------------------- run_pretraining, resumed ----
def _tiny_vocab(path):
  """99 tokens (the tiny config's vocab_size) with ## pieces."""
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  tokens += [f"##w{i}" if i % 3 == 0 else f"w{i}" for i in range(5, 99)]
  path.write_text("\n".join(tokens) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = tmp_path_factory.mktemp("dynamic_run")
  for i in range(2):
    input_pipeline_test.write_records(
        root / f"part-{i}.tfrecord",
        input_pipeline_test.make_instances(24, seed=10 + i))
  testing.tiny_config().to_json_file(str(root / "bert_config.json"))
  _tiny_vocab(root / "vocab.txt")
  return root


def _dynamic_flags(setup, output_dir, **overrides):
  values = dict(masking="dynamic", vocab_file=setup / "vocab.txt",
                masked_lm_prob=0.3, max_predictions_per_seq=4,
                do_whole_word_mask=True)
  values.update(overrides)
  return run_pretraining_test._flags(  # pylint: disable=protected-access
      setup, output_dir, **values)


@pytest.mark.slow
def test_sigkill_mid_epoch_then_rerun_is_byte_identical(setup, tmp_path):
  """48 records, batch 4: 12 steps an epoch. Killed after a checkpoint at
  step 2..6 (mid-epoch), rerun to step 18 (the second epoch, where the
  masks change): the same checkpoint, bit for bit, as one run."""
  steps = 18
  flags = dict(num_train_steps=steps, num_warmup_steps=4)
  killed_dir = tmp_path / "killed"
  killed = run_pretraining_test._popen(  # pylint: disable=protected-access
      _dynamic_flags(setup, killed_dir, **flags))
  testing.sigkill_after_first_checkpoint(killed, killed_dir)
  first = int(tf.train.latest_checkpoint(str(killed_dir)).rsplit("-", 1)[1])
  assert 2 <= first < 12 and first % 12  # mid-epoch
  resumed = testing.run_cli(_dynamic_flags(setup, killed_dir, **flags))
  assert f"Resumed from {killed_dir}/ckpt-{first} at step {first}" in (
      resumed.stdout)
  # The uninterrupted run, in this process (the kill is the other's point).
  testing.run_cli(_dynamic_flags(setup, tmp_path / "whole", **flags))
  a = run_pretraining_test._weights(tmp_path / "whole")  # pylint: disable=protected-access
  b = run_pretraining_test._weights(killed_dir)  # pylint: disable=protected-access
  assert a.keys() == b.keys() and len(a) > 40
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  assert int(b["step/.ATTRIBUTES/VARIABLE_VALUE"]) == steps


@pytest.mark.parametrize("change,expected", [
    ({"vocab_file": ""}, "--masking=dynamic needs --vocab_file"),
    ({"vocab_file": "big"}, "has 120 tokens, more than vocab_size=99"),
    ({"masked_lm_prob": 1.5}, "--masked_lm_prob=1.5 must be in (0, 1]"),
    ({"masking": "static"}, "--masked_lm_prob applies to --masking=dynamic"),
])
def test_bad_dynamic_flags_are_one_sentence(setup, tmp_path, change,
                                            expected):
  if change.get("vocab_file") == "big":
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (tmp_path / "big.txt").write_text(
        "\n".join(tokens + [f"w{i}" for i in range(115)]) + "\n")
    change = {"vocab_file": tmp_path / "big.txt"}
  proc = testing.run_cli(_dynamic_flags(setup, tmp_path / "out", **change),
                         check=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  last = [l for l in proc.stderr.splitlines() if l.strip()][-1]
  assert expected in last, proc.stderr[-2000:]
  assert not os.path.exists(tmp_path / "out" / "checkpoint")
