"""`BertSentenceEmbedder`: one vector per text, for search (run_embedding).

The encoder's last layer pooled into one float32 vector per text, as a
sentence-transformers model's `Transformer` + `Pooling` modules compute it:

  mean  the mean of `sequence_output` over the input mask ([CLS] and [SEP]
        included), sentence-transformers' `pooling_mode="mean"`;
  cls   `sequence_output` at [CLS] (not `pooled_output`: no pooler dense),
        its `pooling_mode="cls"`.

Training feeds several texts per example (an anchor, its positive, maybe a
hard negative) as one flat dict, each role's encoder inputs under
`<role>_<input name>`; they run through the encoder as one batch and come
back as {role: [B, H]}. Shape legend: B examples, R roles, T positions,
H hidden size.
"""

import keras
from keras import ops

from official_bert import configs
from official_bert.modeling import encoder as encoder_lib

POOLINGS = ("mean", "cls")


def pool(sequence_output, input_mask, pooling):
  """[B, T, H], [B, T] -> float32 [B, H]: `pooling` ("mean" or "cls") of
  the tokens; a row without tokens gives zeros (mean)."""
  sequence = ops.cast(sequence_output, "float32")
  if pooling == "cls":
    return sequence[:, 0, :]
  # [B, T, 1] (expand_dims: LiteRT has no builtin for a new-axis slice)
  mask = ops.expand_dims(ops.cast(input_mask, "float32"), -1)
  total = ops.sum(sequence * mask, axis=1)                     # [B, H]
  return total / ops.maximum(ops.sum(mask, axis=1), 1.0)


@keras.saving.register_keras_serializable(package="official_bert")
class BertSentenceEmbedder(encoder_lib.EncoderModel):
  """A sentence embedding model: `BertEncoder` + mean or [CLS] pooling.

  Args:
    encoder: a `BertEncoder` (kept as `encoder`: checkpoints hold
      `model/encoder/...`, read by every tool as an encoder).
    pooling: "mean" or "cls" (see the module doc).

  Inputs: the encoder's dict (int32 [B, T] each) -> float32 [B, H]; or the
    flat dict of several roles (`anchor_input_word_ids`, ...; every role
    cut to the same T) -> {role: float32 [B, H]}. `remove_padding=True`:
    the encoder's position-wise work on the tokens only, the same vectors.

      model = BertSentenceEmbedder.from_bert_config(testing.tiny_config())
      vectors = model(testing.random_inputs())  # [3, 32]

  Reimers and Gurevych, 2019 (Sentence-BERT).
  """

  def __init__(self, encoder, pooling="mean", **kwargs):
    kwargs.setdefault("name", "bert_sentence_embedder")
    super().__init__(encoder, **kwargs)
    if pooling not in POOLINGS:
      raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    self.pooling = pooling

  @classmethod
  def from_bert_config(cls, config: configs.BertConfig, pooling="mean",
                       kernels="keras", **kwargs):
    """Builds (with weights) the model around a new encoder for `config`."""
    encoder = encoder_lib.BertEncoder.from_bert_config(config, kernels=kernels)
    model = cls(encoder, pooling, **kwargs)
    model.build({name: (None, None) for name in encoder_lib.INPUT_NAMES})
    return model

  def call(self, inputs, training=None, remove_padding=False):
    if "input_word_ids" in inputs:
      return self._embed({name: inputs[name]
                          for name in encoder_lib.INPUT_NAMES},
                         training, remove_padding)
    roles = [key[:-len("_input_word_ids")] for key in sorted(inputs)
             if key.endswith("_input_word_ids")]
    # R x [B, T] -> [R * B, T]: one encoder call for every role.
    joined = {name: ops.concatenate([inputs[f"{role}_{name}"]
                                     for role in roles], axis=0)
              for name in encoder_lib.INPUT_NAMES}
    vectors = self._embed(joined, training, remove_padding)   # [R * B, H]
    parts = ops.split(vectors, len(roles), axis=0)            # R x [B, H]
    return dict(zip(roles, parts))

  def _embed(self, inputs, training, remove_padding):
    extra = {}
    if self.pooling == "cls":
      # The last block runs at [CLS] alone: sequence_output [B, 1, H].
      extra["output_positions"] = ops.zeros(
          (ops.shape(inputs["input_word_ids"])[0], 1), "int32")
    sequence = self.encoder(inputs, training=training,
                            remove_padding=remove_padding,
                            **extra)["sequence_output"]       # [B, T, H]
    return pool(sequence, inputs["input_mask"], self.pooling)  # [B, H]

  def get_config(self):
    config = super().get_config()
    config["pooling"] = self.pooling
    return config
