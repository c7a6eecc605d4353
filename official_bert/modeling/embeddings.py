"""BERT's input embeddings: word + position + token type, LayerNorm, dropout."""

import keras
from keras import ops

from official_bert.modeling import dropout
from official_bert.modeling import initializers
from official_bert.modeling import kernels as kernels_lib
from official_bert.modeling import normalization


@keras.saving.register_keras_serializable(package="official_bert")
class BertEmbeddings(keras.layers.Layer):
  """Sums word, learned absolute position and token-type embeddings.

  Mirrors the `bert/embeddings` scope of google-research/bert: the variables
  are `word_embeddings [V, H]`, `position_embeddings [max_positions, H]`,
  `token_type_embeddings [type_vocab_size, H]` and `layer_norm` (the original's
  `LayerNorm`, epsilon 1e-12), followed by dropout.

  Args:
    vocab_size: V, number of WordPiece ids.
    hidden_size: H.
    max_position_embeddings: longest sequence accepted.
    type_vocab_size: number of segment ids.
    dropout_rate: dropout after the LayerNorm.
    initializer_range: stddev of the truncated-normal initializer.
    kernels: "fast" or "keras", for the LayerNorm and the dropout.

  Inputs: `(word_ids, type_ids)`, int [B, T] each, T <= max_position_embeddings;
    `position_ids` (optional int [B, T]): each position's index, for packed
    rows whose positions restart with each sequence (sequence_packing.py).
  Output: float [B, T, H].

  Example:
    >>> emb = BertEmbeddings(vocab_size=99, hidden_size=32,
    ...                      max_position_embeddings=16, type_vocab_size=2)
    >>> emb((ops.ones((3, 7), "int32"), ops.zeros((3, 7), "int32"))).shape
    (3, 7, 32)
  """

  def __init__(self, vocab_size, hidden_size, max_position_embeddings=512,
               type_vocab_size=2, dropout_rate=0.1, initializer_range=0.02,
               kernels="keras", **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.dropout_rate = dropout_rate
    self.initializer_range = initializer_range
    self.kernels = kernels_lib.check(kernels)

  def build(self, input_shape):
    word_shape = input_shape[0]
    self.word_embeddings = keras.layers.Embedding(
        self.vocab_size, self.hidden_size,
        embeddings_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="word_embeddings")
    self.word_embeddings.build(word_shape)
    self.token_type_embeddings = keras.layers.Embedding(
        self.type_vocab_size, self.hidden_size,
        embeddings_initializer=initializers.truncated_normal(
            self.initializer_range),
        dtype=self.dtype_policy, name="token_type_embeddings")
    self.token_type_embeddings.build(word_shape)
    self.position_embeddings = self.add_weight(
        name="position_embeddings",
        shape=(self.max_position_embeddings, self.hidden_size),
        initializer=initializers.truncated_normal(self.initializer_range))
    self.layer_norm = normalization.LayerNormalization(
        epsilon=1e-12, kernels=self.kernels, dtype=self.dtype_policy,
        name="layer_norm")
    self.layer_norm.build(tuple(word_shape) + (self.hidden_size,))
    self.dropout = dropout.Dropout(self.dropout_rate, kernels=self.kernels,
                                   dtype=self.dtype_policy)
    self.built = True

  def call(self, inputs, training=None, position_ids=None):
    word_ids, type_ids = inputs
    seq_length = ops.shape(word_ids)[1]
    x = self.word_embeddings(word_ids) + self.token_type_embeddings(type_ids)
    if position_ids is None:
      # [T, H] broadcast over the batch.
      positions = ops.cast(self.position_embeddings[:seq_length],
                           self.compute_dtype)[None, :, :]
    else:  # packed rows: [B, T] -> [B, T, H], restarting per sequence
      positions = ops.cast(ops.take(self.position_embeddings,
                                    ops.cast(position_ids, "int32"), axis=0),
                           self.compute_dtype)
    x = x + positions
    return self.dropout(self.layer_norm(x), training=training)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[0]) + (self.hidden_size,)

  def get_config(self):
    config = super().get_config()
    config.update(
        vocab_size=self.vocab_size, hidden_size=self.hidden_size,
        max_position_embeddings=self.max_position_embeddings,
        type_vocab_size=self.type_vocab_size, dropout_rate=self.dropout_rate,
        initializer_range=self.initializer_range, kernels=self.kernels)
    return config
