"""TF-Hub encoder + preprocessor modules: exported by the real CLI, moved, reloaded.

The module fixture writes a pretraining checkpoint of the tiny model, runs
`python -m export.export_tfhub`, copies the result elsewhere and deletes the
original (no absolute paths may survive), then every test loads the copy.
"""

import os
import pwd
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from export import saved_model_io
from export import tfhub_modules
from official_bert.training import checkpoints
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

VOCAB = os.path.join(testing.TESTDATA, "export_vocab.txt")
SEQ_LENGTH = 12  # The preprocessor's default; max_position_embeddings is 16.


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  root = tmp_path_factory.mktemp("hub")
  config = testing.tiny_config()
  config.to_json_file(str(root / "bert_config.json"))
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  # Non-zero MLM bias, so a head that ignored it would not match.
  model.cls_predictions.output_bias.assign(
      np.linspace(-1, 1, testing.VOCAB_SIZE).astype(np.float32))
  checkpoints.save_model(model, str(root / "ckpt" / "ckpt-1"))
  umask = os.umask(0o022)  # Inherited by the CLI: modes 0755 / 0644.
  try:
    proc = testing.run_cli([
        "-m", "export.export_tfhub",
        f"--bert_config_file={root / 'bert_config.json'}",
        f"--init_checkpoint={root / 'ckpt' / 'ckpt-1'}",
        f"--vocab_file={VOCAB}", f"--export_dir={root / 'original'}",
        f"--seq_length={SEQ_LENGTH}"])
  finally:
    os.umask(umask)
  assert "with .mlm" in proc.stdout and "TF Text" in proc.stdout
  shutil.copytree(root / "original", root / "moved")
  shutil.rmtree(root / "original")
  return {"model": model, "root": root,
          "encoder": str(root / "moved" / "encoder"),
          "preprocessor": str(root / "moved" / "preprocessor")}


@pytest.fixture(scope="module")
def loaded(exported):
  return (tf.saved_model.load(exported["encoder"]),
          tf.saved_model.load(exported["preprocessor"]))


def test_encoder_outputs_equal_keras_model(exported, loaded):
  encoder = loaded[0]
  keras_encoder = exported["model"].encoder
  for seq in (testing.SEQ, 11):  # Variable sequence length.
    inputs = testing.random_inputs(seq=seq, seed=seq)
    want = keras_encoder(inputs, training=False)
    got = encoder(inputs, training=False)
    assert got["sequence_output"].shape == (testing.BATCH, seq, testing.HIDDEN)
    for name in ("sequence_output", "pooled_output"):
      np.testing.assert_allclose(got[name], want[name], atol=1e-6)
    for layer_got, layer_want in zip(got["encoder_outputs"],
                                     want["encoder_outputs"]):
      np.testing.assert_allclose(layer_got, layer_want, atol=1e-6)
    assert len(got["encoder_outputs"]) == testing.LAYERS
    np.testing.assert_array_equal(got["default"], got["pooled_output"])
  # The masked-LM sub-object.
  inputs = testing.random_inputs()
  inputs["masked_lm_positions"] = np.array([[1, 2], [0, 3], [4, 1]], np.int32)
  got = encoder.mlm(inputs, training=False)["mlm_logits"]
  want = exported["model"](inputs, training=False)["mlm_logits"]
  assert got.shape == (testing.BATCH, 2, testing.VOCAB_SIZE)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_encoder_module_attributes(exported, loaded):
  encoder = loaded[0]
  keras_encoder = exported["model"].encoder
  assert len(encoder.trainable_variables) == len(
      keras_encoder.trainable_variables)
  # Dropout seed-generator states are reachable too (non-trainable).
  assert len(encoder.variables) == len(keras_encoder.variables)
  assert encoder.regularization_losses == []
  assert bool(encoder.do_lower_case.numpy()) is True
  with open(encoder.vocab_file.asset_path.numpy().decode()) as f:
    assert f.read().splitlines()[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                         "[MASK]"]
  # The asset lives inside the moved export, not at the original path.
  assert encoder.vocab_file.asset_path.numpy().decode().startswith(
      str(exported["root"] / "moved"))


def test_dropout_acts_only_in_training(loaded):
  encoder = loaded[0]
  inputs = testing.random_inputs()
  eval_1 = encoder(inputs, training=False)["pooled_output"].numpy()
  eval_2 = encoder(inputs)["pooled_output"].numpy()  # default: False
  train_1 = encoder(inputs, training=True)["pooled_output"].numpy()
  train_2 = encoder(inputs, training=True)["pooled_output"].numpy()
  np.testing.assert_array_equal(eval_1, eval_2)
  assert np.abs(train_1 - eval_1).max() > 1e-3
  assert np.abs(train_1 - train_2).max() > 1e-3


def test_preprocessor(loaded):
  preprocessor = loaded[1]
  special = {k: int(v) for k, v in
             preprocessor.tokenize.get_special_tokens_dict().items()}
  assert special == {"vocab_size": 99, "padding_id": 0,
                     "start_of_sequence_id": 2, "end_of_segment_id": 3,
                     "mask_id": 4}
  vocab = open(VOCAB).read().splitlines()
  ids = {token: i for i, token in enumerate(vocab)}
  tokens = preprocessor.tokenize(tf.constant(["The fox jumps!", "Hello"]))
  assert tokens.ragged_rank == 2  # [B, (words), (pieces)]
  assert tokens.to_list() == [
      [[ids["the"]], [ids["fox"]], [ids["jump"], ids["##s"]], [ids["!"]]],
      [[ids["hello"]]]]
  # __call__: one segment at the default length.
  packed = preprocessor(tf.constant(["The fox jumps!", "Hello"]))
  assert packed["input_word_ids"].shape == (2, SEQ_LENGTH)
  np.testing.assert_array_equal(
      packed["input_word_ids"][1, :4], [2, ids["hello"], 3, 0])
  np.testing.assert_array_equal(packed["input_mask"].numpy().sum(1), [7, 3])
  # Two segments, round-robin trimming to seq_length 7: budget 4, the
  # 5-piece first segment gives up pieces first -> 2 + 2 (not 3 + 1).
  seg_a = preprocessor.tokenize(tf.constant(["The fox jumps!"]))
  seg_b = preprocessor.tokenize(tf.constant(["Hello world"]))
  packed = preprocessor.bert_pack_inputs([seg_a, seg_b], seq_length=7)
  np.testing.assert_array_equal(
      packed["input_word_ids"],
      [[2, ids["the"], ids["fox"], 3, ids["hello"], ids["world"], 3]])
  np.testing.assert_array_equal(packed["input_type_ids"],
                                [[0, 0, 0, 0, 1, 1, 1]])
  np.testing.assert_array_equal(packed["input_mask"], [[1] * 7])
  # Flat [B, (pieces)] segments work too.
  flat = preprocessor.bert_pack_inputs([seg_b.merge_dims(-2, -1)],
                                       seq_length=tf.constant(5))
  np.testing.assert_array_equal(
      flat["input_word_ids"], [[2, ids["hello"], ids["world"], 3, 0]])


@pytest.mark.slow
def test_hub_keras_layer_fine_tunes(exported):
  hub = testing.require("tensorflow_hub")
  import tf_keras  # pylint: disable=g-import-not-at-top
  tf_keras.utils.set_random_seed(0)
  text = tf_keras.Input(shape=(), dtype=tf.string)
  preprocess = hub.KerasLayer(exported["preprocessor"])
  encoder = hub.KerasLayer(exported["encoder"], trainable=True)
  pooled = encoder(preprocess(text))["pooled_output"]
  logits = tf_keras.layers.Dense(2)(pooled)
  classifier = tf_keras.Model(text, logits)
  classifier.compile(
      optimizer=tf_keras.optimizers.Adam(1e-3),
      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  assert len(encoder.trainable_weights) == 39  # every encoder weight
  before = [w.numpy().copy() for w in encoder.trainable_weights]
  texts = tf.constant(["this movie was good", "this movie was bad",
                       "a good day", "a bad day"])
  labels = tf.constant([1, 0, 1, 0])
  # Gradients reach every encoder weight, through the training=True trace
  # (dropout on: two training-mode calls differ, inference calls do not).
  loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  with tf.GradientTape() as tape:
    loss = loss_fn(labels, classifier(texts, training=True))
  grads = tape.gradient(loss, encoder.trainable_weights)
  assert all(g is not None and np.abs(tf.convert_to_tensor(g)).max() > 0
             for g in grads)
  np.testing.assert_array_equal(classifier(texts, training=False),
                                classifier(texts, training=False))
  assert np.abs(classifier(texts, training=True) -
                classifier(texts, training=True)).max() > 1e-4
  classifier.fit(texts, labels, epochs=1, batch_size=4, verbose=0)
  # The tutorial's sentence-pair recipe: tokenize and bert_pack_inputs as
  # layers, seq_length passed as a layer argument.
  loaded = hub.load(exported["preprocessor"])
  tokenize = hub.KerasLayer(loaded.tokenize)
  pack = hub.KerasLayer(loaded.bert_pack_inputs,
                        arguments={"seq_length": 6})
  packed = pack([tokenize(tf.constant(["a good movie"])),
                 tokenize(tf.constant(["bad"]))])
  vocab = open(VOCAB).read().splitlines()
  assert [vocab[i] for i in packed["input_word_ids"][0]] == [
      "[CLS]", "a", "good", "[SEP]", "bad", "[SEP]"]
  changed = [np.abs(b - w.numpy()).max() > 0
             for b, w in zip(before, encoder.trainable_weights)]
  assert all(changed)


def test_readme_loading_snippet_runs_as_written(exported):
  """docs/export-and-serving.md's TF-Hub loading snippet, run in a fresh
  Python (where tensorflow_text is not imported yet), with /tmp/bert_hub
  replaced by the fixture's export. Bug caught: the snippet without `import
  tensorflow_text` (Op type not registered 'TFText>RoundRobinTrim') or without
  `tf`."""
  with open(os.path.join(testing.ROOT, "docs", "export-and-serving.md"),
            encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
  snippet, = [b for b in blocks if 'hub.KerasLayer("/tmp/bert_hub/' in b]
  snippet = snippet.replace("/tmp/bert_hub",
                            os.path.dirname(exported["encoder"]))
  proc = testing.run_cli(["-c", snippet + "\nprint(sorted(outputs))\n"])
  assert "pooled_output" in proc.stdout.strip().splitlines()[-1]


def test_keras3_tfsmlayer_loads_modules(exported):
  import keras  # pylint: disable=g-import-not-at-top
  encoder = keras.layers.TFSMLayer(exported["encoder"],
                                   call_endpoint="__call__")
  preprocessor = keras.layers.TFSMLayer(exported["preprocessor"],
                                        call_endpoint="__call__")
  inputs = preprocessor(tf.constant(["the quick brown fox", "hello"]))
  got = encoder(inputs)
  want = exported["model"].encoder(inputs, training=False)
  np.testing.assert_allclose(got["pooled_output"], want["pooled_output"],
                             atol=1e-6)


def test_bad_export_inputs_give_one_clear_error(exported, tmp_path):
  root = exported["root"]
  testing.tiny_config(num_hidden_layers=3).to_json_file(
      str(tmp_path / "three_layers.json"))
  proc = testing.run_cli([
      "-m", "export.export_tfhub",
      f"--bert_config_file={tmp_path / 'three_layers.json'}",
      f"--init_checkpoint={root / 'ckpt' / 'ckpt-1'}", f"--vocab_file={VOCAB}",
      f"--export_dir={tmp_path / 'out'}"], check=False)
  assert proc.returncode != 0
  assert "has 2 Transformer layers" in proc.stderr
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists()
  with pytest.raises(ValueError, match="does not exist"):
    saved_model_io.check_vocab(str(tmp_path / "missing.txt"), 99)
  with pytest.raises(ValueError, match="has 99 tokens but"):
    saved_model_io.check_vocab(VOCAB, 50)


def test_export_is_readable_by_another_user(exported):
  """TF Serving in a container usually runs as another user. Bug caught:
  tempfile.mkdtemp's 0700 (or mkstemp's 0600) surviving the rename."""
  moved = os.path.dirname(exported["encoder"])  # copytree kept the modes
  modes = set()
  for directory, _, files in os.walk(moved):
    modes.add(("dir", oct(os.stat(directory).st_mode & 0o777)))
    modes.update(("file", oct(os.stat(os.path.join(directory, name)).st_mode
                              & 0o777)) for name in files)
  assert modes == {("dir", "0o755"), ("file", "0o644")}, modes
  if os.getuid() != 0:
    return
  # As `nobody`: list every directory and read every file of a copy in a
  # directory everyone may enter (pytest's tmp root is 0700).
  public = tempfile.mkdtemp()
  try:
    os.chmod(public, 0o755)
    shutil.copytree(moved, os.path.join(public, "hub"))
    nobody = pwd.getpwnam("nobody")
    # `ls` and `cat`: the venv's Python lives under /root, closed to nobody.
    directories, files = [], []
    for directory, _, names in os.walk(os.path.join(public, "hub")):
      directories.append(directory)
      files += [os.path.join(directory, name) for name in names]
    # setpriv drops to nobody after exec: no preexec_fn or user= here, which
    # make subprocess fork() this process (TensorFlow's threads, gRPC's fork
    # handlers) instead of vfork-and-exec, and a fork can deadlock in it.
    as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}",
                 f"--regid={nobody.pw_gid}", "--clear-groups"]
    for command in (["ls", "-a"] + directories, ["cat"] + files):
      proc = subprocess.run(as_nobody + command, capture_output=True,
                            check=False, timeout=120)
      assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) == sum(os.path.getsize(f) for f in files) > 0
  finally:
    shutil.rmtree(public)


def test_load_pretrained_reads_a_fine_tuned_checkpoint(tmp_path):
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  config = testing.tiny_config()
  config.to_json_file(str(tmp_path / "bert_config.json"))
  classifier = finetuning_models.BertClassifier.from_bert_config(
      config, num_classes=3)
  checkpoints.save_model(classifier, str(tmp_path / "ckpt-7"))
  encoder, mlm_head = saved_model_io.load_pretrained(
      str(tmp_path / "bert_config.json"), str(tmp_path / "ckpt-7"))
  assert mlm_head is None  # no masked-LM head in a fine-tuned checkpoint
  inputs = testing.random_inputs()
  np.testing.assert_array_equal(
      encoder(inputs)["pooled_output"],
      classifier.encoder(inputs)["pooled_output"])


def test_load_pretrained_reads_an_original_tf1_checkpoint(exported, tmp_path):
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  model = exported["model"]
  arrays = {name: variable.numpy().T if transpose else variable.numpy()
            for name, (variable, transpose) in
            checkpoint_names.original_names(model).items()}
  release = tmp_path / "uncased_L-2_H-32"
  testing.write_tf1_checkpoint(str(release), arrays, testing.tiny_config())
  # The release folder, as downloaded: the exporters' --init_checkpoint.
  encoder, mlm_head = saved_model_io.load_pretrained(
      str(release / "bert_config.json"), str(release))
  assert mlm_head is not None
  inputs = testing.random_inputs()
  np.testing.assert_allclose(
      encoder(inputs)["sequence_output"],
      model.encoder(inputs)["sequence_output"], atol=1e-6)
  np.testing.assert_array_equal(mlm_head.output_bias.numpy(),
                                model.cls_predictions.output_bias.numpy())
  np.testing.assert_array_equal(mlm_head.dense.kernel.numpy(),
                                model.cls_predictions.dense.kernel.numpy())


def test_interrupted_export_leaves_no_complete_looking_directory(tmp_path):
  module = tf.Module()
  module.v = tf.Variable(1.0)

  def crash(path):
    assert os.path.exists(os.path.join(path, "saved_model.pb"))
    raise KeyboardInterrupt  # e.g. Ctrl-C while writing extra files

  with pytest.raises(KeyboardInterrupt):
    saved_model_io.atomic_save(module, str(tmp_path / "model"),
                               after_save=crash)
  assert os.listdir(tmp_path) == []  # neither the model nor a temp dir
  saved_model_io.atomic_save(module, str(tmp_path / "model"))
  with pytest.raises(ValueError, match="already exists"):
    saved_model_io.atomic_save(module, str(tmp_path / "model"))


def test_pack_inputs_trims_round_robin():
  a = tf.ragged.constant([[11, 12, 13, 14, 15], [21]])
  b = tf.ragged.constant([[31, 32], [41, 42, 43, 44]])
  packed = tfhub_modules.pack_inputs([a, b], 8, cls_id=2, sep_id=3)
  np.testing.assert_array_equal(packed["input_word_ids"], [
      [2, 11, 12, 13, 3, 31, 32, 3],   # a keeps 3, b keeps both
      [2, 21, 3, 41, 42, 43, 44, 3]])  # short a: b gets the rest
  np.testing.assert_array_equal(packed["input_type_ids"], [
      [0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]])
