"""training/task.py: the Task contract, on the tasks themselves (no data, no
TensorFlow).

Each task satisfies its Protocol (the three fine-tuning tasks
FinetuningTask, pretraining Task) with the contract's arity; a task with one
member taken away does not (so `isinstance` sees a removed member, for every
member of every task); and the driver asks of a task exactly the contract's
members (read from its source with `ast`), so the Protocol cannot drift from
what the driver calls.
"""

import ast
import inspect

import pytest

from official_bert.tasks.classification import classification_task
from official_bert.tasks.embedding import embedding_task
from official_bert.tasks.classification import multi_label_task
from official_bert.tasks.ner import ner_task
from official_bert.tasks.pretraining import pretraining_task
from official_bert.tasks.squad import squad_task
from official_bert.training import driver
from official_bert.training import finetuner
from official_bert.training import task as task_lib

TASK = {"build_model", "losses", "metric_counts", "run_files", "log_start"}
FINETUNING = TASK | {"num_train_examples", "example_name", "best_metric",
                     "train_data", "evaluate", "eval_summary", "predict",
                     "example_inputs", "init_head"}


def _tasks():
  """(task, its protocol) for each of the four tasks, unread."""
  return [
      (classification_task.ClassificationTask(
          classification_task.ClassificationConfig(data_dir="d",
                                                   output_dir="o")),
       task_lib.FinetuningTask),
      (ner_task.NerTask(ner_task.NerConfig(data_dir="d", output_dir="o")),
       task_lib.FinetuningTask),
      (embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
          data_dir="d", output_dir="o")), task_lib.FinetuningTask),
      (squad_task.SquadTask(
          squad_task.SquadConfig()), task_lib.FinetuningTask),
      (pretraining_task.PretrainingTask(pretraining_task.PretrainingConfig(
          input_file="in", bert_config_file="bert_config.json")),
       task_lib.Task),
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
  """What `task` lacks of `protocol`, and its methods whose number of
  arguments is not the contract's."""
  problems = []
  for name, member in sorted(members(protocol).items()):
    if not hasattr(task, name):
      problems.append(f"no {name}")
    elif not isinstance(member, property):
      wanted = len(inspect.signature(member).parameters) - 1  # self
      got = len(inspect.signature(getattr(task, name)).parameters)
      if got != wanted:
        problems.append(f"{name} takes {got} arguments, not {wanted}")
  return problems


def without(cls, name):
  """`cls` with the member `name` deleted (as an edit of the task would)."""
  return type(cls.__name__, (), {
      k: v for k, v in vars(cls).items()
      if k not in (name, "__dict__", "__weakref__")})


def _task_attributes(module):
  """The attributes read from a name `task` anywhere in `module`'s source."""
  tree = ast.parse(inspect.getsource(module))
  return {node.attr for node in ast.walk(tree)
          if isinstance(node, ast.Attribute)
          and isinstance(node.value, ast.Name) and node.value.id == "task"}


def test_the_protocols_members_are_the_contract():
  assert set(members(task_lib.Task)) == TASK
  assert set(members(task_lib.FinetuningTask)) == FINETUNING


@EACH_TASK
def test_each_task_satisfies_the_contract(task, protocol):
  assert contract_problems(task, protocol) == []
  assert isinstance(task, protocol)
  assert isinstance(task, task_lib.Task)


@EACH_TASK
def test_a_task_without_any_one_member_fails_the_contract(task, protocol):
  for name in sorted(members(protocol)):
    partial = without(type(task), name)(task.config)
    assert contract_problems(partial, protocol) == [f"no {name}"]
    assert not isinstance(partial, protocol), name


def test_the_multi_label_task_satisfies_the_contract():
  # A ClassificationTask subclass: what it overrides keeps the arity.
  task = multi_label_task.MultiLabelTask(
      classification_task.ClassificationConfig(
          data_dir="d", output_dir="o", task_type="multi_label"))
  assert contract_problems(task, task_lib.FinetuningTask) == []
  assert isinstance(task, task_lib.FinetuningTask)
  assert task.best_metric == "eval_micro_f1"


def test_a_changed_arity_is_seen():
  task, _ = _tasks()[0]
  cls = type(task)
  changed = type(cls.__name__, (cls,), {"evaluate": lambda self, predict: {}})
  assert contract_problems(changed(task.config), task_lib.FinetuningTask) == [
      "evaluate takes 1 arguments, not 2"]


def test_the_driver_asks_of_a_task_only_the_contract():
  """Driver (build_task) reads a Task's members, run_task and Finetuner a
  FinetuningTask's: together all of the contract, and nothing else."""
  assert _task_attributes(driver) == {"build_model", "losses",
                                      "metric_counts"}
  assert _task_attributes(driver) | _task_attributes(finetuner) == FINETUNING
