"""BERT as the two TF-Hub text modules: a reusable encoder and its preprocessor.

They follow TF Hub's "Common SavedModel APIs for text" (the BERT encoder and
preprocessor APIs), so the "Classify text with BERT" recipe works unchanged:

    preprocess = hub.KerasLayer("preprocessor")
    encoder = hub.KerasLayer("encoder", trainable=True)
    outputs = encoder(preprocess(text))            # pooled_output, ...

Encoder (a reusable SavedModel):
  __call__(inputs, training=False): dict int32 [B, T] `input_word_ids`,
      `input_mask`, `input_type_ids` -> dict `sequence_output` [B, T, H],
      `pooled_output` [B, H], `encoder_outputs` (L x [B, T, H]), `default`.
      Traced for training=True (dropout on) and False; any T up to
      max_position_embeddings.
  mlm(inputs, training=False): the same plus `masked_lm_positions` int32
      [B, P] -> the same outputs plus `mlm_logits` float32 [B, P, V].
  variables, trainable_variables, regularization_losses (on both);
  vocab_file (asset), do_lower_case (bool variable).

Preprocessor:
  __call__(strings [B]) -> encoder inputs, int32 [B, seq_length].
  tokenize(strings [B]) -> int32 RaggedTensor [B, (words), (wordpieces)];
  tokenize.get_special_tokens_dict() -> vocab_size, padding_id,
      start_of_sequence_id, end_of_segment_id, mask_id (int32 scalars).
  bert_pack_inputs([segment, ...], seq_length=N): one or two tokenized
      segments -> encoder inputs [B, N], `[CLS] a [SEP] b [SEP]`, trimmed
      round-robin (the longer segment loses tokens first) to fit N.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from official_bert.modeling import encoder as encoder_lib
from official_bert.data import segments as segments_lib
from official_bert.data import tokenization

# tf.Module would own a read-only `variables` property; the TF-Hub API needs
# plain attributes, so the modules are AutoTrackable objects.
_AutoTrackable = tf.__internal__.tracking.AutoTrackable

DEFAULT_SEQ_LENGTH = 128


def _encoder_input_spec(extra=()):
  names = encoder_lib.INPUT_NAMES + tuple(extra)
  return {name: tf.TensorSpec([None, None], tf.int32, name=name)
          for name in names}


def tf_variables(*layers):
  """The tf.Variables of Keras layers, once each, split by trainability.

  Exported modules track these lists and hold the Keras objects untracked:
  a tracked Keras 3 variable is exported as a *copy* of the tf.Variable that
  the traced functions read, so a TF1-style loader (TensorFlow Serving,
  saved_model_cli) would restore the copy and leave the read one empty.
  """
  seen, everything, trainable = set(), [], []
  for layer in layers:
    # Keras 3 wraps each tf.Variable; `.value` is the tf.Variable itself.
    # Dropout's seed-generator states are (non-trainable) variables too.
    for variable in layer.variables:
      tf_variable = variable.value
      if id(tf_variable) in seen:
        continue  # The MLM head shares the word-embedding table.
      seen.add(id(tf_variable))
      everything.append(tf_variable)
      if variable.trainable:
        trainable.append(tf_variable)
  return everything, trainable


class Untracked:
  """Holds a Python object out of SavedModel's attribute tracking.

  Used for Keras layers (their variables are tracked as plain tf.Variables,
  see `tf_variables`) and the tokenizer (its WordPiece tries are graph
  constants, the vocab asset is tracked by the module itself).
  """

  def __init__(self, value):
    self.value = value


class _TracedOnSave(_AutoTrackable):
  """A module whose functions' signatures are traced when it is saved.

  `tf.saved_model.save` keys its tracing cache by the save's variable
  policy, so a signature traced before the save is traced again inside it:
  tracing them in `__init__` would cost every export each trace twice.
  Instead, `_trace()` runs when the save lists the module's children (and
  the module still works unsaved: a call traces what it needs).
  """

  def _trace(self):
    raise NotImplementedError

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    if save_type == "savedmodel":
      self._trace()  # In the save's context: traced once.
    return super()._trackable_children(save_type, **kwargs)


class _Callable(_TracedOnSave):
  """A reusable-SavedModel object: `__call__` plus its variable lists.

  Subclasses set their (Untracked) Keras objects, then call `__init__`, and
  define `_forward(inputs, training)`.
  """

  def __init__(self, layers, input_spec):
    self.variables, self.trainable_variables = tf_variables(*layers)
    self.regularization_losses = []  # BERT uses weight decay, not losses.
    self._input_spec = Untracked(input_spec)

  def _trace(self):
    for training in (True, False):
      self.__call__.get_concrete_function(self._input_spec.value,
                                          training=training)

  @tf.function(autograph=False)
  def __call__(self, inputs, training=False):
    return self._forward(inputs, training)


class _Mlm(_Callable):
  """`encoder.mlm`: the encoder plus the masked-LM head."""

  def __init__(self, encoder_forward, encoder, mlm_head):
    self._encoder_forward = Untracked(encoder_forward)
    self._mlm_head = Untracked(mlm_head)
    super().__init__([encoder, mlm_head],
                     _encoder_input_spec(["masked_lm_positions"]))

  def _forward(self, inputs, training):
    outputs = self._encoder_forward.value(inputs, training)
    outputs["mlm_logits"] = self._mlm_head.value(
        (outputs["sequence_output"], inputs["masked_lm_positions"]))
    return outputs


class EncoderModule(_Callable):
  """The TF-Hub encoder module of a `BertEncoder` (see the file docstring).

  Args:
    encoder: a `BertEncoder` with its weights.
    vocab_file: the vocab.txt it was trained with (kept as an asset).
    do_lower_case: whether its preprocessing lower-cases.
    mlm_head: its `MaskedLMHead`, or None for a module without `.mlm`.
  """

  def __init__(self, encoder, vocab_file, do_lower_case=True, mlm_head=None):
    self._encoder = Untracked(encoder)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                     name="do_lower_case")
    super().__init__([encoder], _encoder_input_spec())
    if mlm_head is not None:
      self.mlm = _Mlm(self._forward, encoder, mlm_head)

  def _forward(self, inputs, training):
    inputs = {name: inputs[name] for name in encoder_lib.INPUT_NAMES}
    return _float32(self._encoder.value(inputs, training=training))


def _float32(outputs):
  # The encoder computes in its dtype policy (bf16 under mixed precision);
  # the module's outputs are float32 whatever the policy.
  return tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), outputs)


class _Tokenize(_AutoTrackable):
  """`preprocessor.tokenize`: strings -> [B, (words), (wordpieces)] int32."""

  def __init__(self, tokenizer):
    self._tokenizer = Untracked(tokenizer)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def __call__(self, strings):
    return tf.cast(self._tokenizer.value.tokenize_words(strings), tf.int32)

  @tf.function(input_signature=[], autograph=False)
  def get_special_tokens_dict(self):
    return {key: tf.constant(value, tf.int32) for key, value in
            self._tokenizer.value.get_special_tokens_dict().items()}


def pack_inputs(segments, seq_length, cls_id, sep_id):
  """`[CLS] a [SEP] (b [SEP])`, trimmed round-robin and padded to seq_length.

  Args:
    segments: list of 1 or 2 int RaggedTensors [B, (pieces)] or
      [B, (words), (pieces)].
    seq_length: int or int32 scalar Tensor, the packed length N.
    cls_id, sep_id: the special ids.

  Returns:
    dict of int32 [B, N] `input_word_ids`, `input_mask`, `input_type_ids`.
  """
  flat = []
  for segment in segments:
    if segment.shape.rank == 3:
      segment = segment.merge_dims(-2, -1)  # [B, (W), (P)] -> [B, (W*P)]
    flat.append(tf.cast(segment, tf.int32))
  # Room left after one [CLS] and one [SEP] per segment.
  budget = seq_length - len(flat) - 1
  trimmed = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(flat)
  ids, type_ids = segments_lib.combine_segments(trimmed, cls_id, sep_id)
  word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length)
  type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length=seq_length)
  return {"input_word_ids": tf.cast(word_ids, tf.int32),
          "input_mask": tf.cast(mask, tf.int32),
          "input_type_ids": tf.cast(type_ids, tf.int32)}


class PreprocessorModule(_TracedOnSave):
  """The TF-Hub preprocessor module (see the file docstring).

  Args:
    vocab_file: the model's vocab.txt (kept as an asset).
    do_lower_case: True for uncased models.
    seq_length: the length `__call__` packs to (and `bert_pack_inputs`'s
      default); at most the encoder's max_position_embeddings.
  """

  def __init__(self, vocab_file, do_lower_case=True,
               seq_length=DEFAULT_SEQ_LENGTH):
    if seq_length < 3:
      raise ValueError(f"seq_length must be at least 3 ([CLS] a [SEP]), "
                       f"got {seq_length}")
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    self._ids = (tokenizer.cls_id, tokenizer.sep_id)
    self.vocab_file = tf.saved_model.Asset(vocab_file)
    self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                     name="do_lower_case")
    self.seq_length = seq_length
    self.tokenize = _Tokenize(tokenizer)

  def _trace(self):
    # Traced for 1 or 2 segments, each [B, (pieces)] or [B, (words),
    # (pieces)], and a seq_length Tensor, so any length works after loading.
    for ragged_rank in (1, 2):
      segment = tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32,
                                    ragged_rank=ragged_rank)
      for num_segments in (1, 2):
        # Named as the argument, as the save names it when it lists the
        # traced signatures (else each is traced again then).
        self.bert_pack_inputs.get_concrete_function(
            [segment] * num_segments,
            seq_length=tf.TensorSpec([], tf.int32, name="seq_length"))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
  def __call__(self, strings):
    return self.bert_pack_inputs([self.tokenize(strings)],
                                 seq_length=self.seq_length)

  @tf.function(autograph=False)
  def bert_pack_inputs(self, segments, seq_length=DEFAULT_SEQ_LENGTH):
    return pack_inputs(list(segments), seq_length, *self._ids)
