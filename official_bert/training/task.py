"""The Task contract: what the driver needs of a task (tasks/*_task.py).

A task module owns its data, model, losses, metrics and evaluation; the
driver sees a task only through the members below. The contract is
structural (`typing.Protocol`): a task names no base class, and
tests/task_test.py checks each of the four with `isinstance`, which fails
when a task lacks a member.

    Task            every task, pretraining included: its model, losses and
                    training metrics (Driver.build_task), the files written
                    beside flags.json, the first lines of the log.
    FinetuningTask  a Task that finetuner.run_task runs: its training
                    arrays, dev evaluation, prediction files and the input
                    that builds the exported model.

Shapes: B examples in a batch, N in a split, T positions, C classes.
"""

import typing


@typing.runtime_checkable
class Task(typing.Protocol):
  """What the shared driver (training/driver.py) needs of every task."""

  def build_model(self, bert_config, kernels):
    """A new keras.Model with an `encoder` (modeling/encoder.py) for
    `bert_config`, using `kernels` ("fast" or "keras", modeling/kernels.py);
    called in the strategy's scope. It maps the encoder inputs to the
    task's outputs: logits [B, C] or [B, T, C], or a dict of arrays."""

  def losses(self, labels, outputs):
    """{"loss": a float32 scalar, the batch's mean, which training
    minimises; any other entries are logged} from a batch's labels and the
    model's outputs (traced in the train step, keras.ops only)."""

  @property
  def metric_counts(self):
    """None, or `(labels, outputs) -> {"X_correct": scalar, "X_total":
    scalar, ...}`: float32 sums the trainer adds over replicas and steps
    and logs as X_accuracy."""

  def run_files(self):
    """{file name: text} written beside flags.json in output_dir (e.g.
    label_list.json); {} for none."""

  def log_start(self, description):
    """Prints the task's first lines of the run (its data, a few decoded
    examples); `description` is the driver's set-up in words ("R replicas
    (strategy), precision, P parameters", Driver.describe())."""


@typing.runtime_checkable
class FinetuningTask(Task, typing.Protocol):
  """A Task that training/finetuner.py's `run_task` runs: train, evaluate on
  dev, predict, export. `predict` arguments below are
  `predict(inputs, fill=0.0)` -> the model's outputs as numpy float32 (the
  same structure as the model's), run with the run's padding; positions
  past an example's batch's cut are `fill`."""

  @property
  def num_train_examples(self):
    """What one epoch counts (an int: examples, windows or questions), for
    the "Trained steps" line; 0 when the run does not train."""

  @property
  def example_name(self):
    """What num_train_examples counts, in words ("examples", "questions")."""

  @property
  def best_metric(self):
    """The eval_results key (a str, e.g. "eval_accuracy") by which the best
    checkpoint is kept when --best_metric is unset."""

  def train_data(self):
    """(inputs, labels), numpy: inputs {"input_word_ids", "input_mask",
    "input_type_ids": int32 [N, T]}; labels [N], [N, T] or a dict of [N]
    arrays, as `losses` reads them."""

  def evaluate(self, predict, step):
    """The dev set's eval_results: {key: number}, with global_step = `step`
    (an int); written to eval_results.txt as `key = value` lines."""

  def eval_summary(self, result):
    """`result`'s headline for the program's last line (a str, e.g.
    "eval_accuracy 0.8412")."""

  def predict(self, predict, step):
    """(files, said, result): {file name: text} written to output_dir, the
    last line's words about them (a str), and eval_results (a dict) when the
    test file holds answers, else None."""

  def init_head(self, model):
    """Sets the starting weights of `model`'s task head (the model built)
    when a run starts fresh, before its encoder is loaded from
    init_checkpoint; most tasks keep the head's initializers and do
    nothing. Not called on resume: the checkpoint has the head."""

  def example_inputs(self):
    """One example's encoder inputs ({name: int32 numpy [1, T]}): they build
    the model that is exported."""
