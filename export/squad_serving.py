"""A TF Serving model that answers a question from a context, text to text.

`export_squad_model` writes `<export_dir>/<version>/`, a SavedModel whose
`serving_default` signature does all of run_squad.py's prediction in the
graph (core TF + TF Text ops, the vocab as an asset):

  inputs   question [B] string, context [B] string
  outputs  answer [B] string: the answer's text, cut from the context
           score [B] float32: its start + end logit (0 without an answer)
           start_char, end_char [B] int32: the answer's character range
             [start, end) in the context (-1 without an answer)
           null_score_diff [B] float32: the [CLS] ("no answer") score minus
             the answer's score (run_squad's null_odds.json)
           no_answer [B] bool: v2.0 models only, null_score_diff >
             null_score_diff_threshold (then answer is "")

As run_squad.py (tasks/squad/squad_data.py), with the same functions: the context is
split into words on whitespace, each word into WordPieces
(`squad_data.context_pieces`); the question's pieces are cut to
max_query_length; the context's pieces are covered by windows of
seq_length - len(question) - 3 pieces, doc_stride apart, each piece
predicted from the window that gives it the most context
(`squad_windows.windows`), all run through the model as one batch;
candidates are the n_best_size best starts and ends of each window, a start
at a piece whose window gives it the most context, at most
max_answer_length pieces (`squad_windows.span_candidates`); the best start +
end logit wins, the first listed on ties. Only mapping the span back to
text differs (below): run_squad does it in Python (`squad_answers.postprocess`,
`get_final_text`), the graph with the pieces' byte offsets.

Limits (tested against predictions.json on SQuAD v2.0 sample questions):
- The answer is cut from the context by the pieces' byte offsets, where
  run_squad maps the pieces' text back with get_final_text. A span holding
  an [UNK] piece (a character missing from the vocab: common in CJK text)
  is its whole words in both, as get_final_text falls back to them. They
  differ where get_final_text falls back for another reason: a span
  starting at the second of two identical basic tokens in one word
  ("ma-Ma"), or a basic token that normalises to a different length (e.g.
  a word in NFD form).
- Words are joined by one space, as run_squad's answers; other whitespace
  inside an answer is not kept. start_char/end_char still index the context.
- With no valid span (an empty context) the answer is "" (run_squad writes
  "empty" for v1.1 models).
- Span scores are float32 sums here, Python float (float64) sums in
  run_squad: spans whose scores differ only by float32 rounding can be
  ordered differently.
- All windows of a request run in one batch: a very long context costs
  memory in proportion to its windows (each a seq_length model input).
"""

import os

import tensorflow as tf

from export import saved_model_io
from export import serving
from export import serving_weights
from export import tfhub_modules
from official_bert.data import tokenization
from official_bert.tasks.squad import squad_data
from official_bert.tasks.squad import squad_windows

SIGNATURE = "serving_default"
DEFAULT_WARMUP = (("Who wrote it?", "It was written by Guido van Rossum."),)


class SquadServingModule(tf.__internal__.tracking.AutoTrackable):
  """The exported object: model, tokenizer and the question-answer signature.

  Args:
    model: a `BertSpanLabeler` (inputs dict -> start_logits, end_logits).
    vocab_file, do_lower_case: the model's vocabulary and casing.
    seq_length, doc_stride, max_query_length, n_best_size,
    max_answer_length, version_2_with_negative, null_score_diff_threshold:
      as run_squad.py's flags.
  """

  def __init__(self, model, vocab_file, do_lower_case, seq_length,
               doc_stride=128, max_query_length=64, n_best_size=20,
               max_answer_length=30, version_2_with_negative=False,
               null_score_diff_threshold=0.0, xla_single_text=False):
    if seq_length <= max_query_length + 3:
      raise ValueError(f"seq_length {seq_length} leaves no room for the "
                       f"context after max_query_length={max_query_length}")
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    self._tokenizer = tfhub_modules.Untracked(tokenizer)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self._model = tfhub_modules.Untracked(model)
    # Plain tf.Variables, the feed-forward kernels as their column blocks
    # (see serving_weights).
    weights = serving_weights.ServingWeights(model)
    self._weights = tfhub_modules.Untracked(weights)
    self.variables = weights.variables
    self.seq_length = int(seq_length)
    self.doc_stride = int(doc_stride)
    self.max_query_length = int(max_query_length)
    self.n_best_size = int(n_best_size)
    self.max_answer_length = int(max_answer_length)
    self.version_2_with_negative = bool(version_2_with_negative)
    self.null_score_diff_threshold = float(null_score_diff_threshold)
    # One question whose context fits one window: the model XLA-compiled
    # (serving.OneRowXla).
    self._xla = tfhub_modules.Untracked(
        serving.OneRowXla(self._model_call, seq_length)
        if xla_single_text else None)
    answer = tf.function(self.answer, autograph=False, input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="context")])
    self._signatures = tfhub_modules.Untracked(
        {SIGNATURE: answer.get_concrete_function()})

  def signatures(self):
    return dict(self._signatures.value)

  def bucket_lengths(self):
    """With xla_single_text, the compiled lengths (else [])."""
    return [] if self._xla.value is None else self._xla.value.bucket_lengths()

  def _model_call(self, inputs):
    with self._weights.value.scope():
      return self._model.value(inputs, training=False)

  def answer(self, question, context):
    """question, context [B] -> the signature's outputs (module docstring)."""
    tokenizer = self._tokenizer.value
    length = self.seq_length
    num_texts = tf.shape(context, out_type=tf.int64)[0]
    query = tokenizer.tokenize(question)[:, :self.max_query_length]  # [B, (Q)]
    pieces = squad_data.context_pieces(tokenizer, context)
    doc = pieces["ids"].merge_dims(1, 2)                          # [B, (N)]
    piece_start = pieces["piece_start"].flat_values                # [Nt]
    piece_end = pieces["piece_end"].flat_values
    piece_word = pieces["ids"].values.value_rowids()              # [Nt]

    # ---- windows: [CLS] query [SEP] context piece [SEP], run_squad's own
    windows = squad_windows.windows(query, pieces["ids"], length,
                                    self.doc_stride, tokenizer.cls_id,
                                    tokenizer.sep_id)
    inputs = {name: windows[name] for name in (
        "input_word_ids", "input_mask", "input_type_ids")}
    if self._xla.value is None:
      outputs = self._model_call(inputs)
    else:
      outputs = self._xla.value(inputs, self._model_call)
    start_logits = tf.cast(outputs["start_logits"], tf.float32)   # [Wn, T]
    end_logits = tf.cast(outputs["end_logits"], tf.float32)
    text_of = windows["text"]                                      # [Wn]
    num_windows = tf.shape(text_of, out_type=tf.int64)[0]
    in_doc = windows["piece"] >= 0                                 # [Wn, T]
    is_max_context = windows["is_max_context"]
    total_pieces = tf.shape(piece_start, out_type=tf.int64)[0]
    # Each position's piece among all texts' pieces (total_pieces outside).
    piece = tf.where(in_doc, windows["piece"] + tf.gather(
        doc.row_splits[:-1], text_of)[:, None], total_pieces)      # [Wn, T]

    # ---- best span: run_squad's candidates (the top-n starts and ends of
    # each window), the best sum; on ties the earlier window, then the
    # candidate listed first, as run_squad's stable sort.
    starts, ends, valid = squad_windows.span_candidates(
        start_logits, end_logits, in_doc, is_max_context, self.n_best_size,
        self.max_answer_length)                                    # [Wn, K]
    top = starts.shape[1]
    pair = (tf.gather(start_logits, starts, batch_dims=1)[:, :, None]
            + tf.gather(end_logits, ends, batch_dims=1)[:, None, :])
    pair = tf.reshape(tf.where(valid, pair, -float("inf")),
                      [num_windows, top * top])                    # [Wn, K*K]
    window_best = tf.reduce_max(pair, axis=1)                      # [Wn]
    window_arg = tf.reduce_min(tf.where(
        tf.equal(pair, window_best[:, None]), tf.range(top * top),
        top * top), axis=1)                                        # [Wn]
    text_best = tf.math.unsorted_segment_max(window_best, text_of, num_texts)
    is_best = (window_best >= tf.gather(text_best, text_of)) & (
        window_best > -float("inf"))
    chosen = tf.math.unsorted_segment_min(
        tf.where(is_best, tf.range(num_windows), num_windows), text_of,
        num_texts)                                                 # [B]
    has_span = chosen < num_windows
    chosen = tf.where(has_span, chosen, 0)
    arg = tf.cast(tf.gather(window_arg, chosen), tf.int64)
    flat_piece = tf.reshape(piece, [-1])                           # [Wn * T]
    start_at = tf.cast(tf.gather(tf.reshape(starts, [-1]),
                                 chosen * top + arg // top), tf.int64)
    end_at = tf.cast(tf.gather(tf.reshape(ends, [-1]),
                               chosen * top + arg % top), tf.int64)
    start_piece = tf.gather(flat_piece, chosen * length + start_at)
    end_piece = tf.gather(flat_piece, chosen * length + end_at)
    start_piece = tf.where(has_span, start_piece, total_pieces)
    end_piece = tf.where(has_span, end_piece, total_pieces)
    pad = tf.zeros([1], tf.int64)
    start_byte = tf.gather(tf.concat([piece_start, pad], 0), start_piece)
    end_byte = tf.gather(tf.concat([piece_end, pad], 0), end_piece)
    first_word = tf.gather(tf.concat([piece_word, pad], 0), start_piece)
    last_word = tf.where(
        has_span, tf.gather(tf.concat([piece_word, pad], 0), end_piece), -1)
    # A span holding an [UNK] piece is its whole words, as run_squad's
    # get_final_text gives it (the original cannot find "[UNK]" in the
    # context's basic tokens and falls back to the words).
    unk = tf.cast(tf.equal(doc.flat_values, tokenizer.unk_id), tf.int64)
    unk_before = tf.concat([pad, tf.cumsum(unk)], 0)               # [Nt + 1]
    whole_words = has_span & (
        tf.gather(unk_before, tf.minimum(end_piece + 1, total_pieces))
        > tf.gather(unk_before, start_piece))
    word_starts = tf.concat([pieces["word_start"].flat_values, pad], 0)
    word_ends = tf.concat([pieces["word_end"].flat_values, pad], 0)
    start_byte = tf.where(whole_words, tf.gather(word_starts, first_word),
                          start_byte)
    end_byte = tf.where(whole_words, tf.gather(
        word_ends, tf.maximum(last_word, 0)), end_byte)

    # ---- the text: the spanned words, the first and last cut to the span
    # pieces, joined by single spaces (as run_squad's answers).
    words = tf.ragged.range(first_word, last_word + 1)             # [B, (w)]
    word_start = tf.gather(pieces["word_start"].flat_values, words)
    word_end = tf.gather(pieces["word_end"].flat_values, words)
    cut_start = tf.maximum(word_start, start_byte[:, None])
    cut_end = tf.minimum(word_end, end_byte[:, None])
    parts = tf.strings.substr(
        tf.gather(context, words.value_rowids()), cut_start.flat_values,
        cut_end.flat_values - cut_start.flat_values)
    answer = tf.strings.reduce_join(words.with_flat_values(parts), axis=1,
                                    separator=" ")
    score = tf.where(has_span, tf.gather(text_best, tf.range(num_texts)), 0.0)
    null = tf.math.unsorted_segment_min(
        start_logits[:, 0] + end_logits[:, 0], text_of, num_texts)
    null_score_diff = null - score

    def chars(byte_offset):  # bytes -> characters of the context
      return tf.strings.length(tf.strings.substr(
          context, tf.zeros_like(byte_offset), byte_offset),
                               unit="UTF8_CHAR")
    result = {"answer": answer, "score": score,
              "start_char": tf.where(has_span, chars(start_byte), -1),
              "end_char": tf.where(has_span, chars(end_byte), -1),
              "null_score_diff": null_score_diff}
    if self.version_2_with_negative:
      no_answer = ~has_span | (null_score_diff > self.null_score_diff_threshold)
      result["no_answer"] = no_answer
      result["answer"] = tf.where(no_answer, "", answer)
      for name in ("start_char", "end_char"):
        result[name] = tf.where(no_answer, -1, result[name])
    return result


def export_squad_model(export_dir, model, vocab_file, *, do_lower_case=True,
                       seq_length=384, doc_stride=128, max_query_length=64,
                       n_best_size=20, max_answer_length=30,
                       version_2_with_negative=False,
                       null_score_diff_threshold=0.0, version=None,
                       warmup=DEFAULT_WARMUP, log=None,
                       xla_single_text=False):
  """Writes the question-answering SavedModel as `<export_dir>/<version>/`.

  Args as `SquadServingModule`'s; `version` default one more than the
  newest present; `warmup` (question, context) pairs sent by TF Serving
  before the version is ready; `xla_single_text`: a request of one question
  whose context fits one window runs the model XLA-compiled
  (`serving.OneRowXla`; TF Serving needs `--xla_cpu_compilation_enabled`),
  and the warmup also sends one such request per length bucket. Returns the
  version directory.
  """
  max_positions = model.encoder.max_position_embeddings
  if seq_length > max_positions:
    raise ValueError(f"seq_length {seq_length} exceeds the model's "
                     f"max_position_embeddings={max_positions}")
  saved_model_io.check_vocab(vocab_file, model.encoder.vocab_size)
  version = serving.next_version(export_dir) if version is None else int(version)
  log = log or (lambda message: None)
  log(f"tracing signature {SIGNATURE}")
  module = SquadServingModule(
      model, vocab_file, do_lower_case, seq_length, doc_stride,
      max_query_length, n_best_size, max_answer_length,
      version_2_with_negative, null_score_diff_threshold, xla_single_text)
  requests = _warmup_requests(list(warmup))
  if xla_single_text and warmup:
    word = serving.warmup_word(vocab_file, do_lower_case)
    for length in module.bucket_lengths():  # [CLS] q [SEP] context [SEP]
      requests += _warmup_requests(
          [(word, " ".join([word] * max(length - 4, 1)))])
  log(f"writing version {version} under {export_dir}")
  return saved_model_io.atomic_save(
      module, os.path.join(export_dir, str(version)),
      signatures=module.signatures(),
      after_save=lambda path: serving.write_warmup_requests(path, requests))


def _warmup_requests(pairs):
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  if not pairs:
    return []
  request = predict_pb2.PredictRequest()
  request.model_spec.signature_name = SIGNATURE
  request.inputs["question"].CopyFrom(
      tf.make_tensor_proto([q for q, _ in pairs]))
  request.inputs["context"].CopyFrom(
      tf.make_tensor_proto([c for _, c in pairs]))
  return [request]
