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
from official_bert.data import text_files
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
  # 3072 columns: inference runs each feed-forward network in 4 column
  # blocks, which the export saves as blocks (export/serving_weights.py).
  config = testing.tiny_config(intermediate_size=3072)
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
  return {"encoder": model.encoder, "mlm_head": model.cls_predictions,
          "root": root, "path": str(root / "models" / "bert" / "1")}


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


def _at_tokens(sequence_output, input_mask):
  """[B, T, H] -> the rows' token positions, concatenated [N, H]."""
  return np.asarray(sequence_output)[np.asarray(input_mask) == 1]


def test_signatures_answer_raw_text_and_ids(exported, served):
  assert set(served.signatures) == {"serving_default", "serving_ids",
                                    "fill_mask"}
  text_fn = served.signatures["serving_default"]
  ids_fn = served.signatures["serving_ids"]
  assert set(text_fn.structured_input_signature[1]) == {"text"}
  assert set(ids_fn.structured_input_signature[1]) == {
      "input_word_ids", "input_mask", "input_type_ids"}
  assert set(text_fn.structured_outputs) == {
      "pooled_output", "sequence_output", "input_mask", "sentence_embedding"}

  got = text_fn(text=tf.constant(TEXTS))
  inputs, want = _keras_on_text(exported["encoder"], TEXTS)
  assert int(inputs["input_mask"][2].numpy().sum()) == SEQ_LENGTH  # truncated
  for name in ("pooled_output", "input_mask"):
    np.testing.assert_allclose(got[name], want.get(name, inputs.get(name)),
                               atol=1e-6)
  # remove_padding: equal at the tokens, zeros at padding positions.
  mask = inputs["input_mask"].numpy()
  np.testing.assert_allclose(_at_tokens(got["sequence_output"], mask),
                             _at_tokens(want["sequence_output"], mask),
                             atol=1e-6)
  assert not np.asarray(got["sequence_output"])[mask == 0].any()

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


def test_feed_forward_kernels_are_saved_as_column_blocks(exported):
  saved = dict(tf.train.list_variables(
      os.path.join(exported["path"], "variables", "variables")))
  shapes = [tuple(shape) for name, shape in saved.items()
            if "OBJECT_GRAPH" not in name]
  hidden = testing.HIDDEN
  assert shapes.count((hidden, 768)) == 4 * testing.LAYERS
  assert (hidden, 3072) not in shapes
  assert shapes.count((3072, hidden)) == testing.LAYERS  # output kernels
  # Every variable once (the head shares the word embeddings): as many
  # numbers as the encoder and the head hold, Dropout's seed states too.
  model_sizes = {id(v.value): int(np.prod(v.shape)) for layer in (
      exported["encoder"], exported["mlm_head"]) for v in layer.variables}
  assert sum(int(np.prod(s)) for s in shapes) == sum(model_sizes.values())


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
      == ["serving_default", "serving_ids", "fill_mask"]
  # What each request should hold, written out here: the default texts, the
  # smallest id request ([CLS] [SEP] [PAD] as 0s), the texts with a [MASK].
  texts = list(serving.DEFAULT_WARMUP_TEXTS)
  ids = {"input_word_ids": [[0, 0, 0]], "input_mask": [[1, 1, 0]],
         "input_type_ids": [[0, 0, 0]]}
  intended = {"serving_default": {"text": tf.constant(texts)},
              "serving_ids": {name: tf.constant(value, tf.int32)
                              for name, value in ids.items()},
              "fill_mask": {"text": tf.constant(
                  [f"{text} [MASK]" for text in texts])}}
  replies = {}
  for log in logs:
    request = log.predict_log.request
    name = request.model_spec.signature_name
    inputs = {key: tf.constant(tf.make_ndarray(proto))
              for key, proto in request.inputs.items()}
    assert set(inputs) == set(intended[name]), name
    replies[name] = served.signatures[name](**inputs)
    # The replayed reply equals the signature called on the intended inputs.
    want = served.signatures[name](**intended[name])
    assert set(replies[name]) == set(want), name
    for key, value in want.items():
      np.testing.assert_array_equal(replies[name][key].numpy(), value.numpy(),
                                    err_msg=f"{name}: {key}")
  # And the values are the model's: the Keras encoder on the same texts/ids.
  inputs, keras_out = _keras_on_text(exported["encoder"], texts)
  np.testing.assert_allclose(replies["serving_default"]["pooled_output"],
                             keras_out["pooled_output"], atol=1e-6)
  keras_ids = exported["encoder"](
      {name: np.array(value, np.int32) for name, value in ids.items()},
      training=False)
  mask = np.array(ids["input_mask"])
  np.testing.assert_allclose(
      _at_tokens(replies["serving_ids"]["sequence_output"], mask),
      _at_tokens(keras_ids["sequence_output"], mask), atol=1e-6)
  np.testing.assert_allclose(replies["serving_ids"]["pooled_output"],
                             keras_ids["pooled_output"], atol=1e-6)
  # The fill_mask request holds a [MASK] in every text.
  assert (replies["fill_mask"]["mask_positions"].numpy()[:, 0] > 0).all()


def test_saved_model_cli_run_matches_keras(exported, served, tmp_path):
  # saved_model_cli's own main in a fresh process, with TF Text's kernels
  # registered first (as tensorflow_model_server links them in); it loads
  # the graph the TF1 way TF Serving does (session + restore op). Two runs
  # in one process: serving_default and fill_mask. TensorFlow's oneDNN
  # rewrites on (TF_ENABLE_ONEDNN_OPTS=1, as docs/export-and-serving.md
  # advises for CPU serving): the fused matmul + bias + GELU / residual-add
  # kernels must give the same outputs.
  texts = TEXTS[:2]
  masked = ["the [MASK] sat on the mat"]
  runs = [["saved_model_cli", "run", "--dir", exported["path"], "--tag_set",
           "serve", "--signature_def", name, "--input_exprs",
           f"text={inputs!r}", "--outdir", str(tmp_path / name)]
          for name, inputs in (("serving_default", texts),
                               ("fill_mask", masked))]
  code = ("import sys, tensorflow_text\n"
          "from tensorflow.python.util import _pywrap_util_port\n"
          "assert _pywrap_util_port.IsMklEnabled(), 'oneDNN rewrites off'\n"
          "from tensorflow.python.tools.saved_model_cli import main\n"
          f"for argv in {runs!r}:\n"
          "  sys.argv = argv\n"
          "  try:\n"
          "    main()\n"
          "  except SystemExit as e:\n"
          "    if e.code:\n"
          "      raise\n")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="1")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=300, env=env)
  assert proc.returncode == 0, proc.stderr[-3000:]
  inputs, want = _keras_on_text(exported["encoder"], texts)
  got = {name: np.load(tmp_path / "serving_default" / f"{name}.npy")
         for name in ("pooled_output", "sequence_output", "input_mask")}
  # Padded to the longer text only.
  assert got["input_mask"].shape[1] == inputs["input_mask"].numpy().sum(
      1).max() < SEQ_LENGTH
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"],
                             atol=1e-6)
  np.testing.assert_allclose(
      _at_tokens(got["sequence_output"], got["input_mask"]),
      _at_tokens(want["sequence_output"], inputs["input_mask"]), atol=1e-6)
  want_mask = served.signatures["fill_mask"](text=tf.constant(masked))
  for name in ("top_k_ids", "top_k_probabilities", "mask_positions"):
    np.testing.assert_allclose(
        np.load(tmp_path / "fill_mask" / f"{name}.npy"), want_mask[name],
        atol=1e-6)


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
  with pytest.raises(ValueError, match="pad_multiple must be at least 1"):
    serving.export_saved_model(str(tmp_path), encoder, VOCAB, seq_length=8,
                               pad_multiple=0)
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


def test_text_runs_at_its_length_and_equals_the_fixed_length_export(
    exported, served):
  # The same model with every text padded to seq_length (the TF-Hub
  # preprocessor's packing), and sentence_embedding L2-normalised.
  fixed = serving.ServingModule(
      exported["encoder"], serving.encoder_outputs, VOCAB, True, SEQ_LENGTH,
      dynamic_length=False, normalize_embedding=True,
      remove_padding=False).signatures()
  texts = tf.constant(["Hello, world!", "the cat sat on the mat.", ""])
  got = served.signatures["serving_default"](text=texts)
  want = fixed["serving_default"](text=texts)
  mask = got["input_mask"].numpy()
  # "the cat sat on the mat ." is 7 pieces: [CLS] + 7 + [SEP] = 9 < 16.
  assert mask.shape == (3, 9) and want["input_mask"].shape == (3, SEQ_LENGTH)
  np.testing.assert_array_equal(mask.sum(1), [6, 9, 2])
  np.testing.assert_array_equal(want["input_mask"].numpy()[:, :9], mask)
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"],
                             atol=1e-6)
  np.testing.assert_allclose(
      _at_tokens(got["sequence_output"], mask),
      _at_tokens(want["sequence_output"], want["input_mask"]), atol=1e-6)
  # sentence_embedding: the mean over the tokens, here and (normalised)
  # in the fixed-length export, whose rows have 7-14 padding positions.
  sequence = got["sequence_output"].numpy()
  mean = (sequence * mask[:, :, None]).sum(1) / mask.sum(1)[:, None]
  np.testing.assert_allclose(got["sentence_embedding"], mean, atol=1e-6)
  np.testing.assert_allclose(
      want["sentence_embedding"],
      mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-6)


def test_mask_token_is_one_token_as_in_hugging_face():
  transformers = testing.require("transformers")
  tokenizer = tokenization.FullTokenizer(VOCAB)
  texts = ["[MASK]", "the [MASK] sat on the[MASK].", "[MASK][MASK] cat",
           "[mask] and [ MASK ] are text", "no mask", "", "Héllo [MASK]!"]
  got = serving.tokenize_with_masks(tokenizer, tf.constant(texts)).to_list()
  reference = transformers.BertTokenizerFast(VOCAB, do_lower_case=True)
  want = [reference(text, add_special_tokens=False)["input_ids"]
          for text in texts]
  assert got == want
  assert got[1].count(tokenizer.mask_id) == 2
  assert tokenizer.mask_id not in got[3]


def test_fill_mask_returns_the_masked_lm_top_k(exported, served):
  texts = ["the [MASK] sat on the [MASK].", "hello [MASK]", "no mask here"]
  got = served.signatures["fill_mask"](text=tf.constant(texts))
  tokenizer = tokenization.FullTokenizer(VOCAB)
  # The expected packing, from the Python tokenizer and the mask id.
  pieces = [tokenizer.tokenize(tf.constant(["the"])).to_list()[0],
            tokenizer.tokenize(tf.constant(["sat on the"])).to_list()[0],
            tokenizer.tokenize(tf.constant(["."])).to_list()[0]]
  mask_id = tokenizer.mask_id
  rows = [[tokenizer.cls_id] + pieces[0] + [mask_id] + pieces[1] + [mask_id]
          + pieces[2] + [tokenizer.sep_id],
          [tokenizer.cls_id, tokenizer.convert_tokens_to_ids(["hello"])[0],
           mask_id, tokenizer.sep_id],
          [tokenizer.cls_id] + tokenizer.tokenize(
              tf.constant(texts[2:])).to_list()[0] + [tokenizer.sep_id]]
  length = max(len(row) for row in rows)
  ids = np.array([row + [0] * (length - len(row)) for row in rows], np.int32)
  mask = (np.arange(length)[None, :] < np.array([len(r) for r in rows])[:, None])
  inputs = {"input_word_ids": ids, "input_mask": mask.astype(np.int32),
            "input_type_ids": np.zeros_like(ids)}
  sequence = exported["encoder"](inputs, training=False)["sequence_output"]
  positions = [[i for i, t in enumerate(row) if t == mask_id] for row in rows]
  np.testing.assert_array_equal(got["mask_positions"],
                                [[2, 6], [2, -1], [-1, -1]])
  vocab = tokenizer.vocab
  for b, row_positions in enumerate(positions):
    for m in range(2):
      if m >= len(row_positions):
        assert list(got["top_k_ids"][b, m].numpy()) == [-1] * 5
        assert got["top_k_probabilities"][b, m].numpy().sum() == 0
        continue
      hidden = sequence[b:b + 1, row_positions[m]][None]  # [1, 1, H]
      logits = np.asarray(exported["mlm_head"](hidden))[0, 0]
      probabilities = np.exp(logits - logits.max())
      probabilities /= probabilities.sum()
      best = np.argsort(-probabilities)[:5]
      assert list(got["top_k_ids"][b, m].numpy()) == list(best)
      np.testing.assert_allclose(got["top_k_probabilities"][b, m],
                                 probabilities[best], atol=1e-6)
      assert [t.decode() for t in got["top_k_tokens"][b, m].numpy()] == [
          vocab[i] for i in best]


def test_pack_to_longest_rounds_up_and_caps():
  pieces = tf.ragged.constant([[5, 6, 7], [8], []], tf.int64)
  for multiple, want in ((1, 5), (4, 8), (8, 8), (32, SEQ_LENGTH)):
    packed = serving.pack_to_longest([pieces], SEQ_LENGTH, 2, 3, multiple)
    assert packed["input_word_ids"].shape == (3, want), multiple
    np.testing.assert_array_equal(packed["input_mask"].numpy().sum(1),
                                  [5, 3, 2])
  np.testing.assert_array_equal(packed["input_word_ids"][0, :6],
                                [2, 5, 6, 7, 3, 0])
  # A pair longer than seq_length: 13 pieces kept round-robin (7 + 6).
  long = tf.ragged.constant([list(range(10, 30))], tf.int64)
  packed = serving.pack_to_longest([long, long], SEQ_LENGTH, 2, 3, 8)
  assert packed["input_word_ids"].shape == (1, SEQ_LENGTH)
  np.testing.assert_array_equal(packed["input_type_ids"][0],
                                [0] * 9 + [1] * 7)  # [CLS] 7 [SEP] 6 [SEP]


def test_training_and_serving_pack_empty_and_long_second_texts_alike():
  # As the original's `if tokens_b:`, an empty or whitespace-only second text
  # (or one of control characters only) packs as `[CLS] a [SEP]`, truncated
  # as a single text; tied long pairs lose b's pieces first.
  tokenizer = tokenization.FullTokenizer(VOCAB)
  long = " ".join(["the cat sat on the mat"] * 3)
  pairs = [(long, ""), (long, "  \t "), (long, "\x00\u200b"), ("the dog", ""),
           (long, "the dog"), ("the dog", long), ("the cat sat", "the mat on"),
           (long, long)]
  examples = [text_files.Example(a, b, None, f"t:{i}")
              for i, (a, b) in enumerate(pairs)]
  seq = 11
  train = text_files.encode(examples, tokenizer, max_seq_length=seq)
  a, b = (tokenizer.tokenize(tf.constant([p[k] for p in pairs]))
          for k in (0, 1))
  serve = serving.pack_to_longest([a, b], seq, tokenizer.cls_id,
                                  tokenizer.sep_id, pad_multiple=seq)
  for name, value in train.items():
    np.testing.assert_array_equal(serve[name].numpy(), value, err_msg=name)
  pieces = a.to_list()
  cls, sep = tokenizer.cls_id, tokenizer.sep_id
  for row in range(3):  # A long text with an empty b: 9 pieces, 1 [SEP].
    assert train["input_word_ids"][row].tolist() == (
        [cls] + pieces[row][:seq - 2] + [sep])
    assert train["input_type_ids"][row].tolist() == [0] * seq
  assert train["input_mask"][3].tolist() == [1] * 4 + [0] * (seq - 4)
  # The long/long row: 8 pieces for the pair, a keeps 4 and b 4.
  assert train["input_type_ids"][7].tolist() == [0] * 6 + [1] * 5


def test_bfloat16_export_is_bfloat16_and_close_to_float32(exported, served,
                                                          tmp_path):
  root = exported["root"]
  path = serving.export_pretrained(
      str(tmp_path / "bf16"), str(root / "bert_config.json"),
      str(root / "ckpt" / "ckpt-1"), VOCAB, seq_length=SEQ_LENGTH,
      weights_dtype="bfloat16", warmup_texts=())
  dtypes = tf.train.load_checkpoint(os.path.join(
      path, "variables", "variables")).get_variable_to_dtype_map()
  assert {dtype for dtype in dtypes.values() if dtype.is_floating} == {
      tf.bfloat16}
  got = tf.saved_model.load(path).signatures["serving_default"](
      text=tf.constant(TEXTS))
  want = served.signatures["serving_default"](text=tf.constant(TEXTS))
  assert got["pooled_output"].dtype == tf.float32
  # bfloat16 keeps 8 significant bits: close, but not the float32 values.
  diff = np.abs(got["pooled_output"] - want["pooled_output"]).max()
  assert 0 < diff < 0.05
  np.testing.assert_array_equal(got["input_mask"], want["input_mask"])


def test_ner_scores_are_the_chosen_tags_softmax_probability(tmp_path):
  # export/ner_serving.py: `scores` is the predicted tag's softmax
  # probability, not its logit. Expected values from the Keras classifier
  # on inputs packed here by hand: [CLS] pieces [SEP], one window per text.
  from export import ner_serving  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  keras.utils.set_random_seed(3)
  model = finetuning_models.BertTokenClassifier.from_bert_config(
      testing.tiny_config(), len(labels))
  # Logits far from 0 and from each other: raw logits cannot pass for
  # probabilities, and a softmax over the wrong axis cannot either.
  kernel = model.classifier.kernel
  kernel.assign(kernel * 40.0)
  path = ner_serving.export_ner_model(
      str(tmp_path / "ner"), model, labels, VOCAB, seq_length=SEQ_LENGTH,
      warmup_texts=())
  texts = ["the quick brown fox", "Hello , world !  the dog sat"]
  got = tf.saved_model.load(path).signatures["serving_default"](
      text=tf.constant(texts))
  tokenizer = tokenization.FullTokenizer(VOCAB)
  num_words = [len(text.split()) for text in texts]
  np.testing.assert_array_equal(got["num_words"], num_words)
  for b, text in enumerate(texts):
    pieces = tokenizer.tokenize(tf.constant(text.split())).to_list()
    ids = [tokenizer.cls_id] + sum(pieces, []) + [tokenizer.sep_id]
    assert len(ids) <= SEQ_LENGTH  # one window
    firsts = np.cumsum([1] + [len(p) for p in pieces])[:-1]
    inputs = {"input_word_ids": np.array([ids], np.int32),
              "input_mask": np.ones((1, len(ids)), np.int32),
              "input_type_ids": np.zeros((1, len(ids)), np.int32)}
    logits = np.asarray(model(inputs, training=False))[0, firsts]  # [W, C]
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    assert np.allclose(probabilities.sum(-1), 1)
    scores = got["scores"][b, :num_words[b]].numpy()
    assert ((scores >= 1 / len(labels)) & (scores <= 1)).all(), scores
    np.testing.assert_allclose(scores, probabilities.max(-1), atol=1e-5)
    assert [t.decode() for t in got["tags"][b, :num_words[b]].numpy()] == [
        labels[i] for i in probabilities.argmax(-1)]
    assert not got["scores"][b, num_words[b]:].numpy().any()  # padding


def test_xla_single_text_equals_the_plain_export(exported, served):
  # One text (or pair) runs XLA-compiled at its bucket's length (8 or 16
  # here), the outputs cut back to its length; several texts run as before.
  module = serving.ServingModule(
      exported["encoder"], serving.encoder_outputs, VOCAB, True, SEQ_LENGTH,
      xla_single_text=True, single_text_bucket=8)
  signature = module.signatures()["serving_default"]
  library = signature.graph.as_graph_def().library.function
  assert [f for f in library if f.attr["_XlaMustCompile"].b]  # XLA, really
  plain = served.signatures["serving_default"]
  for texts in (TEXTS[1:2], TEXTS[:1], TEXTS[2:], TEXTS):
    got = signature(text=tf.constant(texts))
    want = plain(text=tf.constant(texts))
    for name, value in want.items():
      assert got[name].shape == value.shape, (texts, name)
      np.testing.assert_allclose(got[name], value, atol=1e-5, err_msg=name)
  # serving_ids: one unpadded row (a client that tokenizes) runs the same
  # XLA cluster; a padded row, or several, as the plain export.
  ids = module.signatures()["serving_ids"]
  plain_ids = served.signatures["serving_ids"]
  assert [f for f in ids.graph.as_graph_def().library.function
          if f.attr["_XlaMustCompile"].b]
  one = testing.random_inputs(seq=11, seed=4)
  one = {k: v[:1] for k, v in one.items()}
  one["input_mask"][:] = 1
  padded = {k: v.copy() for k, v in one.items()}
  padded["input_mask"][0, 7:] = 0
  for inputs in (one, padded, testing.random_inputs(seq=11, seed=4)):
    got = ids(**{k: tf.constant(v) for k, v in inputs.items()})
    want = plain_ids(**{k: tf.constant(v) for k, v in inputs.items()})
    for name, value in want.items():
      np.testing.assert_allclose(got[name], value, atol=1e-5, err_msg=name)
  # The warmup texts fill each bucket exactly: [CLS] words [SEP].
  lengths = [signature(text=tf.constant([texts["text"]]))["input_mask"].shape[1]
             for texts in module.bucket_texts()]
  assert lengths == [8, 16]


def test_int8_export_adds_a_litert_serving_ids_with_int8_weights(
    exported, served, tmp_path):
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  root = exported["root"]
  with pytest.raises(ValueError, match="drop --weights_dtype=bfloat16"):
    serving.export_pretrained(
        str(tmp_path / "no"), str(root / "bert_config.json"),
        str(root / "ckpt" / "ckpt-1"), VOCAB, weights_dtype="bfloat16",
        quantize="int8")
  assert not (tmp_path / "no").exists()
  path = serving.export_saved_model(
      str(tmp_path / "int8"), exported["encoder"], VOCAB,
      seq_length=SEQ_LENGTH, quantize="int8")
  # The SavedModel (raw text, float32) is the plain one. The warmup, which
  # TF Serving replays against model.tflite under --prefer_tflite_model,
  # holds only the request model.tflite answers too.
  assert set(tf.saved_model.load(path).signatures) == {"serving_default",
                                                       "serving_ids"}
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  logs = [prediction_log_pb2.PredictionLog.FromString(record.numpy())
          for record in tf.data.TFRecordDataset(
              os.path.join(path, serving.WARMUP_FILE))]
  assert [log.predict_log.request.model_spec.signature_name
          for log in logs] == ["serving_ids"]
  model = litert_int8.Int8Model.load(path)
  # Dense kernels int8, one scale per output channel.
  details = model._interpreter.get_tensor_details()  # pylint: disable=protected-access
  int8 = [d for d in details if d["dtype"] == np.int8
          and len(d["shape"]) == 2]
  kernels = [d for d in int8 if "word_embeddings" not in d["name"]]
  # Every dense kernel (the column blocks of the feed-forward networks
  # each) and the pooler; the word embeddings are int8 too, one scale.
  assert len(kernels) == (4 + 8) * testing.LAYERS + 1
  assert all(len(d["quantization_parameters"]["scales"]) == d["shape"][0]
             for d in kernels)
  assert len(int8) == len(kernels) + 1
  ids = testing.random_inputs(seq=11, seed=4)
  got = model(**ids)
  want = served.signatures["serving_ids"](
      **{k: tf.constant(v) for k, v in ids.items()})
  assert set(got) == set(want)
  np.testing.assert_array_equal(got["input_mask"], want["input_mask"])
  # Padding removed from the work, as in the float32 export: its positions
  # are never computed, so exactly 0 (a model on [B, T] computes them).
  padding = ids["input_mask"] == 0
  assert padding.sum() >= 5
  assert not got["sequence_output"][padding].any()
  assert np.abs(got["sequence_output"][~padding]).min() > 0
  a, b = got["sentence_embedding"], want["sentence_embedding"].numpy()
  cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b,
                                                                       axis=1)
  assert cosine.min() > 0.99, cosine
  # Not float32 in disguise: int8 weights change the values a little.
  assert 0 < np.abs(got["pooled_output"] - want["pooled_output"]).max() < 0.1


def test_litert_export_is_serving_ids_in_float32(exported, served, tmp_path):
  # --litert: model.tflite, serving_ids in float32 (no int8 tensor), the
  # SavedModel's numbers; the warmup holds what both serve.
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="drop --weights_dtype=bfloat16 or "
                     "--litert"):
    serving.export_pretrained(
        str(tmp_path / "no"), str(exported["root"] / "bert_config.json"),
        str(exported["root"] / "ckpt" / "ckpt-1"), VOCAB,
        weights_dtype="bfloat16", litert=True)
  path = serving.export_saved_model(
      str(tmp_path / "f32"), exported["encoder"], VOCAB,
      seq_length=SEQ_LENGTH, litert=True)
  model = litert_int8.Int8Model.load(path)
  details = model._interpreter.get_tensor_details()  # pylint: disable=protected-access
  assert not [d for d in details if d["dtype"] == np.int8]
  ids = testing.random_inputs(seq=11, seed=4)
  got = model(**ids)
  want = served.signatures["serving_ids"](
      **{k: tf.constant(v) for k, v in ids.items()})
  assert set(got) == set(want)
  for name, value in got.items():
    np.testing.assert_allclose(value, want[name], atol=1e-5, err_msg=name)
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  logs = [prediction_log_pb2.PredictionLog.FromString(record.numpy())
          for record in tf.data.TFRecordDataset(
              os.path.join(path, serving.WARMUP_FILE))]
  assert {log.predict_log.request.model_spec.signature_name
          for log in logs} == {"serving_ids"}


def test_ner_and_squad_xla_single_text_equal_their_plain_path():
  # run_ner's and run_squad's --xla_single_text: a request whose one text
  # fits one window runs the model XLA-compiled (serving.OneRowXla), cut to
  # its tokens and padded to a bucket; the answers equal the plain path's,
  # which the same signature takes for several texts (or one text of several
  # windows): each text alone against its row of a request of two.
  from export import ner_serving  # pylint: disable=g-import-not-at-top
  from export import squad_serving  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  keras.utils.set_random_seed(5)
  tagger = finetuning_models.BertTokenClassifier.from_bert_config(
      testing.tiny_config(), len(labels))
  tagger.classifier.kernel.assign(tagger.classifier.kernel * 40.0)
  spans = finetuning_models.BertSpanLabeler.from_bert_config(
      testing.tiny_config())
  spans.classifier.kernel.assign(spans.classifier.kernel * 40.0)
  ner_module = ner_serving.NerServingModule(tagger, labels, VOCAB, True,
                                            SEQ_LENGTH, xla_single_text=True)
  squad_module = squad_serving.SquadServingModule(
      spans, VOCAB, True, SEQ_LENGTH, doc_stride=4, max_query_length=4,
      xla_single_text=True)
  ner = ner_module.signatures()["serving_default"]
  squad = squad_module.signatures()["serving_default"]
  for signature in (ner, squad):
    library = signature.graph.as_graph_def().library.function
    assert [f for f in library if f.attr["_XlaMustCompile"].b]  # XLA, really
  assert ner_module.bucket_lengths() == squad_module.bucket_lengths() == [16]

  def assert_row_equal(one, two, row):
    """`one` (a request of one text) equals row `row` of `two` (a request
    of two: the plain path) over one's width (two pads to its longer)."""
    for name, value in two.items():
      got, want = np.asarray(one[name][0]), np.asarray(value[row])
      assert got.dtype == want.dtype, name
      if want.ndim:
        want = want[:got.shape[0]]
      if want.dtype.kind in "SO":
        np.testing.assert_array_equal(got, want, err_msg=name)
      else:
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)

  # The last text needs several windows at SEQ_LENGTH: the plain path alone.
  for texts in (["the quick brown fox", "Hello , world !  the dog sat"],
                ["Hello , world !", " ".join(["the cat sat on the mat"] * 4)]):
    both = ner(text=tf.constant(texts))
    for row, text in enumerate(texts):
      assert_row_equal(ner(text=tf.constant([text])), both, row)
  for questions, contexts in ((["who sat ?", "where ?"],
                               ["the cat sat .", "on the mat"]),
                              (["who ?", "who sat ?"],
                               ["the cat sat on the mat . " * 3,
                                "the cat sat ."])):
    both = squad(question=tf.constant(questions),
                 context=tf.constant(contexts))
    for row, (question, context) in enumerate(zip(questions, contexts)):
      assert_row_equal(squad(question=tf.constant([question]),
                             context=tf.constant([context])), both, row)
