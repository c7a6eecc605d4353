"""run_classifier --task_type=multi_label (tasks/classification/multi_label_task.py): the
metrics on a hand-computed confusion, threshold tuning against brute force,
the loss against numpy, and the program: a small BERT learns which topics a
sentence mentions, eval_results.txt equals the metrics recomputed from the
exported model's answers at thresholds.json, test_results.tsv equals the
export, bad label cells are one sentence naming the file and line. With
--quantize=int8 the int8 model is evaluated at the float32 model's tuned
thresholds (thresholds.json as without it) and published with the
SavedModel, whole; a failed int8 step publishes nothing."""

import json
import os
import random

import numpy as np
import pytest

from official_bert.training import classifier_metrics
from official_bert.tasks.classification import multi_label_task
from tests import testing

FILLER = "the a of on in was is it and to for with by at from this".split()
TOPICS = {"food": ["bread", "cheese"], "music": ["guitar", "piano"],
          "sports": ["football", "tennis"]}


def test_metrics_on_a_hand_computed_confusion():
  # 4 examples, 3 labels (different sizes: a swapped axis cannot pass).
  labels = [[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]]
  predicted = [[1, 0, 0], [0, 1, 0], [1, 0, 1], [0, 0, 0]]
  result = classifier_metrics.multi_label_metrics(labels, predicted,
                                                  ["a", "b", "c"])
  # a: tp 2 fp 0 fn 0; b: tp 1 fp 0 fn 1; c: tp 0 fp 1 fn 1.
  assert result["f1_a"] == pytest.approx(1.0)
  assert result["f1_b"] == pytest.approx(2 / 3)
  assert result["f1_c"] == 0.0
  assert result["micro_f1"] == pytest.approx(2 * 3 / (2 * 3 + 1 + 2))
  assert result["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
  assert result["subset_accuracy"] == pytest.approx(2 / 4)
  assert result["num_examples"] == 4


def test_tuned_thresholds_maximise_each_labels_f1():
  rng = np.random.default_rng(0)
  # A rare label and weak probabilities: the threshold of the best F1 is
  # not the best accuracy's (a tuner maximising accuracy fails here).
  labels = rng.random((60, 3)) < [0.5, 0.15, 0.7]
  probabilities = 0.2 * labels + rng.random((60, 3)) * 0.8
  probabilities[:5] = np.round(probabilities[:5], 1)  # a few repeated
  thresholds = classifier_metrics.tune_thresholds(probabilities, labels)

  def f1(c, t):
    return classifier_metrics.multi_label_metrics(
        labels[:, c:c + 1], probabilities[:, c:c + 1] >= t, ["x"])["f1_x"]

  for c in range(3):
    # Every threshold that matters: each probability itself (p >= t).
    best = max(f1(c, t) for t in probabilities[:, c])
    assert f1(c, thresholds[c]) == pytest.approx(best), c
  # Tuning matters here: 0.5 is worse for at least one label.
  assert any(f1(c, 0.5) < f1(c, thresholds[c]) - 0.01 for c in range(3))
  # A label without positives keeps 0.5.
  none = classifier_metrics.tune_thresholds(probabilities[:, :1],
                                            np.zeros((60, 1)))
  assert none.tolist() == [0.5]


def test_loss_and_eval_loss_are_numpys_binary_cross_entropy():
  logits = np.array([[2.0, -1.0, 0.5], [-3.0, 0.0, 4.0]], np.float32)
  labels = np.array([[1, 0, 0], [0, 1, 1]], np.float32)
  p = 1 / (1 + np.exp(-logits.astype(np.float64)))
  expected = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
  loss = multi_label_task.multi_label_losses(labels, logits)["loss"]
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert classifier_metrics.mean_binary_cross_entropy(
      logits, labels) == pytest.approx(expected, rel=1e-9)
  counts = multi_label_task.multi_label_metric_counts(labels, logits)
  assert float(counts["label_correct"]) == 4  # of 6 decisions at 0.5
  assert float(counts["label_total"]) == 6


def write_task(directory, n_train=200, n_dev=120, n_test=8, seed=0):
  """train.tsv, dev.csv, test.jsonl: filler words with a topic's word for
  each of the sentence's topics (each present with probability 0.4)."""
  rng = random.Random(seed)

  def row():
    words = [rng.choice(FILLER) for _ in range(rng.randint(5, 9))]
    topics = [t for t in TOPICS if rng.random() < 0.4]
    for topic in topics:
      words.insert(rng.randrange(len(words) + 1), rng.choice(TOPICS[topic]))
    return " ".join(words), "|".join(topics)

  rows = {split: [row() for _ in range(n)] for split, n in
          (("train", n_train), ("dev", n_dev), ("test", n_test))}
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "train.tsv"), "w") as f:
    f.write("sentence\ttopics\n")
    f.writelines(f"{s}\t{t}\n" for s, t in rows["train"])
  with open(os.path.join(directory, "dev.csv"), "w") as f:
    f.write("sentence,topics\n")
    f.writelines(f"{s},{t}\n" for s, t in rows["dev"])
  with open(os.path.join(directory, "test.jsonl"), "w") as f:
    f.writelines(json.dumps({"sentence": s}) + "\n" for s, _ in rows["test"])
  return rows


def _flags(task, out, config, *extra):
  return [f"--task_data_dir={task}", "--task_type=multi_label",
          f"--bert_config_file={config}", f"--vocab_file={testing.VOCAB}",
          f"--output_dir={out}", "--label_column=topics",
          "--max_seq_length=16", *extra]


def _config(tmp_path, **overrides):
  """tmp_path/bert_config.json: the tiny config with BERT's vocabulary and
  32 positions (and `overrides`); its path."""
  path = str(tmp_path / "bert_config.json")
  testing.tiny_config(vocab_size=30522, max_position_embeddings=32,
                      **overrides).to_json_file(path)
  return path


def _results(path):
  with open(path) as f:
    return {k: float(v) for k, v in (line.split(" = ") for line in f)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """One training run (with --tune_thresholds and an export) that several
  tests read: {"root", "task", "out", "config", "rows"}."""
  testing.require_shared_data()
  root = tmp_path_factory.mktemp("multi_label")
  task, out, config = root / "task", root / "out", _config(root)
  rows = write_task(str(task))
  testing.run_program("official_bert.run_classifier", _flags(
      task, out, config, "--do_train", "--do_eval", "--do_predict",
      "--tune_thresholds", "--train_batch_size=16", "--learning_rate=1e-3",
      "--num_train_epochs=10", f"--export_dir={root / 'serving'}",
      "--litert"))
  return {"root": root, "task": task, "out": out, "config": config,
          "rows": rows}


def test_learns_evaluates_tunes_predicts_and_exports(trained):
  tmp_path, out, rows = trained["root"], trained["out"], trained["rows"]
  names = sorted(TOPICS)
  with open(out / "label_list.json") as f:
    assert json.load(f) == names
  results = _results(out / "eval_results.txt")
  assert {"eval_micro_f1", "eval_macro_f1", "eval_subset_accuracy",
          "eval_loss", "global_step"} | {f"eval_f1_{n}" for n in names} <= (
              set(results))
  gold = np.array([[n in t.split("|") for n in names]
                   for _, t in rows["dev"]])
  # Above chance: predicting every topic scores 0.57 (seeds 1, 2, 3 and
  # 12345 of this run: 0.73 to 0.87).
  every = classifier_metrics.multi_label_metrics(
      gold, np.ones_like(gold), names)
  assert results["eval_micro_f1"] > every["micro_f1"] + 0.1, results

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  served = tf.saved_model.load(str(tmp_path / "serving" / "1")).signatures[
      "serving_default"]
  with open(out / "thresholds.json") as f:
    tuned = json.load(f)
  thresholds = np.array([tuned[n] for n in names])
  assert not np.allclose(thresholds, 0.5)  # tuned, not the default
  dev = served(text=tf.constant([s for s, _ in rows["dev"]]))
  probabilities = dev["probabilities"].numpy()
  # The export predicts at the tuned thresholds (the label axis: [B, C]).
  np.testing.assert_array_equal(dev["predicted"].numpy(),
                                probabilities >= thresholds)
  assert dev["label_names"].numpy().astype(str).tolist() == (
      [names] * len(rows["dev"]))
  # eval_results.txt from the served answers, with textbook formulas.
  pred = probabilities >= thresholds
  tp, fp = (gold & pred).sum(0), (~gold & pred).sum(0)
  fn = (gold & ~pred).sum(0)
  assert results["eval_micro_f1"] == pytest.approx(
      2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()), abs=1e-6)
  per_label = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
  assert results["eval_macro_f1"] == pytest.approx(per_label.mean(), abs=1e-6)
  for name, f1 in zip(names, per_label):
    assert results[f"eval_f1_{name}"] == pytest.approx(f1, abs=1e-6)
  assert results["eval_subset_accuracy"] == pytest.approx(
      np.mean(np.all(gold == pred, 1)), abs=1e-6)
  # --litert: model.tflite, serving_ids in float32 (no int8 kernel), the
  # SavedModel's numbers within float rounding.
  from export import client_tokenizer  # pylint: disable=g-import-not-at-top
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  version = tmp_path / "serving" / "1"
  lite = litert_int8.Int8Model.load(str(version))
  details = lite._interpreter.get_tensor_details()  # pylint: disable=protected-access
  assert not [d for d in details if d["dtype"] == np.int8]
  ids = client_tokenizer.ClientTokenizer(
      testing.VOCAB, do_lower_case=True,
      max_seq_length=16)([s for s, _ in rows["dev"][:5]])
  want = tf.saved_model.load(str(version)).signatures["serving_ids"](
      **{k: tf.constant(v) for k, v in ids.items()})
  got = lite(**ids)
  assert list(got) == ["logits"]
  for name, value in got.items():
    np.testing.assert_allclose(value, want[name], atol=1e-5, err_msg=name)
  # test_results.tsv: a header of the labels, then the served probabilities.
  with open(out / "test_results.tsv") as f:
    header, *lines = f.read().splitlines()
  assert header.split("\t") == names
  test = served(text=tf.constant([s for s, _ in rows["test"]]))
  np.testing.assert_allclose([[float(p) for p in line.split("\t")]
                              for line in lines],
                             test["probabilities"].numpy(), atol=1e-5)


def _eval_only(trained, tmp_path, name, *extra, check=True):
  """An eval-only run on a copy of the trained output_dir (its checkpoint)
  at `tmp_path / name`, tuning the thresholds again."""
  import shutil  # pylint: disable=g-import-not-at-top
  out = tmp_path / name
  shutil.copytree(trained["out"], out)
  os.remove(out / "thresholds.json")
  proc = testing.run_program("official_bert.run_classifier", _flags(
      trained["task"], out, trained["config"], "--do_eval",
      "--tune_thresholds", *extra), check=check, merge_stderr=True)
  return out, proc


def test_int8_is_evaluated_at_the_float32_thresholds_and_exported_whole(
    trained, tmp_path):
  """--quantize=int8 changes neither thresholds.json nor the float32
  metrics (the thresholds are tuned once, on the float32 model, and the
  int8 model is evaluated at them); the version holds both models."""
  plain, _ = _eval_only(trained, tmp_path, "plain")
  serving = tmp_path / "serving"
  # 1: any drop passes (the gate's threshold is tested in
  # run_classifier_test).
  out, proc = _eval_only(trained, tmp_path, "int8", "--quantize=int8",
                         f"--export_dir={serving}",
                         "--max_quantization_drop=1")
  assert (out / "thresholds.json").read_text() == (
      plain / "thresholds.json").read_text()
  float32 = _results(plain / "eval_results.txt")
  both = _results(out / "eval_results.txt")
  assert {k: v for k, v in both.items() if not k.startswith("int8_")} == (
      float32)
  assert set(both) == set(float32) | {f"int8_{k}" for k in float32}
  # The int8 model's metrics, recomputed from its logits at the float32
  # thresholds (a gate that tuned its own would differ).
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  version = serving / "1"
  assert sorted(os.listdir(serving)) == ["1"]  # no hidden temporary left
  assert {"saved_model.pb", "model.tflite"} <= set(os.listdir(version))
  dev = [s for s, _ in trained["rows"]["dev"]]
  names = sorted(TOPICS)
  with open(plain / "thresholds.json") as f:
    tuned = json.load(f)
  thresholds = np.array([tuned[n] for n in names])
  gold = np.array([[n in t.split("|") for n in names]
                   for _, t in trained["rows"]["dev"]])
  logits = _int8_logits(litert_int8.Int8Model.load(str(version)), dev)
  metrics = classifier_metrics.multi_label_metrics(
      gold, multi_label_task.sigmoid(logits) >= thresholds, names)
  assert both["int8_eval_micro_f1"] == pytest.approx(metrics["micro_f1"],
                                                     abs=1e-6)
  done = [line for line in proc.stdout.splitlines()
          if line.startswith("run_classifier done at step")]
  assert f"int8 {version}/model.tflite (eval_micro_f1 float32" in done[0]


def _int8_logits(model, texts):
  """The int8 model's logits [N, C] on `texts`, packed as training does."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)
  rows = []
  for pieces in tokenizer.tokenize(texts).to_list():
    row = [tokenizer.cls_id] + pieces[:14] + [tokenizer.sep_id]
    rows.append(row + [tokenizer.pad_id] * (16 - len(row)))
  ids = np.array(rows, np.int32)
  return model.predict({"input_word_ids": ids,
                        "input_mask": (ids != tokenizer.pad_id).astype(
                            np.int32),
                        "input_type_ids": np.zeros_like(ids)}, 8)["logits"]


@pytest.mark.parametrize("failure", ["conversion", "gate"])
def test_a_failed_int8_step_exports_nothing(trained, tmp_path, monkeypatch,
                                            failure):
  """The int8 model is built and checked before anything is published: a
  conversion that fails, or a gate that refuses, leaves no version (the
  float32 SavedModel is not published either) and ends with one
  sentence."""
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  from export import serving as serving_lib  # pylint: disable=g-import-not-at-top
  if failure == "conversion":
    def convert(module, signature, int8=True):
      del module, signature, int8
      raise ValueError("the int8 (LiteRT) conversion found ops LiteRT has "
                       "no builtin for (Planted); export without "
                       "--quantize=int8")
    monkeypatch.setattr(litert_int8, "convert", convert)
    match = (r"nothing was exported: the int8 \(LiteRT\) conversion found "
             r"ops LiteRT has no builtin for \(Planted\)")
  else:  # an int8 model that predicts no label: micro F1 0
    class NoLabels:
      signature = {"outputs": ["logits"]}

      def __init__(self, content):
        del content

      def predict(self, inputs, batch_size):
        del batch_size
        return {"logits": np.full((len(inputs["input_word_ids"]),
                                   len(TOPICS)), -20.0, np.float32)}
    monkeypatch.setattr(serving_lib, "int8_model",
                        lambda *args, **kwargs: b"planted")
    monkeypatch.setattr(litert_int8, "Int8Model", NoLabels)
    match = (r"the int8 model's eval_micro_f1 float32 0\.\d+, int8 0\.0000: "
             r"a drop of 0\.\d+ of the metric's range exceeds "
             r"--max_quantization_drop=0\.005, so nothing was exported; "
             r"raise --max_quantization_drop or export without "
             r"--quantize=int8")
  serving = tmp_path / "serving"
  out, proc = _eval_only(trained, tmp_path, "out", "--quantize=int8",
                         f"--export_dir={serving}", check=False)
  # No version, no hidden temporary: the float32 SavedModel is not
  # published either.
  assert not serving.exists() or not os.listdir(serving), os.listdir(serving)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(proc.returncode, lines, "run_classifier",
                                   "")
  import re  # pylint: disable=g-import-not-at-top
  assert re.search(match, lines[-1]), lines[-1]
  # What the dev evaluation chose is kept: thresholds.json, eval_results.
  assert (out / "thresholds.json").exists()


@pytest.mark.parametrize("files, flags_, match", [
    ({"dev.tsv": "sentence\ttopics\nhello\tfood|cars\n"}, [],
     r"dev.tsv:2: label 'cars' is not among the training labels "
     r"\['food', 'music'\]"),
    ({"dev.tsv": "sentence\ttags\nhello\tfood\n"}, [],
     r"dev.tsv:2: no column 'topics'"),
    ({}, ["--label_column=tags"], r"train.tsv:2: no column 'tags'"),
    ({}, ["--tune_thresholds", "--nodo_eval"],
     r"--tune_thresholds tunes on dev: it needs --do_eval"),
])
def test_bad_input_is_one_sentence(tmp_path, files, flags_, match):
  testing.require_shared_data()
  task = tmp_path / "task"
  os.makedirs(task)
  (task / "train.tsv").write_text(
      "sentence\ttopics\nbread and guitar\tfood|music\nthe a\t\n")
  (task / "dev.tsv").write_text("sentence\ttopics\nthe cheese\tfood\n")
  for name, text in files.items():
    (task / name).write_text(text)
  proc = testing.run_program(
      "official_bert.run_classifier",
      _flags(task, tmp_path / "out", _config(tmp_path), "--do_train",
             "--do_eval", *flags_), check=False, merge_stderr=True)
  lines = [line for line in proc.stdout.splitlines() if line.strip()]
  testing.assert_one_sentence_last(proc.returncode, lines, "run_classifier",
                                   "")
  import re  # pylint: disable=g-import-not-at-top
  assert re.search(match, lines[-1]), lines[-1]
  assert not os.path.exists(tmp_path / "out" / "ckpt-1.index")


def test_prior_bias_is_each_labels_smoothed_log_odds():
  labels = np.array([[1, 0, 1], [1, 0, 0], [1, 0, 1], [1, 0, 0]], np.float32)
  p = np.array([4.5, 0.5, 2.5]) / 5  # (positives + 0.5) / (rows + 1)
  np.testing.assert_allclose(multi_label_task.prior_bias(labels),
                             np.log(p / (1 - p)), rtol=1e-6)
  # Documents of windows ([D, C] rows, or any leading axes) count rows.
  np.testing.assert_allclose(multi_label_task.prior_bias(labels[None]),
                             multi_label_task.prior_bias(labels))


def test_a_fresh_run_starts_the_head_at_the_training_prior(tmp_path):
  """At learning rate 0 the trained checkpoint keeps the head's start:
  its bias is the training labels' prior_bias (not 0)."""
  testing.require_shared_data()
  task, out = tmp_path / "task", tmp_path / "out"
  rows = write_task(str(task), n_train=48, n_dev=8)
  testing.run_program("official_bert.run_classifier", _flags(
      task, out, _config(tmp_path), "--do_train", "--nodo_eval",
      "--train_batch_size=16", "--learning_rate=0", "--num_train_epochs=1"))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(str(out))
  names = [n for n in reader.get_variable_to_shape_map()
           if "classifier" in n and "bias" in n and "OPTIMIZER" not in n]
  assert len(names) == 1, names
  gold = [[n in t.split("|") for n in sorted(TOPICS)]
          for _, t in rows["train"]]
  np.testing.assert_allclose(reader.get_tensor(names[0]),
                             multi_label_task.prior_bias(gold), rtol=1e-6)
