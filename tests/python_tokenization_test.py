"""Tests for official_bert/tokenization.py, the original's Python tokenizer
API: hand-checked cases, and BasicTokenizer + WordpieceTokenizer (the Python
WordPiece loop) against FullTokenizer and the batched graph tokenizer on the
shared corpus."""

import collections

import pytest
import tensorflow as tf

from official_bert import tokenization
from official_bert.data import tokenization as graph_tokenization
from tests import testing

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff",
              "##able", "hello", ",", "!", "中", "文", "x", "##x", "world",
              "ab", "##c"]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
  return str(path)


def test_full_tokenizer_gives_wordpiece_strings_and_the_original_lookups(
    vocab_file):
  tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                         do_lower_case=True)
  assert tokenizer.tokenize("UNAFFABLE, Héllo 中文!") == [
      "un", "##aff", "##able", ",", "hello", "中", "文", "!"]
  assert tokenizer.tokenize(b"abc a\xffb zzz") == ["ab", "##c", "ab", "[UNK]"]
  assert tokenizer.tokenize("") == [] and tokenizer.tokenize(" \t") == []
  assert tokenizer.tokenize("a\ue000b") == ["[UNK]"]  # Private use is kept.
  assert isinstance(tokenizer.vocab, collections.OrderedDict)
  assert list(tokenizer.vocab.items()) == [(t, i) for i, t in enumerate(TINY_VOCAB)]
  assert tokenizer.inv_vocab == dict(enumerate(TINY_VOCAB))
  assert tokenizer.convert_tokens_to_ids(["un", "##able", "nope"]) == [5, 7, 1]
  assert tokenizer.convert_ids_to_tokens([8, 15]) == ["hello", "world"]
  cased = tokenization.FullTokenizer(vocab_file, do_lower_case=False)
  assert cased.tokenize("Hello hello") == ["[UNK]", "hello"]


def test_basic_and_wordpiece_tokenizers(vocab_file):
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  assert basic.tokenize(" Héllo,wörld\u00a0中文 a\x00b\u200b ") == [
      "hello", ",", "world", "中", "文", "ab"]
  assert tokenization.BasicTokenizer(do_lower_case=False).tokenize(
      "Héllo!") == ["Héllo", "!"]
  vocab = tokenization.load_vocab(vocab_file)
  wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
  assert wordpiece.tokenize("unaffable abc abq") == [
      "un", "##aff", "##able", "ab", "##c", "[UNK]"]
  # The original's max_input_chars_per_word=200, and its arguments.
  assert wordpiece.tokenize("x" * 200) == ["x"] + ["##x"] * 199
  assert wordpiece.tokenize("x" * 201) == ["[UNK]"]
  short = tokenization.WordpieceTokenizer(vocab, unk_token="?",
                                          max_input_chars_per_word=2)
  assert short.tokenize("xx xxx") == ["x", "##x", "?"]


def test_module_functions(vocab_file, tmp_path):
  assert tokenization.convert_to_unicode(b"caf\xc3\xa9\xff") == "café"
  assert tokenization.printable_text("é") == "é"
  with pytest.raises(ValueError, match="Unsupported string type"):
    tokenization.convert_to_unicode(3)
  vocab = tokenization.load_vocab(vocab_file)
  inv = {i: t for t, i in vocab.items()}
  assert tokenization.convert_tokens_to_ids(vocab, ["x", "y"]) == [13, 1]
  assert tokenization.convert_ids_to_tokens(inv, [13, 14]) == ["x", "##x"]
  assert tokenization.whitespace_tokenize("  a \n b ") == ["a", "b"]
  # A repeated token: its last line's id, in its first line's place.
  dup = tmp_path / "dup.txt"
  dup.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\nx\nab\n")
  assert list(tokenization.load_vocab(str(dup)).items())[5:] == [
      ("ab", 7), ("x", 6)]
  with pytest.raises(ValueError, match="does not exist"):
    tokenization.load_vocab(str(tmp_path / "missing.txt"))


def test_validate_case_matches_checkpoint():
  check = tokenization.validate_case_matches_checkpoint
  check(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
  check(False, "/m/cased_L-12_H-768_A-12/bert_model.ckpt")
  check(False, "/m/my_model/bert_model.ckpt")
  check(True, None)
  with pytest.raises(ValueError, match="--do_lower_case=True` so"):
    check(False, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
  with pytest.raises(ValueError, match="seems to be a cased model"):
    check(True, "gs://b/multi_cased_L-12_H-768_A-12/bert_model.ckpt")


def test_agrees_with_the_graph_tokenizer_on_the_corpus():
  """FullTokenizer.tokenize, BasicTokenizer + WordpieceTokenizer and the
  batched graph tokenizer agree on every 94th corpus line (747) and hand-made corners."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = [line for line in f.read().split("\n") if line.strip()][::94]
  lines += ["a\ue000b Ünïcödé Σίσυφος", "x" * 150 + " " + "y" * 201,
            "the\x01ory the\u0600ory 中文 ﬁne ß ²", "naïve café-au-lait, $5.00"]
  assert len(lines) > 700
  for do_lower_case in (True, False):
    tokenizer = tokenization.FullTokenizer(testing.VOCAB, do_lower_case)
    graph = graph_tokenization.FullTokenizer(testing.VOCAB, do_lower_case)
    batched = graph.tokenize(tf.constant(lines)).to_list()
    for line, ids in zip(lines, batched):
      tokens = tokenizer.tokenize(line)
      assert tokenizer.convert_tokens_to_ids(tokens) == ids, line
      split = [piece for word in tokenizer.basic_tokenizer.tokenize(line)
               for piece in tokenizer.wordpiece_tokenizer.tokenize(word)]
      assert split == tokens, line


# google-research/bert's tokenization_test.py, case by case: its vocabulary
# has [UNK] [CLS] [SEP] and no [PAD] or [MASK], which the original accepts.
ORIGINALS_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa",
                   "un", "runn", "##ing", ","]


def test_the_originals_full_tokenizer_case(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("".join(f"{token}\n" for token in ORIGINALS_VOCAB),
                  encoding="utf-8")
  tokenizer = tokenization.FullTokenizer(str(path))
  tokens = tokenizer.tokenize("UNwant\u00e9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  # A word the vocabulary cannot cover is the original's [UNK] string.
  assert tokenizer.tokenize("wants unwantedX") == ["[UNK]", "[UNK]"]
  assert tokenizer.convert_tokens_to_ids(["[UNK]"]) == [0]
  # Without [UNK] too, as the original: tokens still come out.
  no_unk = tmp_path / "no_unk.txt"
  no_unk.write_text("want\n##ed\n", encoding="utf-8")
  assert tokenization.FullTokenizer(str(no_unk)).tokenize("wanted xyz") == [
      "want", "##ed", "[UNK]"]


def test_the_originals_basic_and_wordpiece_cases():
  assert tokenization.BasicTokenizer().tokenize("ah\u535a\u63a8zz") == [
      "ah", "\u535a", "\u63a8", "zz"]
  lower = tokenization.BasicTokenizer(do_lower_case=True)
  assert lower.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "hello", "!", "how", "are", "you", "?"]
  assert lower.tokenize("H\u00e9llo") == ["hello"]
  assert tokenization.BasicTokenizer(do_lower_case=False).tokenize(
      " \tHeLLo!how  \n Are yoU?  ") == ["HeLLo", "!", "how", "Are", "yoU",
                                         "?"]
  vocab = {token: i for i, token in enumerate(ORIGINALS_VOCAB[:-1])}
  wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)
  assert wordpiece.tokenize("") == []
  assert wordpiece.tokenize("unwanted running") == [
      "un", "##want", "##ed", "runn", "##ing"]
  assert wordpiece.tokenize("unwantedX running") == ["[UNK]", "runn",
                                                     "##ing"]
  assert tokenization.convert_tokens_to_ids(
      vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]
