"""A TensorFlow Serving model directory: raw text in, named outputs out.

`export_saved_model` writes `<export_dir>/<version>/`, a SavedModel with
explicit signatures and everything it needs inside (vocab as an asset,
tokenizer as TF + TF Text ops, warmup requests):

  serving_default   text [B] string (+ text_b [B] with `text_pair=True`)
                    -> tokenized, [CLS] a [SEP] (b [SEP]), trimmed
                    round-robin to `seq_length`, padded to the longest text
                    of the request (T <= seq_length), then the model.
  serving_ids       input_word_ids, input_mask, input_type_ids int32 [B, T]
                    -> the model at T; T longer than `seq_length` is cut.
  fill_mask         (with `mlm_head`) text [B] holding "[MASK]" -> the
                    top-k tokens at each [MASK] (see `ServingModule`).

serving_default and serving_ids return the same named outputs, chosen by
`outputs`: `encoder_outputs` (pooled_output [B, H], sequence_output
[B, T, H]) for a pretrained encoder, `classifier_outputs` (logits,
probabilities [B, C]) or `regression_outputs` (predictions [B]) for
fine-tuned models. Whenever the outputs hold `sequence_output`, the
signatures also return `input_mask` int32 [B, T] (which of the T positions
are tokens) and `sentence_embedding` float32 [B, H], the mean of
`sequence_output` over the tokens (L2-normalised with
`normalize_embedding=True`). Text longer than the model allows is
truncated, never an error at serving time; or, with `windowing` (a
`classifier_windows.Windowing`, run_classifier's --doc_stride), a text of
any length is read as windows of `seq_length` and its windows' logits are
combined into one row per text, by the functions training used.

Text requests run at the length they need: T is the longest packed text
of the request (rounded up to a multiple of `pad_multiple`), at most
`seq_length`; with `dynamic_length=False` every text is padded to
`seq_length` as TF-Hub's preprocessor does (for clients or server-side
batching that need one fixed shape). At the token positions both give the
same values.

With `remove_padding` (the default for a model whose call takes it, as
`BertEncoder` and the fine-tuned models of `finetuning_models.py`), the
model's position-wise work runs on the tokens only (see
`official_bert/modeling/packing.py`): a request of texts of different
lengths costs about its tokens, not B x T. The outputs are the same at the
token positions; `sequence_output` is 0 at padding positions.

Fine-tuned classifier (what run_classifier.py calls):

    serving.export_saved_model(
        "/models/sst2", classifier_model, vocab_file="vocab.txt",
        do_lower_case=True, seq_length=128,
        outputs=serving.classifier_outputs, text_pair=False)

Pretrained checkpoint: `export_pretrained(...)`.
"""

import inspect
import os
import re

import tensorflow as tf

from export import litert_int8
from export import quantize_flag
from export import saved_model_io
from export import serving_weights
from export import tfhub_modules
from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import heads as heads_lib
from official_bert.modeling import sentence_embedder
from official_bert.data import segment_packing
from official_bert.data import segments as segments_lib
from official_bert.data import tokenization
from official_bert import cli
from official_bert.tasks.classification import classifier_outputs as classifier_outputs_lib

SIGNATURE_TEXT = "serving_default"
SIGNATURE_IDS = "serving_ids"
SIGNATURE_FILL_MASK = "fill_mask"
MASK_TOKEN = "[MASK]"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# Sent to the model by TF Serving before it reports the version ready, so
# the first real request does not pay for graph optimisation.
DEFAULT_WARMUP_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "BERT reads the whole sentence at once.",
)
DEFAULT_PAD_MULTIPLE = 1
DEFAULT_TOP_K = 5
# With `xla_single_text`, one text is padded to a multiple of this: at most
# seq_length / 16 XLA compilations (one per bucket, made by the warmup).
DEFAULT_SINGLE_TEXT_BUCKET = 16
WEIGHTS_DTYPES = ("float32", "bfloat16")


class OneRowXla:
  """A request of one row (one text's encoder inputs) runs the model as one
  XLA-compiled function; requests of several rows run `plain`.

  The row is cut to its tokens (the mask's sum) and padded up to a multiple
  of `bucket` (at most `seq_length`), so at most seq_length / bucket
  compilations; the outputs' axis 1 of unknown size (the ones that follow
  the input's length) is cut back to the tokens and padded with zeros to
  the request's length, so both branches answer in the same shapes. Used
  by NER's and SQuAD's exports (`xla_single_text`); `ServingModule` keeps
  its own (its rows are already cut to their longest).

  Args:
    call: `call(inputs) -> outputs` (the model with its weights' scope).
    seq_length: the longest row.
    bucket: the padded length's multiple.
  """

  def __init__(self, call, seq_length, bucket=None):
    self._compiled = tf.function(call, jit_compile=True, autograph=False)
    self.seq_length = int(seq_length)
    self.bucket = int(bucket or DEFAULT_SINGLE_TEXT_BUCKET)

  def bucket_lengths(self):
    """The padded lengths a one-row request can have (what a warmup
    compiles)."""
    return list(range(self.bucket, self.seq_length, self.bucket)) + [
        self.seq_length]

  def one_row(self, inputs):
    full = tf.shape(inputs["input_word_ids"])[1]
    static_full = inputs["input_word_ids"].shape[1]
    tokens = tf.reduce_sum(tf.cast(inputs["input_mask"][0], tf.int32))
    padded_length = tf.minimum(
        (tokens + self.bucket - 1) // self.bucket * self.bucket,
        self.seq_length)
    padded = {name: tf.pad(tensor[:, :tokens],
                           [[0, 0], [0, padded_length - tokens]])
              for name, tensor in inputs.items()}  # [1, T'], zeros after
    outputs = self._compiled(padded)

    def back(t):
      if t.shape.rank is None or t.shape.rank < 2 or t.shape[1] is not None:
        return t
      cut = t[:, :tokens]
      pads = [[0, 0], [0, full - tokens]] + [[0, 0]] * (t.shape.rank - 2)
      # The request's static length too (SQuAD's windows have one).
      return tf.ensure_shape(tf.pad(cut, pads),
                             [None, static_full] + t.shape[2:])
    return tf.nest.map_structure(back, outputs)

  def __call__(self, inputs, plain):
    """`one_row(inputs)` when `inputs` hold one row, else `plain(inputs)`."""
    return tf.cond(tf.equal(tf.shape(inputs["input_word_ids"])[0], 1),
                   lambda: self.one_row(inputs), lambda: plain(inputs))


def warmup_word(vocab_file, do_lower_case=True):
  """A whole word of `vocab_file` that tokenizes to itself (lower-case
  letters): warmup requests repeat it to reach a length."""
  with tf.io.gfile.GFile(vocab_file) as f:
    return next((token for token in (line.strip() for line in f)
                 if token.isalpha() and token.islower()), "a")


def encoder_outputs(model_outputs):
  """A BertEncoder's outputs -> `pooled_output`, `sequence_output`."""
  return {"pooled_output": model_outputs["pooled_output"],
          "sequence_output": model_outputs["sequence_output"]}


# The classifiers' outputs, owned by their task (one implementation).
classifier_outputs = classifier_outputs_lib.classifier_outputs
classifier_outputs_with_labels = (
    classifier_outputs_lib.classifier_outputs_with_labels)
regression_outputs = classifier_outputs_lib.regression_outputs


def mean_pool(sequence_output, input_mask, normalize=False):
  """Masked mean over tokens: [B, T, H], [B, T] -> [B, H] float32.

  A row without tokens gives zeros. With `normalize`, each row is divided
  by its L2 norm (cosine similarity becomes a dot product).
  """
  mean = sentence_embedder.pool(sequence_output, input_mask, "mean")
  return tf.math.l2_normalize(mean, axis=-1) if normalize else mean


def tokenize_with_masks(tokenizer, texts):
  """Like `tokenizer.tokenize`, with each "[MASK]" in the text kept whole.

  The plain tokenizer splits "[MASK]" into "[", "mask", "]" (brackets are
  punctuation). As Hugging Face's tokenizers do for special tokens, the
  exact string "[MASK]" (case-sensitive) is cut out of the text first and
  becomes the [MASK] id; the pieces between are tokenized as usual
  (the cut is a word boundary anyway: "[" is punctuation).

  Args:
    tokenizer: a `tokenization.FullTokenizer`.
    texts: string Tensor [B].

  Returns:
    int64 RaggedTensor [B, (pieces)].
  """
  parts = tf.strings.split(texts, sep=MASK_TOKEN)  # [B, (masks + 1)]
  pieces = tokenizer.tokenize(parts.flat_values)  # [N_parts, (P)]
  # Every part but the last of its text is followed by one [MASK].
  index = tf.range(tf.size(parts.flat_values, out_type=tf.int64))
  last = parts.row_splits[1:] - 1
  followed = tf.not_equal(index, tf.gather(last, parts.value_rowids()))
  masks = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(tf.cast(followed, tf.int64))],
              tf.constant(tokenizer.mask_id, tf.int64)),
      tf.cast(followed, tf.int64))  # [N_parts, (0 or 1)]
  joined = segments_lib.concat([pieces, masks])  # [N_parts, (P + 0/1)]
  return tf.RaggedTensor.from_row_splits(
      joined, parts.row_splits).merge_dims(1, 2)


# The one packing of texts, shared with training (text_files.encode).
pack_to_longest = segment_packing.pack_to_longest


class ServingModule(tf.__internal__.tracking.AutoTrackable):
  """The exported object: the model, the tokenizer and the signatures.

  Args:
    model: a Keras model (or callable) taking the encoder-input dict and
      `training=`.
    outputs: `fn(model_outputs) -> dict of named Tensors`.
    vocab_file, do_lower_case: the model's vocabulary and casing.
    seq_length: longest packed length of text requests and of id requests.
    text_pair: whether `serving_default` takes `text_b` too.
    dynamic_length: pad text requests to their longest text (True) or to
      `seq_length` (False).
    pad_multiple: with dynamic_length, round the length up to a multiple.
    normalize_embedding: L2-normalise `sentence_embedding`.
    mlm_head: the `MaskedLMHead` of `model` (a `BertEncoder`): adds the
      `fill_mask` signature, text [B] -> `top_k_ids` int32 [B, M, K],
      `top_k_tokens` string [B, M, K], `top_k_probabilities` float32
      [B, M, K] (softmax over the vocabulary, best first) and
      `mask_positions` int32 [B, M] (the [MASK]'s index in the packed
      input, [CLS] = 0), for the M [MASK]s of the request's text with the
      most of them; a text with fewer has -1 positions, "" tokens, id -1
      and probability 0 in the rest.
    top_k: K of `fill_mask`.
    remove_padding: run the model with `remove_padding=True` (position-wise
      work on the tokens only); None: whenever the model's `call` takes it.
    windowing: a `classifier_windows.Windowing` (single texts, a model
      returning logits): `serving_default` runs each text's windows and
      returns one combined row per text. `serving_ids` stays one row per
      window.
    xla_single_text: a `serving_default` request of one text (or pair),
      and a `serving_ids` request of one row (a client that tokenizes),
      runs the model as one XLA-compiled function (`jit_compile=True`; TF
      Serving needs `--xla_cpu_compilation_enabled`), its length padded up
      to a multiple of `single_text_bucket`; the outputs are cut back to
      the text's length. The same values (within float rounding, 1e-5);
      requests of several texts run as without it.
    single_text_bucket: see `xla_single_text`.
  """

  def __init__(self, model, outputs, vocab_file, do_lower_case, seq_length,
               text_pair=False, dynamic_length=True,
               pad_multiple=DEFAULT_PAD_MULTIPLE, normalize_embedding=False,
               mlm_head=None, top_k=DEFAULT_TOP_K, remove_padding=None,
               windowing=None, xla_single_text=False,
               single_text_bucket=DEFAULT_SINGLE_TEXT_BUCKET):
    if xla_single_text and windowing is not None:
      raise ValueError("xla_single_text runs one text as one window; it "
                       "cannot be combined with windowing (--doc_stride)")
    if windowing is not None and (text_pair or
                                  windowing.seq_length != seq_length):
      raise ValueError("windowing takes single texts, at seq_length "
                       f"{seq_length}; got text_pair={text_pair}, windows of "
                       f"{windowing.seq_length}")
    self._windowing = windowing
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    self._tokenizer = tfhub_modules.Untracked(tokenizer)
    self._ids = (tokenizer.cls_id, tokenizer.sep_id)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self._model = tfhub_modules.Untracked(model)
    self._mlm_head = tfhub_modules.Untracked(mlm_head)
    layers = [model] + ([mlm_head] if mlm_head is not None else [])
    # Tracked as plain tf.Variables (see tfhub_modules.tf_variables), the
    # feed-forward kernels as their column blocks (see serving_weights).
    weights = serving_weights.ServingWeights(*layers)
    self._weights = tfhub_modules.Untracked(weights)
    self.variables = weights.variables
    self._outputs = outputs
    self.seq_length = seq_length
    self._dynamic_length = dynamic_length
    self._pad_multiple = pad_multiple
    self._normalize_embedding = normalize_embedding
    takes_it = takes_remove_padding(model)
    if remove_padding and not takes_it:
      raise ValueError(f"remove_padding=True needs a model whose call takes "
                       f"remove_padding (a BertEncoder or a fine-tuned "
                       f"model of finetuning_models.py); "
                       f"{type(model).__name__}'s does not: pass "
                       f"remove_padding=False")
    self._remove_padding = takes_it if remove_padding is None else bool(
        remove_padding)
    self._top_k = min(top_k, tokenizer.vocab_size)
    self._vocab = tokenizer.vocab
    self._single_text_bucket = single_text_bucket
    self._text_pair = text_pair
    # One XLA cluster: the model at the bucket's length (no remove_padding:
    # a padded single text would make the token count, and so the compiled
    # shapes, vary within a bucket).
    self._xla_model = tfhub_modules.Untracked(tf.function(
        self._model_call, jit_compile=True, autograph=False)
        if xla_single_text else None)
    # The model as one function of the three int32 [B, T] inputs, traced
    # once and called by every signature that runs it on a batch (text,
    # pairs, ids, rerank): each signature traced it again before (most of
    # an export's time). One text's request took as long either way
    # (measured: the commit's message).
    self._batch_model = tfhub_modules.Untracked(tf.function(
        self._batch_model_call, autograph=False, input_signature=[{
            name: tf.TensorSpec([None, None], tf.int32, name=name)
            for name in encoder_lib.INPUT_NAMES}]))
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
    functions = {SIGNATURE_TEXT: serve_text, SIGNATURE_IDS: serve_ids}
    if mlm_head is not None:
      functions[SIGNATURE_FILL_MASK] = tf.function(
          self._fill_mask, input_signature=[text], autograph=False)
    # Saved as signatures only: a tracked tf.function would be traced again
    # by tf.saved_model.save (about half the export time). Each is traced
    # when first asked for: the int8 model converts serving_ids alone. The
    # model should have kernels="keras" (see kernels.py): the fast kernels
    # are for training, and their forward re-scales the feed-forward
    # kernels on every call.
    self._functions = tfhub_modules.Untracked(functions)

  def signatures(self):
    """{name: concrete function} of every signature."""
    return {name: self.signature(name) for name in self._functions.value}

  def signature(self, name):
    """One signature's concrete function (traced once, when first asked
    for)."""
    return self._functions.value[name].get_concrete_function()

  def bucket_texts(self):
    """With `xla_single_text`, one request per length bucket, each the
    inputs of `serving_default` (`text` [, `text_b`] strings) packing to
    that bucket: a vocabulary word repeated (what the warmup sends, so
    that each bucket is compiled before the first real request)."""
    if self._xla_model.value is None:
      return []
    word = next(token for token in self._vocab
                if token.isalpha() and token.islower())
    bucket, pair = self._single_text_bucket, self._text_pair
    requests = []
    for length in range(bucket, self.seq_length + bucket, bucket):
      words = max(min(length, self.seq_length) - 2 - int(pair), 2)
      texts = {"text": " ".join([word] * (words - words // 2 * pair))}
      if pair:
        texts["text_b"] = " ".join([word] * (words // 2))
      requests.append(texts)
    return requests

  def _serve_text(self, text):
    pieces = self._tokenizer.value.tokenize(text)
    if self._windowing is None:
      return self._run_texts(self._pack([pieces]))
    # Windows of seq_length every doc_stride pieces; one row per text.
    inputs, window_text = self._windowing.pack(
        pieces, *self._ids,
        pad_multiple=self._pad_multiple if self._dynamic_length else None)
    return self._run(inputs, combine=lambda logits: self._windowing.combine(
        logits, window_text, tf.shape(text)[0]))

  def _serve_pair(self, text, text_b):
    # Both sides tokenized as one batch: one tokenizer in the graph, traced
    # once (a pair export's tracing 0.7 s shorter; measured in the commit).
    pieces = self._tokenizer.value.tokenize(tf.concat([text, text_b], 0))
    size = tf.shape(text)[0]
    return self._run_texts(self._pack([pieces[:size], pieces[size:]]))

  def _serve_ids(self, input_word_ids, input_mask, input_type_ids):
    # Longer requests are cut to seq_length (the model cannot take more
    # positions); shorter ones run at their own length.
    inputs = {"input_word_ids": input_word_ids, "input_mask": input_mask,
              "input_type_ids": input_type_ids}
    # One row without padding takes the XLA path too (xla_single_text): a
    # client that tokenizes (ClientTokenizer) gets one text's latency
    # without the graph tokenizer. A padded row runs as before (its padding
    # positions' outputs stay the plain export's).
    inputs = {name: tensor[:, :self.seq_length]
              for name, tensor in inputs.items()}
    return self._run_texts(inputs, tf.reduce_all(
        tf.equal(inputs["input_mask"], 1)))

  def _pack(self, segments):
    # Fixed length: every row padded to seq_length (a multiple of itself).
    pad_multiple = (self._pad_multiple if self._dynamic_length
                    else self.seq_length)
    return pack_to_longest(segments, self.seq_length, *self._ids,
                           pad_multiple=pad_multiple)

  def _run_texts(self, inputs, unpadded=True):
    """`_run`, or with `xla_single_text` and one row (`unpadded`), the XLA
    path."""
    if self._xla_model.value is None:
      return self._run(inputs)
    return tf.cond(tf.logical_and(
        tf.equal(tf.shape(inputs["input_word_ids"])[0], 1), unpadded),
                   lambda: self._run(inputs, single=True),
                   lambda: self._run(inputs))

  def _model_call(self, inputs):
    with self._weights.value.scope():
      return self._model.value(inputs, training=False)

  def _single_text_model(self, inputs):
    """The XLA-compiled model on one row padded to its bucket, its outputs
    cut back to the row's length T (on every axis 1 of unknown size: the
    ones that follow the input's length)."""
    length = tf.shape(inputs["input_word_ids"])[1]
    bucket = self._single_text_bucket
    padded_length = tf.minimum((length + bucket - 1) // bucket * bucket,
                               self.seq_length)
    padded = {name: tf.pad(tensor, [[0, 0], [0, padded_length - length]])
              for name, tensor in inputs.items()}  # [1, T'], zeros after T
    outputs = self._xla_model.value(padded)
    return tf.nest.map_structure(
        lambda t: t[:, :length] if t.shape.rank >= 2 and t.shape[1] is None
        else t, outputs)

  def _batch_model_call(self, inputs):
    extra = {"remove_padding": True} if self._remove_padding else {}
    with self._weights.value.scope():
      return self._model.value(inputs, training=False, **extra)

  def _run(self, inputs, combine=None, single=False):
    with self._weights.value.scope():
      if single:
        model_outputs = self._single_text_model(inputs)
      else:
        model_outputs = self._batch_model.value(
            {name: tf.cast(inputs[name], tf.int32)
             for name in encoder_lib.INPUT_NAMES})
      if combine is not None:
        model_outputs = combine(model_outputs)
      named = self._outputs(model_outputs)
    named = {name: tf.cast(value, tf.float32) if value.dtype.is_floating
             else value for name, value in named.items()}
    if "sequence_output" in named:
      named["input_mask"] = tf.cast(inputs["input_mask"], tf.int32)
      named["sentence_embedding"] = mean_pool(
          named["sequence_output"], inputs["input_mask"],
          self._normalize_embedding)
    return named

  def _fill_mask(self, text):
    tokenizer = self._tokenizer.value
    inputs = self._pack([tokenize_with_masks(tokenizer, text)])
    word_ids = inputs["input_word_ids"]
    # [B, (M)] -> [B, M]: where the [MASK]s are, -1 after a row's last.
    positions = tf.ragged.boolean_mask(
        tf.broadcast_to(tf.range(tf.shape(word_ids)[1]), tf.shape(word_ids)),
        tf.equal(word_ids, tokenizer.mask_id)).to_tensor(default_value=-1)
    found = positions >= 0
    # The last block runs at the [MASK] positions only (and [CLS]).
    with self._weights.value.scope():
      outputs = self._model.value(inputs, training=False,
                                  output_positions=tf.maximum(positions, 0))
      logits = self._mlm_head.value(outputs["sequence_output"])  # [B, M, V]
    probabilities, ids = tf.math.top_k(tf.nn.softmax(
        tf.cast(logits, tf.float32), axis=-1), k=self._top_k)  # [B, M, K]
    keep = tf.broadcast_to(found[:, :, None], tf.shape(ids))
    tokens = tf.gather(tf.constant(self._vocab), ids)
    return {"top_k_ids": tf.where(keep, ids, -1),
            "top_k_tokens": tf.where(keep, tokens, ""),
            "top_k_probabilities": tf.where(keep, probabilities, 0.0),
            "mask_positions": positions}


def takes_remove_padding(model):
  """Whether `model`'s call takes `remove_padding` (e.g. a BertEncoder)."""
  call = getattr(model, "call", None)
  try:
    return "remove_padding" in inspect.signature(call).parameters
  except (TypeError, ValueError):
    return False


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
                       warmup_texts=DEFAULT_WARMUP_TEXTS, log=None,
                       dynamic_length=True, pad_multiple=DEFAULT_PAD_MULTIPLE,
                       normalize_embedding=False, mlm_head=None,
                       top_k=DEFAULT_TOP_K, remove_padding=None,
                       windowing=None, xla_single_text=False,
                       quantize="none", int8_content=None, litert=False):
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
    dynamic_length: text requests run at their longest text's length
      (True) or at `seq_length` (False: one fixed shape).
    pad_multiple: with dynamic_length, round that length up to a multiple.
    normalize_embedding: L2-normalise the `sentence_embedding` output.
    mlm_head: `model`'s masked-LM head (model must be its `BertEncoder`):
      adds the `fill_mask` signature (see `ServingModule`).
    top_k: how many tokens `fill_mask` returns per [MASK].
    remove_padding: the model's position-wise work on the tokens only (see
      `ServingModule`); None: whenever the model supports it.
    windowing: texts of any length as windows, one combined row per text
      (see `ServingModule`).
    xla_single_text: one-text requests run XLA-compiled (see
      `ServingModule`); the warmup requests then hold one text per length
      bucket, so TF Serving compiles every bucket before it serves.
    quantize: "int8" adds `model.tflite`, the `serving_ids` signature with
      int8 weights (see `export/litert_int8.py`; its numeric outputs); the
      warmup then holds the `serving_ids` request only (what both serve).
    int8_content: the LiteRT bytes of an int8 model built and checked
      already (the fine-tuning programs' gate, `int8_predictor`),
      written as `model.tflite` instead of converting again; quantize="int8"
      is implied. The SavedModel and model.tflite appear together or not at
      all.
    litert: without int8, `model.tflite` is `serving_ids` in float32
      (`--litert`: LiteRT's XNNPACK float32 kernels, one text's fastest
      float32 path on a CPU); the warmup as with int8.

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
  if pad_multiple < 1:
    raise ValueError(f"pad_multiple must be at least 1, got {pad_multiple}")
  if top_k < 1:
    raise ValueError(f"top_k must be at least 1, got {top_k}")
  if quantize not in quantize_flag.CHOICES:
    raise ValueError(f"quantize must be one of "
                     f"{list(quantize_flag.CHOICES)}, got {quantize!r}")
  vocab_size = getattr(model, "vocab_size", None)
  if vocab_size is None and hasattr(model, "encoder"):
    vocab_size = model.encoder.vocab_size
  if vocab_size is not None:
    saved_model_io.check_vocab(vocab_file, vocab_size)
  version = next_version(export_dir) if version is None else int(version)
  saved_model_io.check_new(os.path.join(export_dir, str(version)))
  log = log or (lambda message: None)
  names = [SIGNATURE_TEXT, SIGNATURE_IDS] + (
      [SIGNATURE_FILL_MASK] if mlm_head is not None else [])
  log(f"tracing signatures {', '.join(names)}")
  module = ServingModule(
      model, outputs, vocab_file, do_lower_case, seq_length, text_pair,
      dynamic_length=dynamic_length, pad_multiple=pad_multiple,
      normalize_embedding=normalize_embedding, mlm_head=mlm_head,
      top_k=top_k, remove_padding=remove_padding, windowing=windowing,
      xla_single_text=xla_single_text)
  signatures = module.signatures()
  requests = _warmup_requests(list(warmup_texts), text_pair,
                              fill_mask=mlm_head is not None)
  if xla_single_text and warmup_texts:
    requests += _bucket_requests(module)
  int8 = int8_content  # model.tflite's bytes (int8, or float32: litert)
  if quantize == "int8" or int8 is not None or litert:
    if int8 is None:
      log("converting serving_ids to LiteRT " + (
          "with int8 weights" if quantize == "int8" else "in float32"))
      int8 = litert_model(model, outputs, vocab_file, do_lower_case,
                          seq_length, remove_padding=remove_padding,
                          int8=quantize == "int8")
    # TF Serving replays the warmup against model.tflite too under
    # --prefer_tflite_model, and a failed request fails the load: keep the
    # requests both serve.
    requests = [request for request in requests
                if request.model_spec.signature_name == SIGNATURE_IDS]

  def after_save(path):
    write_warmup_requests(path, requests)
    if int8 is not None:
      litert_int8.write(path, int8)

  log(f"writing version {version} under {export_dir}")
  return saved_model_io.atomic_save(
      module, os.path.join(export_dir, str(version)),
      signatures=signatures, after_save=after_save)


def int8_model(model, outputs, vocab_file, do_lower_case, seq_length,
               remove_padding=None):
  """The LiteRT bytes of `model`'s `serving_ids` with int8 weights: its
  numeric `outputs` (and `input_mask`, `sentence_embedding` with a
  `sequence_output`); `remove_padding` as `ServingModule`'s (by default
  the position-wise work runs on the tokens only, as in the float32 export:
  on 32 short texts ~1.8x the texts/s of every layer on [B, T])."""
  return litert_model(model, outputs, vocab_file, do_lower_case, seq_length,
                      remove_padding=remove_padding)


def litert_model(model, outputs, vocab_file, do_lower_case, seq_length,
                 remove_padding=None, int8=True):
  """`int8_model`, or with `int8=False` the same LiteRT model in float32
  (`--litert`). `outputs` None: the model's own (`litert_int8.
  model_outputs`: a dict as it is, one array as `logits`)."""
  module = ServingModule(
      model, litert_int8.numeric(outputs or litert_int8.model_outputs),
      vocab_file, do_lower_case, seq_length, remove_padding=remove_padding)
  return litert_int8.convert(module, SIGNATURE_IDS, int8=int8)


def int8_predictor(model, outputs, vocab_file, do_lower_case, seq_length):
  """`(predict, content, file_name)` of `model` with int8 weights, what the
  fine-tuning programs gate on dev before they export anything:
  `predict(inputs, batch_size)` -> the model's outputs (LiteRT,
  litert_int8.Int8Model), its LiteRT bytes (`int8_model`: published by
  `export_saved_model(..., int8_content=)` or `export_with_int8`) and their
  file name in the export. Its outputs: `outputs(model outputs)` ->
  {name: Tensor}, the export's own names (so model.tflite answers as the
  SavedModel's serving_ids: run_embedding's `sentence_embedding`); None: a
  model's dict as it is, its one array as `logits`. A failed conversion is
  a cli.Error sentence saying that nothing was exported."""
  try:
    content = int8_model(model, outputs, vocab_file, do_lower_case,
                         seq_length)
  except ValueError as e:
    raise cli.Error(f"nothing was exported: {e}") from None
  lite = litert_int8.Int8Model(content)
  names = lite.signature["outputs"]

  def predict(inputs, batch_size):
    # One output is the model's one array (logits, sentence_embedding).
    found = lite.predict(inputs, batch_size)
    return found[names[0]] if len(names) == 1 else found

  return predict, content, litert_int8.LITERT_FILE


def export_with_int8(write, export_dir, int8_content=None, version=None):
  """Publishes what an exporter without int8 (export_ner_model,
  export_squad_model) writes with `int8_content` (LiteRT bytes, the
  fine-tuning programs' int8 model) as its `model.tflite`, both at once:
  `write(base_dir, version)` -> the version directory it wrote, run under a
  hidden directory beside `<export_dir>/<version>` (saved_model_io.
  `atomic_rewrap`), which appears only with both. Without int8_content,
  `write(export_dir, version)` as it is. `version`: default one more than
  the newest present. Returns the version directory."""
  if int8_content is None:
    return write(export_dir, version)
  version = next_version(export_dir) if version is None else int(version)
  return saved_model_io.atomic_rewrap(
      os.path.join(export_dir, str(version)),
      lambda base: write(base, version),
      lambda path: litert_int8.write(path, int8_content))


def export_pretrained(export_dir, bert_config_file, init_checkpoint,
                      vocab_file, fill_mask=True, weights_dtype="float32",
                      **kwargs):
  """`export_saved_model` of the encoder in a pretraining checkpoint.

  Serves `pooled_output`, `sequence_output`, `input_mask` and
  `sentence_embedding`, plus `fill_mask` when `fill_mask` is True and the
  checkpoint has a masked-LM head; `weights_dtype` "bfloat16" exports the
  model in bfloat16 (see `to_bfloat16`); `kwargs` as `export_saved_model`'s.
  """
  if weights_dtype not in WEIGHTS_DTYPES:
    raise ValueError(f"weights_dtype must be one of {list(WEIGHTS_DTYPES)}, "
                     f"got {weights_dtype!r}")
  if weights_dtype == "bfloat16" and kwargs.get("quantize", "none") != "none":
    raise ValueError("--quantize=int8 quantizes float32 weights: drop "
                     "--weights_dtype=bfloat16 or --quantize")
  if weights_dtype == "bfloat16" and kwargs.get("litert"):
    raise ValueError("--litert converts float32 weights: drop "
                     "--weights_dtype=bfloat16 or --litert")
  if kwargs.get("log"):
    kwargs["log"](f"restoring the encoder from {init_checkpoint}")
  encoder, mlm_head = saved_model_io.load_pretrained(
      bert_config_file, init_checkpoint, with_mlm=fill_mask)
  if weights_dtype == "bfloat16":
    encoder, mlm_head = to_bfloat16(encoder, mlm_head)
  return export_saved_model(export_dir, encoder, vocab_file,
                            mlm_head=mlm_head, **kwargs)


def to_bfloat16(encoder, mlm_head=None):
  """A copy of `encoder` (and `mlm_head`) with bfloat16 weights and math.

  Keras's "bfloat16" dtype policy: variables and activations in bfloat16
  (half the SavedModel's size; fast where the CPU has AVX512-BF16 or AMX),
  the attention softmax in float32 as always; the serving outputs are cast
  back to float32. Kernels are Keras's.

  Returns:
    `(encoder, mlm_head)`: the copies (`mlm_head` None if it was None).
  """
  twin = encoder_lib.BertEncoder.from_bert_config(
      encoder.bert_config, kernels="keras", dtype="bfloat16")
  pairs = list(zip(encoder.weights, twin.weights))
  head = None
  if mlm_head is not None:
    head = heads_lib.MaskedLMHead(
        twin.get_embedding_table(), hidden_act=mlm_head.hidden_act,
        initializer_range=mlm_head.initializer_range, kernels="keras",
        dtype="bfloat16", name=mlm_head.name)
    head.build(((None, None, twin.hidden_size),))
    pairs += list(zip(mlm_head.weights, head.weights))
  for old, new in pairs:
    # Same build order, so the same names and shapes, pairwise.
    assert (old.path.split("/")[-2:] == new.path.split("/")[-2:] and
            old.shape == new.shape), (old.path, new.path)
    new.assign(tf.cast(old, tf.bfloat16))
  return twin, head


def _warmup_requests(texts, text_pair, fill_mask=False):
  """PredictRequests for every signature, built from `texts`."""
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
  requests = [text_request, ids_request]
  if fill_mask:
    mask_request = predict_pb2.PredictRequest()
    mask_request.model_spec.signature_name = SIGNATURE_FILL_MASK
    mask_request.inputs["text"].CopyFrom(tf.make_tensor_proto(
        [f"{text} {MASK_TOKEN}" for text in texts]))
    requests.append(mask_request)
  return requests


def _bucket_requests(module):
  """PredictRequests of `module.bucket_texts()`."""
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  requests = []
  for texts in module.bucket_texts():
    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = SIGNATURE_TEXT
    for name, value in texts.items():
      request.inputs[name].CopyFrom(tf.make_tensor_proto([value]))
    requests.append(request)
  return requests


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
