"""A TF Serving model for a reranker: one query and N passages in, N scores out.

`export_reranker` writes `<export_dir>/<version>/`, serving.py's SavedModel
for text pairs (the same tokenizer, packing and model call as training,
`serving.ServingModule` with `text_pair=True`) with one more signature:

  rerank           query string, a scalar or [1]; passages string [N]
                   -> each (query, passage) packed `[CLS] query [SEP]
                   passage [SEP]` as training packed it, then the model.
  serving_default  text [B], text_b [B] string: the pairs themselves.
  serving_ids      input_word_ids, input_mask, input_type_ids int32 [B, T].

Each returns `scores` float32 [N] (the sigmoid of the logit, what
sentence-transformers' `CrossEncoder.predict` returns for a one-label
model) and `logits` [N] (run_reranker's `rerank_outputs`). With
`int8_content`, `model.tflite` (the serving_ids model with int8 weights,
its logits [B, 1]) is published with it. Loading it needs
`import tensorflow_text` first.

    export_reranker("/models/rerank", cross_encoder, "vocab.txt",
                    do_lower_case=True, seq_length=128)
    rerank = tf.saved_model.load(path).signatures["rerank"]
    rerank(query=tf.constant("how do I open a file"),
           passages=tf.constant(["open() returns ...", "..."]))["scores"]
"""

import os

import tensorflow as tf

from export import litert_int8
from export import saved_model_io
from export import serving
from official_bert.tasks.reranking import reranking_task

SIGNATURE_RERANK = "rerank"
WARMUP_QUERY = "How does BERT read a sentence?"


class RerankServingModule(serving.ServingModule):
  """`serving.ServingModule` for text pairs, plus the `rerank` signature."""

  def __init__(self, model, vocab_file, do_lower_case, seq_length):
    super().__init__(model, reranking_task.rerank_outputs, vocab_file,
                     do_lower_case, seq_length, text_pair=True)
    rerank = tf.function(self._rerank, autograph=False, input_signature=[
        tf.TensorSpec(None, tf.string, name="query"),
        tf.TensorSpec([None], tf.string, name="passages")])
    self._functions.value[SIGNATURE_RERANK] = rerank

  def _rerank(self, query, passages):
    one = tf.reshape(query, [])  # a scalar or [1]: one query
    queries = tf.fill(tf.shape(passages), one)                     # [N]
    return self._serve_pair(queries, passages)


def export_reranker(export_dir, model, vocab_file, *, do_lower_case=True,
                    seq_length=128, version=None, int8_content=None,
                    warmup_texts=serving.DEFAULT_WARMUP_TEXTS):
  """Writes `model` (a `BertCrossEncoder`) as TF Serving version
  `<export_dir>/<version>/` (see the module docstring); with
  `int8_content` (LiteRT bytes, the fine-tuning programs' int8 model) its
  model.tflite too, both at once. Returns the version directory."""
  encoder = model.encoder
  if not 3 <= seq_length <= encoder.max_position_embeddings:
    raise ValueError(f"seq_length {seq_length} must be in [3, "
                     f"{encoder.max_position_embeddings}] (the model's "
                     "max_position_embeddings)")
  saved_model_io.check_vocab(vocab_file, encoder.vocab_size)
  version = serving.next_version(export_dir) if version is None else version
  module = RerankServingModule(model, vocab_file, do_lower_case, seq_length)
  texts = list(warmup_texts)
  requests = serving._warmup_requests(texts, text_pair=True)  # pylint: disable=protected-access
  if texts:
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = SIGNATURE_RERANK
    request.inputs["query"].CopyFrom(tf.make_tensor_proto(WARMUP_QUERY))
    request.inputs["passages"].CopyFrom(tf.make_tensor_proto(texts))
    requests.append(request)
  if int8_content is not None:  # what model.tflite serves too
    requests = [r for r in requests
                if r.model_spec.signature_name == serving.SIGNATURE_IDS]

  def after_save(path):
    serving.write_warmup_requests(path, requests)
    if int8_content is not None:
      litert_int8.write(path, int8_content)

  return saved_model_io.atomic_save(
      module, os.path.join(export_dir, str(version)),
      signatures=module.signatures(), after_save=after_save)
