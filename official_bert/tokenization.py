"""google-research/bert's Python tokenizer API, at its import path.

Code written for the original (`import tokenization`) runs as
`from official_bert import tokenization`: the same names, arguments and
results, one text at a time, WordPiece strings out.

  tokenizer = tokenization.FullTokenizer(vocab_file="vocab.txt",
                                         do_lower_case=True)
  tokenizer.tokenize("Héllo, world!")       # ['hello', ',', 'world', '!']
  tokenizer.convert_tokens_to_ids(["hello"])  # [7592]

`FullTokenizer.tokenize` and `BasicTokenizer.tokenize` run the graph
tokenizer of official_bert/data/tokenization.py (one `tf.function` per
tokenizer), so they give exactly the ids that the data job, training and the
exported models see. `WordpieceTokenizer` takes any vocab dict, as the
original's, so it is the greedy longest-match-first loop in Python;
tests/python_tokenization_test.py checks BasicTokenizer + WordpieceTokenizer
against FullTokenizer on the shared corpus.

Like the original's, they take any vocabulary: one without [PAD] [UNK]
[CLS] [SEP] [MASK] (such as the original's own test vocabulary, which lacks
[PAD] and [MASK]) is tokenized by the original's two halves,
`BasicTokenizer` then `WordpieceTokenizer`, a word it cannot cover being the
string "[UNK]". The programs, which need those tokens, check for them
(official_bert/data/tokenization.py). One difference, on bad input only:
`load_vocab` rejects a missing or empty vocab file with one sentence naming
the file, where the original fails later or never.
"""

import collections
import re

import tensorflow as tf

from official_bert.data import tokenization as graph_tokenization

# The released checkpoints whose name tells their casing (the original's lists).
_UNCASED_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                   "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                 "multi_cased_L-12_H-768_A-12")


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Raises ValueError when `do_lower_case` contradicts a released checkpoint's name.

  Only the original's released names are known (e.g. .../uncased_L-12_H-768_A-12/
  bert_model.ckpt); any other path passes.
  """
  if not init_checkpoint:
    return
  match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)
  if model_name in _UNCASED_MODELS and not do_lower_case:
    flag, case_name, fix = "False", "lowercased", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    flag, case_name, fix = "True", "cased", "False"
  else:
    return
  raise ValueError(
      f"You passed in `--do_lower_case={flag}` with `--init_checkpoint="
      f"{init_checkpoint}`. However, `{model_name}` seems to be a {case_name} "
      f"model, so you should pass in `--do_lower_case={fix}` so that the "
      f"fine-tuning matches how the model was pre-training. If this error is "
      f"wrong, please just comment out this check.")


def convert_to_unicode(text):
  """str as is; bytes decoded as UTF-8, invalid bytes dropped."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError(f"Unsupported string type: {type(text)}")


def printable_text(text):
  """Text for print or logging: on Python 3 the same as convert_to_unicode."""
  return convert_to_unicode(text)


def load_vocab(vocab_file):
  """vocab.txt -> OrderedDict token -> id (line number; a repeated token keeps
  its last line's id, in its first line's place, as the original)."""
  vocab = collections.OrderedDict()
  for index, token in enumerate(graph_tokenization.load_vocab(vocab_file,
                                                              required=())):
    vocab[token] = index
  return vocab


def convert_by_vocab(vocab, items):
  """Looks each item up in `vocab` (a token or id dict); unknown -> vocab["[UNK]"]."""
  return [vocab[item] if item in vocab else vocab["[UNK]"] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Splits on whitespace (Python's str.split); empty text -> []."""
  return text.split()


def _decode(strings):
  return [s.decode("utf-8") for s in strings]


class FullTokenizer:
  """Basic tokenization + WordPiece: text -> WordPiece strings.

  Args:
    vocab_file: a BERT vocab.txt.
    do_lower_case: True for uncased models (lower-case and strip accents).

  Attributes:
    vocab: OrderedDict token -> id; inv_vocab: dict id -> token.
    basic_tokenizer, wordpiece_tokenizer: the two halves, as the original's.
  """

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    # The graph tokenizer (the ids the data job, training and the exports
    # see) needs the special tokens; without them, the original's two halves.
    self._tokenize = None
    if all(token in self.vocab for token in graph_tokenization.SPECIAL_TOKENS):
      self._graph = graph_tokenization.FullTokenizer(vocab_file, do_lower_case)
      self._tokenize = tf.function(
          self._graph.tokenize,
          input_signature=[tf.TensorSpec([None], tf.string)])

  def tokenize(self, text):
    """One text (str or UTF-8 bytes) -> list of WordPiece strings."""
    if self._tokenize is None:
      return [piece for word in self.basic_tokenizer.tokenize(text)
              for piece in self.wordpiece_tokenizer.tokenize(word)]
    text = convert_to_unicode(text).encode("utf-8", "surrogatepass")
    ids = self._tokenize(tf.constant([text])).flat_values.numpy()
    return [self.inv_vocab[int(i)] for i in ids]

  def convert_tokens_to_ids(self, tokens):
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    return convert_by_vocab(self.inv_vocab, ids)


class BasicTokenizer:
  """Cleaning, lower-casing and accent stripping (uncased), and splitting on
  whitespace, punctuation and CJK ideographs: text -> list of words."""

  def __init__(self, do_lower_case=True):
    self.do_lower_case = do_lower_case

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def words(texts):
      texts = tf.strings.unicode_transcode(
          texts, "UTF-8", "UTF-8", errors="ignore")
      return graph_tokenization.split_words(
          graph_tokenization.normalize(texts, self.do_lower_case))

    self._words = words

  def tokenize(self, text):
    text = convert_to_unicode(text).encode("utf-8", "surrogatepass")
    return _decode(self._words(tf.constant([text])).flat_values.numpy())


class WordpieceTokenizer:
  """Greedy longest-match-first WordPiece over a vocab dict.

  Args:
    vocab: tokens (a dict or set: anything supporting `in`).
    unk_token: what a word that cannot be covered becomes.
    max_input_chars_per_word: longer words become `unk_token`.
  """

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize(self, text):
    """Words already split by BasicTokenizer (whitespace-separated) -> pieces.

    For example "unaffable" -> ["un", "##aff", "##able"].
    """
    output = []
    for word in whitespace_tokenize(convert_to_unicode(text)):
      output += self._word_pieces(word)
    return output

  def _word_pieces(self, word):
    if len(word) > self.max_input_chars_per_word:
      return [self.unk_token]
    pieces, start = [], 0
    while start < len(word):
      # The longest vocab entry starting at `start` ("##" after the first).
      prefix = "##" if start else ""
      end = next((end for end in range(len(word), start, -1)
                  if prefix + word[start:end] in self.vocab), None)
      if end is None:
        return [self.unk_token]  # Not coverable: the whole word is unknown.
      pieces.append(prefix + word[start:end])
      start = end
    return pieces
