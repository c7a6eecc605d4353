"""The shared training driver (training/driver.py, training/finetuner.py)
built from a DriverConfig alone, in-process, with no absl flags: a tiny
classifier trains, keeps the best checkpoint of a metric that peaks mid-run,
writes flags.json from the config, resumes; and the program's flags map onto
the config field by field (trainer_flags.driver_config)."""

import dataclasses
import json
import os
import types

from absl import flags
import keras
from keras import ops
import numpy as np
import pytest
import tensorflow as tf

from official_bert import cli
from official_bert.modeling import finetuning_models
from official_bert.training import driver
from official_bert.training import finetuner
from tests import testing

EXAMPLES = 12


def _losses(labels, logits):
  return {"loss": ops.mean(keras.losses.sparse_categorical_crossentropy(
      labels, logits, from_logits=True))}


def _run(output_dir, bert_config=None, **overrides):
  config = driver.DriverConfig(**{
      "output_dir": str(output_dir), "num_train_steps": 4,
      "num_warmup_steps": 1, "train_batch_size": 4, "learning_rate": 1e-2,
      "steps_per_loop": 2, "save_checkpoints_steps": 2,
      "eval_every_steps": 2, "kernels": "keras", "flags": {"task": "tiny"},
      **overrides})
  bert_config = bert_config or testing.tiny_config()
  # The members of a FinetuningTask (training/task.py) the Finetuner reads.
  task = types.SimpleNamespace(
      build_model=lambda bert_config, kernels: (
          finetuning_models.BertClassifier.from_bert_config(
              bert_config, 3, kernels=kernels)),
      losses=_losses, metric_counts=lambda labels, outputs: {}, num_train_examples=EXAMPLES,
      example_name="examples", best_metric="eval_accuracy",
      init_head=lambda model: None,
      train_order=lambda batch_size, seed, num_examples: None,
      in_batch_loss=lambda: None)
  run = finetuner.Finetuner(config, task, bert_config)
  run.write_run_files(bert_config, files={"label_list.json": "[0, 1, 2]\n"})
  return run


def _data():
  inputs = testing.random_inputs(batch=EXAMPLES, seq=testing.SEQ, seed=1)
  return inputs, np.arange(EXAMPLES, dtype=np.int32) % 3


def test_the_config_is_frozen():
  config = driver.DriverConfig(output_dir="out")
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.learning_rate = 1.0  # pytype: disable=not-writable


def test_a_run_from_the_dataclass_alone(tmp_path):
  """Trains 4 steps with a dev metric that peaks at step 2: the best
  checkpoint is step 2's and the model holds its weights after training;
  flags.json is the config's flags plus the step counts; a second run on
  the same output_dir resumes at step 4 and uses the best checkpoint."""
  out = tmp_path / "out"
  inputs, labels = _data()
  run = _run(out)
  assert run.restore_or_warm_start() == 0
  seen = []

  def evaluate(step):
    seen.append(step)
    return {"eval_accuracy": {2: 0.9, 4: 0.5}[step], "global_step": step}

  assert run.train(inputs, labels, evaluate)
  assert seen == [2, 4]
  assert run.step == 2  # the best checkpoint's step, loaded after training
  best = tf.train.load_checkpoint(str(out / "best" / "ckpt-2"))
  last = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(out)))
  assert last.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == 4
  kernel = run.model.encoder.pooler.kernel
  name = "model/encoder/pooler/_kernel/.ATTRIBUTES/VARIABLE_VALUE"
  np.testing.assert_array_equal(kernel.numpy(), best.get_tensor(name))
  assert not np.array_equal(kernel.numpy(), last.get_tensor(name))
  with open(out / "flags.json") as f:
    assert json.load(f) == {"task": "tiny", "num_replicas": 1,
                            "num_train_steps": 4, "num_warmup_steps": 1}
  assert (out / "bert_config.json").exists()
  assert (out / "label_list.json").read_text() == "[0, 1, 2]\n"

  predicted = run.predict(inputs, 5)
  assert predicted.shape == (EXAMPLES, 3)
  resumed = _run(out, do_train=False)
  assert resumed.restore_or_warm_start() == 4
  assert resumed.step == 2
  np.testing.assert_allclose(resumed.predict(inputs, 5), predicted,
                             atol=1e-6)


def test_warm_start_loads_the_encoder_and_a_bad_one_leaves_nothing(tmp_path):
  first = _run(tmp_path / "first", eval_every_steps=0)
  first.restore_or_warm_start()
  assert first.train(*_data())
  warm = _run(tmp_path / "warm", init_checkpoint=str(tmp_path / "first"))
  assert warm.restore_or_warm_start() == 0
  np.testing.assert_array_equal(
      warm.model.encoder.get_weights()[0], first.model.encoder.get_weights()[0])
  bad = _run(tmp_path / "new" / "bad",
             init_checkpoint=str(tmp_path / "missing"))
  with pytest.raises(cli.Error, match="^--init_checkpoint: "):
    bad.restore_or_warm_start()
  assert not (tmp_path / "new").exists()
  # A rerun into `first` with another model: one sentence, not a traceback.
  other = _run(tmp_path / "first", eval_every_steps=0,
               bert_config=testing.tiny_config(max_position_embeddings=64))
  with pytest.raises(cli.Error, match=r"^--output_dir .*first holds ckpt-4 "
                     r"of another model \(check bert_config_file\): .*shape"):
    other.restore_or_warm_start()


@pytest.mark.parametrize("accumulation, sentence", [
    (2, "--train_batch_size=5 is not divisible by 1 replicas x "
        "--gradient_accumulation_steps=2; use a multiple of 2."),
    (5, None),
])
def test_the_batch_must_split_over_replicas_and_accumulation(
    tmp_path, accumulation, sentence):
  run = driver.Driver(driver.DriverConfig(
      output_dir=str(tmp_path), train_batch_size=5,
      gradient_accumulation_steps=accumulation))
  built = []
  if sentence is None:  # splits: the driver goes on to build the model
    with pytest.raises(RuntimeError, match="built"):
      run.build(lambda kernels: built.append(kernels) or _stop(), _losses)
    assert built == [run.kernels]
    return
  with pytest.raises(cli.Error) as error:
    run.build(lambda kernels: built.append(kernels), _losses)
  assert str(error.value) == sentence
  assert not built


def _stop():
  raise RuntimeError("built")


def test_trainer_flags_become_the_config_field_by_field():
  """Every shared flag, set to a value other than its default, reaches the
  DriverConfig field of its name (a flag left out of driver_config would
  leave the field at its default)."""
  from official_bert import trainer_flags  # pylint: disable=g-import-not-at-top
  values = flags.FlagValues()
  trainer_flags.define(steps_per_loop=100, keep_checkpoint_max=2,
                       flag_values=values)
  for name, kind in (("output_dir", "string"), ("init_checkpoint", "string"),
                     ("do_train", "bool"), ("train_batch_size", "integer"),
                     ("learning_rate", "float"),
                     ("save_checkpoints_steps", "integer")):
    getattr(flags, f"DEFINE_{kind}")(name, None, "", flag_values=values)
  given = dict(
      output_dir="out", init_checkpoint="ckpt", do_train=False,
      train_batch_size=6, learning_rate=0.5, save_checkpoints_steps=7,
      distribution_strategy="mirrored", num_gpus=0, num_cpu_devices=3,
      tpu="grpc://x", mixed_precision="mixed_bfloat16", jit_compile=True,
      kernels="fast", seed=5, optimizer="lamb", weight_decay=0.2,
      adam_epsilon=1e-8, max_grad_norm=0.3, steps_per_loop=9,
      keep_checkpoint_max=4)
  values(["program", "--tpu_zone=z", "--gcp_project=p"]
         + [f"--{k}={v}" for k, v in given.items()])
  config = trainer_flags.driver_config(values, {"own": 1},
                                       num_train_steps=11)
  assert {k: getattr(config, k) for k in given} == given
  assert (config.tpu_zone, config.gcp_project) == ("z", "p")
  assert config.tpu_resolver_args() == {"zone": "z", "project": "p"}
  assert config.num_train_steps == 11
  assert config.flags["own"] == 1
  assert config.flags["keep_checkpoint_max"] == 4
  assert set(trainer_flags.shared_values(values)) <= set(config.flags)
