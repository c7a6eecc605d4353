"""`BertPretrainer`: the encoder with the masked-LM and next-sentence heads.

Also the pretraining loss and metrics exactly as google-research/bert computes
them:

    mlm_loss = sum(w * CE(masked_lm_ids, mlm_logits)) / (sum(w) + 1e-5)
    nsp_loss = mean(CE(next_sentence_labels, next_sentence_logits))
    loss     = mlm_loss + nsp_loss

    model = BertPretrainer.from_bert_config(config)            # MLM + NSP
    no_nsp = BertPretrainer.from_bert_config(config, use_next_sentence=False)
"""

import keras
from keras import ops

from official_bert import configs
from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import heads

PRETRAINING_INPUT_NAMES = encoder_lib.INPUT_NAMES + ("masked_lm_positions",)


@keras.saving.register_keras_serializable(package="official_bert")
class BertPretrainer(encoder_lib.EncoderModel):
  """BERT with its pretraining heads (`cls/predictions`, `cls/seq_relationship`).

  Args:
    encoder: a `BertEncoder`.
    use_next_sentence: False drops the next-sentence head (the paper's
      "No NSP" ablation, as RoBERTa trains).

  The masked-LM head uses the encoder's `kernels` ("fast" or "keras").

  Inputs: the encoder's dict plus `masked_lm_positions` int32 [B, P].
  Outputs: dict `mlm_logits` float32 [B, P, V] and, with the next-sentence
    head, `next_sentence_logits` float32 [B, 2].
  """

  def __init__(self, encoder, use_next_sentence=True, **kwargs):
    kwargs.setdefault("name", "bert_pretrainer")
    super().__init__(encoder, **kwargs)
    self.use_next_sentence = use_next_sentence
    config = encoder.bert_config
    self.cls_predictions = heads.MaskedLMHead(
        encoder.get_embedding_table(), hidden_act=config.hidden_act,
        initializer_range=config.initializer_range, kernels=encoder.kernels,
        dtype=encoder.dtype_policy, name="cls_predictions")
    self.cls_seq_relationship = None
    if use_next_sentence:
      self.cls_seq_relationship = heads.NextSentenceHead(
          initializer_range=config.initializer_range,
          dtype=encoder.dtype_policy, name="cls_seq_relationship")

  @classmethod
  def from_bert_config(cls, config: configs.BertConfig,
                       use_next_sentence=True, kernels="keras",
                       fused_attention=False, **kwargs):
    """Builds (with weights) a pretrainer around a new encoder for `config`.

    `kernels`: "fast" or "keras" for the encoder and the heads (`kernels.py`);
    `fused_attention`: the encoder's (`BertEncoder`).
    """
    encoder = encoder_lib.BertEncoder.from_bert_config(
        config, kernels=kernels, fused_attention=fused_attention)
    model = cls(encoder, use_next_sentence=use_next_sentence, **kwargs)
    model.build({name: (None, None) for name in PRETRAINING_INPUT_NAMES})
    return model

  def build(self, input_shape):
    word_shape = tuple(input_shape["input_word_ids"])
    hidden = self.encoder.hidden_size
    if not self.encoder.built:
      self.encoder.build(input_shape)
    self.cls_predictions.build(
        (word_shape + (hidden,), tuple(input_shape["masked_lm_positions"])))
    if self.cls_seq_relationship is not None:
      self.cls_seq_relationship.build((word_shape[0], hidden))
    self.built = True

  def call(self, inputs, training=None):
    encoder_inputs = {name: inputs[name] for name in encoder_lib.INPUT_NAMES}
    if encoder_lib.SEQUENCE_IDS in inputs:  # packed rows: masked-LM only
      encoder_inputs[encoder_lib.SEQUENCE_IDS] = inputs[
          encoder_lib.SEQUENCE_IDS]
    # The heads read only the masked positions and [CLS], so the last block
    # runs there only (about 1/6 of its work at seq 128, 20 predictions);
    # the logits equal those of the full sequence output gathered there.
    outputs = self.encoder(encoder_inputs, training=training,
                           output_positions=inputs["masked_lm_positions"])
    result = {"mlm_logits": self.cls_predictions(outputs["sequence_output"])}
    if self.cls_seq_relationship is not None:
      result["next_sentence_logits"] = self.cls_seq_relationship(
          outputs["pooled_output"])
    return result

  def get_config(self):
    config = super().get_config()
    config["use_next_sentence"] = self.use_next_sentence
    return config


def _cross_entropy(labels, logits):
  # [..., C] float32 logits, int labels [...] -> per-example loss [...]:
  # log-sum-exp minus the label's logit. Under XLA (the trainer compiles the
  # losses) this and its gradient took ~40% less time over BERT-Mini's
  # [B, P, V] logits than TF's sparse softmax cross-entropy op.
  labels = ops.cast(labels, "int32")
  label_logits = ops.take_along_axis(logits, labels[..., None], axis=-1)
  return ops.logsumexp(logits, axis=-1) - label_logits[..., 0]


def pretraining_losses(labels, outputs):
  """The original's per-batch losses.

  Args:
    labels: dict with `masked_lm_ids` int [B, P], `masked_lm_weights` float
      [B, P] and, when the model has the next-sentence head,
      `next_sentence_labels` int [B] or [B, 1].
    outputs: the dict `BertPretrainer` returns.

  Returns:
    dict `masked_lm_loss`, `next_sentence_loss` (absent without the head)
    and `loss` (their sum), float32 scalars.
  """
  weights = ops.cast(labels["masked_lm_weights"], "float32")
  mlm_ce = _cross_entropy(labels["masked_lm_ids"], outputs["mlm_logits"])
  mlm_loss = ops.sum(weights * mlm_ce) / (ops.sum(weights) + 1e-5)
  if "next_sentence_logits" not in outputs:
    return {"masked_lm_loss": mlm_loss, "loss": mlm_loss}
  nsp_labels = ops.reshape(labels["next_sentence_labels"], (-1,))
  nsp_loss = ops.mean(_cross_entropy(nsp_labels,
                                     outputs["next_sentence_logits"]))
  return {"masked_lm_loss": mlm_loss, "next_sentence_loss": nsp_loss,
          "loss": mlm_loss + nsp_loss}


def pretraining_metric_counts(labels, outputs):
  """Correct/total counts for masked-LM and next-sentence accuracy.

  Counts (not ratios) so replicas and steps can be summed before dividing.
  Masked-LM accuracy is weighted by `masked_lm_weights` (padding slots of
  masked_lm_positions do not count), as the original's eval metric; a
  prediction is correct when the label's logit is the largest.
  """
  weights = ops.cast(labels["masked_lm_weights"], "float32")
  # A hit is the label's logit being the maximum: argmax's answer (a tie with
  # another id also counts), in one pass over the [B, P, V] logits. Keras'
  # float argmax adds four passes (a negative-zero fix): ~7% of a BERT-Mini
  # training step on CPU.
  logits = outputs["mlm_logits"]
  label_ids = ops.cast(labels["masked_lm_ids"], "int32")
  label_logit = ops.take_along_axis(logits, label_ids[..., None], axis=-1)
  mlm_hit = ops.cast(label_logit[..., 0] >= ops.max(logits, axis=-1),
                     "float32")
  counts = {"masked_lm_correct": ops.sum(weights * mlm_hit),
            "masked_lm_total": ops.sum(weights)}
  if "next_sentence_logits" in outputs:
    nsp_labels = ops.reshape(labels["next_sentence_labels"], (-1,))
    nsp_pred = ops.argmax(outputs["next_sentence_logits"], axis=-1)
    nsp_hit = ops.cast(ops.equal(nsp_pred, ops.cast(nsp_labels, nsp_pred.dtype)),
                       "float32")
    counts["next_sentence_correct"] = ops.sum(nsp_hit)
    counts["next_sentence_total"] = ops.cast(ops.shape(nsp_hit)[0], "float32")
  return counts
