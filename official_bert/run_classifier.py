"""Fine-tunes BERT on a sentence (pair) classification or regression task.

The command and flags of google-research/bert's run_classifier.py, with the
data as files instead of hard-coded GLUE processors, on the pretraining
trainer's loop (`trainer.py`: any tf.distribute strategy, mixed precision,
resume from --output_dir):

    python -m official_bert.run_classifier \\
      --task_data_dir=glue/SST-2 --text_column=sentence --label_column=label \\
      --bert_config_file=bert_base/bert_config.json \\
      --vocab_file=bert_base/vocab.txt --init_checkpoint=bert_base \\
      --do_train --do_eval --do_predict --max_seq_length=128 \\
      --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3 \\
      --output_dir=/tmp/sst2

--task_data_dir holds `train`, `dev` and `test` files (`.tsv`, `.csv` or
`.jsonl`; see classifier_data.py). Labels are the training file's distinct
values, sorted (kept in output_dir/label_list.json); `--task_type=regression`
fits one number instead (STS-B).

Writes to --output_dir: ckpt-<step> (model, optimizer, step; a rerun
resumes), train/ summaries, flags.json, bert_config.json, label_list.json,
eval_results.txt (`key = value` lines: accuracy, F1, Matthews correlation or
Pearson, Spearman; and loss), test_results.tsv (one line per test example:
the class probabilities tab-separated, in label_list order, or the predicted
value). With --export_dir, a TF Serving SavedModel: raw text in,
probabilities out.
"""

import json
import os
import time

from absl import app
from absl import flags

from official_bert import cli
from official_bert.training import preemption

FLAGS = flags.FLAGS


def define_flags():
  """The program's absl flags (defined only when it runs as a program)."""
  # ---- the original's flags, same names and defaults
  flags.DEFINE_string("task_data_dir", None, "Directory with train/dev/test "
                      "files (.tsv, .csv or .jsonl).")
  flags.DEFINE_string("bert_config_file", None, "The bert_config.json of the "
                      "pretrained model.")
  flags.DEFINE_string("vocab_file", None, "The vocab.txt of the pretrained model.")
  flags.DEFINE_string("output_dir", None, "Where checkpoints and results go.")
  flags.DEFINE_string("init_checkpoint", None, "Pretrained (or converted) "
                      "checkpoint, a prefix or a directory; its encoder is "
                      "loaded, the classifier head starts fresh.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased models).")
  flags.DEFINE_integer("max_seq_length", 128, "Tokens per packed example; "
                       "longer ones are truncated.")
  flags.DEFINE_bool("do_train", False, "Whether to fine-tune on train.")
  flags.DEFINE_bool("do_eval", False, "Whether to evaluate on dev.")
  flags.DEFINE_bool("do_predict", False, "Whether to predict on test.")
  flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
  flags.DEFINE_integer("eval_batch_size", 8, "Batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", 8, "Batch size for predict.")
  flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate (AdamW).")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training file.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the steps with "
                     "linear learning-rate warmup.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval.")
  # ---- the task's columns
  flags.DEFINE_string("text_column", "sentence", "Column (or JSON key) of the text.")
  flags.DEFINE_string("text_b_column", None, "Column of the second text of a "
                      "pair (unset: single sentences).")
  flags.DEFINE_string("label_column", "label", "Column of the label.")
  flags.DEFINE_enum("task_type", "classification",
                    ["classification", "regression"], "Regression fits one "
                    "number per example (mean squared error).")
  # ---- shared with run_pretraining.py: distribution, precision, loop
  flags.DEFINE_enum("distribution_strategy", "default",
                    ["default", "one_device", "mirrored", "multi_worker_mirrored",
                     "tpu"], "tf.distribute strategy (see distribution.py).")
  flags.DEFINE_integer("num_gpus", None, "GPUs for mirrored (default all).")
  flags.DEFINE_integer("num_cpu_devices", 1, "Split the CPU into this many "
                       "devices (mirrored replicas without GPUs).")
  flags.DEFINE_string("tpu", None, "TPU name or grpc:// address.")
  flags.DEFINE_enum("mixed_precision", "float32",
                    ["float32", "mixed_bfloat16", "mixed_float16"],
                    "Keras dtype policy.")
  flags.DEFINE_bool("jit_compile", False, "Compile the train step with XLA.")
  flags.DEFINE_enum("kernels", "auto", ["auto", "fast", "keras"],
                    "The model's kernels (official_bert/modeling/kernels.py): "
                    "auto = keras when XLA compiles the model, else fast.")
  flags.DEFINE_integer("steps_per_loop", 100, "Steps per progress line.")
  flags.DEFINE_float("max_grad_norm", 1.0, "Global-norm gradient clipping.")
  flags.DEFINE_float("weight_decay", 0.01, "AdamW weight decay.")
  flags.DEFINE_integer("seed", 12345, "Seed of initialisation, dropout, shuffle.")
  flags.DEFINE_string("export_dir", None, "If set, export the fine-tuned model "
                      "for TF Serving (raw text in, probabilities out) here.")


def _check_flags():
  """The flag errors one sentence can explain, before TensorFlow starts."""
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise app.UsageError("At least one of --do_train, --do_eval or "
                         "--do_predict must be set.")
  for name in ("task_data_dir", "bert_config_file", "vocab_file", "output_dir"):
    if not getattr(FLAGS, name):
      raise app.UsageError(f"--{name} is required.")
  for name in ("task_data_dir", "bert_config_file", "vocab_file"):
    if not os.path.exists(getattr(FLAGS, name)):
      raise app.UsageError(f"--{name} {getattr(FLAGS, name)} does not exist.")
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size",
               "save_checkpoints_steps", "steps_per_loop", "max_seq_length",
               "num_cpu_devices"):
    if getattr(FLAGS, name) <= 0:
      raise app.UsageError(f"--{name} must be positive, got "
                           f"{getattr(FLAGS, name)}.")
  if FLAGS.num_train_epochs <= 0:
    raise app.UsageError("--num_train_epochs must be positive, got "
                         f"{FLAGS.num_train_epochs}.")
  if not 0 <= FLAGS.warmup_proportion < 1:
    raise app.UsageError("--warmup_proportion must be in [0, 1), got "
                         f"{FLAGS.warmup_proportion}.")


def classifier_losses(labels, logits, regression=False):
  """{"loss": mean cross-entropy (or squared error for regression)}."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  if regression:
    loss = ops.mean(ops.square(logits[:, 0] - ops.cast(labels, "float32")))
  else:
    loss = ops.mean(keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True))
  return {"loss": loss}


def classifier_metric_counts(labels, logits):
  """Correct/total sums (the trainer logs them as label_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  predicted = ops.cast(ops.argmax(logits, -1), "int32")
  correct = ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")
  return {"label_correct": ops.sum(correct),
          "label_total": ops.cast(ops.shape(correct)[0], "float32")}


def predict_logits(model, inputs, batch_size):
  """Logits (float32 numpy [N, C]) of `model` on numpy encoder inputs."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dataset = tf.data.Dataset.from_tensor_slices(inputs).batch(batch_size)
  step = tf.function(lambda batch: model(batch, training=False))
  out = [step(batch).numpy() for batch in dataset]
  num_classes = model.num_classes
  return np.concatenate(out) if out else np.zeros((0, num_classes), np.float32)


def eval_results(logits, labels, regression, step):
  """The eval_results.txt values (all prefixed eval_, as the original)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from official_bert.tasks import classifier_metrics  # pylint: disable=g-import-not-at-top
  if regression:
    predictions = logits[:, 0]
    metrics = classifier_metrics.regression_metrics(labels, predictions)
    metrics["loss"] = metrics["mse"]
  else:
    metrics = classifier_metrics.classification_metrics(
        labels, np.argmax(logits, -1), num_classes=logits.shape[-1])
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    metrics["loss"] = float(-np.mean(log_probs[np.arange(len(labels)), labels]))
  result = {f"eval_{k}": v for k, v in metrics.items()}
  result["global_step"] = step
  return result


def _read_split(split, columns, require_label=True):
  from official_bert.tasks import classifier_data  # pylint: disable=g-import-not-at-top
  try:
    path = classifier_data.find_split_file(FLAGS.task_data_dir, split)
    return classifier_data.read_examples(path, columns, require_label)
  except (ValueError, UnicodeDecodeError) as e:
    raise app.UsageError(str(e))


def _label_list(columns, regression):
  """Labels of a previous run (label_list.json) unless training, else the
  train file's."""
  from official_bert.tasks import classifier_data  # pylint: disable=g-import-not-at-top
  saved = os.path.join(FLAGS.output_dir, "label_list.json")
  if regression:
    return None
  if os.path.exists(saved) and not FLAGS.do_train:
    # Eval/predict with a fine-tuned model: its own labels, in its order.
    with open(saved, encoding="utf-8") as f:
      return json.load(f)
  has_train = any(os.path.exists(os.path.join(FLAGS.task_data_dir, "train" + e))
                  for e in classifier_data.EXTENSIONS)
  if has_train:
    return classifier_data.label_list(_read_split("train", columns))
  raise app.UsageError(f"--task_data_dir {FLAGS.task_data_dir} has no train "
                       f"file and {saved} does not exist: the labels are "
                       "unknown; run --do_train first or add the train file.")


def main(argv):
  del argv
  preemption.install()  # before anything slow: see preemption.py
  _check_flags()
  from official_bert.tasks import classifier_data  # pylint: disable=g-import-not-at-top
  regression = FLAGS.task_type == "regression"
  columns = classifier_data.Columns(FLAGS.text_column, FLAGS.text_b_column,
                                    FLAGS.label_column)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  labels = _label_list(columns, regression)
  num_classes = 1 if regression else len(labels)
  if not regression and num_classes < 2:
    raise app.UsageError(f"the train file has only the label {labels}; "
                         "classification needs at least two.")
  # Read and check every split first (no TensorFlow yet): a bad dev or test
  # file fails at once, not after training.
  splits = {}
  for split, wanted in (("train", FLAGS.do_train), ("dev", FLAGS.do_eval),
                        ("test", FLAGS.do_predict)):
    if wanted:
      examples = _read_split(split, columns, require_label=split != "test")
      try:
        ids = (None if split == "test" else
               classifier_data.label_ids(examples, labels, regression))
      except ValueError as e:
        raise app.UsageError(str(e))
      splits[split] = (examples, ids)

  # TensorFlow starts here, after the cheap checks.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import kernels as kernels_lib  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top

  if FLAGS.num_cpu_devices > 1:
    distribution.split_cpu(FLAGS.num_cpu_devices)
  try:
    config = configs.BertConfig.from_json_file(FLAGS.bert_config_file)
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file,
                                           FLAGS.do_lower_case)
  except (ValueError, TypeError, KeyError) as e:
    raise app.UsageError(str(e))
  if tokenizer.vocab_size > config.vocab_size:
    raise app.UsageError(
        f"--vocab_file {FLAGS.vocab_file} has {tokenizer.vocab_size} tokens, "
        f"more than vocab_size={config.vocab_size} of "
        f"{FLAGS.bert_config_file}; pass the model's own vocab.txt.")
  if FLAGS.max_seq_length > config.max_position_embeddings:
    raise app.UsageError(
        f"--max_seq_length={FLAGS.max_seq_length} exceeds max_position_"
        f"embeddings={config.max_position_embeddings} of "
        f"{FLAGS.bert_config_file}; lower --max_seq_length.")
  try:
    splits = {split: (examples, classifier_data.encode(
        examples, tokenizer, FLAGS.max_seq_length), ids)
              for split, (examples, ids) in splits.items()}
  except ValueError as e:
    raise app.UsageError(str(e))

  try:
    strategy = distribution.get_strategy(
        FLAGS.distribution_strategy, FLAGS.num_gpus, FLAGS.tpu)
    distribution.check_jit_compile(strategy, FLAGS.jit_compile)
  except ValueError as e:
    raise app.UsageError(str(e))
  replicas = strategy.num_replicas_in_sync
  if FLAGS.do_train and FLAGS.train_batch_size % replicas:
    raise app.UsageError(
        f"--train_batch_size={FLAGS.train_batch_size} is not divisible by "
        f"{replicas} replicas; use a multiple of {replicas}.")
  num_train = len(splits["train"][0]) if FLAGS.do_train else 0
  num_train_steps = max(1, int(num_train / FLAGS.train_batch_size *
                               FLAGS.num_train_epochs))
  num_warmup_steps = int(num_train_steps * FLAGS.warmup_proportion)

  keras.utils.set_random_seed(FLAGS.seed)
  distribution.set_mixed_precision(FLAGS.mixed_precision)
  # One model, so training, evaluation and prediction run the same kernels.
  kernels = kernels_lib.resolve(
      FLAGS.kernels, FLAGS.jit_compile,
      isinstance(strategy, tf.distribute.TPUStrategy))
  with strategy.scope():
    model_cls = finetuning_models.BertClassifier
    model = model_cls.from_bert_config(config, num_classes, kernels=kernels)
    optimizer = optimization.create_optimizer(
        "adamw", FLAGS.learning_rate, num_train_steps, num_warmup_steps,
        weight_decay=FLAGS.weight_decay, mixed_precision=FLAGS.mixed_precision)
  trainer = trainer_lib.Trainer(
      strategy, model, optimizer,
      lambda y, logits: classifier_losses(y, logits, regression),
      trainer_lib.TrainConfig(
          output_dir=FLAGS.output_dir, num_train_steps=num_train_steps,
          steps_per_loop=FLAGS.steps_per_loop,
          save_checkpoints_steps=FLAGS.save_checkpoints_steps,
          max_grad_norm=FLAGS.max_grad_norm, jit_compile=FLAGS.jit_compile,
          keep_checkpoints=2),
      metric_fn=None if regression else classifier_metric_counts)

  if trainer.is_chief:
    ours = next(module_flags for module_flags in
                FLAGS.flags_by_module_dict().values()
                if any(f.name == "task_data_dir" for f in module_flags))
    resolved = {f.name: f.value for f in ours}
    resolved.update(num_replicas=replicas, num_train_steps=num_train_steps,
                    num_warmup_steps=num_warmup_steps, kernels=kernels)
    cli.atomic_write(os.path.join(FLAGS.output_dir, "flags.json"),
                  json.dumps(resolved, indent=2, sort_keys=True) + "\n")
    config.to_json_file(os.path.join(FLAGS.output_dir, "bert_config.json"))
    if labels is not None:
      cli.atomic_write(os.path.join(FLAGS.output_dir, "label_list.json"),
                    json.dumps(labels) + "\n")
  print(f"{FLAGS.task_type}: labels {labels}, "
        + ", ".join(f"{split} {len(s[0])} examples" for split, s in splits.items())
        + f"; {replicas} replicas ({FLAGS.distribution_strategy}), "
        f"{FLAGS.mixed_precision}, {model.count_params():,} parameters",
        flush=True)
  for split, (examples, inputs, _) in list(splits.items())[:1]:
    for i in range(min(2, len(examples))):  # A few decoded examples.
      n = int(inputs["input_mask"][i].sum())
      print(f"{split} example {examples[i].where}: label "
            f"{examples[i].label!r} tokens "
            + " ".join(tokenizer.convert_ids_to_tokens(
                inputs["input_word_ids"][i][:n])), flush=True)

  def warm_start():
    if not FLAGS.init_checkpoint:
      if FLAGS.do_train:
        print("No --init_checkpoint: fine-tuning from random weights.")
      return
    try:
      prefix = checkpoints.restore_encoder(model.encoder, FLAGS.init_checkpoint)
    except ValueError as e:
      raise app.UsageError(f"--init_checkpoint: {e}")
    print(f"Initialised the encoder from {prefix}", flush=True)

  start = trainer.restore_or_init(init_fn=warm_start)
  step = start
  if not FLAGS.do_train and start == 0:
    print("Warning: no fine-tuned checkpoint in --output_dir; the classifier "
          "head is untrained.", flush=True)
  if FLAGS.do_train:
    _, train_inputs, train_labels = splits["train"]

    def train_fn(input_context):
      batch = input_context.get_per_replica_batch_size(FLAGS.train_batch_size)
      data = tf.data.Dataset.from_tensor_slices((train_inputs, train_labels))
      data = data.shard(input_context.num_input_pipelines,
                        input_context.input_pipeline_id)
      # Seeded and repeated: a resumed run sees what an uninterrupted one would.
      data = data.shuffle(len(train_labels), seed=FLAGS.seed).repeat()
      return data.batch(batch, drop_remainder=True).prefetch(2)

    t0 = time.time()
    result = trainer.train_or_exit(train_fn,
                                   global_batch_size=FLAGS.train_batch_size)
    step = result.step
    if result.preempted:
      return
    print(f"Trained steps {start}..{step} ({num_train_steps} = {num_train} "
          f"examples x {FLAGS.num_train_epochs} epochs / batch "
          f"{FLAGS.train_batch_size}) in {time.time() - t0:.1f} s: "
          + " ".join(f"{k} {v:.4g}" for k, v in result.metrics.items()),
          flush=True)

  summary = []
  if FLAGS.do_eval:
    _, inputs, ids = splits["dev"]
    logits = predict_logits(model, inputs, FLAGS.eval_batch_size)
    result = eval_results(logits, ids, regression, step)
    if trainer.is_chief:
      cli.atomic_write(os.path.join(FLAGS.output_dir, "eval_results.txt"),
                    "".join(f"{k} = {result[k]}\n" for k in sorted(result)))
    print("Eval: " + " ".join(f"{k} {v:.4g}" for k, v in sorted(result.items())),
          flush=True)
    summary.append(f"eval_{'pearson' if regression else 'accuracy'} "
                   f"{result['eval_pearson' if regression else 'eval_accuracy']:.4f}")
  if FLAGS.do_predict:
    examples, inputs, _ = splits["test"]
    logits = predict_logits(model, inputs, FLAGS.predict_batch_size)
    if regression:
      rows = [f"{value:.6g}" for value in logits[:, 0]]
    else:
      probabilities = tf.nn.softmax(logits, axis=-1).numpy()
      rows = ["\t".join(f"{p:.6g}" for p in row) for row in probabilities]
    if trainer.is_chief:
      cli.atomic_write(os.path.join(FLAGS.output_dir, "test_results.tsv"),
                    "".join(row + "\n" for row in rows))
    summary.append(f"{len(rows)} test predictions")
  if FLAGS.export_dir and trainer.is_chief:
    from export import serving  # pylint: disable=g-import-not-at-top
    path = serving.export_saved_model(
        FLAGS.export_dir, model, FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case, seq_length=FLAGS.max_seq_length,
        outputs=(serving.regression_outputs if regression
                 else serving.classifier_outputs),
        text_pair=FLAGS.text_b_column is not None)
    summary.append(f"exported {path}")
  print(f"run_classifier done at step {step}: " + "; ".join(summary)
        + f"; output in {FLAGS.output_dir}", flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
