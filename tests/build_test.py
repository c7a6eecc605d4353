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

PACKAGES = ("official_bert", "tfrecords", "export", "tests", "benchmarks")


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


@pytest.fixture(scope="module")
def targets():
  return _load_build()


def test_every_python_file_has_exactly_one_target(targets):
  owners = {}
  for name, target in targets.items():
    for src in target["srcs"]:
      assert src not in owners, f"{src} is in both :{owners[src]} and :{name}"
      owners[src] = name
  missing = [path for path in _python_files() if path not in owners]
  assert not missing, f"files without a BUILD target: {missing}"
  stale = [src for src in owners if not os.path.exists(os.path.join(testing.ROOT, src))]
  assert not stale, f"BUILD names files that do not exist: {stale}"


def test_tests_are_py_test_and_programs_are_py_binary(targets):
  for name, target in targets.items():
    for src in target["srcs"]:
      with open(os.path.join(testing.ROOT, src)) as f:
        is_program = 'if __name__ == "__main__":' in f.read()
      if src.endswith("_test.py"):
        assert target["kind"] == "py_test", f"{src} should be a py_test, is :{name}"
      elif is_program:
        assert target["kind"] == "py_binary", f"{src} is a program (__main__); :{name} should be py_binary"
      else:
        assert target["kind"] == "py_library", f"{src} is a module; :{name} should be py_library"


def test_deps_cover_project_imports(targets):
  owners = {src: name for name, t in targets.items() for src in t["srcs"]}
  for name, target in targets.items():
    local_deps = set()
    for dep in target["deps"]:
      if dep.startswith(":"):
        assert dep[1:] in targets, f":{name} depends on unknown target {dep}"
        local_deps.add(dep[1:])
    for src in target["srcs"]:
      for imported in _project_imports(src):
        owner = owners.get(imported)
        if owner and owner != name:
          assert owner in local_deps, (
              f"{src} imports {imported}; add \":{owner}\" to the deps of :{name}")


def test_the_checker_sees_a_missing_target(tmp_path, targets):
  # Guard against a checker that passes vacuously: the walk must find files.
  files = _python_files()
  assert "tests/build_test.py" in files
  assert len(targets) >= len(files) // 2
