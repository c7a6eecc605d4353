"""The Task contract: every member of a task that any code calls.

A task package (official_bert/tasks/<task>/) owns its data, model, losses,
metrics, evaluation and the outputs of its export; the driver, the
finetuner, the programs and the exporters see a task only through the
members below, each with one meaning and one form (a method is a method in
every task; a property may be a class attribute). The contract is
structural (`typing.Protocol`): a task names no base class, and
tests/task_test.py checks each task against it, and checks that no code
reads a member of a task that is not declared here nor asks `getattr` or
`isinstance` of a task.

    Task            every task, pretraining included: its model, losses and
                    training metrics (Driver.build_task), the files written
                    beside flags.json, the first lines of the log.
    FinetuningTask  a Task that training/finetuner.py runs (read_and_run,
                    run_task): reading and
                    encoding its files, what it prepares from the starting
                    weights, its training arrays and their order, what a
                    student fits of a teacher (distillation.py), dev
                    evaluation, what it tunes on dev, prediction files and
                    what its export needs.
    PretrainingTask a Task on streamed TFRecords (run_pretraining): finding
                    and checking its records, its input pipelines and its
                    evaluation over the records.

Shapes: B examples in a batch, N in a split, T positions, C classes.
"""

import dataclasses
import typing


@dataclasses.dataclass(frozen=True)
class ExportSpec:
  """What a program's exporter needs of a fine-tuning task.

  Attributes:
    outputs: None (the exporter's own outputs: NER's, SQuAD's) or
      `outputs(model outputs) -> {name: Tensor}` (TF ops, traced in the
      serving signatures): the export's output names and values.
    int8_outputs: the same for the int8 model (model.tflite), None for the
      model's own outputs (its one array as `logits`).
    text_pair: whether a request holds text pairs.
    windowing: None, or the classification windows (a
      tasks/classification/classifier_windows.py `Windowing`) whose logits
      the export combines per text.
    labels: the label names the exporter writes (NER's tags), () for none.
  """
  outputs: typing.Any = None
  int8_outputs: typing.Any = None
  text_pair: bool = False
  windowing: typing.Any = None
  labels: tuple = ()


@dataclasses.dataclass(frozen=True)
class InBatchLoss:
  """A loss that scores each example against candidates from the whole
  batch (embedding's in-batch negatives), and how the train step
  (training/train_step.py) computes it.

  Attributes:
    own_outputs: the keys of the model's output dict that are each
      example's own (embedding's "anchor"); every other output is a
      candidate for every example of the global batch: under several
      replicas it is gathered from all of them (this replica's rows first)
      before `losses` and `metric_counts` read it.
    mini_batch_size: 0, or M: the loss over the whole batch of a replica,
      its gradient computed M examples at a time with the embeddings'
      gradients cached (GradCache: the memory of M, the gradient of the
      batch).
  """
  own_outputs: tuple = ()
  mini_batch_size: int = 0


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

  def metric_counts(self, labels, outputs):
    """{"X_correct": scalar, "X_total": scalar, ...} ({} for none) from a
    batch's labels and outputs (traced in the train step, keras.ops only):
    float32 sums the trainer adds over replicas and steps and logs as
    X_accuracy."""

  def run_files(self):
    """{file name: text} written beside flags.json in output_dir (e.g.
    label_list.json); {} for none."""

  def log_start(self, description):
    """Prints the task's first lines of the run (its data, a few decoded
    examples); `description` is the driver's set-up in words ("R replicas
    (strategy), precision, P parameters", Driver.describe())."""


@typing.runtime_checkable
class FinetuningTask(Task, typing.Protocol):
  """A Task that training/finetuner.py runs: read, encode, train,
  evaluate on dev, tune on dev, predict, export. `predict` arguments below
  are `predict(inputs, fill=0.0)` -> the model's outputs as numpy float32
  (the same structure as the model's), run with the run's padding;
  positions past an example's batch's cut are `fill`."""

  def read(self):
    """Reads and checks every split the run needs, before TensorFlow starts
    (ValueError, OSError or UnicodeDecodeError: one sentence naming the
    file and line)."""

  def encode(self, tokenizer, max_seq_length):
    """Turns the splits read into model inputs with `tokenizer` (a
    data/tokenization.py FullTokenizer), at most `max_seq_length`
    positions (ValueError: one sentence)."""

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

  @property
  def metric_range(self):
    """The range of the task's metrics (a float: 1.0, or 100.0 for
    percentages such as SQuAD's F1), by which --max_quantization_drop is a
    fraction."""

  def train_data(self):
    """(inputs, labels), numpy: inputs {"input_word_ids", "input_mask",
    "input_type_ids": int32 [N, T]}; labels [N], [N, T] or a dict of [N]
    arrays, as `losses` reads them."""

  def prepare_training(self, predict, model, resumed, epoch):
    """What the task computes from the model training starts from, before
    training (embedding's mined hard negatives, which then make its
    train_data): `predict` as in `evaluate`, `model` the built model with
    its starting weights, `resumed` whether the run resumed from its own
    checkpoint past this point, `epoch` 0 (before training), or, when
    `prepares_every_epoch`, the index of the epoch about to start (its
    weights are the previous epoch's last). Returns {file name: text} to
    write to output_dir, in order ({} for none: most tasks prepare
    nothing). ValueError: one sentence."""

  @property
  def prepares_every_epoch(self):
    """Whether `prepare_training` runs again at the start of every epoch
    after the first (embedding with remine_every_epoch: negatives mined
    anew by the weights trained so far): run_task then trains the epochs
    one by one, reading train_data afresh for each (the learning rate's
    schedule stays the whole run's). False for most tasks."""

  def in_batch_loss(self):
    """None when each example's loss reads its own outputs alone, or an
    InBatchLoss: `losses` scores every example against the whole batch's
    candidates, which the train step gathers across replicas and may
    compute in mini-batches."""

  @property
  def num_distill_texts(self):
    """How many of train_data's rows are --distill_data's unlabelled texts
    (an int: they are its last rows, their labels placeholders that the
    label loss leaves out); 0 for none, and in a task that takes none."""

  def teacher_outputs(self, predict):
    """The teacher's outputs over train_data's rows, in their order (the
    structure `distill_losses` reads as `teacher`), from the teacher's
    `predict` (as in `evaluate`). ValueError: one sentence, for a setting
    the task cannot distil."""

  def distill_losses(self, labels, teacher, outputs, temperature, labelled):
    """{"label_loss": the batch's label loss over the rows whose
    `labelled` (float32 [B]) is 1, "distill_loss": the loss to the
    teacher's outputs `teacher` (a batch of `teacher_outputs`' rows, per
    position ones at the full length) over every row, multiplied by
    `temperature`^2 where it compares distributions softened by it} (float32
    scalars; traced in the train step, keras.ops only; training/
    distillation.py mixes them by --distill_alpha)."""

  def train_order(self, batch_size, seed, num_examples):
    """None (the finetuner shuffles the training rows, seeded), or the
    order in which training reads train_data's rows: int64 row indices, at
    least `num_examples`, cut into batches of `batch_size` (the same for a
    seed, so a resumed run skips to the same place; embedding's batches
    repeat no text). ValueError: one sentence naming the file."""

  def evaluate(self, predict, step):
    """The dev set's eval_results: {key: number}, with global_step = `step`
    (an int); written to eval_results.txt as `key = value` lines. It only
    reports: it changes neither the task nor any file."""

  def tune(self, predict):
    """Chooses on the dev set what the final evaluation and the export use
    (multi-label's per-label thresholds, with tune_thresholds) from the
    final float32 model's `predict`, and returns {file name: text} to write
    to output_dir (thresholds.json); {} for a task that tunes nothing.
    Called once, after training, before the final evaluation."""

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

  def export_spec(self):
    """An ExportSpec: what the program's exporter needs of the task (the
    outputs, pairs or single texts, windows, label names)."""


@typing.runtime_checkable
class PretrainingTask(Task, typing.Protocol):
  """A Task whose data streams from TFRecords (tasks/pretraining/): the
  driver trains on `train_input` and evaluates with `evaluate_records`."""

  def load(self, bert_config, seed):
    """Finds the task's record files and checks them against `bert_config`
    (cli.Error: one sentence naming the flag or file)."""

  def train_input(self, batch_size, seed):
    """The training pipeline: a tf.distribute dataset_fn(input_context)
    of `batch_size` (global) batches of (inputs, labels), repeated."""

  def evaluate_records(self, evaluate, step):
    """(eval_results {key: number} with global_step = `step`, the number of
    batches read) over the task's records: `evaluate(dataset_fn, sums_fn,
    max_steps)` (Trainer.evaluate) sums `sums_fn(labels, outputs)` over at
    most max_steps batches. It only reports."""
