"""Keeps README.md true to the tree: the CI command and the paths it names."""

import os
import re

from tests import testing


def _readme():
  with open(os.path.join(testing.ROOT, "README.md"), encoding="utf-8") as f:
    return f.read()


def _shell_blocks(text):
  return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command():
  with open(os.path.join(testing.ROOT, ".ci", "run")) as f:
    ci = f.read()
  commands = [line for block in _shell_blocks(_readme())
              for line in block.splitlines() if "pytest" in line]
  assert commands, "README has no test command in a ```sh block"
  test_command = commands[0].strip()
  assert test_command in ci, (
      f"README's test command is not what .ci/run runs: {test_command!r}")


def test_paths_in_the_layout_table_exist():
  missing, checked = [], 0
  for cell in re.findall(r"^\| (`[^|]*`) \|", _readme(), flags=re.M):
    names = re.findall(r"`([^`]+)`", cell)
    directory = ""
    for name in names:
      if "/" in name:
        directory = os.path.dirname(name.rstrip("/"))
        path = name
      else:  # "attention.py" after "official_bert/modeling/embeddings.py"
        path = os.path.join(directory, name)
      checked += 1
      if not os.path.exists(os.path.join(testing.ROOT, path)):
        missing.append(path)
  assert checked >= 5, "the layout table was not found in README.md"
  assert not missing, f"README names paths that do not exist: {missing}"
