"""Unreadable and unwritable paths, for every program, also when run as root.

Root reads and writes anything, so as root (CI runs as root) each program is
started with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped (`setpriv`),
which makes permissions bite as for any user. Per program: an unreadable
input file, an input in (or being) an unreadable directory, an output in a
read-only directory -> one sentence naming the flag as the last line, exit
1, no traceback, nothing written.

One unprivileged child process (this module run as `python -m
tests.permissions_test ROOT`) runs every case in turn in-process
(testing.run_program: each program parses fresh flags and runs its main),
the programs whose checks come before TensorFlow first, then the exporters,
which import it at start (one case each here; their other bad inputs are
tests/export_cli_test.py's and tests/bad_input_test.py's exporter cases).
The process is the point only for the dropped capabilities; one process
holds them for all cases.

Bugs caught: a permission check that trusts os.access as root (never
fires), "does not exist" for a file that is only hidden by an unreadable
directory, a PermissionError traceback, an output directory made before the
check.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import testing

# Drops root's power to ignore permissions, for the program started.
UNPRIVILEGED = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                 "--bounding-set=-dac_override,-dac_read_search"]
                if os.geteuid() == 0 else [])


def _skip_without_setpriv():
  if UNPRIVILEGED and not shutil.which("setpriv"):
    message = "running as root without setpriv (util-linux)"
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  """Good inputs, their 0o000 twins, a 0o000 directory holding good copies,
  and a read-only (0o555) directory."""
  r = tmp_path_factory.mktemp("permissions")
  (r / "text.txt").write_text("One sentence.\nAnother one.\n\nA new doc.\n")
  shutil.copy(os.path.join(testing.TESTDATA, "export_vocab.txt"),
              r / "vocab.txt")
  testing.tiny_config().to_json_file(str(r / "bert_config.json"))
  for split in ("train", "dev", "test"):
    (r / "cls").mkdir(exist_ok=True)
    (r / "cls" / f"{split}.tsv").write_text("sentence\tlabel\na b\t1\n")
  (r / "squad.json").write_text(json.dumps({"version": "v1.1", "data": [
      {"title": "t", "paragraphs": [{"context": "the fox jumps", "qas": [
          {"id": "q1", "question": "who jumps",
           "answers": [{"text": "fox", "answer_start": 4}]}]}]}]}))
  (r / "locked").mkdir()
  for name in ("text.txt", "vocab.txt", "bert_config.json"):
    shutil.copy(r / name, r / "locked" / name)
    shutil.copy(r / name, r / f"locked_{name}")
    os.chmod(r / f"locked_{name}", 0)
  shutil.copytree(r / "cls", r / "locked" / "cls")
  shutil.copytree(os.path.join(testing.TESTDATA, "main_ckpt"), r / "ckpt")
  shutil.copytree(os.path.join(testing.TESTDATA, "main_ckpt"),
                  r / "locked" / "ckpt")
  shutil.copytree(os.path.join(testing.TESTDATA, "main_ckpt"),
                  r / "locked_ckpt")
  os.chmod(r / "locked_ckpt", 0)
  os.chmod(r / "locked", 0)
  (r / "read_only").mkdir()
  os.chmod(r / "read_only", 0o555)
  (r / "out").mkdir()
  yield r
  os.chmod(r / "locked", 0o755)
  os.chmod(r / "locked_ckpt", 0o755)
  os.chmod(r / "read_only", 0o755)


def test_the_unprivileged_runner_cannot_read_a_locked_file(runs):
  """Without this, every case below would test nothing as root."""
  assert runs["sanity"].startswith("PermissionError"), runs["sanity"]


def _path_checks(root):
  """cli's checks, in this (unprivileged) process: what each says."""
  from official_bert import cli  # pylint: disable=g-import-not-at-top
  said = []
  for check, flag, path in [
      (cli.check_input_file, "a", f"{root}/locked_text.txt"),
      (cli.check_input_file, "b", f"{root}/locked/text.txt"),
      (cli.check_input_dir, "c", f"{root}/locked/cls"),
      (cli.check_output_dir, "d", f"{root}/read_only"),
      (cli.check_output_dir, "e", f"{root}/read_only/x"),
      (cli.check_output_file, "f", f"{root}/read_only/x")]:
    try:
      check(flag, path)
      said.append("no error")
    except cli.Error as e:
      said.append(str(e))
  return said


def test_path_checks_without_privileges(root, runs):
  """cli's checks, in a process that cannot override permissions."""
  locked = root / "locked"
  assert runs["path checks"] == [
      f"--a={root}/locked_text.txt is not readable; check its permissions.",
      f"--b={locked}/text.txt cannot be reached: {locked} is not readable; "
      "check its permissions.",
      f"--c={locked}/cls cannot be reached: {locked} is not readable; check "
      "its permissions.",
      f"--d={root}/read_only is not writable; choose a directory you can "
      "write to.",
      f"--e={root}/read_only/x: {root}/read_only is not writable; choose a "
      "directory you can write to.",
      f"--f={root}/read_only/x: {root}/read_only is not writable; choose a "
      "file you can write to."]
  assert not os.path.exists(root / "read_only" / "x")


def _cases(r):
  """{case: (args, program, text the last line holds)}; R = root."""
  L = f"{r}/locked"  # pylint: disable=invalid-name
  unreachable = lambda flag, path: (f"--{flag}={path} cannot be reached: "
                                    f"{L} is not readable")
  cfg, vocab, text = (f"{r}/bert_config.json", f"{r}/vocab.txt",
                      f"{r}/text.txt")
  qs = ["-m", "official_bert.quickstart"]
  lv = ["-m", "tfrecords.learn_vocab", f"--output_file={r}/out/v.txt"]
  cpd = ["-m", "tfrecords.create_pretraining_data", f"--vocab_file={vocab}",
         f"--output_file={r}/out/o.tfrecord"]
  rp = ["-m", "official_bert.run_pretraining", "--do_train",
        f"--bert_config_file={cfg}", f"--output_dir={r}/out/p"]
  rc = ["-m", "official_bert.run_classifier", "--do_train",
        f"--bert_config_file={cfg}", f"--vocab_file={vocab}"]
  rn = ["-m", "official_bert.run_ner", "--do_train",
        f"--bert_config_file={cfg}", f"--vocab_file={vocab}"]
  rs = ["-m", "official_bert.run_squad", "--do_train",
        f"--bert_config_file={cfg}", f"--vocab_file={vocab}"]
  ef = ["-m", "official_bert.extract_features", f"--bert_config_file={cfg}",
        f"--vocab_file={vocab}"]
  return {
      # quickstart: its only input is --corpus; --work_dir is its output.
      "quickstart file": (qs + [f"--corpus={r}/locked_text.txt",
                                f"--work_dir={r}/out/q"],
                          f"--corpus={r}/locked_text.txt is not readable"),
      "quickstart dir": (qs + [f"--corpus={L}/text.txt",
                               f"--work_dir={r}/out/q"],
                         unreachable("corpus", f"{L}/text.txt")),
      "quickstart output": (qs + [f"--corpus={text}",
                                  f"--work_dir={r}/read_only/q"],
                            f"{r}/read_only is not writable"),
      "learn_vocab file": (lv + [f"--input_file={r}/locked_text.txt"],
                           f"--input_file={r}/locked_text.txt is not "
                           "readable"),
      "learn_vocab dir": (lv + [f"--input_file={L}/text.txt"],
                          unreachable("input_file", f"{L}/text.txt")),
      "learn_vocab output": (["-m", "tfrecords.learn_vocab",
                              f"--input_file={text}",
                              f"--output_file={r}/read_only/v.txt"],
                             f"{r}/read_only is not writable"),
      "create_pretraining_data file": (
          cpd + [f"--input_file={r}/locked_text.txt"],
          f"--input_file={r}/locked_text.txt is not readable"),
      "create_pretraining_data dir": (
          cpd + [f"--input_file={L}/text.txt"],
          unreachable("input_file", f"{L}/text.txt")),
      "create_pretraining_data output": (
          ["-m", "tfrecords.create_pretraining_data", f"--vocab_file={vocab}",
           f"--input_file={text}", f"--output_file={r}/read_only/o.tfrecord"],
          f"{r}/read_only is not writable"),
      "run_pretraining file": (
          ["-m", "official_bert.run_pretraining", "--do_train",
           f"--bert_config_file={r}/locked_bert_config.json",
           f"--input_file={text}", f"--output_dir={r}/out/p"],
          f"--bert_config_file={r}/locked_bert_config.json is not readable"),
      "run_pretraining dir": (rp + [f"--input_file={L}/d.tfrecord"],
                              unreachable("input_file", f"{L}/d.tfrecord")),
      "run_pretraining output": (
          ["-m", "official_bert.run_pretraining", "--do_train",
           f"--bert_config_file={cfg}", f"--input_file={text}",
           f"--output_dir={r}/read_only/p"],
          f"{r}/read_only is not writable"),
      "run_classifier file": (
          ["-m", "official_bert.run_classifier", "--do_train",
           f"--bert_config_file={r}/locked_bert_config.json",
           f"--vocab_file={vocab}", f"--task_data_dir={r}/cls",
           f"--output_dir={r}/out/c"],
          f"--bert_config_file={r}/locked_bert_config.json is not readable"),
      "run_classifier dir": (rc + [f"--task_data_dir={L}/cls",
                                   f"--output_dir={r}/out/c"],
                             unreachable("task_data_dir", f"{L}/cls")),
      "run_classifier output": (rc + [f"--task_data_dir={r}/cls",
                                      f"--output_dir={r}/read_only/c"],
                                f"{r}/read_only is not writable"),
      "run_ner file": (
          ["-m", "official_bert.run_ner", "--do_train",
           f"--bert_config_file={cfg}", f"--vocab_file={r}/locked_vocab.txt",
           f"--task_data_dir={r}/cls", f"--output_dir={r}/out/n"],
          f"--vocab_file={r}/locked_vocab.txt is not readable"),
      "run_ner dir": (rn + [f"--task_data_dir={L}", f"--output_dir={r}/out/n"],
                      f"--task_data_dir={L} is not readable"),
      "run_ner output": (rn + [f"--task_data_dir={r}/cls",
                               f"--output_dir={r}/read_only/n"],
                         f"{r}/read_only is not writable"),
      "run_squad output": (
          rs + [f"--train_file={r}/squad.json",
                f"--output_dir={r}/read_only/s"],
          f"{r}/read_only is not writable"),
      "run_squad file": (
          rs + [f"--train_file={r}/locked_text.txt",
                f"--output_dir={r}/out/s"],
          f"--train_file={r}/locked_text.txt is not readable"),
      "run_squad dir": (
          rs + [f"--train_file={r}/squad.json",
                f"--init_checkpoint={L}/ckpt", f"--output_dir={r}/out/s"],
          unreachable("init_checkpoint", f"{L}/ckpt")),
      "extract_features file": (
          ef + [f"--input_file={r}/locked_text.txt",
                f"--output_file={r}/out/f.jsonl", f"--init_checkpoint={r}"],
          f"--input_file={r}/locked_text.txt is not readable"),
      "extract_features dir": (
          ef + [f"--input_file={text}", f"--output_file={r}/out/f.jsonl",
                f"--init_checkpoint={L}/ckpt"],
          unreachable("init_checkpoint", f"{L}/ckpt")),
      "extract_features output": (
          ef + [f"--input_file={text}",
                f"--output_file={r}/read_only/f.jsonl",
                f"--init_checkpoint={r}"],
          f"{r}/read_only is not writable"),
  }


def _tensorflow_cases(r):
  """The exporters' unwritable --export_dir (checked before the checkpoint
  is restored), their --init_checkpoint in or being an unreadable directory
  ("not found" and "holds no checkpoint" before), and convert_checkpoint's
  --source in an unreadable directory ("does not exist" before): each of
  these imports TensorFlow before its checks."""
  model = [f"--bert_config_file={r}/bert_config.json",
           f"--init_checkpoint={r}/ckpt", f"--vocab_file={r}/vocab.txt"]
  return {
      "export_tfhub": (["-m", "export.export_tfhub"] + model +
                       [f"--export_dir={r}/read_only/hub",
                        "--seq_length=7"],
                       f"--export_dir={r}/read_only/hub: {r}/read_only "
                       "is not writable"),
      "export_saved_model": (["-m", "export.export_saved_model"] + model +
                             [f"--export_dir={r}/read_only/serving",
                              "--max_seq_length=7"],
                             f"--export_dir={r}/read_only/serving: "
                             f"{r}/read_only is not writable"),
      "export_saved_model hidden checkpoint": (
          ["-m", "export.export_saved_model"] + model[:1] +
          [f"--init_checkpoint={r}/locked/ckpt", model[2],
           f"--export_dir={r}/out/serving", "--max_seq_length=7"],
          f"checkpoint {r}/locked/ckpt cannot be reached: {r}/locked "
          "is not readable"),
      "export_tfhub unreadable checkpoint": (
          ["-m", "export.export_tfhub"] + model[:1] +
          [f"--init_checkpoint={r}/locked_ckpt", model[2],
           f"--export_dir={r}/out/hub", "--seq_length=7"],
          f"checkpoint directory {r}/locked_ckpt is not readable"),
      "convert_checkpoint": (["-m", "official_bert.convert_checkpoint",
                              f"--source={r}/locked/ckpt",
                              f"--output_dir={r}/out/cv"],
                             f"--source={r}/locked/ckpt cannot be "
                             f"reached: {r}/locked is not readable"),
  }


def child(root, results_file):
  """Every case in turn, in this process (started without DAC privileges):
  {case: {status, lines, written}} as JSON to `results_file`. The programs
  whose checks come before TensorFlow run first."""
  results = {}
  try:
    open(f"{root}/locked_text.txt", encoding="utf-8").close()
    results["sanity"] = "read it"
  except PermissionError as e:
    results["sanity"] = f"PermissionError: {e}"
  results["path checks"] = _path_checks(root)
  for case, (args, _) in {**_cases(root), **_tensorflow_cases(root)}.items():
    proc = testing.run_program(args[1], args[2:], check=False,
                               merge_stderr=True)
    results[case] = {
        "status": proc.returncode,
        "lines": [l for l in proc.stdout.splitlines() if l.strip()],
        "written": sorted(os.listdir(f"{root}/out")) + sorted(
            os.listdir(f"{root}/read_only"))}
  with open(results_file, "w", encoding="utf-8") as f:
    json.dump(results, f)


@pytest.fixture(scope="module")
def runs(root, tmp_path_factory):
  """The child's results: one process, without DAC privileges, for all."""
  _skip_without_setpriv()
  results_file = tmp_path_factory.mktemp("permissions_results") / "r.json"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=testing.CHILD_PATH)
  proc = subprocess.run(
      UNPRIVILEGED + [sys.executable, "-m", "tests.permissions_test",
                      str(root), str(results_file)],
      cwd=testing.ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-5000:]
  with open(results_file, encoding="utf-8") as f:
    return json.load(f)


def _assert_case(runs, case, program, expected):
  result = runs[case]
  testing.assert_one_sentence_last(result["status"], result["lines"],
                                   program, expected)
  assert result["written"] == [], (case, result["written"])


@pytest.mark.parametrize("case", sorted(_cases("R")))
def test_program_permission_error_is_one_sentence_last(root, runs, case):
  args, expected = _cases(root)[case]
  _assert_case(runs, case, args[1].split(".")[-1], expected)


@pytest.mark.parametrize("case", sorted(_tensorflow_cases("R")))
def test_programs_that_import_tensorflow_first(root, runs, case):
  _, expected = _tensorflow_cases(root)[case]
  _assert_case(runs, case, case.split()[0], expected)


if __name__ == "__main__":
  child(sys.argv[1], sys.argv[2])
