"""Tests for official_bert/data/tokenization.py: hand-checked cases, an independent
Python reference of the original rules, Hugging Face on the shared corpus,
tf.function and SavedModel round trips."""

import os
import random
import shutil
import unicodedata

import pytest
import tensorflow as tf

from official_bert.data import tokenization
from tests import testing

# A hand-made vocab (ids are line numbers), so expectations can be read off.
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff",
              "##able", "hello", "héllo", "Hello", ",", ".", "$", "5", "中",
              "文", "a", "b", "ab", "##c", "##cd", "x", "##x", "world", "!",
              "cafe", "café", "-"]


def _ids(*tokens):
  return [TINY_VOCAB.index(t) for t in tokens]


@pytest.fixture(scope="module")
def tiny_vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def uncased(tiny_vocab_file):
  return tokenization.FullTokenizer(tiny_vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def cased(tiny_vocab_file):
  return tokenization.FullTokenizer(tiny_vocab_file, do_lower_case=False)


def _both_paths(tokenizer, texts):
  """tokenize() and the exact path must agree; returns the ids as lists."""
  fast = tokenizer.tokenize(tf.constant(texts)).to_list()
  exact = tokenizer.tokenize_exact(tf.constant(texts)).to_list()
  assert fast == exact, (texts, fast, exact)
  return fast


# ------------------------------------------------------- hand-checked cases --

def test_accents_stripped_when_uncased_and_kept_when_cased(uncased, cased):
  assert _both_paths(uncased, ["Héllo", "CAFÉ"]) == [_ids("hello"), _ids("cafe")]
  assert _both_paths(cased, ["Héllo", "café", "Hello"]) == [
      _ids("[UNK]"), _ids("café"), _ids("Hello")]


def test_cjk_ideographs_and_punctuation_are_words_of_their_own(uncased):
  assert _both_paths(uncased, ["a中文b", "a,b.$5", "hello—world!"]) == [
      _ids("a", "中", "文", "b"), _ids("a", ",", "b", ".", "$", "5"),
      # U+2014 (em dash, Pd) is punctuation but not in the vocab.
      _ids("hello", "[UNK]", "world", "!")]


def test_control_characters_removed_and_whitespace_splits(uncased):
  texts = ["a\x00b", "a\u200bb\ufffd", "a\x7fb", "a\tb\nab\r\u3000a\u2028b"]
  assert _both_paths(uncased, texts) == [
      _ids("ab"), _ids("ab"), _ids("ab"), _ids("a", "b", "ab", "a", "b")]


def test_only_the_originals_control_characters_are_dropped(uncased):
  # The original's _is_control: Cc (U+0085 too) and Cf (U+200B, U+0600,
  # U+E0001) go; private use (Co) and unassigned code points stay in the word,
  # which the vocab cannot cover: [UNK] (Hugging Face drops them: "ab").
  dropped = ["a\x85b", "a\u0600b", "a\U000e0001b", "a\x9fb"]
  kept = ["a\ue000b", "a\U000f0000b", "a\u0378b", "a\uffffb"]
  assert _both_paths(uncased, dropped + kept) == (
      [_ids("ab")] * len(dropped) + [_ids("[UNK]")] * len(kept))


def test_wordpiece_continuation_and_unk(uncased):
  assert _both_paths(uncased, ["unaffable", "abc abcd", "unaffablex", "zzz"]) == [
      _ids("un", "##aff", "##able"), _ids("ab", "##c", "ab", "##cd"),
      _ids("un", "##aff", "##able", "##x"), _ids("[UNK]")]
  # A word that cannot be covered is a single [UNK], not a partial split.
  assert _both_paths(uncased, ["abq"]) == [_ids("[UNK]")]


def test_words_over_200_characters_are_unk(uncased, cased):
  # The original's max_input_chars_per_word=200 (Hugging Face: 100).
  x200 = _ids("x") + _ids("##x") * 199
  assert _both_paths(uncased, ["x" * 200, "x" * 201, "ab " + "x" * 150 + " ab"]) == [
      x200, _ids("[UNK]"), _ids("ab", "x") + _ids("##x") * 149 + _ids("ab")]
  # Characters, not bytes: "café" + 196 x is 200 characters but 201 bytes.
  assert _both_paths(cased, ["café" + "x" * 196, "café" + "x" * 197]) == [
      _ids("café") + _ids("##x") * 196, _ids("[UNK]")]


def test_tokenize_words_groups_pieces_by_word(uncased):
  words = uncased.tokenize_words(tf.constant(["unaffable, hello", "", "abcd"]))
  assert words.merge_dims(1, 2).to_list() == [
      _ids("un", "##aff", "##able", ",", "hello"), [], _ids("ab", "##cd")]
  assert words.row_lengths().numpy().tolist() == [3, 0, 1]
  assert words.values.row_lengths().numpy().tolist() == [3, 1, 1, 2]


def test_special_ids_and_python_conversions(uncased):
  assert (uncased.pad_id, uncased.unk_id, uncased.cls_id, uncased.sep_id,
          uncased.mask_id) == (0, 1, 2, 3, 4)
  assert uncased.get_special_tokens_dict() == {
      "vocab_size": len(TINY_VOCAB), "padding_id": 0,
      "start_of_sequence_id": 2, "end_of_segment_id": 3, "mask_id": 4}
  assert uncased.convert_tokens_to_ids(["un", "##aff", "nope"]) == [5, 6, 1]
  assert uncased.convert_ids_to_tokens([5, 6, 7]) == ["un", "##aff", "##able"]
  assert uncased.vocab == TINY_VOCAB and uncased.vocab_size == len(TINY_VOCAB)


def test_bert_uncased_vocab_special_ids():
  testing.require_shared_data()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB)
  assert tokenizer.get_special_tokens_dict() == {
      "vocab_size": 30522, "padding_id": 0, "start_of_sequence_id": 101,
      "end_of_segment_id": 102, "mask_id": 103}
  assert tokenizer.unk_id == 100


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("", "is empty"),
    ("\n\n", "is empty"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", "lacks the special token"),
])
def test_bad_vocab_files_raise_one_sentence(tmp_path, content, message):
  path = tmp_path / "vocab.txt"
  if content is not None:
    path.write_text(content)
  with pytest.raises(ValueError, match=message) as error:
    tokenization.load_vocab(str(path))
  text = str(error.value)
  assert str(path) in text and text.count(". ") == 0 and text.endswith(".")
  if "lacks" in message:
    assert "[MASK]" in text


def test_duplicate_and_blank_vocab_lines_keep_the_original_ids(tmp_path):
  # As the original's dict: a repeated token has its last line's id; a blank
  # line still takes an id.
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\n\nab\n##c\n")
  tokenizer = tokenization.FullTokenizer(str(path))
  texts = ["ab abc", "abé \x01ab"]
  assert tokenizer.tokenize(tf.constant(texts)).to_list() == [[7, 7, 8], [1, 7]]
  assert tokenizer.tokenize_exact(tf.constant(texts)).to_list() == [[7, 7, 8], [1, 7]]
  assert tokenizer.convert_tokens_to_ids(["ab", ""]) == [7, 6]


def test_invalid_utf8_bytes_are_dropped(uncased):
  # As the original's decode("utf-8", "ignore").
  assert uncased.tokenize(tf.constant([b"a\xffb", b"\xc3"])).to_list() == [
      _ids("ab"), []]


# ------------------------------------------- graph, tf.function, SavedModel --

class _Holder(tf.Module):

  def __init__(self, tokenizer):
    super().__init__()
    self.tokenizer = tokenizer

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def __call__(self, texts):
    words = self.tokenizer.tokenize_words(texts)
    return {"ids": words.merge_dims(1, 2).to_tensor(-1),
            "words_per_text": words.row_lengths()}


def test_works_in_tf_function_and_survives_saved_model(tmp_path):
  vocab_dir = tmp_path / "vocab"
  vocab_dir.mkdir()
  vocab_file = vocab_dir / "my_vocab.txt"
  vocab_file.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
  holder = _Holder(tokenization.FullTokenizer(str(vocab_file)))
  texts = tf.constant(["Unaffable, héllo 中文!", "", "abcd x"])
  expected = holder(texts)
  assert expected["words_per_text"].numpy().tolist() == [6, 0, 2]

  tf.saved_model.save(holder, str(tmp_path / "saved"))
  shutil.copytree(tmp_path / "saved", tmp_path / "moved")
  shutil.rmtree(tmp_path / "saved")
  shutil.rmtree(vocab_dir)  # Nothing may still point at the original file.
  with open(tmp_path / "moved" / "saved_model.pb", "rb") as f:
    assert str(vocab_dir).encode() not in f.read()
  assert os.listdir(tmp_path / "moved" / "assets") == ["my_vocab.txt"]

  restored = tf.saved_model.load(str(tmp_path / "moved"))
  got = restored(texts)
  for key in expected:
    assert got[key].numpy().tolist() == expected[key].numpy().tolist()
  with open(restored.tokenizer.vocab_file.asset_path.numpy(), encoding="utf-8") as f:
    assert f.read().split() == TINY_VOCAB


# ------------------------------------------ independent reference, fuzzing --

def _reference(text, vocab, do_lower_case, cache=None):
  """google-research/bert's rules, written independently, on Python's tables.

  `cache`, when given, is a dict that keeps for the next lines what each
  character is cleaned to and each whitespace-separated chunk's ids (a
  chunk's ids depend on it alone: the corpus's 1.4M chunks are ~68k
  distinct ones)."""
  cache = {} if cache is None else cache
  cleaning = cache.setdefault("characters", {})  # str.translate's table
  for char in set(text):
    if ord(char) not in cleaning:
      if char in "\t\n\r" or unicodedata.category(char) == "Zs":
        cleaning[ord(char)] = " "
      elif char == "\ufffd" or unicodedata.category(char) in ("Cc", "Cf"):
        cleaning[ord(char)] = None  # removed
      else:
        cleaning[ord(char)] = char
  chunk_ids = cache.setdefault("chunks", {})
  ids = []
  for chunk in text.translate(cleaning).split():
    if chunk not in chunk_ids:
      chunk_ids[chunk] = _reference_chunk(chunk, vocab, do_lower_case)
    ids += chunk_ids[chunk]
  return ids


def _reference_chunk(chunk, vocab, do_lower_case):
  """The ids of one whitespace-separated chunk of cleaned text."""
  words = []
  if do_lower_case:
    chunk = "".join(c for c in unicodedata.normalize("NFD", chunk.lower())
                    if unicodedata.category(c) != "Mn")
  word = ""
  for char in chunk:
    cp = ord(char)
    alone = (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or
             123 <= cp <= 126 or unicodedata.category(char).startswith("P")
             or 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or
             0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F or
             0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
             0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)
    if alone:
      words += [word, char] if word else [char]
      word = ""
    elif char != " ":
      word += char
    elif word:
      words.append(word)
      word = ""
  if word:
    words.append(word)
  ids = []
  for word in words:
    pieces, start = [], 0
    while start < len(word) and len(word) <= 200:
      for end in range(len(word), start, -1):
        piece = ("##" if start else "") + word[start:end]
        if piece in vocab:
          pieces.append(vocab[piece])
          start = end
          break
      else:
        break
    ids += pieces if start == len(word) else [vocab["[UNK]"]]
  return ids


def _tricky_lines(vocab, count, seed):
  """Vocab words glued to characters from many scripts and categories."""
  rng = random.Random(seed)
  # Characters that Python's Unicode tables leave unassigned are left out
  # (TF's tables may be a newer Unicode version), but for a few that are
  # unassigned in every version so far.
  pool = [chr(c) for c in list(range(0, 0x2E00)) + list(range(0x3000, 0x3100))
          + list(range(0xF900, 0xFB00)) + list(range(0xFE00, 0x10000))
          + [0x1F600, 0x20001, 0xE0001, 0xF0000]
          if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
  pool += ["\u0378", "\u0379", "\uffff", "\U000e0080", "\ue000", "\uf8ff",
           "\U00100000"]
  words = [w for w in vocab[999:] if not w.startswith("##")]
  lines = []
  for _ in range(count):
    parts = []
    for _ in range(rng.randint(1, 10)):
      r = rng.random()
      if r < 0.5:
        word = rng.choice(words)
        parts.append(word.upper() if r < 0.1 else word)
      elif r < 0.8:
        parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 3))))
      elif r < 0.82:
        parts.append("ab" * rng.randint(98, 102))  # Around the 200-char limit.
      else:
        parts.append(" ")
    lines.append("".join(parts))
  return lines


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_matches_independent_reference_on_tricky_unicode(do_lower_case):
  testing.require_shared_data()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, do_lower_case)
  vocab = {token: i for i, token in enumerate(tokenizer.vocab)}
  lines = _tricky_lines(tokenizer.vocab, 3000, seed=int(do_lower_case))
  got = tokenizer.tokenize(tf.constant(lines)).to_list()
  bad = [(line, ids) for line, ids in zip(lines, got)
         if ids != _reference(line, vocab, do_lower_case)]
  assert not bad, f"{len(bad)} lines differ, e.g. {bad[:3]}"


def test_ascii_fast_path_equals_exact_path_for_every_ascii_character(uncased):
  texts = [f"un{chr(c)}affable{chr(c)}ab{chr(c)}" for c in range(128)]
  fast = uncased.tokenize(tf.constant(texts)).to_list()
  assert fast == uncased.tokenize_exact(tf.constant(texts)).to_list()
  assert fast[ord(",")] == _ids("un", ",", "[UNK]", ",", "ab", ",")
  assert fast[ord("z")] == _ids("[UNK]")


@pytest.mark.slow
def test_matches_the_original_on_the_shared_corpus_and_where_hf_differs():
  """Ids equal the independent transcription of the original on every corpus
  line, and Hugging Face's BertWordPieceTokenizer too: the corpus has neither
  of the corners where it differs (private-use or unassigned characters, and
  words of 101-200 characters after punctuation splitting; the hand-made
  cases above cover them)."""
  testing.require_shared_data()
  from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = [line for line in f.read().split("\n") if line.strip()]
  assert len(lines) > 70000
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, do_lower_case=True)
  tokenize = tf.function(tokenizer.tokenize,
                         input_signature=[tf.TensorSpec([None], tf.string)])
  batch = 16384
  ours = []
  for start in range(0, len(lines), batch):
    ours += tokenize(tf.constant(lines[start:start + batch])).to_list()
  vocab = {token: i for i, token in enumerate(tokenizer.vocab)}
  cache = {}
  differ = [i for i, line in enumerate(lines)
            if ours[i] != _reference(line, vocab, True, cache)]
  assert not differ, (
      f"{len(differ)} lines differ, e.g. {[lines[i] for i in differ[:3]]}")
  reference = BertWordPieceTokenizer(testing.VOCAB, lowercase=True)
  theirs = [e.ids for e in reference.encode_batch(lines, add_special_tokens=False)]
  hf_differs = [i for i in range(len(lines)) if ours[i] != theirs[i]]
  assert not hf_differs, [lines[i] for i in hf_differs[:3]]
