"""convert_checkpoint: a random Hugging Face BertForPreTraining (safetensors,
pytorch_model.bin) and a TF1 checkpoint with google-research/bert's variable
names convert to the same numbers (1e-5); mismatches are one clear error."""

import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from official_bert.training import checkpoint_names
from official_bert.training import checkpoints
from official_bert import configs
from official_bert import convert_checkpoint
from official_bert.modeling import finetuning_models
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

torch = testing.require("torch")
transformers = testing.require("transformers")

ATOL = 1e-5
POSITIONS = np.array([[1, 2, 6], [0, 2, 4], [3, 1, 1]], np.int32)
VOCAB_LINES = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 99)]


@pytest.fixture(scope="module")
def hf_model():
  config = testing.tiny_config()
  torch.manual_seed(0)
  model = transformers.BertForPreTraining(
      transformers.BertConfig(**config.to_dict())).eval()
  with torch.no_grad():  # Non-trivial biases and LayerNorms.
    for parameter in model.parameters():
      parameter.add_(torch.randn_like(parameter) * 0.05)
  return model


@pytest.fixture(scope="module")
def reference(hf_model):
  x = testing.random_inputs()
  with torch.no_grad():
    out = hf_model(input_ids=torch.tensor(x["input_word_ids"]).long(),
                   attention_mask=torch.tensor(x["input_mask"]).long(),
                   token_type_ids=torch.tensor(x["input_type_ids"]).long(),
                   output_hidden_states=True)
    pooled = hf_model.bert.pooler(out.hidden_states[-1]).numpy()
  mlm = np.take_along_axis(out.prediction_logits.numpy(),
                           POSITIONS[..., None], axis=1)
  return x, {"sequence_output": out.hidden_states[-1].numpy(),
             "pooled_output": pooled, "mlm_logits": mlm,
             "next_sentence_logits": out.seq_relationship_logits.numpy()}


def _hf_dir(hf_model, path, safetensors=True):
  if safetensors:
    hf_model.save_pretrained(path)
  else:  # The older format: config.json + pytorch_model.bin.
    os.makedirs(path)
    hf_model.config.to_json_file(os.path.join(path, "config.json"))
    torch.save(hf_model.state_dict(), os.path.join(path, "pytorch_model.bin"))
  with open(os.path.join(path, "vocab.txt"), "w") as f:
    f.write("\n".join(VOCAB_LINES) + "\n")
  return str(path)


def _assert_same_numbers(output_dir, reference):
  x, ref = reference
  config = configs.BertConfig.from_json_file(
      os.path.join(output_dir, "bert_config.json"))
  assert config == testing.tiny_config()
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  checkpoints.restore_model(model, output_dir)  # The directory resolves.
  out = model({**x, "masked_lm_positions": POSITIONS}, training=False)
  enc = model.encoder(x, training=False)
  for name in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(enc[name], ref[name], atol=ATOL, err_msg=name)
  for name in ("mlm_logits", "next_sentence_logits"):
    np.testing.assert_allclose(out[name], ref[name], atol=ATOL, err_msg=name)


def test_hugging_face_safetensors_cli_gives_the_same_numbers(
    hf_model, reference, tmp_path, caplog):
  source = _hf_dir(hf_model, tmp_path / "hf")
  assert os.path.exists(os.path.join(source, "model.safetensors"))
  out = tmp_path / "converted"
  umask = os.umask(0o022)  # Inherited by the CLI.
  try:
    proc = testing.run_cli(["-m", "official_bert.convert_checkpoint",
                            f"--source={source}", f"--output_dir={out}"])
  finally:
    os.umask(umask)
  assert "converted hf" in proc.stdout and "next-sentence head" in proc.stdout
  # Umask modes (a model server running as another user reads them), not
  # tempfile's 0600.
  modes = {name: oct(os.stat(out / name).st_mode & 0o777)
           for name in os.listdir(out)}
  assert set(modes.values()) == {"0o644"}, modes
  # The index is relative: a moved directory resolves without TF's
  # "ERROR:tensorflow:Couldn't match files for checkpoint".
  with open(out / "checkpoint") as f:
    assert str(tmp_path) not in f.read()
  shutil.move(str(out), str(tmp_path / "moved"))
  with caplog.at_level("WARNING"):
    _assert_same_numbers(str(tmp_path / "moved"), reference)
  assert not [r for r in caplog.records if r.levelname == "ERROR"], (
      caplog.text)
  with open(tmp_path / "moved" / "vocab.txt") as f:
    assert f.read().split("\n")[:2] == VOCAB_LINES[:2]


def test_layer_norm_eps_other_than_berts_is_refused(hf_model, tmp_path):
  source = _hf_dir(hf_model, tmp_path / "hf")
  assert hf_model.config.layer_norm_eps == 1e-12  # The saved one converts.
  convert_checkpoint.config_from_hf(os.path.join(source, "config.json"))
  hf_model.config.to_json_file(os.path.join(source, "config.json"))
  with open(os.path.join(source, "config.json")) as f:
    text = f.read()
  with open(os.path.join(source, "config.json"), "w") as f:
    f.write(text.replace('"layer_norm_eps": 1e-12', '"layer_norm_eps": 1e-05'))
  with pytest.raises(ValueError, match=re.escape(
      "layer_norm_eps is 1e-05; the model computes LayerNorm with BERT's "
      "1e-12")):
    convert_checkpoint.convert(source, str(tmp_path / "out"))
  assert not os.path.exists(tmp_path / "out")
  # The same key in a bert_config.json (kept in `extra`) is refused too.
  with pytest.raises(ValueError, match="layer_norm_eps 1e-05 is not supported"):
    configs.BertConfig.from_dict({**testing.tiny_config().to_dict(),
                                  "layer_norm_eps": 1e-5})
  configs.BertConfig.from_dict({**testing.tiny_config().to_dict(),
                                "layer_norm_eps": 1e-12})


def test_tf1_checkpoint_with_original_names_gives_the_same_numbers(
    hf_model, reference, tmp_path):
  state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
  arrays, _ = checkpoint_names.from_hf_state_dict(state)
  assert arrays["cls/seq_relationship/output_weights"].shape == (2, 32)
  prefix = testing.write_tf1_checkpoint(str(tmp_path / "tf1"), arrays,
                                testing.tiny_config())
  names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  assert "bert/encoder/layer_1/attention/self/query/kernel" in names
  assert "bert/encoder/layer_1/attention/self/query/kernel/adam_m" in names
  result = convert_checkpoint.convert(prefix, str(tmp_path / "out"))
  assert result.unused == [] and result.num_tensors == len(arrays)
  assert "global_step" in result.source.ignored
  _assert_same_numbers(str(tmp_path / "out"), reference)
  # --init_checkpoint of run_classifier / extract_features reads it directly.
  x, ref = reference
  encoder = pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config()).encoder
  checkpoints.restore_encoder(encoder, str(tmp_path / "tf1"))
  np.testing.assert_allclose(encoder(x, training=False)["sequence_output"],
                             ref["sequence_output"], atol=ATOL)
  wrong = pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config(intermediate_size=41))
  with pytest.raises(ValueError, match=re.escape(
      f"{prefix}: the TF1 checkpoint does not match the model config: shape "
      "mismatches: bert/encoder/layer_0/intermediate/dense/kernel: the TF1 "
      "checkpoint has (32, 37), model expects (32, 41)")):
    checkpoints.restore_model(wrong, prefix)


def test_pytorch_bin_and_bert_model_without_prefix(hf_model, reference,
                                                   tmp_path):
  source = _hf_dir(hf_model, tmp_path / "bin", safetensors=False)
  convert_checkpoint.convert(source, str(tmp_path / "out"))
  _assert_same_numbers(str(tmp_path / "out"), reference)
  # run_classifier's --init_checkpoint: the classifier's encoder loads it.
  classifier = finetuning_models.BertClassifier.from_bert_config(
      testing.tiny_config(), 3)
  checkpoints.restore_encoder(classifier.encoder, str(tmp_path / "out"))
  np.testing.assert_allclose(
      classifier.encoder(reference[0], training=False)["pooled_output"],
      reference[1]["pooled_output"], atol=ATOL)
  # A bare BertModel (no "bert." prefix, no heads): the encoder converts.
  bare = tmp_path / "bare"
  hf_model.bert.save_pretrained(bare)
  result = convert_checkpoint.convert(str(bare), str(tmp_path / "bare_out"))
  assert result.heads.startswith("encoder only")
  # No untrained heads are written: an exporter adds no `.mlm`, and
  # pretraining from it initialises the heads.
  names = tf.train.load_checkpoint(str(tmp_path / "bare_out")).get_variable_to_shape_map()
  assert not [name for name in names if name.startswith("model/cls")]
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  _, mlm_head = saved_model_io.load_pretrained(
      str(tmp_path / "bare_out" / "bert_config.json"), str(tmp_path / "bare_out"))
  assert mlm_head is None
  pretrainer = pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config())
  checkpoints.restore_model(pretrainer, str(tmp_path / "bare_out"))
  np.testing.assert_allclose(pretrainer.encoder(reference[0])["pooled_output"],
                             reference[1]["pooled_output"], atol=ATOL)
  encoder = pretrainer_lib.BertPretrainer.from_bert_config(
      testing.tiny_config()).encoder
  checkpoints.restore_encoder(encoder, str(tmp_path / "bare_out"))
  x, ref = reference
  np.testing.assert_allclose(encoder(x)["pooled_output"], ref["pooled_output"],
                             atol=ATOL)


def test_config_mismatch_is_one_sentence_cli_error(hf_model, tmp_path):
  state = {k: v.detach().numpy() for k, v in hf_model.state_dict().items()}
  arrays, _ = checkpoint_names.from_hf_state_dict(state)
  arrays["cls/extra/unknown"] = np.zeros(3, np.float32)
  prefix = testing.write_tf1_checkpoint(str(tmp_path / "tf1"), arrays,
                                testing.tiny_config())
  wrong = tmp_path / "wrong_config.json"
  testing.tiny_config(intermediate_size=41, num_hidden_layers=3).to_json_file(
      str(wrong))
  proc = testing.run_cli(["-m", "official_bert.convert_checkpoint",
                          f"--source={prefix}", f"--bert_config_file={wrong}",
                          f"--output_dir={tmp_path / 'out'}"], check=False,
                         merge_stderr=True)
  assert proc.returncode == 1
  lines = proc.stdout.strip().splitlines()
  assert "Traceback" not in proc.stdout, proc.stdout
  assert lines[-1].startswith("convert_checkpoint: error: "), proc.stdout
  assert "missing tensors ['bert/encoder/layer_2/" in lines[-1]
  assert ("bert/encoder/layer_0/intermediate/dense/kernel: tf1 weights "
          f"{prefix} has (32, 37), model expects (32, 41)") in lines[-1]
  assert not os.path.exists(tmp_path / "out")
  # The right config converts, listing the tensor it has no place for.
  result = convert_checkpoint.convert(prefix, str(tmp_path / "ok"))
  assert result.unused == ["cls/extra/unknown"]
  with pytest.raises(ValueError, match="does not exist"):
    convert_checkpoint.convert(str(tmp_path / "nowhere"), str(tmp_path / "x"))
  shutil.rmtree(tmp_path / "tf1")
