"""training/task.py: the Task contract, on the tasks themselves (no data, no
TensorFlow), and on the code that calls them.

Each task satisfies its Protocol (the fine-tuning tasks FinetuningTask,
pretraining PretrainingTask) with the contract's arity; a task with one
member taken away does not (so `isinstance` sees a removed member, for every
member of every task); the driver, the finetuner, the fine-tuning flow and
every program ask of a task exactly the contract's members (read from their
source with `ast`), so the Protocol cannot drift from what the code calls;
and no code asks `getattr` or `isinstance` of a task.
"""

import ast
import inspect
import os

import pytest

from official_bert import finetuning_flags
from official_bert.tasks.classification import classification_task
from official_bert.tasks.classification import multi_label_task
from official_bert.tasks.embedding import embedding_task
from official_bert.tasks.ner import ner_task
from official_bert.tasks.pretraining import pretraining_task
from official_bert.tasks.reranking import reranking_task
from official_bert.tasks.squad import squad_task
from official_bert.training import distillation
from official_bert.training import driver
from official_bert.training import finetuner
from official_bert.training import task as task_lib
from tests import testing

TASK = {"build_model", "losses", "metric_counts", "run_files", "log_start"}
FINETUNING = TASK | {"read", "encode", "num_train_examples", "example_name",
                     "best_metric", "metric_range", "train_data",
                     "prepare_training", "prepares_every_epoch",
                     "train_order", "in_batch_loss", "evaluate",
                     "tune", "eval_summary", "predict", "example_inputs",
                     "init_head", "export_spec", "num_distill_texts",
                     "teacher_outputs", "distill_losses"}
PRETRAINING = TASK | {"load", "train_input", "evaluate_records"}
# Every program that builds a task: it may ask of it only the contract.
PROGRAMS = ("official_bert/run_classifier.py", "official_bert/run_ner.py",
            "official_bert/run_squad.py", "official_bert/run_embedding.py",
            "official_bert/run_reranker.py", "official_bert/run_pretraining.py")


def _tasks():
  """(task, its protocol) for each task, unread."""
  return [
      (classification_task.ClassificationTask(
          classification_task.ClassificationConfig(data_dir="d",
                                                   output_dir="o")),
       task_lib.FinetuningTask),
      (multi_label_task.MultiLabelTask(
          classification_task.ClassificationConfig(
              data_dir="d", output_dir="o", task_type="multi_label")),
       task_lib.FinetuningTask),
      (ner_task.NerTask(ner_task.NerConfig(data_dir="d", output_dir="o")),
       task_lib.FinetuningTask),
      (embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
          data_dir="d", output_dir="o")), task_lib.FinetuningTask),
      (squad_task.SquadTask(squad_task.SquadConfig()),
       task_lib.FinetuningTask),
      (reranking_task.RerankingTask(reranking_task.RerankingConfig(
          data_dir="d", output_dir="o")), task_lib.FinetuningTask),
      (pretraining_task.PretrainingTask(pretraining_task.PretrainingConfig(
          input_file="in", bert_config_file="bert_config.json")),
       task_lib.PretrainingTask),
  ]


EACH_TASK = pytest.mark.parametrize(
    "task, protocol", [pytest.param(task, protocol, id=type(task).__name__)
                       for task, protocol in _tasks()])


def members(protocol):
  """{name: function or property} of `protocol` and its contract bases."""
  found = {}
  for cls in reversed(protocol.__mro__):
    if cls.__module__ == task_lib.__name__:
      found.update({name: value for name, value in vars(cls).items()
                    if not name.startswith("_")})
  return found


def contract_problems(task, protocol):
  """What `task` lacks of `protocol`, its methods whose number of arguments
  is not the contract's, and contract methods it has as something else."""
  problems = []
  for name, member in sorted(members(protocol).items()):
    if getattr(task, name, None) is None:
      problems.append(f"no {name}")
    elif not isinstance(member, property):
      found = getattr(task, name)
      if not inspect.ismethod(found):
        problems.append(f"{name} is not a method")
        continue
      wanted = len(inspect.signature(member).parameters) - 1  # self
      got = len(inspect.signature(found).parameters)
      if got != wanted:
        problems.append(f"{name} takes {got} arguments, not {wanted}")
  return problems


def _missing(self):
  raise AttributeError("deleted")


def without(cls, name, protocol):
  """`cls` with the member `name` gone (as an edit of the task deleting it
  would): a subclass whose `name` raises AttributeError, so hasattr sees no
  such member, or, for a `protocol` of methods only (whose isinstance reads
  the classes, not the instance), is None, which it takes for a member
  the class does not have."""
  has_properties = any(isinstance(m, property)
                       for m in members(protocol).values())
  return type(cls.__name__, (cls,), {
      name: property(_missing) if has_properties else None})


def task_attributes(source, path="<source>"):
  """The attributes read from a name `task` anywhere in `source`."""
  return {node.attr for node in ast.walk(ast.parse(source, path))
          if isinstance(node, ast.Attribute)
          and isinstance(node.value, ast.Name) and node.value.id == "task"}


def asks_of_a_task(source, path="<source>"):
  """`getattr(task, ...)`, `hasattr(task, ...)` and `isinstance(task, ...)`
  calls in `source`: what a declared member should answer instead."""
  found = []
  for node in ast.walk(ast.parse(source, path)):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr", "isinstance")
        and node.args and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "task"):
      found.append(f"{path}:{node.lineno} {node.func.id}")
  return found


def _source(path):
  with open(os.path.join(testing.ROOT, path), encoding="utf-8") as f:
    return f.read()


def _module_source(module):
  return inspect.getsource(module)


def _callers():
  """Every .py file of the programs, the library and the exporters outside
  the task packages: the code that calls a task (inside its package a
  `task` may be something else: glue.py's GLUE layouts)."""
  found = []
  for package in ("official_bert", "export", "tools", "benchmarks"):
    for dirpath, _, names in os.walk(os.path.join(testing.ROOT, package)):
      found += [os.path.relpath(os.path.join(dirpath, n), testing.ROOT)
                for n in names if n.endswith(".py")]
  return sorted(p for p in found
                if not p.startswith(os.path.join("official_bert", "tasks")))


def test_the_protocols_members_are_the_contract():
  assert set(members(task_lib.Task)) == TASK
  assert set(members(task_lib.FinetuningTask)) == FINETUNING
  assert set(members(task_lib.PretrainingTask)) == PRETRAINING


@EACH_TASK
def test_each_task_satisfies_the_contract(task, protocol):
  assert contract_problems(task, protocol) == []
  assert isinstance(task, protocol)
  assert isinstance(task, task_lib.Task)


@EACH_TASK
def test_a_task_without_any_one_member_fails_the_contract(task, protocol):
  for name in sorted(members(protocol)):
    partial = without(type(task), name, protocol)(task.config)
    assert contract_problems(partial, protocol) == [f"no {name}"]
    assert not isinstance(partial, protocol), name


def test_a_changed_arity_or_form_is_seen():
  task, _ = _tasks()[0]
  cls = type(task)
  changed = type(cls.__name__, (cls,), {"evaluate": lambda self, predict: {}})
  assert contract_problems(changed(task.config), task_lib.FinetuningTask) == [
      "evaluate takes 1 arguments, not 2"]
  # metric_counts as a property returning a function is not the method.
  as_property = type(cls.__name__, (cls,), {
      "metric_counts": property(lambda self: lambda labels, outputs: {})})
  assert contract_problems(as_property(task.config),
                           task_lib.FinetuningTask) == [
                               "metric_counts is not a method"]


def test_the_multi_label_task_keeps_its_own_best_metric():
  task = _tasks()[1][0]
  assert task.best_metric == "eval_micro_f1"


def test_the_driver_and_the_finetuning_flow_ask_only_the_contract():
  """Driver (build_task) reads a Task's members; the Finetuner, run_task
  and the fine-tuning flow (finetuning_flags.run) a FinetuningTask's;
  together all of the contract but the export's, which the programs ask."""
  assert task_attributes(_module_source(driver)) == {
      "build_model", "losses", "metric_counts"}
  finetuning = (task_attributes(_module_source(driver))
                | task_attributes(_module_source(finetuner))
                | task_attributes(_module_source(finetuning_flags))
                | task_attributes(_module_source(distillation)))
  assert finetuning <= FINETUNING
  assert FINETUNING - finetuning <= {"export_spec"}


@pytest.mark.parametrize("path", PROGRAMS)
def test_each_program_asks_only_the_contract(path):
  asked = task_attributes(_source(path), path)
  contract = PRETRAINING if "pretraining" in path else FINETUNING
  assert asked <= contract, f"{path} reads {sorted(asked - contract)}"


def test_pretraining_runs_on_the_contract():
  """pretraining_task.run and evaluate (its flow on the driver) read of
  the task only PretrainingTask's members."""
  asked = task_attributes(_module_source(pretraining_task.run)) | (
      task_attributes(_module_source(pretraining_task.evaluate)))
  assert asked <= PRETRAINING, sorted(asked - PRETRAINING)
  assert {"load", "train_input", "evaluate_records"} <= asked


def test_no_code_asks_getattr_or_isinstance_of_a_task():
  found = []
  callers = _callers()
  assert "official_bert/training/finetuner.py" in callers
  for path in callers:
    found += asks_of_a_task(_source(path), path)
  assert found == []


def test_the_scans_see_a_planted_read():
  assert task_attributes("def f(task):\n  return task.regression\n") == {
      "regression"}
  assert asks_of_a_task(
      "def f(task):\n  return getattr(task, 'metric_range', 1.0)\n") == [
          "<source>:2 getattr"]
  assert asks_of_a_task("if isinstance(task, X):\n  pass\n") == [
      "<source>:1 isinstance"]
  assert asks_of_a_task("getattr(other, 'x')\n") == []
