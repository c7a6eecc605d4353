"""--dynamic_padding, --remove_padding and --group_by_length through the
real program.

run_classifier on sentences of very different lengths, with dropout off
(dropout draws its masks per padded shape, so with it on the two paddings
would train on different noise) and weights drawn wide enough that the
examples' probabilities differ: every batch padded to its longest example
and the position-wise work on its tokens only (the defaults) give the dev
loss and test probabilities of every example padded to --max_seq_length
and computed at every position (the original's way), and, with
--group_by_length, a run killed (SIGKILL)
after a checkpoint and rerun ends exactly where an uninterrupted one does.
"""

import signal

import numpy as np
import pytest

from tests import testing
from tests.run_classifier_test import write_task


def _flags(task, out, config, *extra):
  return ["-m", "official_bert.run_classifier", f"--task_data_dir={task}",
          f"--bert_config_file={config}", f"--vocab_file={testing.VOCAB}",
          f"--output_dir={out}", "--label_column=part", "--max_seq_length=48",
          "--do_train", "--do_eval", "--do_predict", "--train_batch_size=8",
          "--eval_batch_size=7", "--predict_batch_size=3",
          "--learning_rate=1e-3", "--num_train_epochs=2",
          "--steps_per_loop=5", "--save_checkpoints_steps=5",
          "--group_by_length", *extra]


def _outputs(out):
  with open(out / "eval_results.txt") as f:
    results = {k: float(v) for k, v in (line.split(" = ") for line in f)}
  with open(out / "test_results.tsv") as f:
    probabilities = np.array([[float(p) for p in line.split("\t")]
                              for line in f])
  return results, probabilities


@pytest.mark.slow
def test_padding_to_the_batch_equals_fixed_length_and_resumes(tmp_path):
  testing.require_shared_data()
  task = tmp_path / "task"
  write_task(str(task), per_class_train=40, per_class_dev=20)
  config = tmp_path / "bert_config.json"
  testing.tiny_config(vocab_size=30522, max_position_embeddings=64,
                      hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0,
                      initializer_range=0.3).to_json_file(
                          str(config))
  lengths = [len(line.split()) for line in
             (task / "train.tsv").read_text().splitlines()[1:]]
  assert min(lengths) <= 8 and max(lengths) >= 25  # padding matters

  out = tmp_path / "dynamic"
  proc = testing.run_cli(_flags(task, out, config), timeout=600)
  assert "run_classifier done at step 20" in proc.stdout, proc.stdout
  results, probabilities = _outputs(out)
  fixed = tmp_path / "fixed"
  testing.run_cli(_flags(task, fixed, config, "--nodynamic_padding",
                         "--noremove_padding"), timeout=600)
  fixed_results, fixed_probabilities = _outputs(fixed)
  # 20 steps apart in summation order only (float32): equal at 1e-5.
  np.testing.assert_allclose(probabilities, fixed_probabilities, atol=1e-5)
  for key in ("eval_loss", "eval_accuracy", "global_step"):
    assert results[key] == pytest.approx(fixed_results[key], abs=1e-5), key
  # The probabilities differ between examples by far more than the
  # tolerance (weights drawn with std 0.3, not 0.02: at 0.02 a tiny model
  # gives ~0.5 everywhere after 20 steps, which any padding would match).
  assert np.ptp(probabilities[:, 0]) > 0.02, probabilities

  killed_out = tmp_path / "killed"
  killed = testing.start_cli(_flags(task, killed_out, config))
  testing.sigkill_after_first_checkpoint(killed, killed_out, timeout=600,
                                         name="ckpt-10")
  assert killed.returncode == -signal.SIGKILL, killed.stderr.read()[-3000:]
  resumed = testing.run_cli(_flags(task, killed_out, config), timeout=600)
  assert "Resumed from" in resumed.stdout and "ckpt-10" in resumed.stdout
  again, again_probabilities = _outputs(killed_out)
  np.testing.assert_allclose(again_probabilities, probabilities, atol=1e-6)
  assert again["eval_loss"] == pytest.approx(results["eval_loss"], abs=1e-6)
