"""Bad input on the user's path: one sentence, the last line, exit 1.

A program finds bad flags and paths before it imports TensorFlow, in about
a second instead of TensorFlow's start-up (4-7 s on 2 cores): each program
case that must be found so runs as a real subprocess under
`python -X importtime`, which must not have imported it (run_pretraining once
started TensorFlow before its flag checks; this catches that). The cases
found after TensorFlow starts (`AFTER_TENSORFLOW`, and the bad data and
checkpoints below) run in-process (testing.run_cli), as do the detectors
themselves: binary text, stale quickstart stages, log noise.
"""

import os
import pathlib
import subprocess
import sys

import pytest

from official_bert import cli
from tests import testing

# An executable's start: a header, then NUL bytes (what /bin/ls looks like).
BINARY = b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 64


def _run_merged(args, timeout=180, imports=True):
  """Runs `python -X importtime <args>`; returns (exit status, all output
  lines in order but the import-time ones, the modules it imported). Without
  `imports`, the program runs in this process (testing.run_cli) and the
  modules are None."""
  if not imports:
    proc = testing.run_cli(args, check=False, merge_stderr=True)
    return (proc.returncode,
            [line for line in proc.stdout.splitlines() if line.strip()], None)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = testing.ROOT + os.pathsep + env.get("PYTHONPATH", "")
  proc = subprocess.run([sys.executable, "-X", "importtime"] + list(args),
                        cwd=testing.ROOT, env=env, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=timeout)
  lines, imported = [], set()
  for line in proc.stdout.splitlines():
    if line.startswith("import time:"):
      # "import time: <self> | <cumulative> | <indent><module>"
      imported.add(line.rsplit("|", 1)[1].strip())
    elif line.strip():
      lines.append(line)
  return proc.returncode, lines, imported


def _assert_one_sentence(args, program, expected, before_tensorflow=False):
  """The contract; with `before_tensorflow`, also that the program found the
  error without importing TensorFlow (a check moved after TensorFlow's
  start-up still meets the rest of the contract, only slower)."""
  status, lines, imported = _run_merged(args, imports=before_tensorflow)
  testing.assert_one_sentence_last(status, lines, program, expected)
  output = "\n".join(lines)
  # No usage dump: the flag list never appears.
  assert "flags:" not in output and "--helpfull" not in output, output[-3000:]
  if before_tensorflow:
    assert "tensorflow" not in imported, (
        f"{program} imported TensorFlow before finding: {lines[-1]}")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("bad_input")
  (root / "a_file").write_text("not a directory\n")
  (root / "a_dir").mkdir()
  (root / "binary").write_bytes(BINARY)
  (root / "text.txt").write_text("One sentence.\nAnother one.\n\nA new doc.\n")
  testing.tiny_config().to_json_file(str(root / "bert_config.json"))
  testing.tiny_config(hidden_size=48).to_json_file(str(root / "h48.json"))
  # For the runs that train before their bad input shows: what they say of
  # it does not depend on depth, and they trace half the layers.
  testing.tiny_config(num_hidden_layers=1).to_json_file(
      str(root / "one_layer.json"))
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  input_pipeline_test.write_records(
      root / "d.tfrecord", input_pipeline_test.make_instances(4, seed=1))
  (root / "cls").mkdir()
  for split in ("train", "dev", "test"):
    (root / "cls" / f"{split}.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"the fox {i}\t{i % 2}\n"
                                      for i in range(4)))
  (root / "truncated.json").write_text('{"vocab_size": 99, "hidden_size": ')
  (root / "empty.txt").write_text("\n\n")
  latin1 = "Caf\u00e9 na\u00efve r\u00e9sum\u00e9.\n".encode("latin-1")
  (root / "latin1.txt").write_bytes(latin1 * 40)
  (root / "squad.json").write_text(
      '{"version": "v1.1", "data": [{"title": "t", "paragraphs": [{"context": '
      '"the fox jumps", "qas": [{"id": "q1", "question": "who jumps", '
      '"answers": [{"text": "fox", "answer_start": 4}]}]}]}]}')
  return root


def _program_cases(root):
  vocab = os.path.join(testing.TESTDATA, "export_vocab.txt")
  out = root / "out"
  return {
      "run_pretraining output_dir is a file": (
          ["-m", "official_bert.run_pretraining", "--do_train",
           f"--input_file={root}/text.txt", f"--output_dir={root}/a_file",
           f"--bert_config_file={root}/bert_config.json"],
          "run_pretraining", f"--output_dir={root}/a_file is a file, not a "
          "directory"),
      "run_pretraining packed rows with NSP": (
          ["-m", "official_bert.run_pretraining", "--do_train",
           f"--input_file={root}/text.txt", f"--output_dir={out}/packed",
           f"--bert_config_file={root}/bert_config.json",
           "--pack_sequences"],
          "run_pretraining", "--pack_sequences puts several sequences in a "
          "row, which has no one next-sentence label: pass "
          "--next_sentence_prediction=false."),
      "run_pretraining bad flag value": (
          ["-m", "official_bert.run_pretraining", "--num_train_steps=many"],
          "run_pretraining", "flag --num_train_steps=many: invalid literal"),
      "quickstart work_dir is a file": (
          ["-m", "official_bert.quickstart", f"--work_dir={root}/a_file"],
          "quickstart", f"--work_dir={root}/a_file is a file, not a directory"),
      "quickstart corpus is a directory": (
          ["-m", "official_bert.quickstart", f"--work_dir={out}/qs",
           f"--corpus={root}/a_dir"],
          "quickstart", f"--corpus={root}/a_dir is a directory; pass a file"),
      "quickstart corpus is binary": (
          ["-m", "official_bert.quickstart", f"--work_dir={out}/qs",
           f"--corpus={root}/binary"],
          "quickstart", f"--corpus={root}/binary holds NUL bytes"),
      # Checked before any stage: the vocab stage found these, after the
      # work dir and the stage's record were made.
      "quickstart corpus is empty": (
          ["-m", "official_bert.quickstart", f"--work_dir={out}/qs",
           f"--corpus={root}/empty.txt"],
          "quickstart", f"--corpus={root}/empty.txt holds no text"),
      "quickstart corpus is Latin-1": (
          ["-m", "official_bert.quickstart", f"--work_dir={out}/qs",
           f"--corpus={root}/latin1.txt"],
          "quickstart", f"--corpus={root}/latin1.txt: 40 of its 40 lines are "
          "not UTF-8 text"),
      "create_pretraining_data input is binary": (
          ["-m", "tfrecords.create_pretraining_data",
           f"--input_file={root}/binary", f"--output_file={out}/o.tfrecord",
           f"--vocab_file={vocab}"],
          "create_pretraining_data", f"--input_file={root}/binary holds NUL "
          "bytes: it is not a text file"),
      "create_pretraining_data_beam input is binary": (
          ["-m", "tfrecords.create_pretraining_data_beam",
           f"--input_file={root}/binary", f"--output_file={out}/beam",
           f"--vocab_file={vocab}"],
          "create_pretraining_data_beam", f"--input_file={root}/binary holds "
          "NUL bytes"),
      "learn_vocab input is binary": (
          ["-m", "tfrecords.learn_vocab", f"--input_file={root}/binary",
           f"--output_file={root}/a_dir/vocab.txt"],
          "learn_vocab", f"--input_file={root}/binary holds NUL bytes"),
      "learn_vocab required flag missing": (
          ["-m", "tfrecords.learn_vocab", f"--input_file={root}/text.txt"],
          "learn_vocab", "--output_file must have a value other than None; "
          "run with --help"),
      "extract_features input is binary": (
          ["-m", "official_bert.extract_features",
           f"--input_file={root}/binary", f"--output_file={out}/f.jsonl",
           f"--bert_config_file={root}/bert_config.json",
           f"--vocab_file={vocab}", f"--init_checkpoint={root}"],
          "extract_features", f"--input_file={root}/binary holds NUL bytes"),
      "run_squad bert_config is binary": (
          ["-m", "official_bert.run_squad", "--do_predict",
           f"--predict_file={root}/squad.json", f"--output_dir={out}/s",
           f"--bert_config_file={root}/binary", f"--vocab_file={vocab}"],
          "run_squad", f"--bert_config_file={root}/binary is not UTF-8 text"),
      # The output directory must not be made before the config is read (it
      # once was, empty, when the config was read after TensorFlow started).
      "run_squad bert_config is truncated": (
          ["-m", "official_bert.run_squad", "--do_predict",
           f"--predict_file={root}/squad.json", f"--output_dir={out}/s",
           f"--bert_config_file={root}/truncated.json",
           f"--vocab_file={vocab}"],
          "run_squad", f"--bert_config_file={root}/truncated.json is not "
          "valid JSON"),
      # The checkpoint is read after TensorFlow starts: flags.json and
      # bert_config.json must not be written into --output_dir before it.
      "run_pretraining init_checkpoint of another size": (
          ["-m", "official_bert.run_pretraining", "--do_train",
           f"--input_file={root}/d.tfrecord", f"--output_dir={out}/p",
           f"--bert_config_file={root}/h48.json",
           f"--init_checkpoint={testing.TESTDATA}/main_ckpt",
           f"--max_seq_length={testing.SEQ}", "--max_predictions_per_seq=3",
           "--train_batch_size=2", "--num_train_steps=1",
           "--num_warmup_steps=0"],
          "run_pretraining", "--init_checkpoint: checkpoint "
          f"{testing.TESTDATA}/main_ckpt/ckpt-1 does not match the model"),
      # Fine-tuning writes flags.json, bert_config.json, label_list.json
      # before the checkpoint is read: they are removed again.
      "run_classifier init_checkpoint of another size": (
          ["-m", "official_bert.run_classifier", "--do_train",
           f"--task_data_dir={root}/cls", f"--output_dir={out}/c",
           f"--bert_config_file={root}/h48.json", f"--vocab_file={vocab}",
           f"--init_checkpoint={testing.TESTDATA}/main_ckpt",
           f"--max_seq_length={testing.SEQ}", "--train_batch_size=2"],
          "run_classifier", "--init_checkpoint: checkpoint "
          f"{testing.TESTDATA}/main_ckpt/ckpt-1 does not match the encoder's "
          "config"),
      "extract_features output is a directory": (
          ["-m", "official_bert.extract_features",
           f"--input_file={root}/text.txt", f"--output_file={root}/a_dir",
           f"--bert_config_file={root}/bert_config.json",
           f"--vocab_file={vocab}", f"--init_checkpoint={root}"],
          "extract_features", f"--output_file={root}/a_dir is a directory"),
  }


# The cases found after TensorFlow starts (the checkpoint is read with it);
# every other one is found before it.
AFTER_TENSORFLOW = {"run_pretraining init_checkpoint of another size",
                    "run_classifier init_checkpoint of another size"}


@pytest.mark.parametrize("case", sorted(_program_cases(pathlib.Path("R"))))
def test_program_bad_input_is_one_sentence_last(files, case):
  args, program, expected = _program_cases(files)[case]
  _assert_one_sentence(args, program, expected,
                       before_tensorflow=case not in AFTER_TENSORFLOW)
  assert not (files / "out").exists()  # nothing written, not even the dir


def test_resuming_with_another_model_is_refused(files, tmp_path):
  """Mismatched flags: the checkpoints in --output_dir are of another model."""
  out = tmp_path / "pretraining"
  out.mkdir()
  testing.tiny_config(hidden_size=16).to_json_file(str(out / "bert_config.json"))
  (out / "ckpt-2.index").write_bytes(b"")
  (out / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  input_pipeline_test.write_records(
      tmp_path / "d.tfrecord", input_pipeline_test.make_instances(4, seed=1))
  before = (out / "bert_config.json").read_text()
  _assert_one_sentence(
      ["-m", "official_bert.run_pretraining", "--do_train",
       f"--input_file={tmp_path}/d.tfrecord", f"--output_dir={out}",
       f"--bert_config_file={files}/bert_config.json",
       f"--max_seq_length={testing.SEQ}", "--max_predictions_per_seq=3"],
      "run_pretraining",
      f"--bert_config_file={files}/bert_config.json differs from "
      f"{out}/bert_config.json, the model of the checkpoints in --output_dir "
      "(hidden_size); use a new --output_dir")
  # The config beside the checkpoints is not overwritten.
  assert (out / "bert_config.json").read_text() == before


# ------------------------------------------------- binary text, in-process ----

def test_data_job_reader_rejects_binary_past_the_sniffed_start(tmp_path):
  from tfrecords import documents  # pylint: disable=g-import-not-at-top
  late = tmp_path / "late_nul.txt"
  late.write_bytes(b"A sentence of text.\n" * 5000 + b"bad\0line\n")
  assert documents.expand_inputs(str(late)) == [str(late)]  # start is text
  with pytest.raises(documents.InputError,
                     match=f"--input_file={late} holds NUL bytes .at byte "
                     "100003"):
    list(documents.Reader([str(late)]).batches())
  latin = tmp_path / "latin1.txt"
  latin.write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1") * 50)
  with pytest.raises(documents.InputError,
                     match="50 of its 50 lines are not UTF-8 text; convert"):
    list(documents.Reader([str(latin)]).batches())
  with pytest.raises(documents.InputError, match="is a directory"):
    documents.expand_inputs(str(tmp_path))


def test_learn_vocab_reader_rejects_binary(tmp_path):
  from tfrecords import learn_vocab  # pylint: disable=g-import-not-at-top
  late = tmp_path / "late_nul.txt"
  late.write_bytes(b"A sentence of text.\n" * 5000 + b"bad\0line\n")
  with pytest.raises(cli.Error, match="line 5001 holds NUL bytes"):
    learn_vocab._read_lines([str(late)])
  latin = tmp_path / "latin1.txt"
  latin.write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1") * 3 + b"ok\n")
  with pytest.raises(cli.Error, match="3 of its 4 lines are not UTF-8"):
    learn_vocab._read_lines([str(latin)])
  # A few bad bytes are dropped, as the original does.
  mostly = tmp_path / "mostly.txt"
  mostly.write_bytes(b"fine\nfine too\ncaf\xe9\n")
  assert learn_vocab._read_lines([str(mostly)]) == ["fine", "fine too", "caf"]


def test_binary_bert_config_names_the_file(tmp_path):
  """Bug caught: a bare "'utf-8' codec can't decode byte 0x80" as the last
  line of convert_checkpoint and both exporters (no file named)."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  binary = tmp_path / "bert_config.json"
  binary.write_bytes(BINARY)
  with pytest.raises(ValueError, match=f"bert_config_file {binary} is not "
                     r"UTF-8 text \(byte \d+\); pass the bert_config.json"):
    configs.BertConfig.from_json_file(str(binary))


def test_vocab_and_extract_features_inputs(tmp_path):
  from official_bert import extract_features  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  binary = tmp_path / "binary"
  binary.write_bytes(BINARY)
  with pytest.raises(ValueError, match=f"Vocabulary file {binary} holds NUL"):
    tokenization.load_vocab(str(binary))
  with pytest.raises(ValueError, match=f"Vocabulary file {tmp_path} is a "
                     "directory"):
    tokenization.load_vocab(str(tmp_path))
  latin = tmp_path / "latin1.txt"
  latin.write_bytes(b"fine\ncaf\xe9\n")
  with pytest.raises(ValueError, match=f"--input_file {latin} line 2 is not "
                     "UTF-8 text"):
    extract_features.read_input(str(latin))


def test_extract_features_config_that_does_not_fit_is_the_last_line(
    files, tmp_path):
  """Bugs caught: TensorFlow's restore warnings printed after the error (or
  the error without the "extract_features: error:" prefix), and a config
  with fewer layers than the checkpoint restoring silently (the deeper
  layers unread: the vectors of a truncated model, exit 0)."""
  testing.tiny_config(hidden_size=48).to_json_file(str(tmp_path / "h48.json"))
  testing.tiny_config(num_hidden_layers=1).to_json_file(
      str(tmp_path / "l1.json"))
  checkpoint = os.path.join(testing.TESTDATA, "main_ckpt")  # 2 layers, H=32
  env = dict(os.environ, PYTHONPATH=testing.CHILD_PATH)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the warnings a user sees
  procs = {}
  for name in ("h48", "l1"):  # both at once: each imports TensorFlow
    procs[name] = subprocess.Popen(
        [sys.executable, "-m", "official_bert.extract_features",
         f"--input_file={files}/text.txt",
         f"--output_file={tmp_path}/{name}/f.jsonl",
         f"--bert_config_file={tmp_path}/{name}.json",
         f"--vocab_file={testing.TESTDATA}/export_vocab.txt",
         f"--init_checkpoint={checkpoint}", "--layers=-1",
         "--max_seq_length=7"], cwd=testing.ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  expected = {
      "h48": "does not match the encoder's config (check bert_config_file)",
      "l1": f"has 2 encoder layers but --bert_config_file={tmp_path}/l1.json "
            "says num_hidden_layers=1; pass the bert_config.json",
  }
  for name, proc in procs.items():
    output, _ = proc.communicate(timeout=300)
    lines = [l for l in output.splitlines() if l.strip()]
    assert proc.returncode == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert lines[-1].startswith("extract_features: error: checkpoint "), (
        output[-3000:])
    assert expected[name] in lines[-1], lines[-1]
    assert not (tmp_path / name).exists()


# ------------------------------------- pretraining data and checkpoints ----

def _pretraining_args(config, data, out, steps=8):
  return ["-m", "official_bert.run_pretraining", "--do_train",
          f"--input_file={data}", f"--output_dir={out}",
          f"--bert_config_file={config}", f"--max_seq_length={testing.SEQ}",
          "--max_predictions_per_seq=3", "--train_batch_size=4",
          f"--num_train_steps={steps}", "--num_warmup_steps=1",
          "--save_checkpoints_steps=4", "--steps_per_loop=4"]


def test_token_ids_past_the_vocabulary_before_anything_is_written(files,
                                                                  tmp_path):
  """Records written with BERT's 30,522-word vocab, a 99-word config: one
  sentence at start-up naming the file, the id and vocab_size."""
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  instances = input_pipeline_test.make_instances(4, seed=1, vocab=30522)
  data = input_pipeline_test.write_records(tmp_path / "big.tfrecord",
                                           instances)
  largest = int(max(instances.input_ids.max(), instances.masked_lm_ids.max()))
  out = tmp_path / "out"
  _assert_one_sentence(
      _pretraining_args(f"{files}/bert_config.json", data, out),
      "run_pretraining",
      f"TFRecord file {data} holds token id {largest}, but the model's "
      f"vocab_size is {testing.VOCAB_SIZE}")
  assert not out.exists()


def test_token_ids_past_the_vocabulary_after_the_checked_records(files,
                                                                 tmp_path):
  """A bad id past the records checked at start-up: the gather's error is
  the same one sentence, not a traceback."""
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.data import features  # pylint: disable=g-import-not-at-top
  good = input_pipeline_test.make_instances(100, seed=1)
  bad = input_pipeline_test.make_instances(60, seed=2, vocab=30522)
  both = features.Instances(**{
      f: np.concatenate([getattr(good, f), getattr(bad, f)])
      for f in features.Instances.__dataclass_fields__
      if getattr(good, f) is not None})
  data = input_pipeline_test.write_records(tmp_path / "late.tfrecord", both)
  status, lines, _ = _run_merged(_pretraining_args(
      f"{files}/one_layer.json", data, tmp_path / "out", steps=40),
                                 imports=False)
  testing.assert_one_sentence_last(
      status, lines, "run_pretraining",
      f"--input_file={data} holds token id ")
  assert f"but vocab_size is {testing.VOCAB_SIZE}" in lines[-1]


@pytest.mark.parametrize("damage, expected", [
    ("cut inside a header", "is cut short: it ends 5 bytes into the record "
     "at byte "),
    ("header checksum", "is corrupt: the record header at byte 0 fails its "
     "checksum"),
])
def test_tfrecord_framing_is_checked_at_start(files, tmp_path, damage,
                                              expected):
  """TensorFlow reads a file cut inside a record header as a shorter valid
  file (and a run would train on); the start-up check names the cut."""
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  data = input_pipeline_test.write_records(
      tmp_path / "d.tfrecord", input_pipeline_test.make_instances(8, seed=1))
  raw = pathlib.Path(data).read_bytes()
  record = len(raw) // 8
  if damage == "cut inside a header":
    raw = raw[:7 * record + 5]
  else:
    raw = raw[:8] + bytes([raw[8] ^ 1]) + raw[9:]
  pathlib.Path(data).write_bytes(raw)
  out = tmp_path / "out"
  _assert_one_sentence(
      _pretraining_args(f"{files}/bert_config.json", data, out),
      "run_pretraining", f"TFRecord file {data} {expected}")
  assert not out.exists()


def test_truncated_checkpoint_on_resume_falls_back_and_says_so(files,
                                                              tmp_path):
  """A truncated data file raised `IndexError: Read less bytes than
  requested` (a traceback); now the trainer resumes from the checkpoint
  before it, saying so, and stops with one sentence when none reads."""
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  data = input_pipeline_test.write_records(
      tmp_path / "d.tfrecord", input_pipeline_test.make_instances(16, seed=1))
  out = tmp_path / "out"
  config = f"{files}/one_layer.json"
  status, lines, _ = _run_merged(_pretraining_args(config, data, out, steps=8),
                                 imports=False)
  assert status == 0, lines[-5:]

  def cut(step):
    (data_file,) = out.glob(f"ckpt-{step}.data-*")
    data_file.write_bytes(data_file.read_bytes()[:data_file.stat().st_size
                                                 // 2])

  cut(8)
  status, lines, _ = _run_merged(
      _pretraining_args(config, data, out, steps=12), imports=False)
  assert status == 0, lines[-5:]
  output = "\n".join(lines)
  assert (f"Warning: checkpoint ckpt-8: " in output and f"in {out} is "
          "truncated or corrupt; resuming from ckpt-4, the newest that "
          "reads" in output), output[-2000:]
  assert f"Resumed from {out}/ckpt-4 at step 4" in output
  assert "Trained steps 4..12" in output
  # Every checkpoint damaged: one sentence.
  for step in (4, 8, 12):
    cut(step)
  _assert_one_sentence(
      _pretraining_args(config, data, out, steps=16), "run_pretraining",
      f"Every checkpoint in --output_dir {out} is truncated or corrupt "
      "(ckpt-12: ")
