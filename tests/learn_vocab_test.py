"""Tests for tfrecords/learn_vocab.py: a real CLI run on a corpus slice."""

import os

import pytest
import tensorflow as tf

from official_bert.data import tokenization
from tests import testing
from tfrecords import learn_vocab

TRAIN_LINES, HELD_OUT_LINES, VOCAB_SIZE, NUM_UNUSED = 1500, 700, 450, 7


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """(training file, held-out lines): the first lines of the shared corpus."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")
  train = lines[:TRAIN_LINES]
  held_out = [line for line in lines[TRAIN_LINES:TRAIN_LINES + HELD_OUT_LINES]
              if line.strip()]
  path = tmp_path_factory.mktemp("corpus") / "train.txt"
  path.write_text("\n".join(train) + "\n", encoding="utf-8")
  return str(path), held_out


@pytest.fixture(scope="module")
def learned(corpus, tmp_path_factory):
  """Runs the CLI; returns (vocab path, the process)."""
  output = str(tmp_path_factory.mktemp("vocab") / "vocab.txt")
  proc = testing.run_cli([
      "tfrecords/learn_vocab.py", f"--input_file={corpus[0]}",
      f"--output_file={output}", f"--vocab_size={VOCAB_SIZE}",
      f"--num_unused={NUM_UNUSED}", "--do_lower_case=True"])
  return output, proc


@pytest.mark.slow
def test_cli_writes_a_vocab_in_the_original_layout(learned):
  path, proc = learned
  vocab = tokenization.load_vocab(path)
  assert vocab[:NUM_UNUSED + 5] == (
      ["[PAD]"] + [f"[unused{i}]" for i in range(NUM_UNUSED)]
      + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
  assert len(vocab) == len(set(vocab)), "duplicate tokens"
  # The learner aims for 95-100% of the size asked for.
  assert 0.8 * VOCAB_SIZE <= len(vocab) <= VOCAB_SIZE
  # Uncased: no capitals, and frequent words are whole tokens.
  assert not any(t.lower() != t for t in vocab[NUM_UNUSED + 5:])
  for word in ("the", "of", "python", "##s"):
    assert word in vocab
  assert f"wrote {len(vocab)} tokens" in proc.stdout
  assert "lines/s" in proc.stderr  # Progress with a rate.
  assert not os.path.exists(path + ".tmp")


@pytest.mark.slow
def test_learned_vocab_tokenizes_held_out_text_with_few_unknowns(learned, corpus):
  path, _ = learned
  tokenizer = tokenization.FullTokenizer(path, do_lower_case=True)
  assert (tokenizer.unk_id, tokenizer.cls_id, tokenizer.mask_id) == (
      NUM_UNUSED + 1, NUM_UNUSED + 2, NUM_UNUSED + 4)
  words = tokenizer.tokenize_words(tf.constant(corpus[1]))
  pieces = words.flat_values.numpy()
  unk_rate = (pieces == tokenizer.unk_id).mean()
  pieces_per_word = len(pieces) / int(words.values.nrows())
  assert unk_rate < 0.005, unk_rate
  # Subwords, not characters: a small vocab still covers words in few pieces.
  assert pieces_per_word < 2.5, pieces_per_word


def test_count_words_splits_as_full_tokenizer():
  counts = learn_vocab.count_words(["Héllo, World! hello", "中文 x"])
  assert counts == {"hello": 2, ",": 1, "world": 1, "!": 1, "中": 1, "文": 1,
                    "x": 1}
  assert learn_vocab.count_words(["Héllo"], do_lower_case=False) == {"Héllo": 1}


def test_learn_vocab_rejects_a_size_below_the_special_tokens():
  with pytest.raises(ValueError, match="vocab_size=50 leaves no room"):
    learn_vocab.learn_vocab({"a": 20}, vocab_size=50, num_unused=99)


@pytest.mark.parametrize("problem", ["missing", "empty", "no_dir", "small"])
def test_cli_bad_input_is_one_clear_error(tmp_path, problem):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n\n")
  args = {"missing": [f"--input_file={tmp_path}/nope*.txt"],
          "empty": [f"--input_file={empty}"],
          "no_dir": [f"--input_file={empty}",
                     f"--output_file={tmp_path}/no/such/dir/vocab.txt"],
          "small": [f"--input_file={empty}", "--vocab_size=10"]}[problem]
  if problem != "no_dir":
    args.append(f"--output_file={tmp_path}/vocab.txt")
  proc = testing.run_cli(["tfrecords/learn_vocab.py"] + args, check=False)
  assert proc.returncode != 0
  expected = {"missing": "matches no file", "empty": "holds no text",
              "no_dir": "does not exist", "small": "leaves no room"}[problem]
  assert expected in proc.stderr
  assert "Traceback" not in proc.stderr
  assert not os.listdir(tmp_path) or os.listdir(tmp_path) == ["empty.txt"]


def test_learn_vocab_never_exceeds_the_size_asked_for():
  # Word counts where even the highest threshold yields more tokens than
  # asked: the result is cut to size, special tokens and characters first.
  # 26 letters, each alone and as "##x", are already 52 tokens.
  letters = "abcdefghijklmnopqrstuvwxyz"
  counts = {letters[n:] + letters[:n]: 50 + n for n in range(26)}
  steps = []
  vocab = learn_vocab.learn_vocab(
      counts, vocab_size=30, num_unused=2,
      progress=lambda *step: steps.append(step))
  assert len(vocab) == 30 and len(set(vocab)) == 30
  assert vocab[:7] == ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]",
                       "[SEP]", "[MASK]"]
  assert set(vocab[7:]) <= set(letters) | {"##" + c for c in letters}
  assert steps and all(size > 30 for _, _, size, _ in steps)


def test_learn_vocab_on_a_corpus_rarer_than_the_minimum_count():
  vocab = learn_vocab.learn_vocab({"hello": 3, "world": 2}, vocab_size=200,
                                  num_unused=1)
  assert vocab[:6] == ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert set("helowrd") <= set(vocab) and "##o" in vocab
  assert len(vocab) == len(set(vocab)) <= 200
