"""A TF Serving model for NER: raw text in, words with tags and offsets out.

`export_ner_model` writes `<export_dir>/<version>/`, a SavedModel whose
`serving_default` signature runs, in the graph (core TF + TF Text ops only):

  text [B] string
    -> words: split on whitespace (as the CoNLL file's words),
    -> WordPiece per word, words packed into windows of `seq_length` exactly
       as run_ner.py packs a file's sentences (tasks/ner.encode_words),
    -> the token classifier, each word's tag from its first piece.

Outputs, padded to the longest text's word count W (ragged tensors cannot
be signature outputs; `num_words` says how many entries of a row are real):

  words       string [B, W]   the words ("" as padding)
  tags        string [B, W]   predicted tags ("" as padding)
  scores      float32 [B, W]  the tag's softmax probability (0 padding)
  start_char  int32 [B, W]    character (Unicode code point) offsets of the
  end_char    int32 [B, W]      word in its text, end exclusive (-1 padding)
  num_words   int32 [B]

Text longer than one window is windowed, never truncated: every word gets a
tag. Loading it needs `import tensorflow_text` first.

    export_ner_model("/models/ner", token_classifier, labels,
                     vocab_file="vocab.txt", do_lower_case=True,
                     seq_length=128)
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from export import saved_model_io
from export import serving
from export import serving_weights
from export import tfhub_modules
from official_bert.data import tokenization
from official_bert.tasks.ner import ner_data

WARMUP_TEXTS = ("Call os.path.join() on the PATH entries .",
                "EU rejects German call to boycott British lamb .")


class NerServingModule(tf.__internal__.tracking.AutoTrackable):
  """The exported object: model, tokenizer, tag names and the signature."""

  def __init__(self, model, labels, vocab_file, do_lower_case, seq_length,
               xla_single_text=False):
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    self._tokenizer = tfhub_modules.Untracked(tokenizer)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self._model = tfhub_modules.Untracked(model)
    # Plain tf.Variables, the feed-forward kernels as their column blocks
    # (see serving_weights).
    weights = serving_weights.ServingWeights(model)
    self._weights = tfhub_modules.Untracked(weights)
    self.variables = weights.variables
    self._labels = list(labels)
    self.seq_length = int(seq_length)
    # One text of one window: the model XLA-compiled (serving.OneRowXla).
    self._xla = tfhub_modules.Untracked(
        serving.OneRowXla(self._model_call, seq_length)
        if xla_single_text else None)
    serve = tf.function(
        self._serve, autograph=False,
        input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    self._signatures = tfhub_modules.Untracked(
        {serving.SIGNATURE_TEXT: serve.get_concrete_function()})

  def signatures(self):
    return dict(self._signatures.value)

  def bucket_lengths(self):
    """With xla_single_text, the compiled lengths (else [])."""
    return [] if self._xla.value is None else self._xla.value.bucket_lengths()

  def _model_call(self, inputs):
    with self._weights.value.scope():
      return self._model.value(inputs, training=False)

  def _serve(self, text):
    words, byte_start, byte_end = (
        tf_text.WhitespaceTokenizer().tokenize_with_offsets(text))  # [B, (W)]
    encoded = ner_data.encode_words(self._tokenizer.value, words,
                               self.seq_length)
    inputs = {name: encoded[name] for name in
              ("input_word_ids", "input_mask", "input_type_ids")}
    if self._xla.value is None:
      logits = self._model_call(inputs)
    else:
      logits = self._xla.value(inputs, self._model_call)
    logits = tf.cast(logits, tf.float32)                           # [R, T, C]
    per_word = tf.gather_nd(logits, tf.stack(
        [encoded["word_window"], encoded["word_position"]], 1))    # [N, C]
    ids = tf.argmax(per_word, -1)                                  # [N]
    probabilities = tf.nn.softmax(per_word, -1)
    scores = tf.gather(probabilities, ids, batch_dims=1)           # [N]
    tags = tf.gather(tf.constant(self._labels), ids)               # [N]
    # Byte offsets -> character offsets: count the characters before.
    row_text = tf.gather(text, words.value_rowids())               # [N]
    before = byte_start.flat_values
    start = tf.strings.length(
        tf.strings.substr(row_text, tf.zeros_like(before), before,
                          unit="BYTE"), unit="UTF8_CHAR")
    end = start + tf.strings.length(words.flat_values, unit="UTF8_CHAR")

    def padded(values, default):
      return words.with_flat_values(values).to_tensor(default_value=default)

    return {"words": padded(words.flat_values, ""),
            "tags": padded(tags, ""),
            "scores": padded(scores, 0.0),
            "start_char": padded(tf.cast(start, tf.int32), -1),
            "end_char": padded(tf.cast(end, tf.int32), -1),
            "num_words": tf.cast(words.row_lengths(), tf.int32)}


def export_ner_model(export_dir, model, labels, vocab_file, *,
                     do_lower_case=True, seq_length=128, version=None,
                     warmup_texts=WARMUP_TEXTS, xla_single_text=False):
  """Writes a token classifier as TF Serving version
  `<export_dir>/<version>/` (see the module docstring).

  Args:
    export_dir: the model's base path; created if missing.
    model: a `BertTokenClassifier` (logits [R, T, len(labels)]).
    labels: the tag names, in the classifier's output order.
    vocab_file, do_lower_case: the model's vocabulary and casing.
    seq_length: the window length; at most max_position_embeddings.
    version: integer version; default one more than the newest present.
    warmup_texts: texts of the TF Serving warmup request (empty: none).
    xla_single_text: a request of one text that fits one window runs the
      model XLA-compiled (`serving.OneRowXla`; TF Serving needs
      `--xla_cpu_compilation_enabled`); the warmup then also sends one text
      per length bucket, so each is compiled before the first request.

  Returns:
    The path of the written version directory.
  """
  encoder = model.encoder
  if seq_length > encoder.max_position_embeddings or seq_length < 3:
    raise ValueError(f"seq_length {seq_length} must be in [3, "
                     f"{encoder.max_position_embeddings}] (the model's "
                     "max_position_embeddings)")
  if len(labels) != model.num_classes:
    raise ValueError(f"{len(labels)} labels for a model with "
                     f"{model.num_classes} outputs; pass its label_list")
  saved_model_io.check_vocab(vocab_file, encoder.vocab_size)
  version = serving.next_version(export_dir) if version is None else version
  module = NerServingModule(model, labels, vocab_file, do_lower_case,
                            seq_length, xla_single_text)
  requests = _warmup_requests(list(warmup_texts))
  if xla_single_text and warmup_texts:
    word = serving.warmup_word(vocab_file, do_lower_case)
    for length in module.bucket_lengths():  # [CLS] words [SEP]
      requests += _warmup_requests([" ".join([word] * max(length - 2, 1))])
  return saved_model_io.atomic_save(
      module, os.path.join(export_dir, str(version)),
      signatures=module.signatures(),
      after_save=lambda path: serving.write_warmup_requests(path, requests))


def _warmup_requests(texts):
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  if not texts:
    return []
  request = predict_pb2.PredictRequest()
  request.model_spec.signature_name = serving.SIGNATURE_TEXT
  request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts))
  return [request]
