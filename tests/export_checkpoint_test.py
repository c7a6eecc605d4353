"""export_checkpoint: what the real libraries read back equals our model.

* Round trip: a Hugging Face BertForPreTraining directory converted in
  (convert_checkpoint) and exported back holds the same tensors, bit for bit,
  under the same names (no missing or unexpected key).
* A tiny model trained by our trainer, exported by the CLI, loads with
  `BertForPreTraining.from_pretrained` and gives our masked-LM and
  next-sentence logits (1e-5) on sentences of the shared corpus; the exported
  tokenizer gives our ids on the corpus' lines (with and without
  tokenizer.json).
* Fine-tuned classifier, regression, SQuAD and NER heads give our logits
  through the matching transformers classes, with the run's labels.
* sentence-transformers: `SentenceTransformer(dir).encode` equals the
  serving signature's `sentence_embedding` (cosine >= 0.99999), normalised
  or not.
* google_tf1: the variable list equals google-research/bert's names and
  shapes (tests/testdata/bert_base_original_variables.txt, pinned from the
  original, scaled to the tiny sizes); our TF1 importer reads it back to the
  same arrays; a loader written here from the original's scope rules (the
  rule transformers' removed `load_tf_weights_in_bert` followed: it is gone
  from transformers 5) fills BertForPreTraining with the same logits.
* Bad input is one sentence from the CLI, and nothing is left behind.
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from export import checkpoint_heads
from export import export_checkpoint
from export import hf_export
from official_bert import configs
from official_bert import disk_full
from official_bert.modeling import finetuning_models
from official_bert.modeling import pretrainer as pretrainer_lib
from official_bert.training import checkpoints
from tests import testing

torch = testing.require("torch")
transformers = testing.require("transformers")
safetensors_numpy = testing.require("safetensors.numpy")

ATOL = 1e-5
MAX_POSITIONS = 64
TINY_VOCAB = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 94)] + [
    "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"]


def _perturb(model, seed=0):
  """Non-trivial biases and LayerNorms (zeros and ones hide swaps), and
  feed-forward inputs of order 1 (at BERT's init they are ~0.1, where the
  exact and the tanh GELU agree to 1e-5, so a wrong hidden_act would pass)."""
  rng = np.random.default_rng(seed)
  for variable in model.weights:
    value = variable.numpy() + rng.normal(0, 0.05, variable.shape)
    if "/intermediate/kernel" in variable.path:
      value *= 10
    variable.assign(value.astype(np.float32))


def _tiny_vocab(directory):
  path = os.path.join(directory, "vocab.txt")
  with open(path, "w") as f:
    f.write("\n".join(TINY_VOCAB) + "\n")
  return path


def _config_file(directory, config):
  path = os.path.join(directory, "bert_config.json")
  config.to_json_file(path)
  return path


def _no_missing_weights(model_class, directory):
  model, info = model_class.from_pretrained(directory,
                                            output_loading_info=True)
  assert not info["missing_keys"] and not info["unexpected_keys"], info
  assert not info["mismatched_keys"], info
  return model.eval()


def _torch(inputs):
  return dict(input_ids=torch.tensor(inputs["input_word_ids"]).long(),
              attention_mask=torch.tensor(inputs["input_mask"]).long(),
              token_type_ids=torch.tensor(inputs["input_type_ids"]).long())


# ------------------------------------------------------------ round trip ----

def test_hugging_face_directory_round_trips_exactly(tmp_path):
  from official_bert import convert_checkpoint  # pylint: disable=g-import-not-at-top
  config = testing.tiny_config()
  torch.manual_seed(0)
  hf_model = transformers.BertForPreTraining(
      transformers.BertConfig(**config.to_dict())).eval()
  with torch.no_grad():
    for parameter in hf_model.parameters():
      parameter.add_(torch.randn_like(parameter) * 0.05)
  hf_model.save_pretrained(tmp_path / "hf")
  _tiny_vocab(tmp_path / "hf")
  convert_checkpoint.convert(str(tmp_path / "hf"), str(tmp_path / "ours"))
  export_checkpoint.export(
      tmp_path / "back", "huggingface", str(tmp_path / "ours" /
                                            "bert_config.json"),
      str(tmp_path / "ours"), str(tmp_path / "ours" / "vocab.txt"))
  original = safetensors_numpy.load_file(tmp_path / "hf" / "model.safetensors")
  back = safetensors_numpy.load_file(tmp_path / "back" / "model.safetensors")
  assert sorted(back) == sorted(original)
  for name, value in original.items():
    # float32 in, float32 out; transposes are exact.
    np.testing.assert_array_equal(back[name], value, err_msg=name)
  with open(tmp_path / "back" / "config.json") as f:
    exported = json.load(f)
  assert exported["architectures"] == ["BertForPreTraining"]
  for key, value in config.to_dict().items():
    assert exported[key] == value, key
  _no_missing_weights(transformers.BertForPreTraining, tmp_path / "back")


# --------------------------------------------- a model our trainer trained ----

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A pretraining run of 4 steps (trainer checkpoints: model, optimizer,
  step, rng) of a tiny model with the shared uncased vocabulary's size."""
  testing.require_shared_data()
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  from official_bert.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  work = tmp_path_factory.mktemp("trained")
  records = input_pipeline_test.write_records(
      work / "train.tfrecord", input_pipeline_test.make_instances(16, seed=2))
  config = testing.tiny_config(vocab_size=30522,
                               max_position_embeddings=MAX_POSITIONS)
  keras.utils.set_random_seed(3)
  model = pretrainer_lib.BertPretrainer.from_bert_config(config)
  steps = 4
  trainer = trainer_lib.Trainer(
      tf.distribute.get_strategy(), model,
      optimization.create_optimizer("adamw", 1e-2, steps, 1), 
      pretrainer_lib.pretraining_losses,
      trainer_lib.TrainConfig(output_dir=str(work / "run"),
                              num_train_steps=steps, steps_per_loop=2,
                              save_checkpoints_steps=steps),
      metric_fn=pretrainer_lib.pretraining_metric_counts, log=lambda _: None)
  trainer.train(input_pipeline.pretraining_dataset_fn(
      [str(records)], 4, testing.SEQ, 3, is_training=True, seed=1))
  assert tf.train.latest_checkpoint(str(work / "run")).endswith("ckpt-4")
  return {"config": config, "config_file": _config_file(work, config),
          "run": str(work / "run"), "work": work}


def _restored_pretrainer(trained):
  model = pretrainer_lib.BertPretrainer.from_bert_config(trained["config"],
                                                         kernels="keras")
  checkpoints.restore_model(model, trained["run"])
  return model


def _sentence_pairs(n=5, max_len=MAX_POSITIONS):
  """[CLS] a [SEP] b [SEP] of consecutive corpus lines, padded, with three
  masked positions each (our tokenizer: the ids under test)."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)
  lines = [line for doc in testing.corpus_documents()[:20] for line in doc]
  rows = []
  for a, b in zip(lines[0:2 * n:2], lines[1:2 * n:2]):
    ids = tokenizer.tokenize([a, b]).to_list()
    half = (max_len - 3) // 2
    a_ids, b_ids = ids[0][:half], ids[1][:half]
    rows.append([tokenizer.cls_id] + a_ids + [tokenizer.sep_id] + b_ids +
                [tokenizer.sep_id])
    rows[-1] = (rows[-1], len(a_ids) + 2)
  seq = max(len(r) for r, _ in rows)
  inputs = {name: np.zeros((n, seq), np.int32)
            for name in ("input_word_ids", "input_mask", "input_type_ids")}
  positions = np.zeros((n, 3), np.int32)
  for i, (row, first) in enumerate(rows):
    inputs["input_word_ids"][i, :len(row)] = row
    inputs["input_mask"][i, :len(row)] = 1
    inputs["input_type_ids"][i, first:len(row)] = 1
    positions[i] = [1, first // 2 + 1, len(row) - 2]
  return inputs, positions


def test_cli_huggingface_export_gives_our_logits_and_ids(trained, tmp_path):
  out = tmp_path / "hf"
  umask = os.umask(0o022)
  try:
    proc = testing.run_cli([
        "-m", "export.export_checkpoint", "--format=huggingface",
        f"--bert_config_file={trained['config_file']}",
        f"--init_checkpoint={trained['run']}", f"--vocab_file={testing.VOCAB}",
        f"--export_dir={out}"])
  finally:
    os.umask(umask)
  assert "pretraining from" in proc.stdout and "ckpt-4" in proc.stdout
  modes = {name: oct(os.stat(out / name).st_mode & 0o777)
           for name in os.listdir(out)}
  assert set(modes.values()) == {"0o644"}, modes
  assert oct(os.stat(out).st_mode & 0o777) == "0o755"
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
  with open(out / "config.json") as f:
    assert json.load(f)["hidden_act"] == "gelu"  # exact erf, both sides

  hf_model = _no_missing_weights(transformers.BertForPreTraining, out)
  model = _restored_pretrainer(trained)
  inputs, positions = _sentence_pairs()
  ours = model({**inputs, "masked_lm_positions": positions}, training=False)
  with torch.no_grad():
    theirs = hf_model(**_torch(inputs))
  mlm = np.take_along_axis(theirs.prediction_logits.numpy(),
                           positions[..., None], axis=1)
  np.testing.assert_allclose(mlm, ours["mlm_logits"], atol=ATOL)
  np.testing.assert_allclose(theirs.seq_relationship_logits.numpy(),
                             ours["next_sentence_logits"], atol=ATOL)

  # The exported tokenizer: our ids on the corpus' lines, from tokenizer.json
  # and (tokenizers not installed at export time) from vocab.txt alone.
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  lines = [line for doc in testing.corpus_documents()[:60] for line in doc]
  ours = tokenization.FullTokenizer(testing.VOCAB, True).tokenize(
      lines).to_list()
  assert len(lines) > 200
  # tokenizer.json alone, as the Rust tokenizers (text-embeddings-inference)
  # read it: transformers' AutoTokenizer may rebuild parts of it from
  # tokenizer_config.json, so it is checked on its own.
  tokenizers = testing.require("tokenizers")
  rust = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
  theirs = [e.ids for e in rust.encode_batch(lines, add_special_tokens=False)]
  assert theirs == ours
  for drop_json in (False, True):
    if drop_json:
      os.remove(out / "tokenizer.json")
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    theirs = tokenizer(lines, add_special_tokens=False)["input_ids"]
    wrong = [(line, a, b) for line, a, b in zip(lines, ours, theirs) if a != b]
    assert not wrong, wrong[:2]
    pair = tokenizer(lines[0], lines[1])["input_ids"]
    assert pair == [101] + ours[0] + [102] + ours[1] + [102]


# ---------------------------------------------------------- fine-tuned ----

HEADS = {
    # task: (model class, num outputs, flags.json keys of the program,
    #        label_list.json, transformers class)
    # run_classifier's flags.json has doc_stride too (None: no windows).
    "classifier": (finetuning_models.BertClassifier, 3,
                   {"task_type": "classification", "task_data_dir": "d",
                    "doc_stride": None},
                   ["contradiction", "entailment", "neutral"],
                   "BertForSequenceClassification"),
    "regression": (finetuning_models.BertClassifier, 1,
                   {"task_name": "STS-B", "task_type": "classification"}, None,
                   "BertForSequenceClassification"),
    "squad": (finetuning_models.BertSpanLabeler, 2,
              {"doc_stride": 128, "max_query_length": 64}, None,
              "BertForQuestionAnswering"),
    "ner": (finetuning_models.BertTokenClassifier, 5,
            {"task_data_dir": "conll"}, ["B-LOC", "B-PER", "I-LOC", "I-PER",
                                         "O"], "BertForTokenClassification"),
}


def _fine_tuned_run(directory, task):
  """A fine-tuning output_dir as the programs leave it: a trainer-style
  checkpoint (model/...), flags.json, bert_config.json, label_list.json."""
  model_class, num, run_flags, labels, _ = HEADS[task]
  config = testing.tiny_config()
  model = model_class.from_bert_config(config, num_classes=num)
  _perturb(model)
  os.makedirs(directory)
  checkpoints.save_model(model, os.path.join(directory, "ckpt-7"))
  with open(os.path.join(directory, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-7"\n')
  with open(os.path.join(directory, "flags.json"), "w") as f:
    json.dump({"do_train": True, "learning_rate": 2e-5, **run_flags}, f)
  if labels:
    with open(os.path.join(directory, "label_list.json"), "w") as f:
      json.dump(labels, f)
  return model, _config_file(directory, config)


def test_a_multi_label_classifier_is_refused(tmp_path):
  # Its sigmoid outputs would be served as a single-label softmax.
  run = str(tmp_path / "run")
  _, config_file = _fine_tuned_run(run, "classifier")
  with open(os.path.join(run, "flags.json"), "w") as f:
    json.dump({"task_type": "multi_label", "doc_stride": None}, f)
  with pytest.raises(ValueError, match="is a multi-label classifier"):
    checkpoint_heads.read(config_file, run, None)


@pytest.mark.parametrize("task", list(HEADS))
def test_fine_tuned_heads_give_our_logits_in_transformers(task, tmp_path):
  model, config_file = _fine_tuned_run(str(tmp_path / "run"), task)
  exported = export_checkpoint.export(
      tmp_path / "hf", "huggingface", config_file, str(tmp_path / "run"),
      _tiny_vocab(tmp_path))
  assert exported.task == task
  _, _, _, labels, class_name = HEADS[task]
  hf_model = _no_missing_weights(getattr(transformers, class_name),
                                 tmp_path / "hf")
  x = testing.random_inputs()
  ours = model(x, training=False)
  with torch.no_grad():
    theirs = hf_model(**_torch(x))
  if task == "squad":  # Ours puts -1e4 at padding; compare the tokens.
    mask = x["input_mask"].astype(bool)
    for side in ("start_logits", "end_logits"):
      np.testing.assert_allclose(getattr(theirs, side).numpy()[mask],
                                 np.asarray(ours[side])[mask], atol=ATOL)
  else:
    np.testing.assert_allclose(theirs.logits.numpy(), ours, atol=ATOL)
  config = hf_model.config
  if labels:
    assert [config.id2label[i] for i in range(len(labels))] == labels
  if task == "regression":
    assert config.problem_type == "regression" and config.num_labels == 1
  if task == "classifier":
    assert config.problem_type == "single_label_classification"


def test_a_real_run_classifier_output_dir_exports_with_its_labels(tmp_path):
  """The detection reads what run_classifier really writes (flags.json,
  label_list.json, trainer checkpoints with the optimizer)."""
  testing.require_shared_data()
  from tests import run_classifier_test  # pylint: disable=g-import-not-at-top
  task, out = tmp_path / "task", tmp_path / "out"
  run_classifier_test.write_task(str(task), per_class_train=8,
                                 per_class_dev=2)
  config_file = run_classifier_test._config_file(tmp_path / "config.json")  # pylint: disable=protected-access
  testing.run_cli(run_classifier_test._flags(  # pylint: disable=protected-access
      task, out, config_file, "--do_train", "--train_batch_size=8",
      "--num_train_epochs=1", "--steps_per_loop=1"), timeout=300)
  exported = export_checkpoint.export(tmp_path / "hf", "huggingface",
                                      config_file, str(out), testing.VOCAB)
  assert exported.task == "classifier" and exported.prefix.endswith("ckpt-2")
  with open(out / "label_list.json") as f:
    labels = json.load(f)
  assert exported.labels == labels == sorted(run_classifier_test.PARTS)
  hf_model = _no_missing_weights(
      transformers.BertForSequenceClassification, tmp_path / "hf")
  assert hf_model.config.label2id == {"c_api": 0, "whatsnew": 1}
  model = finetuning_models.BertClassifier.from_bert_config(
      configs.BertConfig.from_json_file(config_file), num_classes=2)
  checkpoints.restore_model(model, str(out))
  x = testing.random_inputs(vocab=30522)
  with torch.no_grad():
    theirs = hf_model(**_torch(x)).logits.numpy()
  np.testing.assert_allclose(theirs, model(x, training=False), atol=ATOL)


@pytest.mark.parametrize("task,class_name", [
    ("masked_lm", "BertForMaskedLM"), ("encoder", "BertModel")])
def test_masked_lm_alone_and_encoder_alone(task, class_name, tmp_path):
  config = testing.tiny_config()
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=False)
  _perturb(model)
  root = model if task == "masked_lm" else tf.train.Checkpoint(
      encoder=model.encoder)  # As convert_checkpoint writes an encoder.
  prefix = tf.train.Checkpoint(model=root).write(str(tmp_path / "ck" / "c-1"))
  exported = export_checkpoint.export(
      tmp_path / "hf", "huggingface", _config_file(str(tmp_path), config),
      prefix, _tiny_vocab(tmp_path))
  assert exported.task == task
  hf_model = _no_missing_weights(getattr(transformers, class_name),
                                 tmp_path / "hf")
  x = testing.random_inputs()
  with torch.no_grad():
    theirs = hf_model(**_torch(x))
  if task == "masked_lm":
    positions = np.array([[1, 2, 6], [0, 2, 4], [3, 1, 1]], np.int32)
    ours = model({**x, "masked_lm_positions": positions}, training=False)
    np.testing.assert_allclose(
        np.take_along_axis(theirs.logits.numpy(), positions[..., None], 1),
        ours["mlm_logits"], atol=ATOL)
  else:
    ours = model.encoder(x, training=False)
    np.testing.assert_allclose(theirs.last_hidden_state.numpy(),
                               ours["sequence_output"], atol=ATOL)
    np.testing.assert_allclose(theirs.pooler_output.numpy(),
                               ours["pooled_output"], atol=ATOL)


def test_fine_tuned_checkpoint_without_its_run_files_needs_task(tmp_path):
  _fine_tuned_run(str(tmp_path / "run"), "ner")
  os.remove(tmp_path / "run" / "flags.json")
  args = ("huggingface", str(tmp_path / "run" / "bert_config.json"),
          str(tmp_path / "run"), _tiny_vocab(tmp_path))
  with pytest.raises(ValueError, match="pass --task=classifier, regression"):
    export_checkpoint.export(tmp_path / "a", *args)
  assert export_checkpoint.export(tmp_path / "b", *args,
                                  task="ner").task == "ner"
  assert not os.path.exists(tmp_path / "a")


# ------------------------------------------------- sentence-transformers ----

@pytest.mark.parametrize("normalize", [False, True])
def test_sentence_transformers_equals_serving_sentence_embedding(
    trained, tmp_path, normalize):
  st = testing.require("sentence_transformers")
  from export import serving  # pylint: disable=g-import-not-at-top
  seq_length = 32
  export_checkpoint.export(
      tmp_path / "st", "sentence_transformers", trained["config_file"],
      trained["run"], testing.VOCAB, max_seq_length=seq_length,
      normalize_embedding=normalize)
  assert os.path.isdir(tmp_path / "st" / "2_Normalize") == normalize
  texts = [line for doc in testing.corpus_documents()[:3] for line in doc][:8]
  texts.append(" ".join(texts))  # Longer than seq_length: truncated alike.
  embedder = st.SentenceTransformer(str(tmp_path / "st"), device="cpu")
  assert embedder.max_seq_length == seq_length
  theirs = embedder.encode(texts, convert_to_numpy=True)
  module = serving.ServingModule(
      _restored_pretrainer(trained).encoder, serving.encoder_outputs,
      testing.VOCAB, True, seq_length, normalize_embedding=normalize)
  ours = module.signatures()[serving.SIGNATURE_TEXT](
      text=tf.constant(texts))["sentence_embedding"].numpy()
  cosine = np.sum(ours * theirs, -1) / (
      np.linalg.norm(ours, axis=-1) * np.linalg.norm(theirs, axis=-1))
  assert cosine.min() >= 0.99999, cosine
  np.testing.assert_allclose(theirs, ours, atol=ATOL)


# ------------------------------------------------------------ google_tf1 ----

def _pinned_original_names(config):
  """google-research/bert's names and shapes, scaled from the pinned
  BERT-Base list (tests/testdata) to `config`'s sizes."""
  sizes = {768: config.hidden_size, 3072: config.intermediate_size,
           30522: config.vocab_size, 512: config.max_position_embeddings,
           2: config.type_vocab_size}
  names = {}
  with open(os.path.join(testing.TESTDATA,
                         "bert_base_original_variables.txt")) as f:
    for line in f:
      if line.startswith("#") or not line.strip():
        continue
      name, shape = line.split()
      layer = re.search(r"/layer_(\d+)/", name)
      if layer and int(layer.group(1)) >= config.num_hidden_layers:
        continue
      names[name] = [sizes[int(d)] for d in shape.split(",")]
  assert len(names) == 5 + 16 * config.num_hidden_layers + 2 + 5 + 2
  return names


def _load_original_into_torch(model, prefix):
  """Fills a transformers BERT from a TF1 checkpoint by the original's
  scopes: "/" walks attributes, layer_<n> indexes, kernel and gamma are
  `weight` (kernels transposed: torch stores [out, in]), beta and output_bias
  `bias`, output_weights `weight`, *_embeddings an Embedding's `weight`.
  Written here, independent of checkpoint_names.py."""
  attribute = {"kernel": "weight", "gamma": "weight", "beta": "bias",
               "output_bias": "bias", "output_weights": "weight"}
  loaded = set()
  for name, _ in tf.train.list_variables(prefix):
    array = tf.train.load_variable(prefix, name)
    pointer = model
    for part in name.split("/"):
      match = re.fullmatch(r"layer_(\d+)", part)
      if match:
        pointer = pointer.layer[int(match.group(1))]
      else:
        pointer = getattr(pointer, attribute.get(part, part))
    if name.endswith("_embeddings"):
      pointer = pointer.weight
    if name.endswith("/kernel"):
      array = array.T
    assert tuple(pointer.shape) == array.shape, name
    pointer.data = torch.from_numpy(np.ascontiguousarray(array))
    loaded.add(id(pointer))
  model.tie_weights()
  unloaded = [n for n, p in model.named_parameters() if id(p) not in loaded]
  assert not unloaded, unloaded


def test_google_tf1_export_has_original_names_and_loads_everywhere(
    trained, tmp_path):
  from official_bert import convert_checkpoint  # pylint: disable=g-import-not-at-top
  out = tmp_path / "tf1"
  exported = export_checkpoint.export(out, "google_tf1",
                                      trained["config_file"], trained["run"],
                                      testing.VOCAB)
  assert sorted(os.listdir(out)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
      "bert_model.ckpt.index", "vocab.txt"]
  prefix = str(out / "bert_model.ckpt")
  assert dict(tf.train.list_variables(prefix)) == _pinned_original_names(
      trained["config"])
  # Our importer reads it back to the same arrays, exactly.
  source = convert_checkpoint.read_tf1_checkpoint(str(out))
  assert source.config == trained["config"] and not source.ignored
  assert sorted(source.arrays) == sorted(exported.arrays)
  for name, value in exported.arrays.items():
    np.testing.assert_array_equal(source.arrays[name], value, err_msg=name)
  # The original's rules fill transformers' BertForPreTraining: our logits.
  hf_config = transformers.BertConfig(**configs.BertConfig.from_json_file(
      str(out / "bert_config.json")).to_dict())
  hf_model = transformers.BertForPreTraining(hf_config).eval()
  _load_original_into_torch(hf_model, prefix)
  inputs, positions = _sentence_pairs(3)
  ours = _restored_pretrainer(trained)(
      {**inputs, "masked_lm_positions": positions}, training=False)
  with torch.no_grad():
    theirs = hf_model(**_torch(inputs))
  np.testing.assert_allclose(
      np.take_along_axis(theirs.prediction_logits.numpy(),
                         positions[..., None], axis=1),
      ours["mlm_logits"], atol=ATOL)
  np.testing.assert_allclose(theirs.seq_relationship_logits.numpy(),
                             ours["next_sentence_logits"], atol=ATOL)


@pytest.mark.parametrize("task,names", [
    # run_classifier.py's create_model: output_weights [num_labels, H].
    ("classifier", {"output_weights": [3, 32], "output_bias": [3]}),
    # run_squad.py's create_model: cls/squad/output_weights [2, H].
    ("squad", {"cls/squad/output_weights": [2, 32],
               "cls/squad/output_bias": [2]})])
def test_google_tf1_fine_tuned_heads_use_the_originals_names(task, names,
                                                             tmp_path):
  model, config_file = _fine_tuned_run(str(tmp_path / "run"), task)
  export_checkpoint.export(tmp_path / "tf1", "google_tf1", config_file,
                           str(tmp_path / "run"), _tiny_vocab(tmp_path))
  variables = dict(tf.train.list_variables(str(tmp_path / "tf1" /
                                               "bert_model.ckpt")))
  heads = {k: v for k, v in variables.items() if not k.startswith("bert/")}
  assert heads == names
  # Read back as a TF1 fine-tuned checkpoint: the same head, same logits.
  again = checkpoint_heads.read(config_file, str(tmp_path / "tf1"))
  assert again.task == task
  x = testing.random_inputs()
  ours = model(x, training=False)
  os.mkdir(tmp_path / "hf")
  hf_export.write_huggingface(again, str(tmp_path / "hf"),
                              _tiny_vocab(tmp_path), True)
  hf_model = _no_missing_weights(
      getattr(transformers, HEADS[task][4]), tmp_path / "hf")
  with torch.no_grad():
    theirs = hf_model(**_torch(x))
  got = theirs.logits if task == "classifier" else theirs.start_logits
  want = ours if task == "classifier" else ours["start_logits"]
  mask = x["input_mask"].astype(bool) if task == "squad" else Ellipsis
  np.testing.assert_allclose(got.numpy()[mask], np.asarray(want)[mask],
                             atol=ATOL)


# ------------------------------------------------------------ bad input ----

def test_a_failed_export_leaves_nothing(tmp_path, monkeypatch):
  _, config_file = _fine_tuned_run(str(tmp_path / "run"), "classifier")
  vocab = _tiny_vocab(tmp_path)

  def fail(*args):
    raise OSError(28, "No space left on device", str(tmp_path / "x"))
  monkeypatch.setattr(hf_export, "write_tokenizer", fail)
  # A full disk is the sentence cli.run prints (official_bert/disk_full.py).
  with pytest.raises(disk_full.WriteFailed, match="the disk is full"):
    export_checkpoint.export(tmp_path / "hf", "huggingface", config_file,
                             str(tmp_path / "run"), vocab)
  assert sorted(os.listdir(tmp_path)) == ["run", "vocab.txt"]  # no temp dir


def test_bad_input_is_one_sentence(tmp_path):
  _, config_file = _fine_tuned_run(str(tmp_path / "run"), "ner")
  vocab = _tiny_vocab(tmp_path)
  three_layers = _config_file(str(tmp_path),
                              testing.tiny_config(num_hidden_layers=3))
  (tmp_path / "a_file").write_text("x")
  (tmp_path / "exists").mkdir()
  cases = [
      # A config that does not fit the checkpoint.
      (["--format=huggingface", f"--bert_config_file={three_layers}",
        f"--export_dir={tmp_path / 'out'}"],
       "has 2 Transformer layers but"),
      # A head the format cannot hold.
      (["--format=google_tf1", f"--export_dir={tmp_path / 'out'}"],
       "holds an NER head, which google-research/bert has no names for"),
      # An export dir under a file, and one that exists (before TensorFlow).
      ([f"--export_dir={tmp_path / 'a_file' / 'out'}"], "is a file"),
      ([f"--export_dir={tmp_path / 'exists'}"], "already exists"),
  ]
  base = {"--format": "huggingface", "--bert_config_file": config_file,
          "--init_checkpoint": str(tmp_path / "run"), "--vocab_file": vocab}
  for change, expected in cases:
    flags = dict(base)
    flags.update(arg.split("=", 1) for arg in change)
    proc = testing.run_cli(
        ["-m", "export.export_checkpoint"] +
        [f"{k}={v}" for k, v in flags.items()], check=False,
        merge_stderr=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    testing.assert_one_sentence_last(proc.returncode, lines,
                                     "export_checkpoint", expected)
  assert sorted(os.listdir(tmp_path)) == sorted(
      ["run", "vocab.txt", "bert_config.json", "a_file", "exists"])
