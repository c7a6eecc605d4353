"""Numerical equivalence with two independent BERTs, weights copied over.

Hugging Face `transformers` (PyTorch) and keras-hub's `BertBackbone` are the
references: same weights in, the same sequence_output, pooled_output, every
layer's output and pretraining logits out (float32, 2e-6).
"""

import numpy as np
import pytest

from official_bert.training import checkpoint_names
from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

torch = testing.require("torch")
transformers = testing.require("transformers")

ATOL = 2e-6  # Measured ~7e-7. A mask bias of -10 instead of -10000 (padding
# leaking e^-10) gives 3e-6 (keras-hub) to 1e-5 (HF): caught.
POSITIONS = np.array([[1, 2, 6], [0, 2, 4], [3, 1, 1]], np.int32)


def _hf_model(config, seed=0):
  hf_config = transformers.BertConfig(**config.to_dict())
  torch.manual_seed(seed)
  model = transformers.BertForPreTraining(hf_config).eval()
  with torch.no_grad():
    # Perturb every parameter: zero biases and unit LayerNorms would hide
    # a bias or gamma copied to the wrong place.
    for parameter in model.parameters():
      parameter.add_(torch.randn_like(parameter) * 0.05)
  return model


def _ours_from_hf(hf_model, config):
  state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
  arrays, ignored = checkpoint_names.from_hf_state_dict(state)
  assert ignored == []
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  assert checkpoint_names.assign_original(model, arrays, "hf") == []
  return model


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu"])
def test_matches_hugging_face_bert_for_pretraining(hidden_act):
  config = testing.tiny_config(hidden_act=hidden_act)
  hf = _hf_model(config)
  ours = _ours_from_hf(hf, config)
  x = testing.random_inputs()
  out = ours({**x, "masked_lm_positions": POSITIONS})
  enc = ours.encoder(x)
  with torch.no_grad():
    ref = hf(input_ids=torch.tensor(x["input_word_ids"]).long(),
             attention_mask=torch.tensor(x["input_mask"]).long(),
             token_type_ids=torch.tensor(x["input_type_ids"]).long(),
             output_hidden_states=True)
    pooled_ref = hf.bert.pooler(ref.hidden_states[-1]).numpy()
  np.testing.assert_allclose(enc["sequence_output"], ref.hidden_states[-1],
                             atol=ATOL)
  np.testing.assert_allclose(enc["pooled_output"], pooled_ref, atol=ATOL)
  assert len(enc["encoder_outputs"]) == config.num_hidden_layers
  for ours_layer, ref_layer in zip(enc["encoder_outputs"], ref.hidden_states[1:]):
    np.testing.assert_allclose(ours_layer, ref_layer, atol=ATOL)
  ref_mlm = np.take_along_axis(ref.prediction_logits.numpy(),
                               POSITIONS[..., None], axis=1)
  np.testing.assert_allclose(out["mlm_logits"], ref_mlm, atol=ATOL)
  np.testing.assert_allclose(out["next_sentence_logits"],
                             ref.seq_relationship_logits, atol=ATOL)


def test_loads_hf_bert_model_names_without_prefix():
  config = testing.tiny_config()
  hf = _hf_model(config)
  state = {k: v.detach().numpy() for k, v in hf.bert.state_dict().items()}
  arrays, ignored = checkpoint_names.from_hf_state_dict(state)
  assert ignored == []
  encoder = encoder_lib.BertEncoder.from_bert_config(config)
  checkpoint_names.assign_original(encoder, arrays, "hf")
  x = testing.random_inputs()
  with torch.no_grad():
    ref = hf.bert(input_ids=torch.tensor(x["input_word_ids"]).long(),
                  attention_mask=torch.tensor(x["input_mask"]).long(),
                  token_type_ids=torch.tensor(x["input_type_ids"]).long())
  np.testing.assert_allclose(encoder(x)["pooled_output"], ref.pooler_output,
                             atol=ATOL)


def test_mismatched_config_is_one_clear_error():
  hf = _hf_model(testing.tiny_config())
  state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
  arrays, _ = checkpoint_names.from_hf_state_dict(state)
  wider = pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config(num_hidden_layers=3, intermediate_size=41))
  with pytest.raises(ValueError, match=r"missing tensors.*layer_2.*shape mismatches"):
    checkpoint_names.assign_original(wider, arrays, "hf")


def test_matches_keras_hub_bert_backbone():
  keras_hub = testing.require("keras_hub")
  config = testing.tiny_config(hidden_act="gelu_new")  # keras-hub uses tanh GELU
  ours = encoder_lib.BertEncoder.from_bert_config(config)
  rng = np.random.default_rng(1)
  for variable in ours.weights:  # Non-trivial LayerNorm and bias values too.
    variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
  hub = keras_hub.models.BertBackbone(
      vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
      num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
      intermediate_dim=config.intermediate_size,
      max_sequence_length=config.max_position_embeddings, dropout=0.1)
  heads, size = config.num_attention_heads, config.hidden_size // config.num_attention_heads
  emb = ours.embeddings
  hub.token_embedding.embeddings.assign(emb.word_embeddings.embeddings)
  hub.position_embedding.position_embeddings.assign(emb.position_embeddings)
  hub.segment_embedding.embeddings.assign(emb.token_type_embeddings.embeddings)
  hub.embeddings_layer_norm.set_weights(emb.layer_norm.get_weights())
  for block, hub_block in zip(ours.encoder_layers, hub.transformer_layers):
    mha = hub_block._self_attention_layer
    for mine, theirs in ((block.attention.query, mha._query_dense),
                         (block.attention.key, mha._key_dense),
                         (block.attention.value, mha._value_dense)):
      theirs.kernel.assign(np.reshape(mine.kernel, (-1, heads, size)))
      theirs.bias.assign(np.reshape(mine.bias, (heads, size)))
    mha._output_dense.kernel.assign(
        np.reshape(block.attention.output_dense.kernel, (heads, size, -1)))
    mha._output_dense.bias.assign(block.attention.output_dense.bias)
    hub_block._self_attention_layer_norm.set_weights(
        block.attention_layer_norm.get_weights())
    hub_block._feedforward_intermediate_dense.set_weights(
        block.intermediate.get_weights())
    hub_block._feedforward_output_dense.set_weights(
        block.output_dense.get_weights())
    hub_block._feedforward_layer_norm.set_weights(
        block.output_layer_norm.get_weights())
  hub.pooled_dense.set_weights(ours.pooler.get_weights())

  x = testing.random_inputs()
  out = ours(x)
  ref = hub({"token_ids": x["input_word_ids"], "segment_ids": x["input_type_ids"],
             "padding_mask": x["input_mask"]})
  real = x["input_mask"][..., None].astype(bool)
  # keras-hub masks padded queries differently; compare real positions.
  np.testing.assert_allclose(np.where(real, out["sequence_output"], 0),
                             np.where(real, ref["sequence_output"], 0), atol=ATOL)
  np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=ATOL)
  # keras-hub's backbone is functional, so every block's output is reachable.
  import keras  # pylint: disable=g-import-not-at-top
  per_layer = keras.Model(hub.inputs, [b.output for b in hub.transformer_layers])
  hub_layers = per_layer({"token_ids": x["input_word_ids"],
                          "segment_ids": x["input_type_ids"],
                          "padding_mask": x["input_mask"]})
  assert len(hub_layers) == config.num_hidden_layers
  for ours_layer, ref_layer in zip(out["encoder_outputs"], hub_layers):
    np.testing.assert_allclose(np.where(real, ours_layer, 0),
                               np.where(real, ref_layer, 0), atol=ATOL)
