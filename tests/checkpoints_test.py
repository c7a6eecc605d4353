"""Tests for official_bert/training/checkpoints.py's TrainingCheckpoints:
which checkpoint a resume reads when the newest ones are damaged."""

import os

import pytest
import tensorflow as tf

from official_bert import cli
from official_bert.training import checkpoints


def _saved(tmp_path, steps):
  """A checkpoint per step of `steps` in tmp_path, each holding its step as
  the value of its one variable; returns (variable, TrainingCheckpoints)."""
  value = tf.Variable(0.0)
  saver = checkpoints.TrainingCheckpoints(tf.train.Checkpoint(value=value),
                                          str(tmp_path))
  for step in steps:
    value.assign(float(step))
    saver.save(step)
  return value, saver


def _cut(tmp_path, step):
  """Cuts ckpt-<step>'s data file to half its size (a copy cut short)."""
  (data,) = tmp_path.glob(f"ckpt-{step}.data-*")
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])


def test_newest_readable_of_several_is_restored(tmp_path, capsys):
  """Bug caught: the fallback reading the oldest readable checkpoint instead
  of the newest (with only two, oldest and newest readable are the same)."""
  value, saver = _saved(tmp_path, (1, 2, 3, 4))
  _cut(tmp_path, 4)
  _cut(tmp_path, 3)
  value.assign(-1.0)
  prefix = saver.restore_latest()
  assert os.path.basename(prefix) == "ckpt-2"
  assert value.numpy() == 2.0
  out = capsys.readouterr().out
  assert "ckpt-4: " in out and "ckpt-3: " in out, out
  assert "resuming from ckpt-2, the newest that reads" in out, out


def test_the_latest_is_read_when_it_reads_and_none_is_one_sentence(tmp_path):
  value, saver = _saved(tmp_path, (1, 2, 3))
  value.assign(-1.0)
  assert os.path.basename(saver.restore_latest()) == "ckpt-3"
  assert value.numpy() == 3.0
  for step in (1, 2, 3):
    _cut(tmp_path, step)
  with pytest.raises(cli.Error, match=r"Every checkpoint in --output_dir .* "
                     r"is truncated or corrupt \(ckpt-3: .*ckpt-2: .*ckpt-1: "):
    saver.restore_latest()
