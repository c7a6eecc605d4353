"""A TensorFlow Serving model directory: raw text in, named outputs out.

`export_saved_model` writes `<export_dir>/<version>/`, a SavedModel with two
explicit signatures and everything it needs inside (vocab as an asset,
tokenizer as TF + TF Text ops, warmup requests):

  serving_default   text [B] string (+ text_b [B] with `text_pair=True`)
                    -> tokenized, [CLS] a [SEP] (b [SEP]), trimmed
                    round-robin to `seq_length`, padded, then the model.
  serving_ids       input_word_ids, input_mask, input_type_ids int32 [B, T]
                    -> the model; T longer than `seq_length` is cut to it.

Both return the same named float32 outputs, chosen by `outputs`:
`encoder_outputs` (pooled_output [B, H], sequence_output [B, T, H]) for a
pretrained encoder, `classifier_outputs` (logits, probabilities [B, C]) or
`regression_outputs` (predictions [B]) for fine-tuned models. Text longer
than the model allows is truncated, never an error at serving time.

Fine-tuned classifier (what run_classifier.py calls):

    serving.export_saved_model(
        "/models/sst2", classifier_model, vocab_file="vocab.txt",
        do_lower_case=True, seq_length=128,
        outputs=serving.classifier_outputs, text_pair=False)

Pretrained checkpoint: `export_pretrained(...)` (export_saved_model.py).
"""

import os
import re

import tensorflow as tf

from export import saved_model_io
from export import tfhub_modules
from official_bert.modeling import encoder as encoder_lib
from official_bert.data import tokenization

SIGNATURE_TEXT = "serving_default"
SIGNATURE_IDS = "serving_ids"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# Sent to the model by TF Serving before it reports the version ready, so
# the first real request does not pay for graph optimisation.
DEFAULT_WARMUP_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "BERT reads the whole sentence at once.",
)


def encoder_outputs(model_outputs):
  """A BertEncoder's outputs -> `pooled_output`, `sequence_output`."""
  return {"pooled_output": model_outputs["pooled_output"],
          "sequence_output": model_outputs["sequence_output"]}


def classifier_outputs(model_outputs):
  """Logits [B, C] (or a dict with `logits`) -> `logits`, `probabilities`."""
  if isinstance(model_outputs, dict):
    model_outputs = model_outputs["logits"]
  logits = tf.cast(model_outputs, tf.float32)
  return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}


def regression_outputs(model_outputs):
  """A one-output regression head [B, 1] -> `predictions` [B]."""
  if isinstance(model_outputs, dict):
    model_outputs = model_outputs["logits"]
  return {"predictions": tf.cast(model_outputs, tf.float32)[:, 0]}


class ServingModule(tf.__internal__.tracking.AutoTrackable):
  """The exported object: the model, the tokenizer and both signatures.

  Args:
    model: a Keras model (or callable) taking the encoder-input dict and
      `training=`.
    outputs: `fn(model_outputs) -> dict of named Tensors`.
    vocab_file, do_lower_case: the model's vocabulary and casing.
    seq_length: packed length of text requests and the longest id request.
    text_pair: whether `serving_default` takes `text_b` too.
  """

  def __init__(self, model, outputs, vocab_file, do_lower_case, seq_length,
               text_pair=False):
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    self._tokenizer = tfhub_modules.Untracked(tokenizer)
    self._ids = (tokenizer.cls_id, tokenizer.sep_id)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self._model = tfhub_modules.Untracked(model)
    # Tracked as plain tf.Variables (see tfhub_modules.tf_variables).
    self.variables, _ = tfhub_modules.tf_variables(model)
    self._outputs = outputs
    self.seq_length = seq_length
    text = tf.TensorSpec([None], tf.string, name="text")
    if text_pair:
      text_b = tf.TensorSpec([None], tf.string, name="text_b")
      serve_text = tf.function(self._serve_pair,
                               input_signature=[text, text_b], autograph=False)
    else:
      serve_text = tf.function(self._serve_text, input_signature=[text],
                               autograph=False)
    serve_ids = tf.function(
        self._serve_ids, autograph=False, input_signature=[
            tf.TensorSpec([None, None], tf.int32, name=name)
            for name in encoder_lib.INPUT_NAMES])
    # Saved as signatures only: a tracked tf.function would be traced again
    # by tf.saved_model.save (about half the export time).
    self._signatures = tfhub_modules.Untracked({
        SIGNATURE_TEXT: serve_text.get_concrete_function(),
        SIGNATURE_IDS: serve_ids.get_concrete_function()})

  def signatures(self):
    return dict(self._signatures.value)

  def _serve_text(self, text):
    return self._run(self._pack([text]))

  def _serve_pair(self, text, text_b):
    return self._run(self._pack([text, text_b]))

  def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
    # Longer requests are cut to seq_length (the model cannot take more
    # positions); shorter ones run at their own length.
    inputs = {"input_word_ids": input_word_ids, "input_mask": input_mask,
              "input_type_ids": input_type_ids}
    return self._run({name: tensor[:, :self.seq_length]
                      for name, tensor in inputs.items()})

  def _pack(self, texts):
    segments = [self._tokenizer.value.tokenize(t) for t in texts]
    return tfhub_modules.pack_inputs(segments, self.seq_length, *self._ids)

  def _run(self, inputs):
    named = self._outputs(self._model.value(inputs, training=False))
    return {name: tf.cast(value, tf.float32) if value.dtype.is_floating
            else value for name, value in named.items()}


def next_version(export_dir):
  """1 + the largest numeric version under `export_dir` (1 if none)."""
  if not tf.io.gfile.isdir(export_dir):
    return 1
  versions = [int(name) for name in tf.io.gfile.listdir(export_dir)
              if re.fullmatch(r"\d+/?", name)]
  return max(versions, default=0) + 1


def export_saved_model(export_dir, model, vocab_file, *, do_lower_case=True,
                       seq_length=128, outputs=encoder_outputs,
                       text_pair=False, version=None,
                       warmup_texts=DEFAULT_WARMUP_TEXTS, log=None):
  """Writes `model` as TF Serving version `<export_dir>/<version>/`.

  Args:
    export_dir: the model's base path (`--model_base_path` of
      tensorflow_model_server); created if missing.
    model: a Keras model taking the dict `input_word_ids`, `input_mask`,
      `input_type_ids` and `training=`: a `BertEncoder` or a fine-tuned model.
    vocab_file: the model's vocab.txt (copied into the SavedModel's assets).
    do_lower_case: True for uncased models.
    seq_length: packed length of text requests; at most the model's
      max_position_embeddings.
    outputs: maps the model's outputs to the named serving outputs:
      `encoder_outputs`, `classifier_outputs`, `regression_outputs` or your
      own `fn(model_outputs) -> dict`.
    text_pair: `serving_default` takes `text` and `text_b` (sentence pairs).
    version: integer version; default one more than the newest present.
    warmup_texts: texts of the warmup requests (empty: none).
    log: optional `fn(message)` told about each step (the CLI prints them).

  Returns:
    The path of the written version directory.
  """
  max_positions = getattr(model, "max_position_embeddings", None)
  if max_positions is None and hasattr(model, "encoder"):
    max_positions = model.encoder.max_position_embeddings
  if max_positions is not None and seq_length > max_positions:
    raise ValueError(f"seq_length {seq_length} exceeds the model's "
                     f"max_position_embeddings={max_positions}; pass "
                     f"seq_length <= {max_positions}")
  if seq_length < 3:
    raise ValueError(f"seq_length must be at least 3, got {seq_length}")
  vocab_size = getattr(model, "vocab_size", None)
  if vocab_size is None and hasattr(model, "encoder"):
    vocab_size = model.encoder.vocab_size
  if vocab_size is not None:
    saved_model_io.check_vocab(vocab_file, vocab_size)
  version = next_version(export_dir) if version is None else int(version)
  log = log or (lambda message: None)
  log(f"tracing signatures {SIGNATURE_TEXT}, {SIGNATURE_IDS}")
  module = ServingModule(model, outputs, vocab_file, do_lower_case,
                         seq_length, text_pair)
  requests = _warmup_requests(list(warmup_texts), text_pair)
  log(f"writing version {version} under {export_dir}")
  return saved_model_io.atomic_save(
      module, os.path.join(export_dir, str(version)),
      signatures=module.signatures(),
      after_save=lambda path: write_warmup_requests(path, requests))


def export_pretrained(export_dir, bert_config_file, init_checkpoint,
                      vocab_file, **kwargs):
  """`export_saved_model` of the encoder in a pretraining checkpoint.

  Serves `pooled_output` and `sequence_output`; `kwargs` as
  `export_saved_model`'s.
  """
  if kwargs.get("log"):
    kwargs["log"](f"restoring the encoder from {init_checkpoint}")
  encoder, _ = saved_model_io.load_pretrained(
      bert_config_file, init_checkpoint, with_mlm=False)
  return export_saved_model(export_dir, encoder, vocab_file, **kwargs)


def _warmup_requests(texts, text_pair):
  """PredictRequests for both signatures, built from `texts`."""
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  if not texts:
    return []
  text_request = predict_pb2.PredictRequest()
  text_request.model_spec.signature_name = SIGNATURE_TEXT
  text_request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts))
  if text_pair:
    text_request.inputs["text_b"].CopyFrom(
        tf.make_tensor_proto(texts[1:] + texts[:1]))
  ids_request = predict_pb2.PredictRequest()
  ids_request.model_spec.signature_name = SIGNATURE_IDS
  # [CLS] [SEP] [PAD]: the smallest valid id request (ids 101/102 in BERT's
  # vocab would not fit every vocab, so use 0s with a full mask).
  for name, row in (("input_word_ids", [0, 0, 0]),
                    ("input_mask", [1, 1, 0]),
                    ("input_type_ids", [0, 0, 0])):
    ids_request.inputs[name].CopyFrom(
        tf.make_tensor_proto([row], dtype=tf.int32))
  return [text_request, ids_request]


def write_warmup_requests(saved_model_dir, requests):
  """Writes `assets.extra/tf_serving_warmup_requests` (PredictionLogs)."""
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  if not requests:
    return
  path = os.path.join(saved_model_dir, WARMUP_FILE)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.TFRecordWriter(path) as writer:
    for request in requests:
      log = prediction_log_pb2.PredictionLog(
          predict_log=prediction_log_pb2.PredictLog(request=request))
      writer.write(log.SerializeToString())
