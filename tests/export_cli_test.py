"""The exporters as a user runs them: --help, and a config that does not fit.

Each test runs the real `python -m export.<program>` (in-process:
testing.run_program).
Bugs these catch: the model flags defined in saved_model_io missing from
`--help` (absl lists only the main module's key flags); an error followed by
TensorFlow's "Value in checkpoint could not be found" warnings or a usage
dump (app.run + sys.exit instead of cli.run); a half-written export.
"""

import os
import shutil

import pytest

from official_bert.training import checkpoints
from official_bert.modeling import pretrainer as pretrainer_lib
from tests import testing

VOCAB = os.path.join(testing.TESTDATA, "export_vocab.txt")
PROGRAMS = ("export.export_saved_model", "export.export_tfhub")
MODEL_FLAGS = ("--bert_config_file", "--init_checkpoint", "--vocab_file",
               "--[no]do_lower_case")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  root = tmp_path_factory.mktemp("export_cli")
  model = pretrainer_lib.BertPretrainer.from_bert_config(testing.tiny_config())
  checkpoints.save_model(model, str(root / "ckpt" / "ckpt-1"))
  testing.tiny_config().to_json_file(str(root / "bert_config.json"))
  # hidden_size 48 (heads 4 still divides it): every kernel has a new shape.
  testing.tiny_config(hidden_size=48).to_json_file(str(root / "h48.json"))
  return root


def test_help_lists_the_model_flags():
  for program in PROGRAMS:
    proc = testing.run_program(program, ["--help"], check=False,
                               merge_stderr=True)
    out = proc.stdout
    # absl's --help exits with status 1 after printing the usage.
    assert proc.returncode == 1, out[-2000:]
    for flag in MODEL_FLAGS + ("--export_dir",):
      assert f"  {flag}:" in out, f"{program} --help lacks {flag}:\n{out}"
    assert "--helpfull" in out


@pytest.mark.parametrize("program", PROGRAMS)
def test_config_that_does_not_fit_is_the_last_line(checkpoint, program):
  out = checkpoint / program
  proc = testing.run_cli([
      "-m", program, f"--bert_config_file={checkpoint / 'h48.json'}",
      f"--init_checkpoint={checkpoint / 'ckpt' / 'ckpt-1'}", f"--vocab_file={VOCAB}",
      f"--export_dir={out}"], check=False, merge_stderr=True)
  lines = proc.stdout.strip().splitlines()
  assert proc.returncode == 1, proc.stdout
  name = program.split(".")[1]
  assert lines[-1].startswith(f"{name}: error: checkpoint "), proc.stdout
  assert "does not match the" in lines[-1]
  assert "(check bert_config_file)" in lines[-1]
  assert not any("Value in checkpoint could not be found" in line
                 for line in lines), proc.stdout
  assert "Traceback" not in proc.stdout and "USAGE" not in proc.stdout
  assert not out.exists() or os.listdir(out) == []


def test_truncated_checkpoint_and_unreadable_vocab_are_one_sentence(
    checkpoint, tmp_path):
  """Bugs caught: TF's IndexError / FailedPreconditionError escaping as a
  traceback (the CLIs turn ValueError into the last-line sentence)."""
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  shutil.copytree(checkpoint / "ckpt", tmp_path / "trunc")
  data = tmp_path / "trunc" / "ckpt-1.data-00000-of-00001"
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)
  with pytest.raises(ValueError, match="cannot read checkpoint .*trunc/ckpt-1: "
                     ".*; pass a complete checkpoint"):
    saved_model_io.load_pretrained(str(checkpoint / "bert_config.json"),
                                   str(tmp_path / "trunc" / "ckpt-1"))
  with pytest.raises(ValueError, match="(?i)vocab.* is a directory"):
    saved_model_io.check_vocab(str(tmp_path), testing.VOCAB_SIZE)
