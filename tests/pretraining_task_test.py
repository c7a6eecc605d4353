"""tasks/pretraining/pretraining_task.py: the evaluation's sums and eval_results.txt's
values against numpy, and the sentences a bad record or a changed config
becomes (no training)."""

import numpy as np
import pytest

from official_bert import cli
from official_bert.tasks.pretraining import pretraining_task
from tests import testing


def _batch(seed=0, nsp=True):
  rng = np.random.default_rng(seed)
  labels = {"masked_lm_ids": rng.integers(0, 11, (3, 4)).astype(np.int32),
            "masked_lm_weights": np.array([[1, 1, 0, 0], [1, 1, 1, 1],
                                           [1, 0, 0, 0]], np.float32),
            "next_sentence_labels": np.array([[0], [1], [1]], np.int32)}
  outputs = {"mlm_logits": rng.normal(size=(3, 4, 11)).astype(np.float32)}
  if nsp:
    outputs["next_sentence_logits"] = rng.normal(size=(3, 2)).astype(
        np.float32)
  return labels, outputs


def _ce(logits, ids):
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]


def test_eval_sums_and_results_against_numpy():
  labels, outputs = _batch()
  sums = {k: float(v) for k, v in
          pretraining_task.eval_sums(labels, outputs).items()}
  weights = labels["masked_lm_weights"]
  mlm_ce = _ce(outputs["mlm_logits"], labels["masked_lm_ids"])
  # Padding slots (weight 0) count neither in the loss nor in the total.
  assert sums["masked_lm_loss_sum"] == pytest.approx(
      (weights * mlm_ce).sum(), rel=1e-5)
  assert sums["masked_lm_total"] == 7
  hits = outputs["mlm_logits"].argmax(-1) == labels["masked_lm_ids"]
  assert sums["masked_lm_correct"] == (weights * hits).sum()
  nsp_ce = _ce(outputs["next_sentence_logits"],
               labels["next_sentence_labels"][:, 0])
  assert sums["next_sentence_loss_sum"] == pytest.approx(nsp_ce.sum(),
                                                         rel=1e-5)
  result = pretraining_task.eval_results(sums, step=4)
  assert result["masked_lm_loss"] == pytest.approx(
      (weights * mlm_ce).sum() / 7, rel=1e-5)
  assert result["next_sentence_loss"] == pytest.approx(nsp_ce.mean(),
                                                       rel=1e-5)
  assert result["loss"] == pytest.approx(result["masked_lm_loss"]
                                         + result["next_sentence_loss"])
  assert result["global_step"] == 4


def test_without_the_nsp_head_only_masked_lm_figures():
  labels, outputs = _batch(nsp=False)
  sums = {k: float(v) for k, v in
          pretraining_task.eval_sums(labels, outputs).items()}
  result = pretraining_task.eval_results(sums, step=1)
  assert set(result) == {"global_step", "masked_lm_accuracy",
                         "masked_lm_loss", "loss"}
  assert result["loss"] == result["masked_lm_loss"]


def test_an_out_of_vocab_id_is_one_sentence_only_for_the_models_vocab():
  config = pretraining_task.PretrainingConfig(input_file="r.tfrecord",
                                              bert_config_file="c.json")
  message = "indices[3,5] = 30600 is not in [0, 30522)"
  sentence = pretraining_task.out_of_vocab_sentence(message, config, 30522)
  assert sentence.startswith("--input_file=r.tfrecord holds token id 30600, "
                             "but vocab_size is 30522 in --bert_config_file"
                             "=c.json")
  # Another table's bound (e.g. positions) is not the vocabulary's.
  assert pretraining_task.out_of_vocab_sentence(message, config, 512) is None


def test_resuming_with_another_config_names_the_changed_keys(tmp_path):
  testing.tiny_config().to_json_file(str(tmp_path / "bert_config.json"))
  pretraining_task.check_same_config(testing.tiny_config(), "c.json",
                                     str(tmp_path))
  with pytest.raises(cli.Error, match=r"--bert_config_file=c.json differs "
                     r"from .*\(hidden_dropout_prob\)"):
    pretraining_task.check_same_config(
        testing.tiny_config(hidden_dropout_prob=0.3), "c.json", str(tmp_path))
