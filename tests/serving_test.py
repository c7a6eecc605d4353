"""TF Serving export: real CLI, moved directory, signatures, saved_model_cli.

The module fixture writes a pretraining checkpoint of the tiny model, runs
`python -m export.export_saved_model`, copies the model base path elsewhere
and deletes the original; the tests load the copy as TF Serving would (by
signature) and compare with the Keras encoder.
"""

import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from export import saved_model_io
from export import serving
from export import tfhub_modules
from official_bert.training import checkpoints
from official_bert.modeling import encoder as encoder_lib
from official_bert.modeling import pretrainer as pretrainer_lib
from official_bert.data import tokenization
from tests import testing

VOCAB = os.path.join(testing.TESTDATA, "export_vocab.txt")
SEQ_LENGTH = 16  # = max_position_embeddings of the tiny config
TEXTS = ["The quick brown fox jumps over the lazy dog.",
         "Hello, world!",
         # Far longer than SEQ_LENGTH pieces: truncated, not an error.
         " ".join(["the cat sat on the mat"] * 20)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  root = tmp_path_factory.mktemp("serving")
  config = testing.tiny_config()
  config.to_json_file(str(root / "bert_config.json"))
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  checkpoints.save_model(model, str(root / "ckpt" / "ckpt-1"))
  proc = testing.run_cli([
      "-m", "export.export_saved_model",
      f"--bert_config_file={root / 'bert_config.json'}",
      f"--init_checkpoint={root / 'ckpt' / 'ckpt-1'}", f"--vocab_file={VOCAB}",
      f"--max_seq_length={SEQ_LENGTH}", f"--export_dir={root / 'original'}"])
  assert "signatures serving_default(text)" in proc.stdout
  shutil.copytree(root / "original", root / "models" / "bert")
  shutil.rmtree(root / "original")
  return {"encoder": model.encoder, "root": root,
          "path": str(root / "models" / "bert" / "1")}


@pytest.fixture(scope="module")
def served(exported):
  return tf.saved_model.load(exported["path"])


def _keras_on_text(encoder, texts, texts_b=None):
  """What the text signature should compute, built from the parts."""
  tokenizer = tokenization.FullTokenizer(VOCAB)
  segments = [tokenizer.tokenize(tf.constant(texts))]
  if texts_b is not None:
    segments.append(tokenizer.tokenize(tf.constant(texts_b)))
  inputs = tfhub_modules.pack_inputs(segments, SEQ_LENGTH, tokenizer.cls_id,
                                     tokenizer.sep_id)
  return inputs, encoder(inputs, training=False)


def test_signatures_answer_raw_text_and_ids(exported, served):
  assert set(served.signatures) == {"serving_default", "serving_ids"}
  text_fn = served.signatures["serving_default"]
  ids_fn = served.signatures["serving_ids"]
  assert set(text_fn.structured_input_signature[1]) == {"text"}
  assert set(ids_fn.structured_input_signature[1]) == {
      "input_word_ids", "input_mask", "input_type_ids"}
  assert set(text_fn.structured_outputs) == {"pooled_output",
                                             "sequence_output"}

  got = text_fn(text=tf.constant(TEXTS))
  inputs, want = _keras_on_text(exported["encoder"], TEXTS)
  assert int(inputs["input_mask"][2].numpy().sum()) == SEQ_LENGTH  # truncated
  for name in ("pooled_output", "sequence_output"):
    np.testing.assert_allclose(got[name], want[name], atol=1e-6)

  # Ids: any length up to SEQ_LENGTH as is; longer requests are cut.
  for seq in (testing.SEQ, 23):
    ids = testing.random_inputs(seq=seq, seed=seq)
    got = ids_fn(**{k: tf.constant(v) for k, v in ids.items()})
    kept = {k: v[:, :SEQ_LENGTH] for k, v in ids.items()}
    want = exported["encoder"](kept, training=False)
    assert got["sequence_output"].shape == (testing.BATCH, min(seq, 16),
                                            testing.HIDDEN)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"],
                               atol=1e-6)


def test_vocab_is_an_asset_inside_the_moved_export(exported):
  assets = os.path.join(exported["path"], "assets")
  assert os.listdir(assets) == ["export_vocab.txt"]
  with open(os.path.join(exported["path"], "saved_model.pb"), "rb") as f:
    graph = f.read()
  # No absolute path of the machine that exported it.
  assert str(exported["root"]).encode() not in graph
  assert testing.TESTDATA.encode() not in graph


def test_warmup_requests_replay(exported, served):
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  path = os.path.join(exported["path"], serving.WARMUP_FILE)
  logs = []
  for record in tf.data.TFRecordDataset(path):
    logs.append(prediction_log_pb2.PredictionLog.FromString(record.numpy()))
  assert [log.predict_log.request.model_spec.signature_name for log in logs] \
      == ["serving_default", "serving_ids"]
  for log in logs:
    request = log.predict_log.request
    inputs = {name: tf.constant(tf.make_ndarray(proto))
              for name, proto in request.inputs.items()}
    outputs = served.signatures[request.model_spec.signature_name](**inputs)
    assert outputs["pooled_output"].shape[0] == len(
        next(iter(inputs.values())))


def test_saved_model_cli_run_matches_keras(exported, tmp_path):
  # saved_model_cli's own main in a fresh process, with TF Text's kernels
  # registered first (as tensorflow_model_server links them in); it loads
  # the graph the TF1 way TF Serving does (session + restore op).
  code = ("import sys, tensorflow_text; "
          "from tensorflow.python.tools.saved_model_cli import main; "
          "sys.argv[0] = 'saved_model_cli'; sys.exit(main())")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  texts = TEXTS[:2]
  proc = subprocess.run(
      [sys.executable, "-c", code, "run", "--dir", exported["path"],
       "--tag_set", "serve", "--signature_def", "serving_default",
       "--input_exprs", f"text={texts!r}", "--outdir", str(tmp_path)],
      capture_output=True, text=True, timeout=300, env=env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  _, want = _keras_on_text(exported["encoder"], texts)
  for name in ("pooled_output", "sequence_output"):
    got = np.load(tmp_path / f"{name}.npy")
    np.testing.assert_allclose(got, want[name], atol=1e-6)


def test_graph_uses_only_core_tf_and_tf_text_ops(exported):
  ops = saved_model_io.op_types(exported["path"])
  assert ops["other"] == []
  assert "FastWordpieceTokenizeWithOffsets" in ops["tf_text"]
  # In a process that imports TensorFlow alone, every "core" op is
  # registered and every TF Text op is not (until tensorflow_text loads).
  code = ("import sys, tensorflow as tf\n"
          "from tensorflow.python.framework import op_def_registry as r\n"
          "core, text = sys.argv[1].split(','), sys.argv[2].split(',')\n"
          "print([o for o in core if r.get(o) is None])\n"
          "print([o for o in text if r.get(o) is not None])\n"
          "import tensorflow_text\n"
          "print([o for o in text if r.get(o) is None])\n")
  proc = subprocess.run(
      [sys.executable, "-c", code, ",".join(ops["core"]),
       ",".join(ops["tf_text"])], capture_output=True, text=True,
      timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split("\n")[:3] == ["[]", "[]", "[]"]


def test_classifier_export_with_text_pairs(exported, tmp_path):
  # A fine-tuned classifier as run_classifier.py exports it.
  encoder = exported["encoder"]
  word_ids = keras.Input((None,), dtype="int32", name="input_word_ids")
  mask = keras.Input((None,), dtype="int32", name="input_mask")
  type_ids = keras.Input((None,), dtype="int32", name="input_type_ids")
  inputs = {"input_word_ids": word_ids, "input_mask": mask,
            "input_type_ids": type_ids}
  logits = keras.layers.Dense(3, name="classifier")(
      encoder(inputs)["pooled_output"])
  classifier = keras.Model(inputs, logits)
  base = tmp_path / "classifier"
  for name in ("3", "10", ".10.tmp-x", "notes"):  # Only numbers count.
    (base / name).mkdir(parents=True)
  first = serving.export_saved_model(
      str(base), classifier, VOCAB, seq_length=SEQ_LENGTH,
      outputs=serving.classifier_outputs, text_pair=True, warmup_texts=())
  assert os.path.basename(first) == "11"
  assert not os.path.exists(os.path.join(first, "assets.extra"))
  served = tf.saved_model.load(first).signatures["serving_default"]
  assert set(served.structured_input_signature[1]) == {"text", "text_b"}
  texts_b = ["a good movie", "the dog", "it was bad"]
  got = served(text=tf.constant(TEXTS), text_b=tf.constant(texts_b))
  assert set(got) == {"logits", "probabilities"}
  packed, _ = _keras_on_text(encoder, TEXTS, texts_b)
  want = classifier(packed).numpy()
  np.testing.assert_allclose(got["logits"], want, atol=1e-6)
  np.testing.assert_allclose(got["probabilities"],
                             tf.nn.softmax(want).numpy(), atol=1e-6)
  np.testing.assert_allclose(got["probabilities"].numpy().sum(-1), 1.0,
                             atol=1e-6)


def test_bad_export_arguments(exported, tmp_path):
  encoder = exported["encoder"]
  with pytest.raises(ValueError, match="exceeds the model's "
                     "max_position_embeddings=16"):
    serving.export_saved_model(str(tmp_path), encoder, VOCAB, seq_length=17)
  small = encoder_lib.BertEncoder.from_bert_config(
      testing.tiny_config(vocab_size=50))
  with pytest.raises(ValueError, match="has 99 tokens but the model's"):
    serving.export_saved_model(str(tmp_path), small, VOCAB, seq_length=8)
  with pytest.raises(ValueError, match="already exists"):
    serving.export_saved_model(os.path.dirname(exported["path"]), encoder,
                               VOCAB, seq_length=8, version=1)
  # The CLI: a missing vocab is one sentence naming the file.
  root = exported["root"]
  proc = testing.run_cli([
      "-m", "export.export_saved_model",
      f"--bert_config_file={root / 'bert_config.json'}",
      f"--init_checkpoint={root / 'ckpt' / 'ckpt-1'}",
      f"--vocab_file={tmp_path / 'nope.txt'}", f"--max_seq_length={SEQ_LENGTH}",
      f"--export_dir={tmp_path / 'out'}"], check=False)
  assert proc.returncode == 1
  assert "nope.txt does not exist" in proc.stderr
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")
