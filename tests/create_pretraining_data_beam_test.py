"""The Beam pipeline on the DirectRunner: same records as the CLI job."""

import glob
import os

import pytest
import tensorflow as tf

from tests import testing
from tfrecords import create_pretraining_data as cpd


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """2,000 lines of the pydocs corpus, a document every 20 lines."""
  testing.require_shared_data()
  with open(testing.CORPUS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:2000]
  lines = [line if i % 20 else "" for i, line in enumerate(lines)]
  path = tmp_path_factory.mktemp("corpus") / "slice.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("next_sentence_prediction", [True, False])
def test_beam_writes_the_same_records_as_the_cli_job(corpus, tmp_path,
                                                     next_sentence_prediction):
  """Also with next_sentence_prediction=False (FULL-SENTENCES packing)."""
  flags = {"vocab_file": testing.VOCAB, "max_seq_length": 48,
           "max_predictions_per_seq": 6, "dupe_factor": 2,
           "window_tokens": 2500, "random_seed": 7,
           "next_sentence_prediction": next_sentence_prediction}
  prefix = str(tmp_path / "beam.tfrecord.gz")
  proc = testing.run_cli(
      ["tfrecords/create_pretraining_data_beam.py", f"--input_file={corpus}",
       f"--output_file={prefix}", "--num_output_shards=3",
       "--compression=GZIP", "--runner=DirectRunner"] +
      [f"--{k}={v}" for k, v in flags.items()])
  shards = sorted(glob.glob(prefix + "-*"))
  assert [s[len(prefix):] for s in shards] == [
      "-00000-of-00003", "-00001-of-00003", "-00002-of-00003"]
  beam_records = [r.numpy() for s in shards
                  for r in tf.data.TFRecordDataset(s, "GZIP")]
  assert all(len(list(tf.data.TFRecordDataset(s, "GZIP"))) for s in shards)

  path = str(tmp_path / "cli.tfrecord")
  stats = cpd.create_pretraining_data(cpd.JobConfig(
      input_files=[corpus], output_files=[path], **flags))
  cli_records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
  assert stats["windows"] > 3
  assert len(beam_records) == len(cli_records) > 500
  assert sorted(beam_records) == sorted(cli_records)
  assert f"done: wrote {len(cli_records):,} instances" in proc.stderr
  # DirectRunner runs in this process tree: Beam's own would first fetch its
  # Prism runner from GitHub (nothing is downloaded at run time).
  assert "Prism" not in proc.stderr, proc.stderr[-3000:]


def test_beam_cli_rejects_bad_input_with_one_sentence(tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n")
  proc = testing.run_cli(
      ["tfrecords/create_pretraining_data_beam.py", f"--input_file={empty}",
       f"--output_file={tmp_path}/out",
       f"--vocab_file={os.path.join(testing.TESTDATA, 'export_vocab.txt')}"],
      check=False)
  assert proc.returncode == 1
  assert "No documents in --input_file" in proc.stderr
  assert "Traceback" not in proc.stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]
