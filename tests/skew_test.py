"""No skew between training and serving: the same raw inputs through the
training programs' path and through the exported signature give the same
ids and the same predictions, for the classifier, NER and SQuAD.

The inputs are the corners where two implementations of one preprocessing
drift apart: pairs longer than the window (the longer text cut first),
pairs of equal length at the limit (the original cuts `text_b` on ties), an
empty or blank second text, and non-ASCII text (accents, U+202F, a
no-break space, CJK, an emoji), whose offsets must count characters, not
UTF-8 bytes. Random weights are enough: a different id or window changes
a random model's output.
"""

import json
import re

import numpy as np
import pytest

from tests import testing

SEQ = 16

# (text, text_b): the pair cases.
PAIRS = [
    # Longer than the window: the longer text is cut first.
    ("the quick brown fox jumps over the lazy dog again and again today",
     "a short one"),
    ("tiny", "python reads files and writes them back with the same "
     "encoding every time"),
    # Equal lengths past the limit: the original cuts text_b on ties.
    ("one two three four five six seven", "eight nine ten eleven twelve "
     "thirteen fourteen"),
    # Equal lengths exactly at the limit (13 pieces in all).
    ("one two three four five six", "seven eight nine ten eleven twelve "
     "thirteen"),
    ("Café naïve résumé", "Ça déjà vu"),
    ("10\u202fkm to Zürich", "no\u00a0break space"),
    ("北京是中国的首都", "東京は日本の首都です"),
    ("an emoji \U0001F600 here", "and \U0001F680 there"),
    ("nothing after it", ""),
    ("blank after it", "   "),
]


@pytest.fixture(scope="module")
def tokenizer():
  testing.require_shared_data()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  return tokenization.FullTokenizer(testing.VOCAB, True)


def _config():
  return testing.tiny_config(vocab_size=30522, max_position_embeddings=64,
                             hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)


def _load(path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  return tf.saved_model.load(str(path)).signatures["serving_default"]


def test_classifier_pairs_same_ids_and_probabilities(tokenizer, tmp_path):
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import serving  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top
  examples = [text_files.Example(text=a, text_b=b, label=None,
                                      where=f"case {i}")
              for i, (a, b) in enumerate(PAIRS)]
  # The training programs' path (run_classifier: text_files.encode).
  inputs = text_files.encode(examples, tokenizer, SEQ)
  # The export's packing, on the same texts.
  packed = serving.pack_to_longest(
      [tokenizer.tokenize(tf.constant([a for a, _ in PAIRS])),
       tokenizer.tokenize(tf.constant([b for _, b in PAIRS]))], SEQ,
      tokenizer.cls_id, tokenizer.sep_id, pad_multiple=SEQ)
  for name in ("input_word_ids", "input_mask", "input_type_ids"):
    np.testing.assert_array_equal(packed[name].numpy(), inputs[name],
                                  err_msg=name)
  # The cases reach the corners: a cut pair, a full window, an empty b
  # packed as [CLS] a [SEP].
  lengths = inputs["input_mask"].sum(1)
  assert (lengths == SEQ).sum() >= 4
  for row in (-2, -1):
    assert inputs["input_type_ids"][row].sum() == 0
    assert list(inputs["input_word_ids"][row]).count(tokenizer.sep_id) == 1
  keras.utils.set_random_seed(1)
  model = finetuning_models.BertClassifier.from_bert_config(_config(), 3)
  trained_path = tf.nn.softmax(model(inputs, training=False), -1).numpy()
  serving.export_saved_model(
      str(tmp_path / "serving"), model, vocab_file=testing.VOCAB,
      do_lower_case=True, seq_length=SEQ, outputs=serving.classifier_outputs,
      text_pair=True)
  served = _load(tmp_path / "serving" / "1")(
      text=tf.constant([a for a, _ in PAIRS]),
      text_b=tf.constant([b for _, b in PAIRS]))
  np.testing.assert_allclose(served["probabilities"].numpy(), trained_path,
                             atol=1e-5)


NER_TEXTS = [
    "Café naïve résumé at Zürich",
    "北京 is the capital of 中国",
    "an emoji \U0001F600 between words and more words after it to fill "
    "several windows of this tiny model",
    "Ça déjà vu",
]


def test_ner_same_tags_and_character_offsets(tokenizer, tmp_path):
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import ner_serving  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.ner import ner_data  # pylint: disable=g-import-not-at-top
  labels = ["O", "B-X", "I-X", "B-Y", "I-Y"]
  sentences = [ner_data.Sentence(tuple(t.split(" ")), ("O",) * len(t.split(" ")),
                            f"case {i}") for i, t in enumerate(NER_TEXTS)]
  keras.utils.set_random_seed(2)
  model = finetuning_models.BertTokenClassifier.from_bert_config(
      _config(), len(labels))
  # run_ner's path: ner_data.encode, the model, each word's first piece.
  inputs, window, position, _ = ner_data.encode(sentences, tokenizer, SEQ)
  assert window.max() + 1 > len(sentences)  # a text needed several windows
  logits = np.asarray(model(inputs, training=False))
  ids = logits[window, position].argmax(-1)
  trained_path = [labels[i] for i in ids]
  ner_serving.export_ner_model(str(tmp_path / "ner"), model, labels,
                               testing.VOCAB, seq_length=SEQ)
  out = _load(tmp_path / "ner" / "1")(text=tf.constant(NER_TEXTS))
  served, at = [], 0
  for i, text in enumerate(NER_TEXTS):
    n = int(out["num_words"][i])
    words = sentences[i].words
    assert n == len(words)
    served += [t.decode() for t in out["tags"][i, :n].numpy()]
    # Offsets count characters: they cut each word out of the Python str.
    starts, ends = out["start_char"][i].numpy(), out["end_char"][i].numpy()
    assert [text[s:e] for s, e in zip(starts[:n], ends[:n])] == list(words)
    at += n
  assert served == trained_path
  assert len(set(served)) >= 3  # varied tags: a shift would show


SQUAD_CASES = [
    ("Where is the café?", "The café naïve is in Zürich, near the "
     "lake, and serves crème brûlée every day of the week."),
    ("How far is it?", "It is 10\u202fkm from the station and 3\u00a0km "
     "from the old town hall."),
    ("What is the capital?", "北京是中国的首都，东京是日本的首都。"
     "Paris is the capital of France."),
    ("Who smiles?", "The child \U0001F600 smiles at the dog while the "
     "old man reads his newspaper in the garden."),
]


@pytest.mark.parametrize("max_answer_length", [30, 2])
def test_squad_same_answers_and_character_offsets(tokenizer, tmp_path,
                                                  max_answer_length):
  """Long contexts (several windows, the max-context rule), and with
  max_answer_length=2 answers at the length limit."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import squad_serving  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_data  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_answers  # pylint: disable=g-import-not-at-top
  seq, stride, query = 32, 8, 12
  path = tmp_path / "predict.json"
  path.write_text(json.dumps({"version": "1.1", "data": [{
      "title": "t", "paragraphs": [
          {"context": c, "qas": [{"id": f"q{i}", "question": q,
                                  "answers": []}]}
          for i, (q, c) in enumerate(SQUAD_CASES)]}]}), encoding="utf-8")
  # run_squad's path: the reader, the windows, the model, postprocess.
  examples = squad_data.read_squad_examples(str(path), False, False)
  features = squad_data.convert_examples_to_features(
      examples, tokenizer, seq, stride, query, False)
  assert len(features) > len(examples)  # long contexts: several windows
  keras.utils.set_random_seed(3)
  model = finetuning_models.BertSpanLabeler.from_bert_config(_config())
  logits = model(squad_data.feature_arrays(features), training=False)
  predictions, _, _ = squad_answers.postprocess(
      examples, features, np.asarray(logits["start_logits"]).tolist(),
      np.asarray(logits["end_logits"]).tolist(), tokenizer.vocab,
      n_best_size=20, max_answer_length=max_answer_length)
  squad_serving.export_squad_model(
      str(tmp_path / "squad"), model, testing.VOCAB, seq_length=seq,
      doc_stride=stride, max_query_length=query,
      max_answer_length=max_answer_length)
  out = _load(tmp_path / "squad" / "1")(
      question=tf.constant([q for q, _ in SQUAD_CASES]),
      context=tf.constant([c for _, c in SQUAD_CASES]))
  checked_non_ascii = 0
  for i, (_, context) in enumerate(SQUAD_CASES):
    answer = out["answer"][i].numpy().decode()
    assert answer == predictions[f"q{i}"], (i, answer, predictions)
    start, end = int(out["start_char"][i]), int(out["end_char"][i])
    # Character offsets: the answer is the context's str slice, its words
    # joined by one space (words split as the original's reader splits
    # them: on " ", tab, CR, LF and U+202F; a no-break space stays).
    words = re.split("[ \t\r\n\u202f]+", context[start:end].strip())
    assert " ".join(words) == answer, (i, start, end)
    checked_non_ascii += not answer.isascii()
  assert checked_non_ascii >= (2 if max_answer_length > 2 else 1), predictions
  if max_answer_length == 2:  # spans at the limit were chosen
    pieces = tokenizer.tokenize(tf.constant(list(predictions.values())))
    assert 2 in pieces.row_lengths().numpy().tolist()
