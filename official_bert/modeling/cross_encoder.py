"""A cross-encoder: one relevance logit for a (query, passage) pair.

The query and the passage are read together, `[CLS] query [SEP] passage
[SEP]`, and one dense layer on the pooled [CLS] output gives the pair's
logit (sentence-transformers' `CrossEncoder` with `num_labels=1`, whose
`predict` returns its sigmoid). The model is a `BertClassifier` with one
output, so its checkpoints (`model/classifier/...`) and exports are a
one-label classifier's: Hugging Face's `BertForSequenceClassification` with
one label.

Shape legend: B queries (or pairs), G passages per query, T sequence.
"""

import keras
from keras import ops

from official_bert.modeling import finetuning_models


@keras.saving.register_keras_serializable(package="official_bert")
class BertCrossEncoder(finetuning_models.BertClassifier):
  """Scores (query, passage) pairs, one or a group per query at a time.

  Args:
    encoder: a `BertEncoder`.
    num_classes: 1 (the one relevance logit; kept as an argument so the
      config round-trips as BertClassifier's).
    dropout_rate: as `BertClassifier`'s.

  Inputs: the encoder's dict, int32 [B, T] each (one pair per row), or
    [B, G, T] (each query's G pairs: the listwise loss's groups; every
    pair must hold tokens).
  Output: float32 logits [B, 1] for [B, T] inputs (BertClassifier's), or
    [B, G] for [B, G, T] inputs.

      model = BertCrossEncoder.from_bert_config(testing.tiny_config(), 1)
      pairs = testing.random_inputs()                   # 3 pairs, [3, 7]
      model(pairs)                                      # [3, 1]
      model({k: v[None] for k, v in pairs.items()})     # [1, 3]

  Nogueira and Cho, 2019, "Passage Re-ranking with BERT".
  """

  def __init__(self, encoder, num_classes=1, dropout_rate=None, **kwargs):
    if int(num_classes) != 1:
      raise ValueError(f"a cross-encoder has one output, got num_classes="
                       f"{num_classes!r}")
    kwargs.setdefault("name", "bert_cross_encoder")
    super().__init__(encoder, num_classes, dropout_rate, **kwargs)

  def call(self, inputs, training=None, remove_padding=False):
    mask = inputs["input_mask"]
    if len(mask.shape) == 2:                                   # [B, T]
      return super().call(inputs, training, remove_padding)
    shape = ops.shape(mask)                                    # B, G, T
    pairs = {name: ops.reshape(inputs[name], (-1, shape[2]))
             for name in ("input_word_ids", "input_mask",
                          "input_type_ids")}                   # [B*G, T]
    logits = super().call(pairs, training, remove_padding)     # [B*G, 1]
    return ops.reshape(logits, (shape[0], shape[1]))           # [B, G]
