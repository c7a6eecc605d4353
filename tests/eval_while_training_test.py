"""Evaluation while training: run_classifier --eval_every_steps keeps the
best checkpoint by the dev metric, stops early with a patience, evaluates,
predicts and exports that checkpoint's weights, and a run killed (SIGKILL)
mid-way resumes its best-metric state exactly.

The dev set is labelled against the training rule (its labels swapped), so
the better the model learns, the worse the dev accuracy: the metric peaks
early in the run and the last weights are not the best ones."""

import json
import os
import re
import signal

import numpy as np
import pytest

from official_bert.training import best_checkpoint
from tests import testing
from tests.run_classifier_test import write_task


def _swap_dev_labels(task):
  path = task / "dev.csv"
  lines = path.read_text().splitlines()
  swap = {"c_api": "whatsnew", "whatsnew": "c_api"}
  out = [lines[0]]
  for line in lines[1:]:
    text, label = line.rsplit(",", 1)
    out.append(f"{text},{swap[label]}")
  path.write_text("\n".join(out) + "\n")


def _flags(task, out, config, *extra):
  return ["-m", "official_bert.run_classifier", f"--task_data_dir={task}",
          f"--bert_config_file={config}", f"--vocab_file={testing.VOCAB}",
          f"--output_dir={out}", "--label_column=part", "--max_seq_length=32",
          "--do_train", "--do_eval", "--train_batch_size=16",
          "--learning_rate=2e-3", "--num_train_epochs=8",
          "--warmup_proportion=0.1", "--steps_per_loop=8",
          "--save_checkpoints_steps=8", "--eval_every_steps=8",
          "--early_stopping_patience=3", "--best_metric=eval_loss", *extra]


def _evaluations(stdout):
  """{step: dev loss} of the progress lines."""
  return {int(m.group(1)): float(m.group(2)) for m in re.finditer(
      r"step (\d+)/\d+ .*? eval_loss ([0-9.]+)", stdout)}


def _results(path):
  with open(path) as f:
    return {k: float(v) for k, v in (line.split(" = ") for line in f)}


@pytest.mark.slow
def test_best_checkpoint_is_the_peak_exported_and_resumed(tmp_path):
  testing.require_shared_data()
  task = tmp_path / "task"
  rows = write_task(str(task), per_class_train=100, per_class_dev=40)
  _swap_dev_labels(task)
  config = tmp_path / "bert_config.json"
  testing.tiny_config(vocab_size=30522, max_position_embeddings=64
                      ).to_json_file(str(config))
  out = tmp_path / "out"
  proc = testing.run_cli(_flags(task, out, config,
                                f"--export_dir={tmp_path / 'serving'}"),
                         timeout=600)
  evals = _evaluations(proc.stdout)
  with open(out / "best" / "best.json") as f:
    best = json.load(f)
  best_step = min(evals, key=lambda s: (evals[s], s))  # first of the best
  assert best["step"] == best_step and best["metric"] == "eval_loss"
  assert best["value"] == pytest.approx(evals[best_step], rel=1e-3)
  last = max(evals)
  # Peaks before the end, and stopped 3 evaluations after the peak.
  assert best_step < last < 100, proc.stdout
  assert evals[last] > best["value"] + 0.01, evals
  assert last == best_step + 24 and "Early stopping at step" in proc.stdout
  assert f"run_classifier done at step {best_step}" in proc.stdout
  results = _results(out / "eval_results.txt")
  assert results["global_step"] == best_step
  assert results["eval_loss"] == pytest.approx(best["value"], abs=1e-6)
  assert results["eval_accuracy"] == pytest.approx(
      best["eval_results"]["eval_accuracy"], abs=1e-6)
  # The exported model holds that step's weights: its probabilities on the
  # dev texts give the best step's dev loss (not the last step's).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  served = tf.saved_model.load(str(tmp_path / "serving" / "1"))
  texts = [s for s, _ in rows["dev"]]
  gold = np.array([{"c_api": 1, "whatsnew": 0}[l] for _, l in rows["dev"]])
  probs = served.signatures["serving_default"](
      text=tf.constant(texts))["probabilities"].numpy()
  loss = -np.mean(np.log(probs[np.arange(len(gold)), gold]))
  assert loss == pytest.approx(best["value"], abs=1e-4)
  assert abs(loss - evals[last]) > 1e-3
  # checkpoints.resolve(output_dir) -> the best one, for the exporters.
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  assert checkpoints.resolve(str(out)) == str(out / "best" / f"ckpt-{best_step}")

  # Killed (SIGKILL) after the evaluation of step 16, then resumed: the same
  # best step and value, the same early stop, the same results.
  killed_out = tmp_path / "killed"
  killed = testing.start_cli(_flags(task, killed_out, config))
  testing.sigkill_after_first_checkpoint(killed, killed_out, timeout=600,
                                         name="ckpt-16")
  assert killed.returncode == -signal.SIGKILL, killed.stderr.read()[-3000:]
  assert (killed_out / "best" / "best.json").exists()
  resumed = testing.run_cli(_flags(task, killed_out, config), timeout=600)
  assert "Resumed from" in resumed.stdout
  with open(killed_out / "best" / "best.json") as f:
    again = json.load(f)
  assert (again["step"], again["value"]) == (best["step"], best["value"])
  assert f"run_classifier done at step {best_step}" in resumed.stdout
  second = _results(killed_out / "eval_results.txt")
  for key in results:
    assert second[key] == pytest.approx(results[key], abs=1e-6), key


def test_best_checkpoint_state_and_direction(tmp_path):
  import keras  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.layers.Dense(2)])
  model.build((None, 3))
  best = best_checkpoint.BestCheckpoint(str(tmp_path / "best"), model,
                                        "accuracy")
  assert best.state() is None and best.load_weights() is None
  assert best.resolve_metric({"eval_accuracy": 0.5}) == "eval_accuracy"
  assert best.better(0.6, 0.5) and not best.better(0.5, 0.5)
  loss = best_checkpoint.BestCheckpoint("x", model, "eval_loss")
  assert loss.better(0.4, 0.5) and not loss.better(0.6, 0.5)
  weights = [w.copy() for w in model.get_weights()]
  best.save(3, 0.5, {"eval_accuracy": 0.5})
  model.set_weights([w + 1 for w in weights])
  best.save(7, 0.6, {"eval_accuracy": 0.6})
  model.set_weights([w + 2 for w in weights])
  # Only the new best's files stay; loading brings back its weights.
  names = sorted(os.listdir(tmp_path / "best"))
  assert [n for n in names if n.startswith("ckpt-3")] == []
  assert {"best.json", "checkpoint", "ckpt-7.index"} <= set(names)
  state = best.load_weights()
  assert state["step"] == 7 and state["value"] == 0.6
  for got, want in zip(model.get_weights(), weights):
    np.testing.assert_array_equal(got, want + 1)
  best.clear()
  assert not (tmp_path / "best").exists()
