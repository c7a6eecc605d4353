"""A client's tokenizer for the int8 model: our ids, at Hugging Face's speed.

The int8 export (`<version>/model.tflite`, export/litert_int8.py) takes ids,
not text: TF Serving's `--prefer_tflite_model=true` and `Int8Model` from
Python leave the tokenizing to the client. `ClientTokenizer` gives that
client the model inputs the SavedModel's own text signature builds (the
graph tokenizer, data/tokenization.py, then data/segment_packing.py's
`pack_to_longest`), from Hugging Face's `tokenizers` library (Rust) loaded
with our vocab.txt and our rules: as fast as `BertTokenizerFast`, several
times faster than the graph tokenizer called from Python
(benchmarks/serving_benchmark.py's `int8_fast` peer splits one text's time
into tokenizer and model). The graph tokenizer stays the model's:
training, the SavedModel and the data job use it; this one is for clients
only.

    tokenizer = ClientTokenizer("vocab.txt", do_lower_case=True,
                                max_seq_length=128)
    inputs = tokenizer(["How do I open a file?"])        # or (texts, texts_b)
    outputs = litert_int8.Int8Model.load(version_dir)(**inputs)

Clients install the `tokenizers` package (`pip install tokenizers`; the
project itself needs it only for its tests), imported when a
`ClientTokenizer` is made; this module imports numpy alone, no TensorFlow.

The rules are the graph tokenizer's, written for Oniguruma (the regular
expressions of `tokenizers`) instead of RE2: the original's control
characters dropped, whitespace to a space, (uncased) a word-final sigma,
lower-casing, NFD and no accents, then words split at spaces and made of
each punctuation character and CJK ideograph, then WordPiece with words
over 200 characters [UNK]. `[CLS] a [SEP] (b [SEP])` with the original's
longest-first truncation as `pack_to_longest`. tests/client_tokenizer_test.py
pins the ids equal to the graph's on the corpus, pairs, truncation and
tests/tokenization_test.py's cases. Where they differ: characters whose
Unicode tables differ, Oniguruma's being 16.0 and TensorFlow 2.21's 15.0
(13.0 for which characters a final sigma looks past): characters first
assigned in Unicode 16.0, and a word-final capital sigma after a combining
mark added in 14.0 or later (`ΑΣ` behind U+0898 is `ας` here, `ασ` in the
graph). The test names them.
"""

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_CHARS_PER_WORD = 200  # the original's max_input_chars_per_word

# data/tokenization.py's patterns in Oniguruma's syntax (its \xHH is a byte,
# so code points are written \x{...}).
_CONTROL = (r"[\x{0}-\x{8}\x{b}\x{c}\x{e}-\x{1f}\x{7f}-\x{9f}]|\p{Cf}"
            r"|\x{fffd}")
_WHITESPACE = (r"[\t\n\r\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
               r"\x{202f}\x{205f}\x{3000}]")
# Python's str.lower (the graph's too) makes a capital sigma final (ς)
# after a cased letter and not before one, looking past case-ignorable
# characters; `tokenizers`' Lowercase maps each character alone (σ).
_FINAL_SIGMA = (r"(?<=\p{Cased}\p{Case_Ignorable}*)\x{3a3}"
                r"(?!\p{Case_Ignorable}*\p{Cased})")
_ACCENTS = r"\p{Mn}"
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
_CJK = (r"[\x{4e00}-\x{9fff}\x{3400}-\x{4dbf}\x{20000}-\x{2a6df}"
        r"\x{2a700}-\x{2b73f}\x{2b740}-\x{2b81f}\x{2b820}-\x{2ceaf}"
        r"\x{f900}-\x{faff}\x{2f800}-\x{2fa1f}]")


def read_vocab(vocab_file):
  """{token: id} of a vocab.txt as data/tokenization.load_vocab reads it
  (one token per line, stripped; a token listed twice has its last id).
  Raises ValueError naming the file when it cannot be read or lacks one of
  SPECIAL_TOKENS."""
  try:
    with open(vocab_file, "rb") as f:
      text = f.read().decode("utf-8")
  except (OSError, UnicodeDecodeError) as e:
    raise ValueError(f"cannot read vocabulary file {vocab_file} ({e}); "
                     "pass the model's vocab.txt") from None
  tokens = [line.strip() for line in text.splitlines()]
  vocab = {token: i for i, token in enumerate(tokens)}
  missing = [token for token in SPECIAL_TOKENS if token not in vocab]
  if missing:
    raise ValueError(f"vocabulary file {vocab_file} lacks "
                     f"{', '.join(missing)}; pass the model's vocab.txt")
  return vocab


class ClientTokenizer:
  """Texts (or pairs) -> the int8 model's inputs, as the export packs them.

  Args:
    vocab_file: the model's vocab.txt (the export's `assets/vocab.txt`).
    do_lower_case: as the model was trained (uncased: True).
    max_seq_length: the longest packed input (the export's seq_length).

  Calling it with texts [B] (and texts_b [B]) returns int32 numpy [B, T]
  `input_word_ids`, `input_mask`, `input_type_ids`, T the longest packed
  row rounded up to `pad_multiple`, at most max_seq_length: what the
  SavedModel's text signature feeds its model.
  """

  def __init__(self, vocab_file, do_lower_case=True, max_seq_length=128):
    from tokenizers import Regex  # pylint: disable=g-import-not-at-top
    from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
    from tokenizers import normalizers  # pylint: disable=g-import-not-at-top
    from tokenizers import pre_tokenizers  # pylint: disable=g-import-not-at-top
    from tokenizers.models import WordPiece  # pylint: disable=g-import-not-at-top
    if max_seq_length < 3:
      raise ValueError(f"max_seq_length must be at least 3 ([CLS], [SEP] and "
                       f"a piece), got {max_seq_length}")
    vocab = read_vocab(vocab_file)
    self.max_seq_length = max_seq_length
    self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]
    steps = [normalizers.Replace(Regex(_CONTROL), ""),
             normalizers.Replace(Regex(_WHITESPACE), " ")]
    if do_lower_case:
      steps += [normalizers.Replace(Regex(_FINAL_SIGMA), "\u03c2"),
                normalizers.Lowercase(), normalizers.NFD(),
                normalizers.Replace(Regex(_ACCENTS), "")]
    # No special tokens are added: "[CLS]" in a text is three words, as in
    # the graph tokenizer.
    self._tokenizer = Tokenizer(WordPiece(
        vocab, unk_token="[UNK]", continuing_subword_prefix="##",
        max_input_chars_per_word=MAX_CHARS_PER_WORD))
    self._tokenizer.normalizer = normalizers.Sequence(steps)
    self._tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(" +"), behavior="removed"),
        pre_tokenizers.Split(Regex(_PUNCTUATION + "|" + _CJK),
                             behavior="isolated")])

  def tokenize(self, texts):
    """WordPiece ids of each text: [B] strings -> B lists of ints (bytes
    are decoded as UTF-8, invalid bytes dropped, as the graph's)."""
    texts = [text.decode("utf-8", "ignore") if isinstance(text, bytes)
             else text for text in texts]
    if len(texts) == 1:  # encode_batch's thread pool costs ~0.1 ms
      return [self._tokenizer.encode(texts[0], add_special_tokens=False).ids]
    return [encoding.ids for encoding in self._tokenizer.encode_batch(
        texts, add_special_tokens=False)]

  def __call__(self, texts, texts_b=None, pad_multiple=1):
    """Model inputs of `texts` (and `texts_b`), packed and padded as
    data/segment_packing.pack_to_longest does."""
    if isinstance(texts, (str, bytes)) or isinstance(texts_b, (str, bytes)):
      raise TypeError("pass lists of texts, e.g. [text]")
    pieces_a = self.tokenize(texts)
    pieces_b = (self.tokenize(texts_b) if texts_b is not None
                else [[]] * len(pieces_a))
    if len(pieces_b) != len(pieces_a):
      raise ValueError(f"{len(pieces_a)} texts but {len(pieces_b)} texts_b")
    rows = [self._pack(a, b) for a, b in zip(pieces_a, pieces_b)]
    longest = max([len(ids) for ids, _ in rows] + [1])
    length = min(-(-longest // pad_multiple) * pad_multiple,
                 self.max_seq_length)
    inputs = {name: np.zeros((len(rows), length), np.int32) for name in (
        "input_word_ids", "input_mask", "input_type_ids")}
    for row, (ids, type_ids) in enumerate(rows):
      inputs["input_word_ids"][row, :len(ids)] = ids
      inputs["input_mask"][row, :len(ids)] = 1
      inputs["input_type_ids"][row, :len(ids)] = type_ids
    return inputs

  def _pack(self, a, b):
    """(ids, type_ids) of `[CLS] a [SEP] (b [SEP])` within max_seq_length.

    google-research/bert's convert_single_example: a single text keeps its
    first max_seq_length - 2 pieces; a pair keeps max_seq_length - 3 by
    `_truncate_seq_pair` (a piece off the end of the longer text, `b` on
    ties: the shorter keeps all it has up to half, `a` the odd piece), and
    packs as a single text when `b` has no pieces, or keeps none.
    """
    if not b:
      a = a[:self.max_seq_length - 2]
      return [self.cls_id] + a + [self.sep_id], [0] * (len(a) + 2)
    budget = self.max_seq_length - 3
    if len(a) + len(b) > budget:
      keep_a = min(len(a), max((budget + 1) // 2, budget - len(b)))
      a, b = a[:keep_a], b[:budget - keep_a]
    ids = [self.cls_id] + a + [self.sep_id]
    if b:
      ids += b + [self.sep_id]
    return ids, [0] * (len(a) + 2) + [1] * (len(ids) - len(a) - 2)
