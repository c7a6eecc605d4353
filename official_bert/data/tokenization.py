"""BERT's FullTokenizer (basic tokenization + WordPiece) as TensorFlow graph ops.

Text in, WordPiece ids out, with the semantics of google-research/bert's
`tokenization.FullTokenizer` (tests/tokenization_test.py checks the ids
against an independent transcription of its rules; docs/tokenizer.md lists
where Hugging Face's `BertWordPieceTokenizer` differs):

  1. clean: drop NUL, U+FFFD and the original's control characters (Cc and
     Cf, not Co private use or unassigned code points); every whitespace
     character becomes a space;
  2. uncased only: lower-case, NFD-decompose, drop non-spacing marks (accents);
  3. split on whitespace, and make every punctuation character (Unicode P*
     and all ASCII non-alphanumerics) and every CJK ideograph its own word;
  4. greedy longest-match-first WordPiece per word, `##` on continuations;
     a word that cannot be covered, or is longer than 200 characters, is [UNK].

Everything runs as core TF + TF Text ops, so `tokenize` works inside
`tf.function`, `tf.data` and SavedModels. The vocabulary file is tracked as a
`tf.saved_model.Asset`, so a SavedModel holding the tokenizer carries it.

Example:
  tokenizer = FullTokenizer("vocab.txt", do_lower_case=True)
  tokenizer.tokenize(tf.constant(["Héllo, world!"]))
  # <tf.RaggedTensor [[7592, 1010, 2088, 999]]>
"""

import functools

import tensorflow as tf
import tensorflow_text as tf_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# The original's max_input_chars_per_word: longer words become [UNK].
# (Hugging Face's WordPiece uses 100.)
MAX_CHARS_PER_WORD = 200

# Control characters as the original's _is_control names them: categories Cc
# (U+0000-U+001F, U+007F-U+009F) and Cf, except \t \n \r; plus U+FFFD. They
# are dropped first. Private use (Co) and unassigned code points stay, as in
# the original, so "a\ue000b" is one word (Hugging Face drops every C*).
_CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\p{Cf}|\x{fffd}"
# Then whitespace (\t \n \r, Zs, and the line/paragraph separators that
# Python's str.split() also splits on) becomes a plain space.
# (The space itself is left out of the pattern: nothing to replace.)
_WHITESPACE = (r"[\t\n\r\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
               r"\x{202f}\x{205f}\x{3000}]")
# The control characters of ASCII text (\t \n \r are whitespace).
_ASCII_CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
# Non-spacing marks: the accents that NFD splits off.
_ACCENTS = r"\p{Mn}"
# Characters that are a word of their own: ASCII punctuation ranges (the
# original counts $, +, <, =, >, ^, `, |, ~ as punctuation too), Unicode
# punctuation, and the CJK ideograph blocks of the original.
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
_CJK = (r"[\x{4e00}-\x{9fff}\x{3400}-\x{4dbf}\x{20000}-\x{2a6df}"
        r"\x{2a700}-\x{2b73f}\x{2b740}-\x{2b81f}\x{2b820}-\x{2ceaf}"
        r"\x{f900}-\x{faff}\x{2f800}-\x{2fa1f}]")
_KEEP_DELIMITERS = _PUNCTUATION + "|" + _CJK
_DELIMITERS = " +|" + _KEEP_DELIMITERS


def load_vocab(vocab_file, required=SPECIAL_TOKENS):
  """Reads a vocab.txt (one token per line, id = line number) into a list.

  Raises:
    ValueError: one sentence naming the file and the fix, when the file is
      missing, empty, or lacks one of the `required` tokens (by default
      SPECIAL_TOKENS, which the data job, masking and the exports use).
  """
  if not tf.io.gfile.exists(vocab_file):
    raise ValueError(
        f"Vocabulary file {vocab_file} does not exist; pass the path of a "
        f"BERT vocab.txt (one token per line).")
  if tf.io.gfile.isdir(vocab_file):
    raise ValueError(
        f"Vocabulary file {vocab_file} is a directory; pass the path of a "
        f"BERT vocab.txt (one token per line).")
  with tf.io.gfile.GFile(vocab_file, "rb") as f:
    data = f.read()
  if b"\0" in data[:1 << 16]:
    raise ValueError(f"Vocabulary file {vocab_file} holds NUL bytes; pass a "
                     "BERT vocab.txt (UTF-8 text, one token per line).")
  try:
    # As the original: one token per line, surrounding whitespace stripped.
    vocab = [line.strip() for line in data.decode("utf-8").splitlines()]
  except UnicodeDecodeError as e:
    raise ValueError(f"Vocabulary file {vocab_file} is not UTF-8 text (byte "
                     f"{e.start}); pass a BERT vocab.txt (UTF-8, one token "
                     "per line).") from None
  while vocab and not vocab[-1]:
    vocab.pop()  # A trailing blank line is not a token.
  if not vocab:
    raise ValueError(
        f"Vocabulary file {vocab_file} is empty; pass a BERT vocab.txt with "
        f"one token per line.")
  missing = [token for token in required if token not in vocab]
  if missing:
    raise ValueError(
        f"Vocabulary file {vocab_file} lacks the special token(s) "
        f"{', '.join(missing)}; add them (one per line) or use a vocab made "
        f"by tfrecords/learn_vocab.py.")
  return vocab


def normalize(texts, do_lower_case=True):
  """Steps 1-2 above on a string Tensor of any shape: clean, lower, strip accents."""
  texts = tf.strings.regex_replace(texts, _CONTROL, "")
  texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
  if do_lower_case:
    # Full Unicode lower-casing, as Python's str.lower (not case folding,
    # which would also NFKC-normalise, e.g. "ﬁ" -> "fi").
    texts = tf.strings.lower(texts, encoding="utf-8")
    texts = tf_text.normalize_utf8(texts, "NFD")
    texts = tf.strings.regex_replace(texts, _ACCENTS, "")
  return texts


def split_words(texts):
  """Step 3 above: string Tensor [B] -> words, RaggedTensor [B, (words)]."""
  return tf_text.regex_split(texts, _DELIMITERS, _KEEP_DELIMITERS)


@functools.lru_cache(maxsize=8)
def _fast_wordpiece(vocab, max_bytes_per_word, no_pretokenization):
  """TF Text's FastWordpieceTokenizer of `vocab` (a tuple of unique tokens).

  Built once per process for each vocabulary and setting (building the trie
  of BERT's vocabulary takes ~0.1 s): the tokenizers of one run's training,
  evaluation and export share it. It holds only constants.
  """
  return tf_text.FastWordpieceTokenizer(
      vocab=list(vocab), max_bytes_per_word=max_bytes_per_word,
      token_out_type=tf.int64, unknown_token="[UNK]",
      no_pretokenization=no_pretokenization)


class FullTokenizer(tf.Module):
  """Basic tokenization + WordPiece, as graph ops, over a BERT vocab.txt.

  Args:
    vocab_file: path of a vocab.txt, one token per line; must hold
      SPECIAL_TOKENS.
    do_lower_case: True for uncased models (lower-case and strip accents).

  Attributes:
    vocab: the tokens, id = index. `vocab_size` its length.
    pad_id, unk_id, cls_id, sep_id, mask_id: ids of SPECIAL_TOKENS.
    vocab_file: the vocabulary as a `tf.saved_model.Asset`.
  """

  def __init__(self, vocab_file, do_lower_case=True, name=None):
    super().__init__(name=name)
    vocab = load_vocab(vocab_file)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self.do_lower_case = bool(do_lower_case)
    # Python-side lookups only; a SavedModel gets the file through the asset.
    # Set past tf.Module's attribute tracking, which would wrap the dict (and
    # walk the tuple) of every token: ~0.13 s per tokenizer of BERT's vocab.
    object.__setattr__(self, "_vocab", tuple(vocab))
    # As the original: a token listed twice has its last line's id.
    object.__setattr__(self, "_token_to_id",
                       {token: i for i, token in enumerate(vocab)})
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        self._token_to_id[token] for token in SPECIAL_TOKENS)
    # FastWordpiece needs unique, non-empty tokens: the lines that lose
    # (earlier duplicates, blank lines) become "\x01<line>", which no word can
    # contain (control characters are dropped before splitting).
    unique = [token if token and self._token_to_id[token] == i else f"\x01{i}"
              for i, token in enumerate(vocab)]
    # Both WordPiece tries are built here and embedded in the graph as
    # constants. The exact path limits word length in characters itself.
    # (Shared within the process, but not when built while tracing: its
    # constants would belong to that graph.)
    unique = tuple(unique)
    build = (_fast_wordpiece if tf.executing_eagerly()
             else _fast_wordpiece.__wrapped__)
    self._wordpiece_words = build(unique, 4 * MAX_CHARS_PER_WORD + 4,
                                  no_pretokenization=True)
    # End-to-end (splits on whitespace and punctuation itself, as step 3 for
    # ASCII text, where bytes are characters).
    self._wordpiece_ascii = build(unique, MAX_CHARS_PER_WORD,
                                  no_pretokenization=False)
    # Which ids start a word: all but the "##" continuations.
    self._starts_word = tf.constant(
        [not token.startswith("##") for token in vocab], tf.bool)

  @property
  def vocab(self):
    return list(self._vocab)

  @property
  def vocab_size(self):
    return len(self._vocab)

  def tokenize(self, texts):
    """String Tensor [B] -> int64 RaggedTensor [B, (wordpieces)].

    Pure-ASCII strings (99.5% of the shared corpus' lines) take a fast path:
    ASCII clean-up and lower-casing, then FastWordpiece's own splitting. The
    rest take the exact path of `tokenize_exact`. Both give the same ids.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    # (A byte-vs-character length test would let invalid UTF-8 through.)
    is_ascii = tf.strings.regex_full_match(texts, r"[\x00-\x7f]*")
    ascii_rows = tf.where(is_ascii)[:, 0]
    other_rows = tf.where(tf.logical_not(is_ascii))[:, 0]
    fast = tf.gather(texts, ascii_rows)
    fast = tf.strings.regex_replace(fast, _ASCII_CONTROL, "")
    if self.do_lower_case:
      fast = tf.strings.lower(fast)
    fast = self._wordpiece_ascii.tokenize(fast)  # [B_ascii, (P)]
    exact = self.tokenize_exact(tf.gather(texts, other_rows))  # [B_other, (P)]
    # Put the rows back in input order.
    order = tf.math.invert_permutation(tf.concat([ascii_rows, other_rows], 0))
    return tf.gather(tf.concat([fast, exact], axis=0), order)

  def tokenize_exact(self, texts):
    """`tokenize` without the ASCII fast path (steps 1-4 on every string)."""
    return self._tokenize_exact_words(texts).merge_dims(1, 2)

  def _tokenize_exact_words(self, texts):
    texts = tf.convert_to_tensor(texts, tf.string)
    # As the original's convert_to_unicode: invalid UTF-8 bytes are dropped.
    texts = tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="ignore")
    words = split_words(normalize(texts, self.do_lower_case))  # [B, (W)]
    # A word longer than MAX_CHARS_PER_WORD characters becomes the word
    # "[UNK]", which WordPiece maps to the [UNK] id (the splitter never makes
    # that word itself: brackets are punctuation).
    too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > (
        MAX_CHARS_PER_WORD)
    words = words.with_flat_values(
        tf.where(too_long, "[UNK]", words.flat_values))
    return self._wordpiece_words.tokenize(words)  # [B, (W), (P)]

  def tokenize_words(self, texts):
    """String Tensor [B] -> int64 RaggedTensor [B, (words), (wordpieces)].

    Words are the basic tokenizer's (step 3): every word's first wordpiece
    is a vocab token without "##" and every later one has it, so the pieces
    of `tokenize` regroup exactly (as whole-word masking in
    google-research/bert's create_pretraining_data.py groups them).
    """
    pieces = self.tokenize(texts)  # [B, (P)]
    starts = tf.gather(self._starts_word, pieces.flat_values)  # [P_total]
    words = tf.RaggedTensor.from_row_starts(
        pieces.flat_values, tf.where(starts)[:, 0],
        validate=False)  # [W_total, (P)]
    # Words before each row boundary: a running count of word starts read at
    # the rows' piece splits.
    words_before = tf.concat(
        [[0], tf.cumsum(tf.cast(starts, tf.int64))], axis=0)  # [P_total + 1]
    return tf.RaggedTensor.from_row_splits(
        words, tf.gather(words_before, pieces.row_splits), validate=False)

  def wordpiece_with_offsets(self, words):
    """WordPiece (step 4) on words already normalised and split (steps 1-3).

    String Tensor [N] -> (ids, start, end), int64 RaggedTensors [N, (P)]:
    each piece's byte range in its word (SQuAD maps answers through them).
    """
    return self._wordpiece_words.tokenize_with_offsets(words)

  def convert_ids_to_tokens(self, ids):
    return [self._vocab[int(i)] for i in ids]

  def convert_tokens_to_ids(self, tokens):
    return [self._token_to_id.get(token, self.unk_id) for token in tokens]

  def get_special_tokens_dict(self):
    """The special ids under the names of the TF-Hub preprocessor API."""
    return {
        "vocab_size": self.vocab_size,
        "padding_id": self.pad_id,
        "start_of_sequence_id": self.cls_id,
        "end_of_segment_id": self.sep_id,
        "mask_id": self.mask_id,
    }
