"""extract_features.py as a real program: its JSONL holds exactly the
encoder's layer outputs and pooled vector for each line (singles and pairs)."""

import json

import numpy as np
import pytest

from official_bert.training import checkpoints
from official_bert.data import text_files
from official_bert.modeling import encoder as encoder_lib
from official_bert import extract_features
from official_bert.data import tokenization
from tests import testing

LINES = ["The quick brown fox jumps over the lazy dog.",
         "",
         "Where is the answer? ||| It is in the text.",
         "Short."]


@pytest.mark.slow
def test_jsonl_holds_the_encoders_vectors(tmp_path):
  testing.require_shared_data()
  config = testing.tiny_config(vocab_size=30522, max_position_embeddings=32,
                               num_hidden_layers=3)
  config.to_json_file(str(tmp_path / "bert_config.json"))
  encoder = encoder_lib.BertEncoder.from_bert_config(config)
  rng = np.random.default_rng(0)
  for variable in encoder.weights:  # Non-trivial values everywhere.
    variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
  checkpoints.save_model(encoder, str(tmp_path / "ckpt" / "model"))
  with open(tmp_path / "input.txt", "w") as f:
    f.write("\n".join(LINES) + "\n")
  out = tmp_path / "features.jsonl"
  proc = testing.run_cli([
      "-m", "official_bert.extract_features",
      f"--input_file={tmp_path / 'input.txt'}", f"--output_file={out}",
      f"--vocab_file={testing.VOCAB}",
      f"--bert_config_file={tmp_path / 'bert_config.json'}",
      f"--init_checkpoint={tmp_path / 'ckpt' / 'model'}", "--layers=-1,0",
      "--max_seq_length=16", "--batch_size=2"])
  assert "Wrote 3 examples" in proc.stdout and "examples/s" in proc.stdout
  with open(out) as f:
    rows = [json.loads(line) for line in f]
  assert [r["linex_index"] for r in rows] == [0, 1, 2]

  tokenizer = tokenization.FullTokenizer(testing.VOCAB)
  examples = extract_features.read_input(str(tmp_path / "input.txt"))
  assert examples[1].text_b == "It is in the text."
  for row, example in zip(rows, examples):
    packed = text_files.encode([example], tokenizer, 16)
    n = int(packed["input_mask"].sum())
    # Each example alone, unpadded: padding in the batch must not matter.
    x = {k: v[:, :n] for k, v in packed.items()}
    ref = encoder(x, training=False)
    tokens = [f["token"] for f in row["features"]]
    assert tokens == tokenizer.convert_ids_to_tokens(x["input_word_ids"][0])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    last = np.array([[l["values"] for l in f["layers"] if l["index"] == -1][0]
                     for f in row["features"]])
    first = np.array([[l["values"] for l in f["layers"] if l["index"] == 0][0]
                      for f in row["features"]])
    np.testing.assert_allclose(last, ref["sequence_output"][0], atol=2e-5)
    np.testing.assert_allclose(first, ref["encoder_outputs"][0][0], atol=2e-5)
    assert not np.allclose(first, last, atol=1e-2)
    np.testing.assert_allclose(row["pooled_output"], ref["pooled_output"][0],
                               atol=2e-5)
  assert tokens.count("[SEP]") == 1 and "pooled_output" in row
  assert rows[1]["features"][0]["token"] == "[CLS]"
  pair_tokens = [f["token"] for f in rows[1]["features"]]
  assert pair_tokens.count("[SEP]") == 2


def test_bad_layers_and_empty_input(tmp_path):
  assert extract_features.parse_layers("-1,-2", 2) == [-1, -2]
  with pytest.raises(ValueError, match=r"has 2 layers.*\[-2, 1\]"):
    extract_features.parse_layers("-1,-3", 2)
  with pytest.raises(ValueError, match="comma-separated integers"):
    extract_features.parse_layers("last", 2)
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n")
  with pytest.raises(ValueError, match=f"--input_file {empty} holds no text"):
    extract_features.read_input(str(empty))
