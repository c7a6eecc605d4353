"""official_bert/training/release_folder.py: the folder convert_checkpoint and
extend_checkpoint write, read back by the checkpoint code."""

import errno
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from official_bert import configs
from official_bert import disk_full
from official_bert.modeling import pretrainer
from official_bert.training import checkpoints
from official_bert.training import release_folder
from tests import testing


def _random_model(config, seed):
  """A BertPretrainer whose every weight is drawn from `seed` (a restore
  into a freshly built model cannot pass by matching its initialisation)."""
  model = pretrainer.BertPretrainer.from_bert_config(config)
  rng = np.random.default_rng(seed)
  for weight in model.weights:
    weight.assign(rng.normal(size=weight.shape).astype(weight.dtype))
  return model


def _names(directory):
  reader = tf.train.load_checkpoint(os.path.join(directory, "bert_model.ckpt"))
  return [n for n in reader.get_variable_to_shape_map()
          if n.startswith("model/")]


def test_a_pretrainer_is_written_whole_and_the_folder_moves(tmp_path):
  config = testing.tiny_config()
  model = _random_model(config, seed=1)
  vocab = tmp_path / "source_vocab.txt"
  vocab.write_bytes(b"[PAD]\r\n[UNK]")  # copied as it is: CRLF, no last \n
  out = tmp_path / "out"
  prefix = release_folder.write(str(out), model, config, str(vocab),
                                {"pooling.json": '{"pooling": "cls"}\n'})
  assert prefix == str(out / "bert_model.ckpt")
  assert sorted(os.listdir(out)) == [
      "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
      "bert_model.ckpt.index", "checkpoint", "pooling.json", "vocab.txt"]
  assert (out / "vocab.txt").read_bytes() == b"[PAD]\r\n[UNK]"
  assert (out / "pooling.json").read_text() == '{"pooling": "cls"}\n'
  assert any(n.startswith("model/cls_predictions/") for n in _names(out))
  # The index names the checkpoint relatively: the moved folder resolves.
  moved = tmp_path / "moved"
  shutil.move(str(out), str(moved))
  assert configs.BertConfig.from_json_file(
      str(moved / "bert_config.json")) == config
  again = _random_model(config, seed=2)
  checkpoints.restore_model(again, str(moved))
  for written, read in zip(model.weights, again.weights):
    np.testing.assert_array_equal(written.numpy(), read.numpy(),
                                  err_msg=written.path)


def test_an_encoder_is_written_without_heads(tmp_path):
  config = testing.tiny_config()
  model = _random_model(config, seed=3)
  out = tmp_path / "out"
  release_folder.write(str(out), model.encoder, config, ["[PAD]", "a"])
  names = _names(out)
  assert names and all(n.startswith("model/encoder/") for n in names), names
  assert (out / "vocab.txt").read_text() == "[PAD]\na\n"
  again = _random_model(config, seed=4)
  checkpoints.restore_model(again, str(out))  # the heads keep theirs
  for written, read in zip(model.encoder.weights, again.encoder.weights):
    np.testing.assert_array_equal(written.numpy(), read.numpy())
  # Its own vocab.txt, rewritten in place, is left as it is; no vocab at
  # all writes none.
  release_folder.write(str(out), model.encoder, config,
                       str(out / "vocab.txt"))
  assert (out / "vocab.txt").read_text() == "[PAD]\na\n"
  release_folder.write(str(tmp_path / "bare"), model.encoder, config)
  assert not (tmp_path / "bare" / "vocab.txt").exists()


def test_a_full_disk_is_the_folders_writer_s_to_report_when_temporary(
    tmp_path, monkeypatch):
  """In place, a failed checkpoint write names the checkpoint; into a
  temporary folder, the caller's atomic_dir names the final one."""
  config = testing.tiny_config()
  model = _random_model(config, seed=5)

  def full(*unused_args, **unused_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(tf.train.Checkpoint, "write", full)
  with pytest.raises(disk_full.WriteFailed,
                     match=r"cannot write the checkpoint .*bert_model\.ckpt"):
    release_folder.write(str(tmp_path / "out"), model, config)
  with pytest.raises(OSError) as raised:
    release_folder.write(str(tmp_path / "tmp"), model, config, temporary=True)
  assert not isinstance(raised.value, disk_full.WriteFailed)
