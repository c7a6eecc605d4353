"""Pretraining (masked LM + next sentence): run_pretraining's task.

The model (`BertPretrainer`) and its per-batch losses and training metrics
are modeling/pretrainer.py's (the step's math lives there, beside the
model); this module holds the rest of the task: reading the TFRecords
(static or dynamic masks), the evaluation's sums and eval_results.txt's
values, freezing the old embedding rows of an extended vocabulary, the
errors a bad record becomes, and the run itself on the shared driver.
`PretrainingTask` is a training/task.py `Task`: the driver builds its model,
losses and metric counts (`Driver.build_task`), trains (`train_steps`) and
writes eval_results.txt (`write_eval_results`) as it does a fine-tuning
task's:

    config = PretrainingConfig(input_file="/tmp/tf_examples-*.tfrecord",
                               bert_config_file="bert_config.json",
                               do_train=True, do_eval=True)
    run(DriverConfig(output_dir="/tmp/pretraining", num_train_steps=20,
                     num_warmup_steps=10), config)
"""

import contextlib
import dataclasses
import os
import re
from typing import Optional

from official_bert import cli


@dataclasses.dataclass(frozen=True)
class PretrainingConfig:
  """A pretraining run's data and evaluation, with the flags' names.

  input_file: comma-separated globs of the data job's TFRecords.
  bert_config_file: the model's bert_config.json.
  max_seq_length, max_predictions_per_seq: the records' (static masks), or
    the most masks drawn per sequence (masking="dynamic", with
    masked_lm_prob, do_whole_word_mask and vocab_file's ids).
  next_sentence_prediction: False builds no NSP head (RoBERTa).
  pack_sequences: read the records into rows of several sequences
    (training/input_pipeline.py `pack_rows`; masked-LM only, so
    next_sentence_prediction must be False).
  freeze_old_embeddings_steps: with an extend_checkpoint init_checkpoint,
    steps during which only the new words' rows learn.
  eval_batch_size, max_eval_steps: the evaluation on input_file.
  """
  input_file: str
  bert_config_file: str
  do_train: bool = False
  do_eval: bool = False
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  masking: str = "static"
  masked_lm_prob: float = 0.15
  do_whole_word_mask: bool = False
  vocab_file: Optional[str] = None
  next_sentence_prediction: bool = True
  pack_sequences: bool = False
  freeze_old_embeddings_steps: int = 0
  eval_batch_size: int = 8
  max_eval_steps: int = 100


def eval_sums(labels, outputs):
  """Sums for the original's eval metrics (ratios taken over the whole set)."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  weights = ops.cast(labels["masked_lm_weights"], "float32")
  mlm_ce = keras.losses.sparse_categorical_crossentropy(
      labels["masked_lm_ids"], outputs["mlm_logits"], from_logits=True)
  sums = pretrainer.pretraining_metric_counts(labels, outputs)
  sums["masked_lm_loss_sum"] = ops.sum(weights * mlm_ce)
  if "next_sentence_logits" in outputs:  # a model with the NSP head
    nsp_labels = ops.reshape(labels["next_sentence_labels"], (-1,))
    nsp_ce = keras.losses.sparse_categorical_crossentropy(
        nsp_labels, outputs["next_sentence_logits"], from_logits=True)
    sums["next_sentence_loss_sum"] = ops.sum(nsp_ce)
  return sums


def eval_results(sums, step):
  """The original's eval_results.txt values from `eval_sums` sums (the
  masked-LM ones alone for a model without the NSP head)."""
  mlm_total = max(sums["masked_lm_total"], 1e-12)
  result = {
      "global_step": step,
      "masked_lm_accuracy": sums["masked_lm_correct"] / mlm_total,
      "masked_lm_loss": sums["masked_lm_loss_sum"] / mlm_total,
  }
  result["loss"] = result["masked_lm_loss"]
  if "next_sentence_loss_sum" in sums:
    nsp_total = max(sums["next_sentence_total"], 1e-12)
    result["next_sentence_accuracy"] = (sums["next_sentence_correct"]
                                        / nsp_total)
    result["next_sentence_loss"] = sums["next_sentence_loss_sum"] / nsp_total
    result["loss"] += result["next_sentence_loss"]
  return result


def freeze_old_embeddings(model, steps, init_checkpoint):
  """The trainer's gradient transform for freeze_old_embeddings_steps (None
  when 0): the new word ids come from extend_info.json beside
  init_checkpoint (docs/domain-adaptation.md)."""
  if steps <= 0:
    return None
  from official_bert.training import extension  # pylint: disable=g-import-not-at-top
  try:
    new_ids = extension.read_new_word_ids(init_checkpoint,
                                          model.encoder.bert_config.vocab_size)
  except ValueError as e:
    raise cli.Error(f"--freeze_old_embeddings_steps={steps}: {e}") from None
  return extension.freeze_rows(
      [model.encoder.embeddings.word_embeddings.embeddings,
       model.cls_predictions.output_bias], new_ids, steps)


def check_same_config(bert_config, bert_config_file, output_dir):
  """Resuming with another model than the checkpoints' is one sentence."""
  saved_path = os.path.join(output_dir, "bert_config.json")
  if not os.path.exists(saved_path):
    return
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  saved = configs.BertConfig.from_json_file(saved_path).to_dict()
  wanted = bert_config.to_dict()
  if saved != wanted:
    changed = sorted(k for k in set(saved) | set(wanted)
                     if saved.get(k) != wanted.get(k))
    raise cli.Error(
        f"--bert_config_file={bert_config_file} differs from "
        f"{saved_path}, the model of the checkpoints in --output_dir "
        f"({', '.join(changed)}); use a new --output_dir to start fresh, or "
        "the same config to resume.")


def out_of_vocab_sentence(message, config, vocab_size):
  """A token id past the embedding table in a record after the first ones
  that were checked at start-up (the CPU's gather reports it), or None."""
  found = re.search(r"= (\d+) is not in \[0, (\d+)\)", message or "")
  if not found or int(found.group(2)) != vocab_size:
    return None
  return (f"--input_file={config.input_file} holds token id "
          f"{found.group(1)}, but vocab_size is {vocab_size} in "
          f"--bert_config_file={config.bert_config_file}: the records were "
          "written with another vocab.txt; regenerate them with the model's "
          "vocab.txt (training stopped; the last checkpoint in --output_dir "
          "is kept).")


def _check_packed_records(config, path):
  """Packed records (the data job's --pack_sequences) train masked-LM only,
  with their own masks: ValueError naming the flag otherwise."""
  if config.next_sentence_prediction:
    raise ValueError(f"--input_file {path} holds packed rows (several "
                     "sequences a row, written with --pack_sequences), which "
                     "have no next-sentence labels: pass "
                     "--next_sentence_prediction=false.")
  if config.masking == "dynamic":
    raise ValueError(f"--input_file {path} holds packed rows, masked per "
                     "sequence by the data job: drop --masking=dynamic (or "
                     "write the records unpacked and pass --pack_sequences).")


@contextlib.contextmanager
def record_errors(config, vocab_size):
  """A corrupt record, or a token id past the vocabulary, met while reading
  input_file: one sentence (cli.Error) instead of TensorFlow's error."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    yield
  except tf.errors.DataLossError as e:
    kind = "truncated" if "truncated" in e.message else "corrupt"
    raise cli.Error(
        f"--input_file={config.input_file} holds a {kind} TFRecord; "
        "regenerate it with create_pretraining_data (training stopped; "
        "the last checkpoint in --output_dir is kept).") from None
  except tf.errors.InvalidArgumentError as e:
    sentence = out_of_vocab_sentence(e.message, config, vocab_size)
    if sentence is None:
      raise
    raise cli.Error(sentence) from None


class PretrainingTask:
  """run_pretraining's task: `load` the records, then what the driver builds,
  trains on and evaluates (a training/task.py `PretrainingTask`;
  tests/task_test.py checks it).

  Attributes, once read: files (input_file's, resolved), record_predictions
  (masked positions per record, or the most drawn with dynamic masking),
  masking (dynamic masking's options, or None).
  """

  def __init__(self, config):
    self.config = config
    self.files = []
    self.record_predictions = config.max_predictions_per_seq
    self.masking = None
    self.packed_records = False

  def load(self, bert_config, seed):
    """Finds input_file's records and checks them against the model
    (cli.Error)."""
    from official_bert.data import features  # pylint: disable=g-import-not-at-top
    from official_bert.training import dynamic_masking  # pylint: disable=g-import-not-at-top
    from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
    config = self.config
    try:
      files = input_pipeline.resolve_input_files(config.input_file)
      # Dynamic masking draws up to max_predictions_per_seq from records
      # written with any number of predictions.
      record_predictions = config.max_predictions_per_seq
      masking = None
      try:
        packed = features.is_packed(files[0])
      except ValueError:  # unreadable: check_input_files says how
        packed = False
      if packed:  # the data job's --pack_sequences: masked-LM only
        _check_packed_records(config, files[0])
        record_predictions = features.record_predictions(files[0])
      elif config.masking == "dynamic":
        record_predictions = features.record_predictions(files[0])
        masking = dynamic_masking.options_from_vocab(
            config.vocab_file, config.masked_lm_prob,
            config.max_predictions_per_seq, config.do_whole_word_mask, seed)
      input_pipeline.check_input_files(files, config.max_seq_length,
                                       record_predictions,
                                       vocab_size=bert_config.vocab_size)
    except ValueError as e:
      raise cli.Error(str(e)) from None
    if masking and masking.vocab_size > bert_config.vocab_size:
      raise cli.Error(
          f"--vocab_file={config.vocab_file} has {masking.vocab_size} "
          f"tokens, more than vocab_size={bert_config.vocab_size} of "
          f"{config.bert_config_file}; pass the vocab the model was built "
          "for.")
    self.files, self.record_predictions, self.masking = (
        files, record_predictions, masking)
    self.packed_records = packed

  def run_files(self):
    return {}

  def log_start(self, run_description):
    print(f"{len(self.files)} input files, {run_description}", flush=True)
    if self.packed_records:
      print(f"The records hold packed rows ({self.record_predictions} masked "
            "slots; masked-LM only)", flush=True)
    elif self.config.pack_sequences:
      print(f"Packing the records into rows of up to "
            f"{self.config.max_seq_length} positions and "
            f"{self._row_predictions()} masked slots (masked-LM only)",
            flush=True)

  # ------------------------------------------------- model and losses ----
  def build_model(self, bert_config, kernels):
    """`BertPretrainer`, without the NSP head when next_sentence_prediction
    is off."""
    from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
    return pretrainer.BertPretrainer.from_bert_config(
        bert_config, use_next_sentence=self.config.next_sentence_prediction,
        kernels=kernels)

  def losses(self, labels, outputs):
    from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
    return pretrainer.pretraining_losses(labels, outputs)

  def metric_counts(self, labels, outputs):
    from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
    return pretrainer.pretraining_metric_counts(labels, outputs)

  # ---------------------------------------------- input and evaluation ----
  def train_input(self, batch_size, seed):
    """input_file's records, shuffled and repeated, in `batch_size`
    batches (a micro-batch with gradient accumulation), with dynamic masks
    when masking is "dynamic"."""
    from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
    return input_pipeline.pretraining_dataset_fn(
        self.files, batch_size, self.config.max_seq_length,
        self.record_predictions, is_training=True, seed=seed,
        masking=self.masking, row_predictions=self._row_predictions(),
        packed_records=self.packed_records)

  def _row_predictions(self):
    """The masked slots of a row packed while reading (None: one record
    per row, or records the data job packed)."""
    from official_bert.data import row_packing  # pylint: disable=g-import-not-at-top
    if not self.config.pack_sequences or self.packed_records:
      return None
    return row_packing.default_row_predictions(
        self.record_predictions, row_packing.MAX_SEQUENCES_PER_ROW)

  def evaluate_records(self, evaluate, step):
    """The original's evaluation over input_file's records (their own
    masks), at most max_eval_steps batches of eval_batch_size:
    (eval_results with global_step = `step`, the batches read)."""
    from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
    config = self.config
    eval_fn = input_pipeline.pretraining_dataset_fn(
        self.files, config.eval_batch_size, config.max_seq_length,
        self.record_predictions, is_training=False,
        row_predictions=self._row_predictions(),
        packed_records=self.packed_records)
    sums = evaluate(eval_fn, eval_sums, config.max_eval_steps)
    return eval_results(sums, step), sums["eval_steps"]


def run(run_config, config):
  """Pretrains (do_train) and evaluates (do_eval) on the shared driver
  (training/driver.py) with `run_config`, a DriverConfig."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import cpu_allocator  # pylint: disable=g-import-not-at-top
  from official_bert.training import driver as driver_lib  # pylint: disable=g-import-not-at-top
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  try:
    bert_config = configs.BertConfig.from_json_file(config.bert_config_file,
                                                    "--bert_config_file")
  except (ValueError, TypeError, KeyError) as e:
    raise cli.Error(str(e)) from None
  if config.max_seq_length > bert_config.max_position_embeddings:
    raise cli.Error(
        f"--max_seq_length={config.max_seq_length} exceeds max_position_"
        f"embeddings={bert_config.max_position_embeddings} of "
        f"{config.bert_config_file}; lower --max_seq_length.")
  # The strategy first: multi-worker collectives must be configured before
  # TensorFlow runs any op (reading the files does).
  driver = driver_lib.Driver(run_config)
  task = PretrainingTask(config)
  task.load(bert_config, run_config.seed)
  driver.check_init_checkpoint()
  driver.build_task(
      task, bert_config,
      transform_gradients=lambda model: freeze_old_embeddings(
          model, config.freeze_old_embeddings_steps,
          run_config.init_checkpoint))

  resuming = driver.resuming()
  if resuming:
    check_same_config(bert_config, config.bert_config_file,
                      run_config.output_dir)
  task.log_start(f"{driver.describe()}, {driver.kernels} kernels, "
                 f"{'BFC' if cpu_allocator.in_use() else 'default'} CPU "
                 "allocator")
  driver.restore_or_init()
  # Written once the checkpoints fit the config: a bad init_checkpoint
  # leaves nothing in a new output_dir.
  driver.write_run_files(bert_config, {"kernels": driver.kernels},
                         task.run_files())
  if not resuming and not run_config.init_checkpoint:
    print("Starting from scratch (no checkpoint in --output_dir), step 0",
          flush=True)
  if config.do_train:
    train_fn = task.train_input(
        run_config.train_batch_size // run_config.gradient_accumulation_steps,
        run_config.seed)
    with record_errors(config, bert_config.vocab_size):
      if driver.train_steps(train_fn) is None:
        return  # SIGTERM: the checkpoint is saved, a rerun resumes
  if config.do_eval:
    evaluate(driver, task, config, bert_config)


def evaluate(driver, task, config, bert_config):
  """The task's evaluation (`evaluate_records`) at the driver's step:
  eval_results.txt and eval/ summaries, on the chief."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  step = driver.step
  with record_errors(config, bert_config.vocab_size):
    result, batches = task.evaluate_records(driver.trainer.evaluate, step)
  driver.write_eval_results(result)
  if driver.is_chief:
    writer = tf.summary.create_file_writer(
        os.path.join(driver.config.output_dir, "eval"))
    with writer.as_default(step=step):
      for key, value in result.items():
        tf.summary.scalar(key, value)
    writer.flush()
  print(f"Eval at step {step} on {batches} batches: "
        + " ".join(f"{k} {v:.4g}" for k, v in sorted(result.items())),
        flush=True)
