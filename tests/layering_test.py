"""The package layering of docs/architecture.md, checked on the source.

Reads every module's imports with `ast` (function-level imports included;
nothing is imported, so no TensorFlow) and checks the dependency rules:

- the library (official_bert.{modeling,training,data,tasks}) never imports
  `export` nor a program: programs and exporters sit on top of it;
- `export` imports only the library, configs and cli: no program
  (run_*, quickstart, convert_checkpoint, extract_features), so
  `run_classifier --export_dir` may call the exporter without a cycle;
- no task package imports another: a module under official_bert/tasks/<a>/
  imports official_bert.tasks.<a> and no other official_bert.tasks.<b>
  (a task's whole story is in its package; what two tasks share lives in
  data/ or training/);
- the checkpoint tools (official_bert/convert_checkpoint.py,
  extend_checkpoint.py, export/export_checkpoint.py) import no task module:
  a file format they read or write (the sentence-transformers folder and
  its pooling.json) lives beside the checkpoint code, in training/;
- the model (official_bert.modeling) imports only keras, numpy, the standard
  library, configs and itself: no TensorFlow, so it runs on any Keras backend;
- the training loop (training/trainer.py, training/train_step.py) imports no
  model module: the program that builds the model chooses its kernels;
- `tools` (the task generators the docs tell users to run) imports no
  `tests`, so a user's clone needs no test module to run them;
- `benchmarks` imports no `tests` either: what a benchmark shares with the
  tests (benchmarks/fault_table.py: the tiny fixtures) lives in `tools`;
- the library (the shared driver, training/driver.py, included) reads no
  absl flags: it imports no `absl.flags`, names no `FLAGS`, and `grep FLAGS`
  finds nothing in it. Programs build a DriverConfig from their flags.

Each rule is also checked against a planted violation, so a checker that
cannot see an import (a missed node type, a wrong path) fails here.
"""

import ast
import os
import sys

import pytest

from tests import testing

CHECKPOINT_TOOLS = ("official_bert.convert_checkpoint",
                    "official_bert.extend_checkpoint",
                    "export.export_checkpoint")
LIBRARY = ("official_bert.modeling", "official_bert.training",
           "official_bert.data", "official_bert.tasks")
SHARED = ("official_bert.configs", "official_bert.cli",
          "official_bert.atomic_io", "official_bert.disk_full")


def _module_name(path):
  return os.path.relpath(path, testing.ROOT)[:-len(".py")].replace(
      os.sep, ".").removesuffix(".__init__")


def _modules(package):
  """{module name: path} of every .py file under `package` (a dotted name)."""
  base = os.path.join(testing.ROOT, *package.split("."))
  if os.path.isfile(base + ".py"):
    return {package: base + ".py"}
  found = {}
  for dirpath, _, names in os.walk(base):
    for name in names:
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        found[_module_name(path)] = path
  return found


def imports_of_source(source, module, path="<source>"):
  """Every module name `source` imports (absolute, dotted), at any depth.

  `from a.b import c` yields both `a.b` and `a.b.c` (c may be a module);
  relative imports are resolved against `module`.
  """
  found = set()
  for node in ast.walk(ast.parse(source, path)):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parent = module.split(".")[:-node.level]
        base = ".".join(parent + ([base] if base else []))
      found.add(base)
      found.update(f"{base}.{alias.name}" for alias in node.names)
  return found


def _imports(path, module):
  """What `path` (the source of `module`) imports: imports_of_source."""
  with open(path) as f:
    return imports_of_source(f.read(), module, path)


def _within(name, prefixes):
  return any(name == p or name.startswith(p + ".") for p in prefixes)


def _programs():
  """official_bert's programs: top-level modules with a __main__ block."""
  found = []
  for name, path in _modules("official_bert").items():
    with open(path) as f:
      if (name.count(".") == 1 and
          'if __name__ == "__main__":' in f.read()):
        found.append(name)
  return sorted(found)


def library_violations(modules):
  """(module, import) pairs where the library reaches export or a program."""
  forbidden = ("export",) + tuple(_programs())
  return [(m, i) for m, path in modules.items()
          for i in sorted(_imports(path, m))
          if _within(i, forbidden)]


def export_violations(modules):
  """(module, import) pairs where export/ imports official_bert beyond the
  library, configs and cli."""
  return [(m, i) for m, path in modules.items()
          for i in sorted(_imports(path, m))
          if _within(i, ("official_bert",)) and i != "official_bert"
          and not _within(i, LIBRARY + SHARED)]


def task_violations(modules):
  """(module, import) pairs where a module of one task package
  (official_bert.tasks.<a>...) imports another (official_bert.tasks.<b>)."""
  bad = []
  for m, path in modules.items():
    parts = m.split(".")
    if parts[:2] != ["official_bert", "tasks"] or len(parts) < 3:
      continue  # official_bert/tasks/__init__.py, outside the packages
    own = ".".join(parts[:3])
    bad += [(m, i) for i in sorted(_imports(path, m))
            if _within(i, ("official_bert.tasks",))
            and i != "official_bert.tasks" and not _within(i, (own,))]
  return bad


def imports_within(modules, prefixes):
  """(module, import) pairs where a module imports one of `prefixes`."""
  return [(m, i) for m, path in modules.items()
          for i in sorted(_imports(path, m)) if _within(i, prefixes)]


def checkpoint_tool_violations(modules):
  """(module, import) pairs where a module imports official_bert.tasks."""
  return imports_within(modules, ("official_bert.tasks",))


def model_violations(modules):
  """(module, import) pairs where the model imports beyond keras, numpy, the
  standard library, configs and official_bert.modeling."""
  bad = []
  for m, path in modules.items():
    for i in sorted(_imports(path, m)):
      top = i.split(".")[0]
      if top in sys.stdlib_module_names or top in ("keras", "numpy"):
        continue
      if i == "official_bert" or _within(
          i, ("official_bert.modeling", "official_bert.configs",
              "official_bert.atomic_io", "official_bert.disk_full")):
        continue
      bad.append((m, i))
  return bad


def trainer_violations(modules):
  return imports_within(modules, ("official_bert.modeling",))


def importers_of_tests(modules):
  """(module, import) pairs where a module imports `tests`."""
  return imports_within(modules, ("tests",))


def flags_violations(modules):
  """(module, what) pairs where the library reads absl flags: an import of
  absl.flags, a name or attribute FLAGS, or the word in its text."""
  bad = []
  for m, path in modules.items():
    with open(path) as f:
      source = f.read()
    bad += [(m, i) for i in sorted(imports_of_source(source, m, path))
            if _within(i, ("absl.flags",))]
    tree = ast.parse(source, path)
    if any(getattr(node, "id", getattr(node, "attr", None)) == "FLAGS"
           for node in ast.walk(tree)
           if isinstance(node, (ast.Name, ast.Attribute))):
      bad.append((m, "FLAGS"))
    elif "FLAGS" in source:
      bad.append((m, "the word FLAGS"))
  return bad


def _library():
  found = {}
  for package in LIBRARY:
    found.update(_modules(package))
  return found


def _training_loop():
  return {m: p for m, p in _modules("official_bert.training").items()
          if m.endswith((".trainer", ".train_step"))}


def test_the_walk_finds_the_packages_and_programs():
  assert len(_modules("official_bert.modeling")) >= 10
  assert "official_bert.training.trainer" in _library()
  assert set(_training_loop()) == {"official_bert.training.trainer",
                                   "official_bert.training.train_step"}
  assert {"official_bert.run_pretraining", "official_bert.run_classifier",
          "official_bert.quickstart", "official_bert.convert_checkpoint",
          "official_bert.extract_features"} <= set(_programs())
  assert "official_bert.cli" not in _programs()


def test_library_imports_neither_export_nor_programs():
  assert library_violations(_library()) == []


def test_export_imports_no_program():
  assert export_violations(_modules("export")) == []


def test_no_task_package_imports_another():
  modules = _modules("official_bert.tasks")
  assert {m.split(".")[2] for m in modules if m.count(".") >= 2} >= {
      "classification", "squad", "ner", "embedding", "pretraining"}
  assert task_violations(modules) == []


def test_checkpoint_tools_import_no_task():
  modules = {}
  for name in CHECKPOINT_TOOLS:
    modules.update(_modules(name))
  assert set(modules) == set(CHECKPOINT_TOOLS)
  assert checkpoint_tool_violations(modules) == []


def test_model_imports_no_tensorflow():
  assert model_violations(_modules("official_bert.modeling")) == []


def test_the_models_config_imports_no_absl():
  """configs.py (which the model imports) and what it imports obey the
  model's rule too: no absl, no TensorFlow, on any Keras backend."""
  modules = {**_modules("official_bert.configs"),
             **_modules("official_bert.atomic_io"),
             **_modules("official_bert.disk_full")}
  assert model_violations(modules) == []


def test_training_loop_imports_no_model_module():
  assert trainer_violations(_training_loop()) == []


def test_library_reads_no_flags():
  assert "official_bert.training.driver" in _library()
  assert flags_violations(_library()) == []


def test_tools_import_no_tests():
  assert {"tools.pydocs_ner", "tools.squad_task"} <= set(_modules("tools"))
  assert importers_of_tests(_modules("tools")) == []


def test_benchmarks_import_no_tests():
  assert {"benchmarks.fault_table", "benchmarks.serving_benchmark"} <= set(
      _modules("benchmarks"))
  assert importers_of_tests(_modules("benchmarks")) == []


@pytest.mark.parametrize("source, module, expected", [
    ("def f():\n  from export import serving\n", "official_bert.training.x",
     "export.serving"),
    ("import export.saved_model_io as io\n", "official_bert.data.x",
     "export.saved_model_io"),
    ("from .. import modeling\n", "official_bert.training.trainer",
     "official_bert.modeling"),
    ("from ..modeling import gradients\n", "official_bert.training.trainer",
     "official_bert.modeling.gradients"),
])
def test_imports_are_seen_in_functions_aliases_and_relative_form(
    source, module, expected):
  assert expected in imports_of_source(source, module)


def test_each_rule_sees_a_planted_violation(tmp_path):
  def planted(text, module="official_bert.training.planted"):
    path = tmp_path / "planted.py"
    path.write_text(text)
    return {module: str(path)}

  assert library_violations(planted(
      "def f():\n  from export import serving\n"))
  assert library_violations(planted(
      "from official_bert import run_classifier\n"))
  assert export_violations(planted(
      "from official_bert import run_pretraining\n"))
  assert not export_violations(planted(
      "from official_bert.modeling import encoder\n"
      "from official_bert import configs\n"))
  assert task_violations(planted(
      "from official_bert.tasks.squad import squad_data\n",
      "official_bert.tasks.ner.planted"))
  assert task_violations(planted(
      "def f():\n  from ..classification import glue\n",
      "official_bert.tasks.ner.planted"))
  assert task_violations(planted(
      "import official_bert.tasks.embedding.embedding_task\n",
      "official_bert.tasks.ner"))  # a package's __init__.py
  assert not task_violations(planted(
      "from official_bert.tasks.ner import ner_data\nfrom . import ner_data\n"
      "from official_bert import tasks\n"
      "from official_bert.training import classifier_metrics\n",
      "official_bert.tasks.ner.planted"))
  assert checkpoint_tool_violations(planted(
      "def export():\n"
      "  from official_bert.tasks.embedding import embedding_task\n",
      "export.export_checkpoint"))
  assert checkpoint_tool_violations(planted(
      "from official_bert import tasks\n", "official_bert.convert_checkpoint"))
  assert not checkpoint_tool_violations(planted(
      "from official_bert.training import sentence_transformers_folder\n"
      "from official_bert.modeling import pretrainer\n",
      "official_bert.convert_checkpoint"))
  assert model_violations(planted("import tensorflow as tf\n"))
  assert model_violations(planted(
      "def f():\n  from official_bert.training import trainer\n"))
  assert not model_violations(planted(
      "import math\nimport keras\nfrom keras import ops\nimport numpy as np\n"
      "from official_bert.modeling import gradients\n"))
  assert trainer_violations(planted(
      "from official_bert.modeling import gradients\n"))
  assert importers_of_tests(planted("from tests import testing\n"))
  assert importers_of_tests(planted(
      "def make_fixtures():\n  from tests import input_pipeline_test\n",
      "benchmarks.planted"))
  assert not importers_of_tests(planted(
      "from tools import tiny_fixtures\n", "benchmarks.planted"))
  assert flags_violations(planted("from absl import flags\n"))
  assert flags_violations(planted("import absl.flags as f\n"))
  assert flags_violations(planted("def f(x):\n  return x.FLAGS.seed\n"))
  assert flags_violations(planted("def f():\n  return FLAGS.seed\n"))
  assert flags_violations(planted('"""Reads FLAGS."""\n'))
  assert not flags_violations(planted(
      "from absl import logging\nfrom official_bert import cli\n"
      "def f(flag_values):\n  return flag_values.seed\n"))
