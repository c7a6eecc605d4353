"""--student_layers: a fine-tuned student keeps the chosen layers of the
encoder --init_checkpoint names, with its embeddings and pooler
(training/checkpoints.py restore_encoder, checkpoint_names.py,
training/finetuner.py, finetuning_flags.py). The student's weights are
compared with the teacher checkpoint's, number for number, in every
checkpoint layout and after a fine-tuning program's warm start; a bad
index is one sentence naming the flag and the range."""

import json

import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import encoder as encoder_lib
from official_bert.training import checkpoint_names
from official_bert.training import checkpoints
from tests import testing
from tools import tiny_fixtures

TEACHER_LAYERS = 4


def _teacher(vocab_size=testing.VOCAB_SIZE):
  """A 4-layer encoder of random weights (each layer different)."""
  return encoder_lib.BertEncoder.from_bert_config(testing.tiny_config(
      num_hidden_layers=TEACHER_LAYERS, vocab_size=vocab_size,
      max_position_embeddings=64))


def _assert_student_of(student, teacher, layers):
  """The student's embeddings, pooler and block i equal the teacher's
  embeddings, pooler and block layers[i]; and not another of its blocks."""
  for ours, theirs in ((student.embeddings, teacher.embeddings),
                       (student.pooler, teacher.pooler)):
    for a, b in zip(ours.weights, theirs.weights, strict=True):
      np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
  for i, layer in enumerate(layers):
    kept = student.encoder_layers[i]
    for other in range(TEACHER_LAYERS):
      same = all(np.allclose(a.numpy(), b.numpy(), atol=1e-6) for a, b in zip(
          kept.weights, teacher.encoder_layers[other].weights, strict=True))
      assert same == (other == layer), (i, layer, other)


@pytest.mark.parametrize("layout", ["model/encoder", "encoder", "tf1"])
def test_restore_encoder_keeps_the_chosen_layers_of_every_layout(
    tmp_path, layout):
  teacher = _teacher()
  prefix = str(tmp_path / "ckpt")
  if layout == "model/encoder":  # pretraining, conversion, fine-tuning
    prefix = tf.train.Checkpoint(model=tf.train.Checkpoint(
        encoder=teacher)).write(prefix)
  elif layout == "encoder":
    prefix = checkpoints.save_model(teacher, prefix)
  else:  # google-research/bert's names
    arrays = {name: (variable.numpy().T if transpose else variable.numpy())
              for name, (variable, transpose)
              in checkpoint_names.original_names(teacher).items()}
    prefix = testing.write_tf1_checkpoint(
        str(tmp_path / "tf1"), arrays, testing.tiny_config(
            num_hidden_layers=TEACHER_LAYERS))
  layers = (1, 3)
  student = encoder_lib.BertEncoder.from_bert_config(testing.tiny_config(
      num_hidden_layers=len(layers), max_position_embeddings=64))
  checkpoints.restore_encoder(student, prefix, layers)
  _assert_student_of(student, teacher, layers)


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory):
  """A classification task, the teacher's bert_config.json and its
  checkpoint (model/encoder, as a pretraining run's), and the teacher."""
  testing.require_shared_data()
  tmp_path = tmp_path_factory.mktemp("teacher")
  task = tmp_path / "task"
  tiny_fixtures.write_classification_task(str(task), per_class_train=8,
                                          per_class_dev=4)
  teacher = _teacher(vocab_size=30522)
  config_file = str(tmp_path / "bert_config.json")
  testing.tiny_config(num_hidden_layers=TEACHER_LAYERS, vocab_size=30522,
                      max_position_embeddings=64).to_json_file(config_file)
  prefix = tf.train.Checkpoint(model=tf.train.Checkpoint(
      encoder=teacher)).write(str(tmp_path / "teacher" / "ckpt"))
  return task, config_file, prefix, teacher


def _args(task, config_file, prefix, out, *extra):
  return [f"--task_data_dir={task}", f"--bert_config_file={config_file}",
          f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
          "--label_column=part", "--max_seq_length=32",
          f"--init_checkpoint={prefix}", *extra]


def test_a_student_fine_tunes_from_the_teachers_layers(tmp_path, teacher_run):
  """run_classifier --student_layers=0,2: one step at a learning rate too
  small to move a weight (1e-9) and the saved checkpoint's encoder is the
  teacher's layers 0 and 2 with its embeddings and pooler; the run's
  bert_config.json says 2 layers."""
  task, config_file, prefix, teacher = teacher_run
  out = tmp_path / "out"
  proc = testing.run_program("official_bert.run_classifier", _args(
      task, config_file, prefix, out, "--student_layers=0,2", "--do_train",
      "--nodo_eval", "--train_batch_size=16", "--num_train_epochs=1",
      "--learning_rate=1e-9", "--kernels=keras"))
  assert "(a student of its layers 0,2)" in proc.stdout, proc.stdout
  with open(out / "bert_config.json") as f:
    config = json.load(f)
  assert config["num_hidden_layers"] == 2
  assert config["hidden_size"] == testing.HIDDEN
  student = encoder_lib.BertEncoder.from_bert_config(
      testing.tiny_config(**{k: config[k] for k in (
          "num_hidden_layers", "vocab_size", "max_position_embeddings")}))
  checkpoints.restore_encoder(student, str(out))
  _assert_student_of(student, teacher, (0, 2))


@pytest.mark.parametrize("layers, sentence", [
    ("0,4", "--student_layers=0,4 must be increasing layer indices from 0 "
            "to 3 (num_hidden_layers=4 of"),
    ("2,0", "--student_layers=2,0 must be increasing layer indices from 0 "
            "to 3"),
    ("1,1", "--student_layers=1,1 must be increasing layer indices from 0 "
            "to 3"),
    ("-1,2", "--student_layers=-1,2 must be increasing layer indices"),
    ("0,x", "--student_layers=0,x is not a list of layer indices; pass the "
            "teacher's layers to keep, such as 0,2,4."),
])
def test_a_bad_index_is_one_sentence_naming_the_flag_and_range(
    tmp_path, teacher_run, layers, sentence):
  task, config_file, prefix, _ = teacher_run
  out = tmp_path / "out"
  last = testing.refused_input("official_bert.run_classifier", _args(
      task, config_file, prefix, out, f"--student_layers={layers}",
      "--do_train"))
  assert sentence in last, last
  assert not out.exists()


def test_student_layers_need_init_checkpoint(tmp_path, teacher_run):
  task, config_file, _, _ = teacher_run
  args = _args(task, config_file, "", tmp_path / "out", "--student_layers=0",
               "--do_train")
  last = testing.refused_input("official_bert.run_classifier",
                               [a for a in args if a != "--init_checkpoint="])
  assert last.endswith("--student_layers keeps layers of the encoder that "
                       "--init_checkpoint names; pass --init_checkpoint."), last
