"""Tests for official_bert/run_pretraining.py as a real command-line program."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests import input_pipeline_test
from tests import testing

PROGRAM = ["-m", "official_bert.run_pretraining"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """Two tiny TFRecord files and a tiny bert_config.json."""
  root = tmp_path_factory.mktemp("pretraining")
  for i in range(2):
    input_pipeline_test.write_records(
        root / f"part-{i}.tfrecord",
        input_pipeline_test.make_instances(24, seed=10 + i))
  config = root / "bert_config.json"
  testing.tiny_config().to_json_file(str(config))
  return root


@pytest.fixture(scope="module")
def short_runs(setup):
  """Two 8-step CLI runs on data whose masked tokens are all
  id 7 (learnable in a few steps): LAMB in mixed_bfloat16 and AdamW in
  mixed_float16 (dynamic loss scaling). Returns {name: (output_dir, stdout)}."""
  data = setup / "skewed"
  data.mkdir()
  rows = input_pipeline_test.make_instances(24, seed=3)
  input_pipeline_test.write_records(data / "skewed.tfrecord", dataclasses.replace(
      rows, masked_lm_ids=np.full_like(rows.masked_lm_ids, 7)))
  runs = {"lamb_bf16": dict(optimizer="lamb", mixed_precision="mixed_bfloat16",
                            learning_rate=0.05),
          "adamw_fp16": dict(optimizer="adamw", mixed_precision="mixed_float16",
                             learning_rate=2e-3)}
  outputs = {}
  for name, flags in runs.items():  # one after the other, in this process
    proc = testing.run_cli(_flags(setup, data / name, num_warmup_steps=0,
                                  input_file=data / "skewed.tfrecord",
                                  **flags))
    outputs[name] = (data / name, proc.stdout)
  return outputs


def _flags(setup, output_dir, **overrides):
  values = dict(
      input_file=f"{setup}/part-*.tfrecord", output_dir=str(output_dir),
      bert_config_file=f"{setup}/bert_config.json", max_seq_length=testing.SEQ,
      max_predictions_per_seq=3, train_batch_size=4, num_train_steps=8,
      num_warmup_steps=2, learning_rate=1e-3, steps_per_loop=2,
      save_checkpoints_steps=2)
  values.update(overrides)
  return PROGRAM + ["--do_train"] + [f"--{k}={v}" for k, v in values.items()]


def _weights(output_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(output_dir)))
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if name.startswith(("model/", "optimizer/", "step/"))}


def _error_line(proc):
  lines = [l for l in proc.stderr.splitlines() if l.strip()]
  return lines[-1] if lines else ""


@pytest.mark.parametrize("change,expected", [
    ({"max_seq_length": testing.SEQ + 2},
     f"feature input_ids has length {testing.SEQ}, expected {testing.SEQ + 2} "
     "from --max_seq_length"),
    ({"max_predictions_per_seq": 5},
     "has length 3, expected 5 from --max_predictions_per_seq"),
    ({"input_file": "/nonexistent/*.tfrecord"}, "matches no file"),
    ({"train_batch_size": 5, "gradient_accumulation_steps": 2},
     "--train_batch_size=5 is not divisible"),
])
def test_bad_flags_and_mismatched_data_give_one_sentence(setup, tmp_path,
                                                         change, expected):
  proc = testing.run_cli(_flags(setup, tmp_path / "out", **change), check=False)
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr
  assert expected in _error_line(proc), proc.stderr[-2000:]
  assert not os.path.exists(tmp_path / "out" / "checkpoint")


def test_neither_train_nor_eval_is_a_usage_error(setup, tmp_path):
  args = [a for a in _flags(setup, tmp_path) if a != "--do_train"]
  proc = testing.run_cli(args, check=False)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert "--do_train or --do_eval" in _error_line(proc)


def _popen(args, env=None):
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                  PYTHONPATH=testing.CHILD_PATH, **(env or {}))
  return subprocess.Popen([sys.executable] + args, cwd=testing.ROOT,
                          env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_to_the_same_weights(setup, tmp_path):
  """Kill -9 after the first checkpoint, rerun: same end as no interruption.

  Dropout is on: the checkpoint keeps the dropout seed states and the data
  pipeline is seeded and skips the batches already used, so the resumed run
  sees the same batches and masks as the uninterrupted one.
  """
  steps = 30
  # Warmup longer than the run, as in the original's short command lines:
  # accepted with one warning (the rate never peaks).
  flags = dict(num_train_steps=steps, num_warmup_steps=40)
  killed_dir = tmp_path / "killed"
  killed = _popen(_flags(setup, killed_dir, **flags))
  testing.sigkill_after_first_checkpoint(killed, killed_dir)
  first = int(tf.train.latest_checkpoint(str(killed_dir)).rsplit("-", 1)[1])
  assert 2 <= first < steps  # killed mid-run, after a checkpoint
  resumed = testing.run_cli(_flags(setup, killed_dir, **flags))
  assert f"Resumed from {killed_dir}/ckpt-{first} at step {first}" in (
      resumed.stdout)
  assert "Starting from scratch" not in resumed.stdout
  assert f"Trained steps {first}..{steps}" in resumed.stdout
  warnings = [line for line in resumed.stderr.splitlines() if "warning:" in line]
  assert warnings == [
      "run_pretraining: warning: --num_warmup_steps=40 exceeds "
      "--num_train_steps=30, so the learning rate only reaches 0.75 x "
      "--learning_rate (as in the original)."], resumed.stderr[-2000:]
  # The uninterrupted run, in this process (the kill is the other's point).
  whole = testing.run_cli(_flags(setup, tmp_path / "whole", **flags))
  assert ("Starting from scratch (no checkpoint in --output_dir), step 0"
          in whole.stdout)
  a, b = _weights(tmp_path / "whole"), _weights(killed_dir)
  assert a.keys() == b.keys() and len(a) > 40
  for name in a:
    np.testing.assert_allclose(a[name], b[name], atol=1e-6, err_msg=name)
  assert int(b["step/.ATTRIBUTES/VARIABLE_VALUE"]) == steps


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _unigram_baseline(path, seq, preds):
  """Accuracy of always predicting the most frequent masked token."""
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  ids = np.concatenate([
      labels["masked_lm_ids"].numpy()[labels["masked_lm_weights"].numpy() > 0]
      for _, labels in input_pipeline.pretraining_dataset(
          [str(path)], 512, seq, preds, is_training=False)])
  return np.bincount(ids).max() / len(ids)


@pytest.mark.slow
def test_end_to_end_on_real_text(tmp_path):
  """The data job on the shared corpus, a small BERT: loss falls, eval written.

  Kept small for CI (L2 H64, batch 16, seq 64, 150 steps); docs/pretraining.md's
  L2 H128 run at seq 128 is the full-size version of the same command.
  """
  testing.require_shared_data()
  data = tmp_path / "pydocs.tfrecord"
  testing.run_cli(["-m", "tfrecords.create_pretraining_data",
                   f"--input_file={testing.CORPUS}", f"--output_file={data}",
                   f"--vocab_file={testing.VOCAB}", "--max_seq_length=64",
                   "--max_predictions_per_seq=10", "--dupe_factor=1"])
  config = tmp_path / "bert_config.json"
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  configs.PRESETS["bert_tiny"].replace(
      hidden_size=64, intermediate_size=256, max_position_embeddings=64
  ).to_json_file(str(config))
  steps = 150
  proc = testing.run_cli(
      PROGRAM + [f"--input_file={data}", f"--output_dir={tmp_path / 'out'}",
                 f"--bert_config_file={config}", "--do_train", "--do_eval",
                 "--max_seq_length=64", "--max_predictions_per_seq=10",
                 "--train_batch_size=16", f"--num_train_steps={steps}",
                 "--num_warmup_steps=15", "--learning_rate=2e-3",
                 "--steps_per_loop=50", "--save_checkpoints_steps=150",
                 "--max_eval_steps=10", "--eval_batch_size=64"])
  lines = [l for l in proc.stdout.splitlines() if l.startswith("step ")]
  losses = [float(l.split(" loss ")[1].split()[0]) for l in lines]
  assert len(losses) == steps // 50 and losses[-1] < losses[0] - 1.0, lines
  results = dict(line.split(" = ") for line in
                 (tmp_path / "out" / "eval_results.txt").read_text().splitlines())
  assert set(results) >= {"masked_lm_accuracy", "masked_lm_loss",
                          "next_sentence_accuracy", "next_sentence_loss"}
  assert int(results["global_step"]) == steps
  # --kernels=auto without XLA: the fast kernels, for training and eval.
  assert ", fast kernels" in proc.stdout
  # The BFC CPU allocator (training/cpu_allocator.py), set before TF loaded.
  assert ", BFC CPU allocator" in proc.stdout
  assert json.load(open(tmp_path / "out" / "flags.json"))["kernels"] == "fast"
  # Always guessing the most frequent token ("the", ".", ...) scores ~5%;
  # 150 small steps reach it (the model has learned the unigram); going
  # well above it takes longer (docs/pretraining.md: the 600-step run).
  baseline = _unigram_baseline(data, 64, 10)
  assert float(results["masked_lm_accuracy"]) > 0.9 * baseline, (
      results, baseline)
  assert float(results["masked_lm_loss"]) < 7.0  # ln(30522) = 10.3 at start


# The workers' XLA compiles without LLVM's expensive passes (the code it
# makes is slower, its results the same): the --jit_compile rerun below
# compiles the whole model in each worker, ~13 s of the test's CPU with them.
_FAST_XLA_COMPILE = ("--xla_backend_optimization_level=0 "
                     "--xla_llvm_disable_expensive_passes=true")


def _start_workers(setup, output_dir, extra=(), **flags):
  """Two MultiWorkerMirroredStrategy worker processes on localhost."""
  workers = [f"localhost:{_free_port()}" for _ in range(2)]
  procs = []
  for index in range(2):
    tf_config = json.dumps({"cluster": {"worker": workers},
                            "task": {"type": "worker", "index": index}})
    procs.append(_popen(
        _flags(setup, output_dir, distribution_strategy="multi_worker_mirrored",
               **flags) + list(extra),
        env={"TF_CONFIG": tf_config, "XLA_FLAGS": _FAST_XLA_COMPILE}))
  return procs


def _wait_for_sigterm_handler(proc, timeout=60):
  """Waits until `proc` handles SIGTERM (bit 15 of SigCgt in /proc)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    with open(f"/proc/{proc.pid}/status") as f:
      caught = next(line for line in f if line.startswith("SigCgt:"))
    if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
      return
    time.sleep(0.01)
  pytest.fail(f"no SIGTERM handler after {timeout} s")


def _wait_all(procs, timeout):
  """(stdout, stderr) of each process; kills all of them if one hangs."""
  deadline = time.time() + timeout
  try:
    return [p.communicate(timeout=max(1, deadline - time.time()))
            for p in procs]
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()
    outputs = [p.communicate() for p in procs]
    pytest.fail(f"workers still running after {timeout} s (hung in a "
                f"collective?): {[err[-1500:] for _, err in outputs]}")


@pytest.mark.slow
def test_two_workers_train_stop_together_on_one_sigterm_and_resume(setup,
                                                                   tmp_path):
  """Two MultiWorkerMirroredStrategy processes on localhost train; then a
  preempted machine: SIGTERM reaches worker 1 only. Both workers agree at the
  next loop boundary, save the same checkpoint and exit 0 (without the
  agreement worker 1 saves and leaves alone, and worker 0 fails or waits in
  the next step's all-reduce). Then a SIGTERM while they start up. A rerun of
  both resumes, trains (with --jit_compile) and evaluates."""
  output_dir = tmp_path / "out"
  # One layer: what the workers agree on, save and resume does not depend
  # on the depth; each of the six processes traces (and the last two
  # compile with XLA) half the layers (~6 s of the test's CPU).
  config = tmp_path / "bert_config.json"
  testing.tiny_config(num_hidden_layers=1).to_json_file(str(config))
  procs = _start_workers(setup, output_dir, num_train_steps=100000,
                         bert_config_file=config)
  deadline = time.time() + 300
  while not (output_dir / "checkpoint").exists():
    for p in procs:
      assert p.poll() is None, p.communicate()[1][-3000:]
    assert time.time() < deadline
    time.sleep(0.05)
  procs[1].send_signal(signal.SIGTERM)
  results = _wait_all(procs, timeout=120)
  for proc, (out, err) in zip(procs, results):
    assert proc.returncode == 0, err[-3000:]
    assert "2 replicas (multi_worker_mirrored)" in out
    assert "Trained steps" not in out
  saved = [line for out, _ in results for line in out.splitlines()
           if line.startswith("SIGTERM: saved checkpoint")]
  assert len(saved) == 2 and "(signal on another worker)" in saved[0], saved
  step = int(tf.train.latest_checkpoint(str(output_dir)).rsplit("-", 1)[1])
  assert 2 <= step < 100000
  assert all(f"ckpt-{step} at step {step}" in line for line in saved), saved
  assert int(_weights(output_dir)["step/.ATTRIBUTES/VARIABLE_VALUE"]) == step

  # A preemption while the job starts up: SIGTERM to worker 1 as soon as its
  # handler is in place (before TensorFlow is imported). It must not die
  # (worker 0 would wait for it in the first collective): both stop before
  # their first step, exit 0 and leave the checkpoint as it was.
  procs = _start_workers(setup, output_dir, num_train_steps=step + 2,
                         bert_config_file=config)
  _wait_for_sigterm_handler(procs[1])
  procs[1].send_signal(signal.SIGTERM)
  for proc, (out, err) in zip(procs, _wait_all(procs, timeout=300)):
    assert proc.returncode == 0, err[-3000:]
    assert (f"SIGTERM before training started: stopped at step {step}"
            in out), out
  assert tf.train.latest_checkpoint(str(output_dir)).endswith(f"ckpt-{step}")

  # The resumed run also compiles its steps with XLA (one device per worker;
  # the optimizer's cross-replica update stays outside XLA).
  procs = _start_workers(setup, output_dir, num_train_steps=step + 2,
                         bert_config_file=config,
                         extra=["--do_eval", "--max_eval_steps=3",
                                "--jit_compile"])
  for proc, (out, err) in zip(procs, _wait_all(procs, timeout=300)):
    assert proc.returncode == 0, err[-3000:]
    assert f"at step {step}" in out and f"Trained steps {step}..{step + 2}" in out
    # XLA compiles the model: Keras's kernels, for training and eval.
    assert ", keras kernels" in out, out
  assert tf.train.latest_checkpoint(str(output_dir)).endswith(f"ckpt-{step + 2}")
  assert not [n for n in os.listdir(output_dir) if n.startswith(".worker")]
  assert json.load(open(output_dir / "flags.json"))["num_replicas"] == 2
  assert json.load(open(output_dir / "flags.json"))["kernels"] == "keras"
  assert "masked_lm_accuracy = " in (output_dir / "eval_results.txt").read_text()


def _logged(stdout, key):
  """The value of `key` on each progress line."""
  return [float(line.split(f" {key} ")[1].split()[0])
          for line in stdout.splitlines() if line.startswith("step ")]


@pytest.mark.slow
@pytest.mark.parametrize("name,precision", [("lamb_bf16", "mixed_bfloat16"),
                                            ("adamw_fp16", "mixed_float16")])
def test_lamb_and_mixed_precision_train(short_runs, name, precision):
  output_dir, out = short_runs[name]
  assert f", {precision}, " in out
  losses = _logged(out, "masked_lm_loss")
  assert len(losses) == 4 and np.all(np.isfinite(_logged(out, "loss")))
  # ln(99) = 4.6 at the start; learning the one masked token brings it down.
  assert losses[-1] < losses[0] - 0.3, out
  assert _logged(out, "masked_lm_accuracy")[-1] == 1.0, out
  weights = _weights(output_dir)
  assert int(weights["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 8
  assert all(np.all(np.isfinite(w)) for w in weights.values())


@pytest.mark.slow
def test_init_checkpoint_warm_starts_phase2_from_phase1_and_tf1(
    setup, short_runs, tmp_path):
  """Phase 1 (seq 7, 3 predictions: the LAMB run) -> phase 2 at seq 12 with
  5 predictions in a new output_dir, from phase 1's directory and from the
  same weights as a google-research/bert TF1 checkpoint. Learning rate 0, so
  phase 2's checkpoint must hold exactly phase 1's weights, at step 2 of a
  fresh optimizer. A rerun of phase 2 resumes its own checkpoint."""
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  phase1 = short_runs["lamb_bf16"][0]
  input_pipeline_test.write_records(
      tmp_path / "long.tfrecord",
      input_pipeline_test.make_instances(16, seq=12, preds=5, seed=4))
  # The released layout: bert_model.ckpt.* with original names, no
  # `checkpoint` index file.
  model = pretrainer.BertPretrainer.from_bert_config(testing.tiny_config())
  checkpoints.restore_model(model, str(phase1))
  arrays = {name: variable.numpy().T if transpose else variable.numpy()
            for name, (variable, transpose) in
            checkpoint_names.original_names(model).items()}
  testing.write_tf1_checkpoint(str(tmp_path / "uncased_L-2_H-32"), arrays,
                               testing.tiny_config())
  os.remove(tmp_path / "uncased_L-2_H-32" / "checkpoint")

  def phase2(name, init, **overrides):
    return testing.run_cli(_flags(
        setup, tmp_path / name, input_file=tmp_path / "long.tfrecord",
        max_seq_length=12, max_predictions_per_seq=5, num_train_steps=2,
        num_warmup_steps=0, learning_rate=0, init_checkpoint=init,
        **overrides), check=False)

  procs = {"from_phase1": phase2("from_phase1", phase1),
           "from_tf1": phase2("from_tf1", tmp_path / "uncased_L-2_H-32"),
           "bad": phase2("bad", tmp_path / "nowhere" / "ckpt-8")}
  results = {name: (proc.stdout, proc.stderr)
             for name, proc in procs.items()}
  out, err = results.pop("bad")
  assert procs.pop("bad").returncode != 0 and "Traceback" not in err
  assert (f"--init_checkpoint: checkpoint {tmp_path}/nowhere/ckpt-8 not found"
          in err.strip().splitlines()[-1]), err[-2000:]
  assert not os.path.exists(tmp_path / "bad" / "flags.json")

  want = {k: v for k, v in _weights(phase1).items() if k.startswith("model/")}
  assert len(want) > 40
  for name, (out, err) in results.items():
    assert procs[name].returncode == 0, err[-3000:]
    assert "Warm-started the weights from" in out and "Trained steps 0..2" in out
    got = _weights(tmp_path / name)
    assert int(got["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 2
    # Phase 1 ran 8 updates: a restored optimizer would be at 10.
    assert int(got["optimizer/variables/0/.ATTRIBUTES/VARIABLE_VALUE"]) == 2
    for key, value in want.items():
      np.testing.assert_array_equal(got[key], value, err_msg=(name, key))
  assert "TF1 checkpoint with the original variable names" in (
      results["from_tf1"][0])

  rerun = testing.run_cli(_flags(
      setup, tmp_path / "from_phase1", input_file=tmp_path / "long.tfrecord",
      max_seq_length=12, max_predictions_per_seq=5, num_train_steps=4,
      num_warmup_steps=0, learning_rate=0, init_checkpoint=phase1))
  assert "Warm-started" not in rerun.stdout
  assert "at step 2" in rerun.stdout and "Trained steps 2..4" in rerun.stdout


@pytest.mark.slow
def test_without_next_sentence_prediction_trains_evaluates_and_exports(
    setup, tmp_path):
  """--next_sentence_prediction=false: no NSP head in the checkpoint, no NSP
  number in the progress lines or eval_results.txt, and the checkpoint
  exports with every exporter of pretraining checkpoints (its masked-LM
  head included: fill_mask, the TF-Hub .mlm, BertForMaskedLM)."""
  out_dir = tmp_path / "no_nsp"
  # One layer: the heads and what each exporter writes of them do not
  # depend on depth; the run and the four exports trace half the layers.
  config = tmp_path / "bert_config.json"
  testing.tiny_config(num_hidden_layers=1).to_json_file(str(config))
  # Packed rows (--pack_sequences, masked-LM only) read the same records.
  proc = testing.run_cli(_flags(setup, out_dir, num_train_steps=4,
                                next_sentence_prediction="false",
                                bert_config_file=config) +
                         ["--do_eval", "--max_eval_steps=2",
                          "--pack_sequences"])
  assert "Packing the records into rows" in proc.stdout
  logged = [line for line in proc.stdout.splitlines()
            if line.startswith(("step ", "Trained steps", "Eval at step"))]
  assert len(logged) == 4 and "masked_lm_loss" in logged[-1], proc.stdout
  assert not [line for line in logged if "next_sentence" in line], logged
  results = dict(line.split(" = ") for line in
                 (out_dir / "eval_results.txt").read_text().splitlines())
  assert sorted(results) == ["global_step", "loss", "masked_lm_accuracy",
                             "masked_lm_loss"]
  assert results["loss"] == results["masked_lm_loss"]
  weights = _weights(out_dir)
  assert not [n for n in weights if "seq_relationship" in n]
  assert [n for n in weights if n.startswith("model/cls_predictions/")]
  vocab = os.path.join(testing.TESTDATA, "export_vocab.txt")
  model = [f"--bert_config_file={out_dir / 'bert_config.json'}",
           f"--init_checkpoint={out_dir}", f"--vocab_file={vocab}"]
  exports = {
      "saved_model": ["-m", "export.export_saved_model", "--max_seq_length=8"],
      "tfhub": ["-m", "export.export_tfhub", "--seq_length=8"],
      "huggingface": ["-m", "export.export_checkpoint", "--format=huggingface"],
      "google_tf1": ["-m", "export.export_checkpoint", "--format=google_tf1"]}
  for name, args in exports.items():
    testing.run_cli(args + model + [f"--export_dir={tmp_path / name}"])
  assert (tmp_path / "tfhub" / "encoder").is_dir()
  assert os.listdir(tmp_path / "saved_model") == ["1"]
  config = json.load(open(tmp_path / "huggingface" / "config.json"))
  assert config["architectures"] == ["BertForMaskedLM"], config
  reader = tf.train.load_checkpoint(str(tmp_path / "google_tf1" /
                                        "bert_model.ckpt"))
  names = reader.get_variable_to_shape_map()
  assert "cls/predictions/output_bias" in names
  assert not [n for n in names if n.startswith("cls/seq_relationship")]
