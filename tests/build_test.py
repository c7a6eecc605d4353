"""Keeps BUILD in sync with the tree.

Bazel 4 cannot fetch rule repositories offline here, so instead of
`bazel test` this test evaluates BUILD (Starlark is Python syntax for the
subset we use) with recording stand-ins for the rules and checks that:
every Python file has exactly one target; tests are py_test, programs
(files with a `__main__` block) are py_binary; every source exists; and every
project module a file imports is reachable through the target's deps.
"""

import ast
import os

import pytest

from tests import testing

PACKAGES = ("official_bert", "tfrecords", "export", "tests", "benchmarks",
            "tools")


def _load_build():
  targets = {}

  def rule(kind):
    def record(name, srcs=(), deps=(), **kwargs):
      assert name not in targets, f"BUILD defines target {name!r} twice"
      targets[name] = {"kind": kind, "srcs": list(srcs), "deps": list(deps),
                       **kwargs}
    return record

  scope = {
      "load": lambda *args, **kwargs: None,
      "package": lambda **kwargs: None,
      "requirement": lambda name: "@pypi//" + name,
      "glob": lambda *args, **kwargs: [],
      "py_library": rule("py_library"),
      "py_binary": rule("py_binary"),
      "py_test": rule("py_test"),
  }
  with open(os.path.join(testing.ROOT, "BUILD")) as f:
    exec(compile(f.read(), "BUILD", "exec"), scope)  # pylint: disable=exec-used
  return targets


def _python_files():
  found = []
  for package in PACKAGES:
    for dirpath, _, names in os.walk(os.path.join(testing.ROOT, package)):
      if "__pycache__" in dirpath:
        continue
      for name in names:
        if name.endswith(".py") and name != "__init__.py":
          found.append(os.path.relpath(os.path.join(dirpath, name), testing.ROOT))
  return sorted(found)


def _project_imports(path):
  """Project files that `path` imports, as repo-relative paths."""
  with open(os.path.join(testing.ROOT, path)) as f:
    tree = ast.parse(f.read(), path)
  modules = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      modules.add(node.module)
      modules.update(f"{node.module}.{alias.name}" for alias in node.names)
  files = set()
  for module in modules:
    if module.split(".")[0] not in PACKAGES:
      continue
    candidate = module.replace(".", "/") + ".py"
    if os.path.exists(os.path.join(testing.ROOT, candidate)):
      files.add(candidate)
  return files


def file_problems(targets):
  """Files without a target, files in two targets, targets naming no file."""
  problems, owners = [], {}
  for name, target in targets.items():
    for src in target["srcs"]:
      if src in owners:
        problems.append(f"{src} is in both :{owners[src]} and :{name}")
      owners[src] = name
  missing = [path for path in _python_files() if path not in owners]
  if missing:
    problems.append(f"files without a BUILD target: {missing}")
  stale = [src for src in owners
           if not os.path.exists(os.path.join(testing.ROOT, src))]
  if stale:
    problems.append(f"BUILD names files that do not exist: {stale}")
  return problems


def kind_problems(targets):
  """Tests that are not py_test, programs not py_binary, modules not py_library."""
  problems = []
  for name, target in targets.items():
    for src in target["srcs"]:
      with open(os.path.join(testing.ROOT, src)) as f:
        is_program = 'if __name__ == "__main__":' in f.read()
      if src.endswith("_test.py"):
        kind = "py_test"
      elif is_program:
        kind = "py_binary"
      else:
        kind = "py_library"
      if target["kind"] != kind:
        problems.append(f"{src} should be in a {kind}, is in the "
                        f"{target['kind']} :{name}")
  return problems


def dep_problems(targets):
  """Project imports not reachable through the importing target's deps."""
  problems = []
  owners = {src: name for name, t in targets.items() for src in t["srcs"]}
  for name, target in targets.items():
    local_deps = set()
    for dep in target["deps"]:
      if dep.startswith(":"):
        if dep[1:] not in targets:
          problems.append(f":{name} depends on unknown target {dep}")
        local_deps.add(dep[1:])
    for src in target["srcs"]:
      for imported in _project_imports(src):
        owner = owners.get(imported)
        if owner and owner != name and owner not in local_deps:
          problems.append(f"{src} imports {imported}; add \":{owner}\" to "
                          f"the deps of :{name}")
  return problems


@pytest.fixture(scope="module")
def targets():
  return _load_build()


def test_every_python_file_has_exactly_one_target(targets):
  assert file_problems(targets) == []


def test_tests_are_py_test_and_programs_are_py_binary(targets):
  assert kind_problems(targets) == []


def test_deps_cover_project_imports(targets):
  assert dep_problems(targets) == []


def test_the_checker_sees_a_missing_target(targets):
  # A checker that passes vacuously (walks no file, reads no import) fails
  # here: each planted mutation of the real BUILD must be reported.
  assert "tests/build_test.py" in _python_files()
  without = {k: v for k, v in targets.items() if k != "trainer"}
  assert any("official_bert/training/trainer.py" in p
             for p in file_problems(without))
  # The programs importing the trainer now depend on an unknown target.
  assert any(":run_pretraining depends on unknown target :trainer" in p
             for p in dep_problems(without))


def test_the_checker_sees_a_duplicate_or_stale_source(targets):
  doubled = dict(targets, extra={"kind": "py_library", "deps": [],
                                 "srcs": ["official_bert/cli.py",
                                          "official_bert/gone.py"]})
  problems = file_problems(doubled)
  assert any("official_bert/cli.py is in both" in p for p in problems)
  assert any("official_bert/gone.py" in p for p in problems)


def test_the_checker_sees_a_missing_dep_and_a_wrong_kind(targets):
  trainer = targets["trainer"]
  mutated = dict(targets, trainer=dict(
      trainer, kind="py_binary",
      deps=[d for d in trainer["deps"] if d != ":train_step"]))
  assert any("official_bert/training/train_step.py" in p and ":trainer" in p
             for p in dep_problems(mutated))
  assert any("should be in a py_library" in p for p in kind_problems(mutated))
