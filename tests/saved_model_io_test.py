"""Publishing an exporter's version with files added (run_ner's and
run_squad's int8 model.tflite): `serving.export_with_int8` over
`saved_model_io.atomic_rewrap`. The version appears with every file or not
at all: a failure while adding them leaves neither the version nor a hidden
temporary directory (a bug that published the SavedModel first, then added
model.tflite, fails both tests)."""

import os

import pytest
import tensorflow as tf

from export import litert_int8
from export import saved_model_io
from export import serving


def _exporter(seen):
  """An exporter without int8 (as export_ner_model): `write(export_dir,
  version)` publishes a tiny SavedModel under export_dir by atomic_save."""

  def write(export_dir, version):
    seen.append(os.listdir(os.path.dirname(export_dir)))
    module = tf.Module()
    module.v = tf.Variable(3.0)
    if version is None:
      version = serving.next_version(export_dir)
    return saved_model_io.atomic_save(
        module, os.path.join(export_dir, str(version)))

  return write


def test_the_version_appears_with_model_tflite(tmp_path):
  export_dir = tmp_path / "serving"
  os.makedirs(export_dir / "1")  # an older version: this one is 2
  seen = []
  path = serving.export_with_int8(_exporter(seen), str(export_dir),
                                  b"int8 bytes")
  assert path == str(export_dir / "2")
  # Written under a hidden directory: no version 2 until it was whole.
  assert [name for name in seen[0] if not name.startswith(".")] == ["1"]
  assert sorted(os.listdir(export_dir)) == ["1", "2"]
  assert {"saved_model.pb", "variables", litert_int8.LITERT_FILE} <= set(
      os.listdir(path))
  with open(os.path.join(path, litert_int8.LITERT_FILE), "rb") as f:
    assert f.read() == b"int8 bytes"
  assert float(tf.saved_model.load(path).v) == 3.0
  # Without int8 bytes: the exporter's own version, as it writes it.
  assert serving.export_with_int8(_exporter([]), str(export_dir)) == str(
      export_dir / "3")


def test_a_failure_adding_files_publishes_nothing(tmp_path, monkeypatch):
  def fail(path, content):
    raise RuntimeError(f"planted: {path} {content}")

  monkeypatch.setattr(litert_int8, "write", fail)
  export_dir = tmp_path / "serving"
  with pytest.raises(RuntimeError, match="planted"):
    serving.export_with_int8(_exporter([]), str(export_dir), b"int8 bytes")
  assert os.listdir(export_dir) == []  # no version, no hidden temporary
