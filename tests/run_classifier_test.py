"""run_classifier.py as a real program: a small BERT learns which part of the
Python documentation a sentence comes from (C API reference vs. "What's
New"), writes eval_results.txt and test_results.tsv, resumes from its
output_dir, and rejects bad data files with one sentence."""

import json
import os
import random

import numpy as np
import pytest

from official_bert.tasks.classification import classification_task
from tests import testing
from tools import tiny_fixtures

# Which part of the Python docs a sentence comes from: train.tsv, dev.csv,
# test.jsonl (other tests take them from here).
PARTS = tiny_fixtures.PARTS
write_task = tiny_fixtures.write_classification_task


def _config_file(path):
  config = testing.tiny_config(vocab_size=30522, max_position_embeddings=64)
  config.to_json_file(str(path))
  return str(path)


def _flags(task, out, config, *extra):
  return ["-m", "official_bert.run_classifier", f"--task_data_dir={task}",
          f"--bert_config_file={config}", f"--vocab_file={testing.VOCAB}",
          f"--output_dir={out}", "--label_column=part", "--max_seq_length=32",
          *extra]


def _results(path):
  with open(path) as f:
    return {k: float(v) for k, v in (line.split(" = ") for line in f)}


@pytest.mark.slow
def test_fine_tuning_learns_evaluates_predicts_and_resumes(tmp_path):
  testing.require_shared_data()
  task = tmp_path / "task"
  rows = write_task(str(task))
  config = _config_file(tmp_path / "bert_config.json")
  out = tmp_path / "out"
  proc = testing.run_cli(_flags(
      task, out, config, "--do_train", "--do_eval", "--do_predict",
      "--train_batch_size=32", "--learning_rate=1e-3", "--num_train_epochs=6",
      "--warmup_proportion=0.1", "--steps_per_loop=25"), timeout=300)
  assert "run_classifier done at step 112" in proc.stdout, proc.stdout
  assert "ETA" in proc.stdout and "seq/s" in proc.stdout
  results = _results(out / "eval_results.txt")
  majority = max(sum(label == part for _, label in rows["dev"])
                 for part in PARTS) / len(rows["dev"])
  assert majority == 0.5
  assert results["eval_accuracy"] >= 0.75, results
  assert results["eval_f1"] >= 0.7 and results["eval_matthews_corrcoef"] > 0.5
  assert results["global_step"] == 112 and results["eval_num_examples"] == 200
  with open(out / "label_list.json") as f:
    assert json.load(f) == ["c_api", "whatsnew"]
  with open(out / "test_results.tsv") as f:
    probabilities = np.array([[float(p) for p in line.split("\t")]
                              for line in f])
  assert probabilities.shape == (10, 2)
  np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)
  predicted = np.array(["c_api", "whatsnew"])[probabilities.argmax(1)]
  assert (predicted == np.array([l for _, l in rows["test"]])).mean() >= 0.7

  # Eval/predict only: the run restores the fine-tuned checkpoint from
  # output_dir (the trainer's resume), reproduces the numbers and exports.
  # With --quantize=int8: the int8 (LiteRT) model's dev metrics beside them.
  again = testing.run_cli(_flags(
      task, out, config, "--do_eval", "--do_predict", "--eval_batch_size=13",
      f"--export_dir={tmp_path / 'serving'}", "--quantize=int8",
      "--xla_single_text"))
  assert "Resumed from" in again.stdout and "ckpt-112" in again.stdout
  second = _results(out / "eval_results.txt")
  for key in results:
    assert second[key] == pytest.approx(results[key], abs=1e-5), key
    assert f"int8_{key}" in second, key
  # Accuracy within half a point (one dev example in 200), and not copied:
  # the int8 model's own figures (its loss differs).
  assert second["int8_eval_accuracy"] == pytest.approx(
      results["eval_accuracy"], abs=0.0051)
  assert second["int8_eval_loss"] != second["eval_loss"]
  assert "int8 " in again.stdout.splitlines()[-1]
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  int8 = litert_int8.Int8Model.load(str(tmp_path / "serving" / "1"))
  assert int8.signature["outputs"] == ["logits"]
  # Raw text in, the same probabilities out.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  served = tf.saved_model.load(str(tmp_path / "serving" / "1"))
  served_test = served.signatures["serving_default"](
      text=tf.constant([s for s, _ in rows["test"]]))
  out_probs = served_test["probabilities"]
  np.testing.assert_allclose(out_probs.numpy(), probabilities, atol=1e-5)
  # --xla_single_text: one text runs XLA-compiled, the same probabilities.
  library = served.signatures["serving_default"].graph.as_graph_def().library
  assert [f for f in library.function if f.attr["_XlaMustCompile"].b]
  one = served.signatures["serving_default"](
      text=tf.constant([rows["test"][0][0]]))["probabilities"]
  np.testing.assert_allclose(one.numpy(), probabilities[:1], atol=1e-5)
  # With the label names, in label_list.json's order, and the predicted one.
  assert served_test["label_names"].numpy().astype(str).tolist() == (
      [["c_api", "whatsnew"]] * len(rows["test"]))
  assert served_test["label"].numpy().astype(str).tolist() == (
      predicted.tolist())
  # eval_results.txt against the dev metrics computed here from the served
  # model's probabilities with the textbook formulas (not the program's
  # classifier_metrics): accuracy, F1 of the second label, Matthews.
  dev_probs = served.signatures["serving_default"](
      text=tf.constant([s for s, _ in rows["dev"]]))["probabilities"].numpy()
  pred = dev_probs.argmax(1)
  gold = np.array([["c_api", "whatsnew"].index(label)
                   for _, label in rows["dev"]])
  tp = float(((pred == 1) & (gold == 1)).sum())
  tn = float(((pred == 0) & (gold == 0)).sum())
  fp = float(((pred == 1) & (gold == 0)).sum())
  fn = float(((pred == 0) & (gold == 1)).sum())
  assert 0 < tp + fp < len(gold)  # both labels predicted: F1 and MCC mean
  by_hand = {
      "eval_accuracy": (tp + tn) / len(gold),
      "eval_f1": 2 * tp / (2 * tp + fp + fn),
      "eval_matthews_corrcoef": (tp * tn - fp * fn) / np.sqrt(
          (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))}
  for key, value in by_hand.items():
    assert second[key] == pytest.approx(value, abs=1e-6), key


@pytest.mark.parametrize("files, match", [
    ({"dev.tsv": "sentence\tpart\nhello world\tc_api\nhow now\tmaybe\n"},
     r"dev.tsv:3: label 'maybe' is not among the training labels "
     r"\['c_api', 'whatsnew'\]"),
    ({"dev.tsv": ""}, r"dev.tsv is empty"),
    ({"dev.tsv": "sentence\tpart\nhello\tc_api\textra\n"},
     r"dev.tsv:2: 3 fields, but the header has 2"),
    ({"dev.jsonl": '{"sentence": "hello"}\n'},
     r"dev.jsonl:1: no column 'part'"),
])
def test_bad_data_files_are_one_sentence_errors(tmp_path, files, match):
  testing.require_shared_data()
  task = tmp_path / "task"
  os.makedirs(task)
  with open(task / "train.tsv", "w") as f:
    f.write("sentence\tpart\nthe c api\tc_api\nnew in 3.9\twhatsnew\n")
  for name, text in files.items():
    with open(task / name, "w") as f:
      f.write(text)
  config = _config_file(tmp_path / "bert_config.json")
  proc = testing.run_cli(_flags(task, tmp_path / "out", config, "--do_train",
                                "--do_eval"), check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "Traceback" not in proc.stderr
  import re  # pylint: disable=g-import-not-at-top
  assert re.search(match, proc.stderr), proc.stderr[-2000:]
  assert not os.path.exists(tmp_path / "out" / "ckpt-1.index")


def test_eval_results_for_regression_and_classification():
  logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]], np.float32)
  result = classification_task.eval_results(logits, np.array([0, 1, 1]), False, 7)
  assert result["eval_accuracy"] == pytest.approx(2 / 3)
  expected_loss = -np.mean([np.log(1 / (1 + np.exp(-2))),
                            np.log(1 / (1 + np.exp(-1))),
                            np.log(1 / (1 + np.exp(3)))])
  assert result["eval_loss"] == pytest.approx(expected_loss, rel=1e-5)
  assert result["global_step"] == 7
  values = np.array([[0.5], [2.0], [1.0]], np.float32)
  result = classification_task.eval_results(values, np.array([1.0, 3.0, 2.5]),
                                       True, 7)
  assert result["eval_spearman"] == pytest.approx(1.0)
  assert result["eval_mse"] == pytest.approx((0.25 + 1 + 2.25) / 3)


def test_losses_and_training_metric_counts():
  logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]], np.float32)
  labels = np.array([0, 1, 1], np.int32)
  loss = classification_task.classifier_losses(labels, logits)["loss"]
  log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  assert float(loss) == pytest.approx(-log_softmax[[0, 1, 2], labels].mean(),
                                      rel=1e-5)
  counts = classification_task.classifier_metric_counts(labels, logits)
  assert float(counts["label_correct"]) == 2 and float(counts["label_total"]) == 3
  values = np.array([[0.5], [2.0]], np.float32)
  mse = classification_task.classifier_losses(np.array([1.0, 1.0], np.float32),
                                         values, regression=True)["loss"]
  assert float(mse) == pytest.approx((0.25 + 1.0) / 2)


# ---- the original's command line: --task_name, --data_dir, GLUE layouts

def _mrpc_files(directory, n_train=40, n_dev=9):
  """MRPC in the download's layout (BOM'd header; Quality, #1 ID, #2 ID,
  #1 String, #2 String; test: index first). Pairs are paraphrases (1) when
  the second sentence repeats the first."""
  rng = random.Random(3)
  words = "the cat dog sat ran on a mat log big small red".split()
  header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"

  def pair(i):
    a = " ".join(rng.choice(words) for _ in range(6))
    label = i % 3 != 0
    b = a if label else " ".join(rng.choice(words) for _ in range(6))
    return int(label), f'"{a}"', b  # a leading quote: no quoting in GLUE

  train = [pair(i) for i in range(n_train)]
  dev = [pair(i) for i in range(n_dev)]
  os.makedirs(directory, exist_ok=True)
  for name, rows, first in (("train.tsv", train, None), ("dev.tsv", dev, None),
                            ("test.tsv", dev, "index")):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
      f.write(header if first is None else header.replace("Quality", first))
      f.writelines(f"{i if first else label}\t{i}\t{i + 1}\t{a}\t{b}\n"
                   for i, (label, a, b) in enumerate(rows))
  return dev


@pytest.mark.parametrize("setup, flags_, match", [
    ("no_dev", ["--task_name=MRPC"],
     r"--data_dir \S+ has no dev file dev.tsv for --task_name=MRPC"),
    ("mrpc", ["--task_name=SQuAD"], r"--task_name=SQuAD is not a known task"),
    ("mrpc", ["--task_name=MRPC", "--output_dir={out_file}"],
     r"--output_dir=\S+ is a file, not a directory; pass a directory"),
    ("mrpc", ["--task_name=MRPC", "--data_dir={out_file}"],
     r"--data_dir=\S+ is a file, not a directory; pass a directory"),
    ("mrpc", ["--task_name=MRPC", "--bert_config_file={tmp}"],
     r"--bert_config_file=\S+ is a directory; pass a file"),
    ("binary", ["--task_name=MRPC"], r"train.tsv is not UTF-8 text"),
    ("empty_dev", ["--task_name=MRPC"], r"dev.tsv has no examples"),
    ("mrpc", ["--task_name=MRPC", "--task_data_dir={tmp}"],
     r"--data_dir and --task_data_dir name different directories"),
    # The flag checks' boundaries: 1 is no warmup proportion, a negative
    # drop is refused, and 0 is a drop the gate may allow (the run then
    # meets the missing dev file).
    ("mrpc", ["--task_name=MRPC", "--warmup_proportion=1"],
     r"--warmup_proportion must be in \[0, 1\), got 1"),
    ("mrpc", ["--task_name=MRPC", "--quantize=int8", "--export_dir={tmp}/e",
              "--max_quantization_drop=-0.01"],
     r"--max_quantization_drop must be 0 or more, got -0.01"),
    ("no_dev", ["--task_name=MRPC", "--quantize=int8", "--export_dir={tmp}/e",
                "--max_quantization_drop=0"],
     r"--data_dir \S+ has no dev file dev.tsv"),
    ("mrpc", ["--task_name=MRPC", "--litert"],
     r"--litert writes model.tflite into the export: pass --export_dir\."),
    ("mrpc", ["--task_name=MRPC", "--early_stopping_patience=2"],
     r"--early_stopping_patience needs --eval_every_steps"),
    ("mrpc", ["--task_name=MRPC", "--xla_single_text"],
     r"--xla_single_text is a setting of the export: pass --export_dir\."),
    ("mrpc", ["--task_name=SST-2", "--data_dir={tmp}", "--xla_single_text",
              "--doc_stride=8", "--export_dir={tmp}/e"],
     r"--xla_single_text runs one text as one window; with --doc_stride"),
])
def test_bad_input_is_one_sentence_and_writes_nothing(tmp_path, setup, flags_,
                                                      match):
  import re  # pylint: disable=g-import-not-at-top
  data = tmp_path / "MRPC"
  _mrpc_files(str(data), n_train=3, n_dev=2)
  if setup == "no_dev":
    os.remove(data / "dev.tsv")
  elif setup == "binary":
    (data / "train.tsv").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\n")
  elif setup == "empty_dev":
    (data / "dev.tsv").write_text("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t"
                                  "#2 String\n", encoding="utf-8")
  (tmp_path / "a_file").write_text("x")
  (tmp_path / "bert_config.json").write_text("{}")
  out = tmp_path / "out"
  fill = dict(out_file=tmp_path / "a_file", tmp=tmp_path)
  args = ["-m", "official_bert.run_classifier", "--do_train", "--do_eval",
          f"--data_dir={data}", f"--vocab_file={testing.VOCAB}",
          f"--bert_config_file={tmp_path / 'bert_config.json'}",
          f"--output_dir={out}"] + [f.format(**fill) for f in flags_]
  proc = testing.run_cli(args, check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "Traceback" not in proc.stderr
  last = proc.stderr.strip().splitlines()[-1]
  assert re.search(match, last), proc.stderr[-2000:]
  assert not out.exists()


class _Run:
  """What `finetuner._int8_gate` uses of a Finetuner."""

  def __init__(self, best_metric=None):
    self.config = type("Config", (), {"best_metric": best_metric})()
    self.step = 7
    self.written = []

  def write_eval_results(self, result):
    self.written.append(dict(result))


@pytest.mark.parametrize("task_name, metric_range, value, int8_value, passes",
                         [("eval_accuracy", 1.0, 0.90, 0.8951, True),
                          ("eval_accuracy", 1.0, 0.90, 0.8949, False),
                          ("f1", 100.0, 88.0, 87.01, True),  # SQuAD: /100
                          ("f1", 100.0, 88.0, 86.99, False),
                          ("eval_loss", 1.0, 0.30, 0.3049, True),  # lower
                          ("eval_loss", 1.0, 0.30, 0.3051, False)])
def test_int8_gate_refuses_a_drop_past_max_quantization_drop(
    task_name, metric_range, value, int8_value, passes):
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top
  task = type("Task", (), {"best_metric": task_name,
                           "metric_range": metric_range})()
  max_drop = 0.01 if metric_range == 100 else 0.005
  # The planted int8 model: its predictions give `int8_value`.
  predict = lambda inputs, batch_size: int8_value
  dev = lambda step, predictor: {task_name: predictor({}), "step": step}
  run = _Run()
  gate = lambda: finetuner._int8_gate(  # pylint: disable=protected-access
      run, task, predict, {task_name: value, "step": 7}, dev, 8, max_drop)
  if passes:
    assert gate() == (f"{task_name} float32 {value:.4f}, int8 "
                      f"{int8_value:.4f}")
  else:  # run_task then exports nothing (multi_label_test runs it)
    with pytest.raises(cli.Error, match=r"exceeds --max_quantization_drop="
                       r".*, so nothing was exported; raise "
                       r"--max_quantization_drop or export without "
                       r"--quantize=int8$"):
      gate()
  assert run.written == [{task_name: value, "step": 7,
                          f"int8_{task_name}": int8_value, "int8_step": 7}]
