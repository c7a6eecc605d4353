"""Tests of BertConfig: the bert_config.json format, validation and presets."""

import json

import pytest

from official_bert import configs

GOOGLE_BASE = {  # uncased_L-12_H-768_A-12/bert_config.json, as released.
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 512, "num_attention_heads": 12,
    "num_hidden_layers": 12, "type_vocab_size": 2, "vocab_size": 30522,
}


def test_fields_are_exactly_the_json_keys():
  names = [f.name for f in configs.dataclasses.fields(configs.BertConfig)]
  assert sorted(n for n in names if n != "extra") == sorted(GOOGLE_BASE)


def test_round_trip_keeps_unknown_keys(tmp_path):
  path = tmp_path / "bert_config.json"
  values = dict(GOOGLE_BASE, directionality="bidi", pooler_fc_size=768)
  path.write_text(json.dumps(values))
  config = configs.BertConfig.from_json_file(str(path))
  assert config == configs.PRESETS["bert_base"]
  assert config.extra == {"directionality": "bidi", "pooler_fc_size": 768}
  out = tmp_path / "saved.json"
  config.to_json_file(str(out))
  assert json.loads(out.read_text()) == values
  # Written atomically: no temporary file is left beside it.
  assert sorted(p.name for p in tmp_path.iterdir()) == ["bert_config.json",
                                                        "saved.json"]


@pytest.mark.parametrize("key,value,message", [
    ("hidden_size", 770, r"hidden_size \(770\) must be divisible by num_attention_heads \(12\)"),
    ("hidden_act", "tanhh", r"hidden_act 'tanhh' is not one of"),
    ("num_hidden_layers", 0, r"num_hidden_layers must be a positive integer, got 0"),
    ("vocab_size", -5, r"vocab_size must be a positive integer, got -5"),
    ("intermediate_size", 3.5, r"intermediate_size must be a positive integer, got 3.5"),
    ("hidden_dropout_prob", 1.5, r"hidden_dropout_prob must be in \[0, 1\), got 1.5"),
])
def test_invalid_values_name_key_and_value(key, value, message):
  with pytest.raises(ValueError, match=message):
    configs.BertConfig(**dict(GOOGLE_BASE, **{key: value}))


def test_file_errors_name_the_file(tmp_path):
  with pytest.raises(ValueError, match=r"bert_config_file .*nope.json does not exist"):
    configs.BertConfig.from_json_file(str(tmp_path / "nope.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(ValueError, match=r"bad.json is not valid JSON"):
    configs.BertConfig.from_json_file(str(bad))
  partial = tmp_path / "partial.json"
  partial.write_text(json.dumps({"vocab_size": 10}))
  with pytest.raises(ValueError, match=r"partial.json lacks the keys .*hidden_size"):
    configs.BertConfig.from_json_file(str(partial))
  wrong = tmp_path / "wrong.json"
  wrong.write_text(json.dumps(dict(GOOGLE_BASE, num_attention_heads=7)))
  with pytest.raises(ValueError, match=r"wrong.json: .*divisible by num_attention_heads \(7\)"):
    configs.BertConfig.from_json_file(str(wrong))


def test_presets_are_the_released_shapes():
  expected = {"bert_tiny": (2, 128, 2), "bert_mini": (4, 256, 4),
              "bert_small": (4, 512, 8), "bert_medium": (8, 512, 8),
              "bert_base": (12, 768, 12), "bert_large": (24, 1024, 16)}
  for name, (layers, hidden, heads) in expected.items():
    config = configs.PRESETS[name]
    assert (config.num_hidden_layers, config.hidden_size,
            config.num_attention_heads) == (layers, hidden, heads)
    assert config.intermediate_size == 4 * hidden
    assert config.vocab_size == 30522
