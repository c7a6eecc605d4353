"""`BertEncoder`: the BERT Transformer encoder (Devlin et al., 2018).

Reads top to bottom in execution order: embeddings, L Transformer blocks,
pooler. Inputs and outputs use the TF-Hub names:

    inputs  input_word_ids, input_mask, input_type_ids   int32 [B, T]
    outputs sequence_output [B, T, H], pooled_output [B, H],
            encoder_outputs (a list, one [B, T, H] per layer), default = pooled

    encoder = BertEncoder.from_bert_config(configs.PRESETS["bert_tiny"])
    outputs = encoder({"input_word_ids": ids, "input_mask": mask,
                       "input_type_ids": type_ids})
"""

import keras
from keras import ops

from official_bert import configs
from official_bert.modeling import embeddings
from official_bert.modeling import initializers
from official_bert.modeling import kernels as kernels_lib
from official_bert.modeling import packing as packing_lib
from official_bert.modeling import sequence_packing
from official_bert.modeling import transformer

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# Optional: packed rows' sequence numbers (sequence_packing.py).
SEQUENCE_IDS = "input_sequence_ids"


@keras.saving.register_keras_serializable(package="official_bert")
class BertEncoder(keras.Model):
  """The BERT encoder: embeddings, `num_hidden_layers` blocks and a pooler.

  Sublayers mirror the original variable scopes: `embeddings`, `layer_0` ...
  `layer_{L-1}`, `pooler` (tanh dense on the [CLS] position), so converting a
  released checkpoint is a rename table (see `checkpoint_names.py`).

  Args: the `bert_config.json` keys (see `configs.BertConfig`) as keyword
    arguments; `from_bert_config` builds one from a `BertConfig`. And
    `kernels`: "keras" (Keras's formulas and autodiff, the default) or "fast"
    (written-out gradients, for TensorFlow without XLA), passed to every
    layer and saved in `get_config`; the same weights and checkpoints either
    way. See `kernels.py`; a program picks it with
    `kernels.resolve`.

  Inputs: dict of int32 [B, T] tensors `input_word_ids`, `input_mask` (1 for
    real tokens, 0 for padding), `input_type_ids`; any T up to
    `max_position_embeddings`.
  Outputs: dict `sequence_output` [B, T, H], `pooled_output` [B, H],
    `encoder_outputs` (list of L [B, T, H]), `default` (= pooled_output).

  `input_sequence_ids` (optional int [B, T]): packed rows, several
  sequences one after another (1, 2, ... per sequence, 0 for padding): each
  attends only within itself and its positions restart at 0, so each gets
  the outputs it would get alone (sequence_packing.py). The pooler reads
  position 0, the first sequence's [CLS].

  `fused_attention=True`: attention as one fused op (flash or cuDNN where
  the backend has it, `kernels.fused_attention`), without dropout on the
  attention probabilities; saved in `get_config`.

  `output_positions` (optional int [B, P]): the positions a head will read,
  e.g. the masked-LM positions. The last block then runs at those positions
  and [CLS] only (all positions stay keys and values), and `sequence_output`
  and the last of `encoder_outputs` are [B, P, H]: the full outputs gathered
  at `output_positions`, at a fraction of the last block's cost.

  `remove_padding=True` (training or inference): the blocks' position-wise
  work (every dense layer, LayerNorm, the feed-forward network) runs on the
  tokens only, packed [N, H], and attention on [B, T] (see `packing.py`).
  At the token positions the outputs equal the padded path's (to float
  rounding); at padding positions they are zeros. Position 0 ([CLS]) must
  be a token of each row: the pooler reads it. The saving is the share of
  padding, e.g. a serving request padded to its longest text, or a
  fine-tuning batch of short sentences. With `output_positions` too, those
  positions must be tokens.
  """

  def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12,
               num_attention_heads=12, intermediate_size=3072,
               hidden_act="gelu", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, max_position_embeddings=512,
               type_vocab_size=2, initializer_range=0.02, kernels="keras",
               fused_attention=False, **kwargs):
    kwargs.setdefault("name", "bert_encoder")
    super().__init__(**kwargs)
    # Validates every value with the same messages as bert_config.json.
    self._bert_config = configs.BertConfig(
        vocab_size=vocab_size, hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size, hidden_act=hidden_act,
        hidden_dropout_prob=hidden_dropout_prob,
        attention_probs_dropout_prob=attention_probs_dropout_prob,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=type_vocab_size, initializer_range=initializer_range)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range
    self.kernels = kernels_lib.check(kernels)
    self.fused_attention = bool(fused_attention)

  @classmethod
  def from_bert_config(cls, config: configs.BertConfig, **kwargs):
    """Builds (and creates the weights of) an encoder for `config`.

    `kwargs` go to the constructor, e.g. `kernels="fast"` or `dtype`.
    """
    values = config.to_dict()
    for key in config.extra:
      values.pop(key)
    encoder = cls(**values, **kwargs)
    encoder.build({name: (None, None) for name in INPUT_NAMES})
    return encoder

  @property
  def bert_config(self) -> configs.BertConfig:
    return self._bert_config

  def build(self, input_shape):
    word_shape = tuple(input_shape["input_word_ids"])
    hidden_shape = word_shape + (self.hidden_size,)
    self.embeddings = embeddings.BertEmbeddings(
        self.vocab_size, self.hidden_size, self.max_position_embeddings,
        self.type_vocab_size, dropout_rate=self.hidden_dropout_prob,
        initializer_range=self.initializer_range, kernels=self.kernels,
        dtype=self.dtype_policy, name="embeddings")
    self.embeddings.build((word_shape, word_shape))
    for i in range(self.num_hidden_layers):
      block = transformer.TransformerBlock(
          self.hidden_size, self.num_attention_heads, self.intermediate_size,
          hidden_act=self.hidden_act,
          hidden_dropout_prob=self.hidden_dropout_prob,
          attention_probs_dropout_prob=self.attention_probs_dropout_prob,
          initializer_range=self.initializer_range, kernels=self.kernels,
          fused_attention=self.fused_attention, dtype=self.dtype_policy,
          name=f"layer_{i}")
      block.build((hidden_shape, word_shape))
      # One attribute per block (not a list): Keras 3 lists are not tracked
      # by tf.train.Checkpoint, and `layer_N` is the original's scope name.
      setattr(self, f"layer_{i}", block)
    self.pooler = keras.layers.Dense(
        self.hidden_size, activation="tanh",
        kernel_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="pooler")
    self.pooler.build((word_shape[0], self.hidden_size))
    self.built = True

  def call(self, inputs, training=None, output_positions=None,
           remove_padding=False):
    missing = [name for name in INPUT_NAMES if name not in inputs]
    if missing:
      raise ValueError(f"BertEncoder inputs lack {missing}; it takes a dict "
                       f"with {list(INPUT_NAMES)}")
    word_ids = inputs["input_word_ids"]
    mask = inputs["input_mask"]
    length = word_ids.shape[1]
    if length is not None and length > self.max_position_embeddings:
      raise ValueError(f"sequence length {length} exceeds "
                       f"max_position_embeddings={self.max_position_embeddings}")
    attention_mask = mask
    position_ids = None
    sequence_ids = inputs.get(SEQUENCE_IDS)
    if sequence_ids is not None:  # packed rows (sequence_packing.py)
      if remove_padding:
        raise ValueError("packed rows (input_sequence_ids) have little "
                         "padding to remove: call with remove_padding=False")
      attention_mask = sequence_packing.attention_mask(sequence_ids)
      position_ids = sequence_packing.position_ids(sequence_ids)
    x = self.embeddings((word_ids, inputs["input_type_ids"]),
                        training=training, position_ids=position_ids)
    blocks = self.encoder_layers
    last_positions = None
    if output_positions is not None:
      # [B, P] -> [B, 1 + P]: the pooler's [CLS] position first.
      output_positions = ops.cast(output_positions, "int32")
      cls = ops.zeros((ops.shape(output_positions)[0], 1), "int32")
      last_positions = ops.concatenate([cls, output_positions], axis=1)
    packing = None
    if remove_padding:
      packing = packing_lib.pack_indices(mask)
      # [B, T, H] -> [N, H]
      x = packing_lib.pack(x, packing, kernels=self.kernels)
    layer_outputs = []
    for i, block in enumerate(blocks):
      positions = last_positions if i == len(blocks) - 1 else None
      x = block((x, attention_mask), training=training,
                output_positions=positions,
                packing=packing)
      layer_outputs.append(x)
    if packing is not None:
      # [N, H] -> [B, T, H], zeros at padding (unused ones are pruned from a
      # tf.function's graph); a last block run at output_positions is
      # [B, 1 + P, H] already.
      packed = layer_outputs if last_positions is None else layer_outputs[:-1]
      layer_outputs[:len(packed)] = [
          packing_lib.unpack(output, packing, mask, kernels=self.kernels)
          for output in packed]
      x = layer_outputs[-1]
    # [B, H]: the [CLS] position of the last block.
    pooled = self.pooler(x[:, 0, :])
    if last_positions is not None:
      # [B, 1 + P, H] -> [B, P, H]: the requested positions.
      x = layer_outputs[-1] = x[:, 1:, :]
    return {"sequence_output": x, "pooled_output": pooled,
            "encoder_outputs": layer_outputs, "default": pooled}

  @property
  def encoder_layers(self):
    """The Transformer blocks, first to last."""
    return [getattr(self, f"layer_{i}") for i in range(self.num_hidden_layers)]

  def get_embedding_table(self):
    """The [V, H] word-embedding variable (tied to the masked-LM output)."""
    return self.embeddings.word_embeddings.embeddings

  def get_config(self):
    config = super().get_config()
    values = self._bert_config.to_dict()
    config.update(values)
    config.update(kernels=self.kernels, fused_attention=self.fused_attention)
    return config

  @classmethod
  def from_config(cls, config):
    return cls(**config)


class EncoderModel(keras.Model):
  """A model around a `BertEncoder`, kept as `encoder` (so checkpoints hold
  `model/encoder/...`): its build and its config round trip; subclasses add
  their own arguments to `get_config`."""

  def __init__(self, encoder, **kwargs):
    super().__init__(**kwargs)
    self.encoder = encoder

  def build(self, input_shape):
    if not self.encoder.built:
      self.encoder.build(input_shape)
    self.built = True

  def get_config(self):
    config = super().get_config()
    config["encoder"] = keras.saving.serialize_keras_object(self.encoder)
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
    return cls(**config)
