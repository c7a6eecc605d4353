"""Fine-tuning models on `BertEncoder`: sentence(-pair) classification or
regression, SQuAD-style span labelling and NER-style token classification.

Each model keeps the encoder under the attribute `encoder`, so its
checkpoints (`model/encoder/...`) are read by `checkpoints.restore_encoder`
like a pretraining checkpoint, and a pretrained or converted checkpoint
initialises it with:

    model = BertClassifier.from_bert_config(config, num_classes=3)
    checkpoints.restore_encoder(model.encoder, "/path/to/init_checkpoint")

Heads compute in the encoder's dtype policy and return float32 logits, so the
losses are stable under a mixed_bfloat16 / mixed_float16 policy.

Shape legend: B batch, T sequence, H hidden size, C classes.
"""

import keras
from keras import ops

from official_bert import configs
from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import initializers


def _build_encoder_model(model):
  model.build({name: (None, None) for name in encoder_lib.INPUT_NAMES})
  return model


class _FineTuningModel(encoder_lib.EncoderModel):
  """Stores the encoder, the dropout rate and the output size."""

  def __init__(self, encoder, num_classes, dropout_rate=None, **kwargs):
    super().__init__(encoder, **kwargs)
    if int(num_classes) < 1:
      raise ValueError(f"num_classes must be at least 1, got {num_classes!r}")
    self.num_classes = int(num_classes)
    # The original fine-tunes with the config's hidden dropout on the head.
    self.dropout_rate = (encoder.hidden_dropout_prob if dropout_rate is None
                         else float(dropout_rate))
    initializer_range = encoder.initializer_range
    self.dropout = keras.layers.Dropout(
        self.dropout_rate, dtype=encoder.dtype_policy, name="dropout")
    self.classifier = keras.layers.Dense(
        self.num_classes,
        kernel_initializer=initializers.truncated_normal(initializer_range),
        dtype=encoder.dtype_policy, name="classifier")

  @classmethod
  def from_bert_config(cls, config: configs.BertConfig, num_classes,
                       kernels="keras", **kwargs):
    """Builds (with weights) the model around a new encoder for `config`
    with `kernels` ("fast" or "keras", see `kernels.py`)."""
    encoder = encoder_lib.BertEncoder.from_bert_config(config, kernels=kernels)
    return _build_encoder_model(cls(encoder, num_classes, **kwargs))

  def build(self, input_shape):
    super().build(input_shape)
    self.classifier.build((None, self.encoder.hidden_size))

  def get_config(self):
    config = super().get_config()
    config.update({"num_classes": self.num_classes,
                   "dropout_rate": self.dropout_rate})
    return config


@keras.saving.register_keras_serializable(package="official_bert")
class BertClassifier(_FineTuningModel):
  """Classifies a sentence or a sentence pair from the pooled [CLS] output.

  As google-research/bert's `run_classifier.py`: dropout on `pooled_output`,
  then one dense layer. With `num_classes=1` the single output is a
  regression score (STS-B style).

  Args:
    encoder: a `BertEncoder`.
    num_classes: number of labels (1 for regression).
    dropout_rate: dropout on the pooled output; default the encoder's
      `hidden_dropout_prob`.

  Inputs: the encoder's dict (int32 [B, T] each). `remove_padding=True`
    (fine-tuning, and what the serving export passes): the encoder's
    position-wise work on the tokens only, the same logits.
  Output: float32 logits [B, C].

      model = BertClassifier.from_bert_config(testing.tiny_config(), 3)
      logits = model(testing.random_inputs())  # [3, 3]

  Devlin et al., 2018, section 4.1 (GLUE).
  """

  def __init__(self, encoder, num_classes, dropout_rate=None, **kwargs):
    kwargs.setdefault("name", "bert_classifier")
    super().__init__(encoder, num_classes, dropout_rate, **kwargs)

  def call(self, inputs, training=None, remove_padding=False):
    inputs = _encoder_inputs(inputs)
    # The pooler reads [CLS] alone: the last block runs there only (no
    # other output positions), the same pooled output for 1/L less work.
    no_positions = ops.zeros((ops.shape(inputs["input_word_ids"])[0], 0),
                             "int32")
    pooled = self.encoder(inputs, training=training,
                          output_positions=no_positions,
                          remove_padding=remove_padding)[
        "pooled_output"]                                       # [B, H]
    logits = self.classifier(self.dropout(pooled, training=training))
    return ops.cast(logits, "float32")                         # [B, C]


WINDOW_AGGREGATIONS = ("max", "mean")


def combine_windows(logits, text, num_texts, aggregation):
  """Each text's logits from its windows': the one implementation that
  training (`BertDocumentClassifier`), evaluation and the export
  (`classifier_windows.Windowing.combine`) share.

  Args:
    logits: float [W, C], one row per window.
    text: int [W], each window's text in [0, num_texts]; num_texts marks a
      window that belongs to no text (dropped).
    num_texts: B, an int or a scalar tensor.
    aggregation: "max" (per class, the largest over a text's windows; the
      gradient reaches the window that gave it) or "mean".

  Returns:
    float32 [B, C]; every text must have a window.
  """
  if aggregation not in WINDOW_AGGREGATIONS:
    raise ValueError(f"aggregation must be one of "
                     f"{list(WINDOW_AGGREGATIONS)}, got {aggregation!r}")
  logits = ops.cast(logits, "float32")
  segments = num_texts + 1                       # the last: no text's
  if aggregation == "max":
    return ops.segment_max(logits, text, num_segments=segments)[:num_texts]
  sums = ops.segment_sum(logits, text, num_segments=segments)[:num_texts]
  counts = ops.segment_sum(ops.ones_like(text, dtype="float32"), text,
                           num_segments=segments)[:num_texts]      # [B]
  return sums / ops.maximum(counts, 1.0)[:, None]


@keras.saving.register_keras_serializable(package="official_bert")
class BertDocumentClassifier(BertClassifier):
  """A `BertClassifier` that also reads a document as its windows.

  For run_classifier's `--window_training=documents`: a training example is
  a document's windows (`tasks/classification/classifier_windows.py`), and its logits are
  the windows' logits combined by `aggregation`, so the loss sees what
  evaluation and serving predict. "max": per class, the largest over the
  windows (the gradient reaches the window that gave it, so a label that
  one sentence decides trains the window holding it; multiple-instance
  learning); "mean": their mean.

  Args:
    encoder, num_classes, dropout_rate: as `BertClassifier`'s.
    aggregation: "max" or "mean".

  Inputs: int32 [B, W, T] each (W windows per document; a document with
    fewer has all-zero `input_mask` rows after its own, which take no part),
    or [B, T]: single windows, BertClassifier's logits (what evaluation and
    the export call; `Windowing.combine` combines them alike).
  Output: float32 logits [B, C]. Its variables are BertClassifier's, so
    checkpoints and exports are interchangeable.

      model = BertDocumentClassifier.from_bert_config(testing.tiny_config(), 2)
      windows = testing.random_inputs()                   # 3 windows, [3, 7]
      logits = model({k: v[None] for k, v in windows.items()})  # [1, 2]
  """

  def __init__(self, encoder, num_classes, dropout_rate=None,
               aggregation="max", **kwargs):
    super().__init__(encoder, num_classes, dropout_rate, **kwargs)
    if aggregation not in WINDOW_AGGREGATIONS:
      raise ValueError(f"aggregation must be one of "
                       f"{list(WINDOW_AGGREGATIONS)}, got {aggregation!r}")
    self.aggregation = aggregation

  def call(self, inputs, training=None, remove_padding=False):
    inputs = _encoder_inputs(inputs)
    mask = inputs["input_mask"]
    if len(mask.shape) == 2:                                   # [B, T]
      return super().call(inputs, training, remove_padding)
    shape = ops.shape(mask)                                    # B, W, T
    present = ops.any(ops.not_equal(mask, 0), axis=-1)[:, :, None]  # [B, W, 1]
    # An absent window reads one token (position 0, id 0): the encoder
    # needs a [CLS] position that is a token; its logits are dropped below.
    first = ops.cast(ops.equal(ops.arange(shape[2]), 0), mask.dtype)  # [T]
    inputs = dict(inputs, input_mask=ops.where(present, mask, first))
    windows = {name: ops.reshape(value, (-1, shape[2]))
               for name, value in inputs.items()}              # [B*W, T]
    logits = super().call(windows, training, remove_padding)   # [B*W, C]
    # Each window's document; an absent window's is B, which is dropped.
    document = ops.repeat(ops.arange(shape[0]), shape[1])      # [B*W]
    document = ops.where(ops.reshape(present, (-1,)), document, shape[0])
    return combine_windows(logits, document, shape[0], self.aggregation)

  def get_config(self):
    config = super().get_config()
    config["aggregation"] = self.aggregation
    return config


@keras.saving.register_keras_serializable(package="official_bert")
class BertSpanLabeler(_FineTuningModel):
  """Predicts answer start and end positions per token (SQuAD).

  One dense layer maps each token's `sequence_output` to two scores, as the
  original's `run_squad.py` (`cls/squad/output_weights` [2, H]). Padding
  positions get a large negative logit so they are never predicted.

  Args:
    encoder: a `BertEncoder`.

  Inputs: the encoder's dict (int32 [B, T] each). `remove_padding=True`
    (fine-tuning and inference): the position-wise work on the tokens only, the
    same logits at the tokens.
  Output: dict `start_logits`, `end_logits`, float32 [B, T].

      model = BertSpanLabeler.from_bert_config(testing.tiny_config())
      out = model(testing.random_inputs())  # out["start_logits"]: [3, 7]

  Devlin et al., 2018, section 4.2 (SQuAD v1.1).
  """

  def __init__(self, encoder, num_classes=2, dropout_rate=0.0, **kwargs):
    if num_classes != 2:
      raise ValueError(f"BertSpanLabeler has 2 outputs (start, end), "
                       f"got num_classes={num_classes!r}")
    kwargs.setdefault("name", "bert_span_labeler")
    super().__init__(encoder, 2, dropout_rate, **kwargs)

  @classmethod
  def from_bert_config(cls, config, num_classes=2, kernels="keras", **kwargs):
    return super().from_bert_config(config, num_classes, kernels, **kwargs)

  def call(self, inputs, training=None, remove_padding=False):
    sequence = self.encoder(_encoder_inputs(inputs), training=training,
                            remove_padding=remove_padding)[
        "sequence_output"]                                     # [B, T, H]
    logits = ops.cast(self.classifier(
        self.dropout(sequence, training=training)), "float32")  # [B, T, 2]
    padding = 1.0 - ops.cast(inputs["input_mask"], "float32")  # [B, T]
    # [B, T, 1]; expand_dims: a new-axis slice has no LiteRT builtin.
    logits = logits - 1e4 * ops.expand_dims(padding, -1)
    return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}


@keras.saving.register_keras_serializable(package="official_bert")
class BertTokenClassifier(_FineTuningModel):
  """Labels every token (named-entity recognition, section 5.3 of the paper).

  Dropout then one dense layer on each token's `sequence_output`.

  Args:
    encoder: a `BertEncoder`.
    num_classes: number of token labels.
    dropout_rate: default the encoder's `hidden_dropout_prob`.

  Inputs: the encoder's dict (int32 [B, T] each). `remove_padding=True`
    (fine-tuning and inference): the position-wise work on the tokens only, the
    same logits at the tokens (at padding positions: the bias alone).
  Output: float32 logits [B, T, C].

      model = BertTokenClassifier.from_bert_config(testing.tiny_config(), 5)
      logits = model(testing.random_inputs())  # [3, 7, 5]
  """

  def __init__(self, encoder, num_classes, dropout_rate=None, **kwargs):
    kwargs.setdefault("name", "bert_token_classifier")
    super().__init__(encoder, num_classes, dropout_rate, **kwargs)

  def call(self, inputs, training=None, remove_padding=False):
    sequence = self.encoder(_encoder_inputs(inputs), training=training,
                            remove_padding=remove_padding)[
        "sequence_output"]                                     # [B, T, H]
    logits = self.classifier(self.dropout(sequence, training=training))
    return ops.cast(logits, "float32")                         # [B, T, C]


def _encoder_inputs(inputs):
  return {name: inputs[name] for name in encoder_lib.INPUT_NAMES}
