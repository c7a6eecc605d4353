"""Reads any official_bert checkpoint as google-research/bert-named arrays,
and says which head it holds.

What `export_checkpoint` writes depends on the checkpoint's head (`task`):

  pretraining  model/cls_predictions and model/cls_seq_relationship (or the
               TF1 cls/predictions/..., cls/seq_relationship/...)
  masked_lm    model/cls_predictions alone
  encoder      model/encoder alone (a converted encoder, TF1 bert/...)
  classifier   model/classifier of run_classifier (TF1: output_weights
               [C, H], output_bias [C], the original's run_classifier.py)
  regression   the same with one output (STS-B, --task_type=regression)
  squad        model/classifier of run_squad (TF1: cls/squad/output_weights
               [2, H], cls/squad/output_bias, the original's run_squad.py)
  ner          model/classifier of run_ner (no original program; kept here
               under run_classifier's names, never written as TF1)
  reranker     model/classifier of run_reranker, one output (a cross-
               encoder's relevance logit; TF1: run_classifier's names)

A fine-tuned checkpoint does not say which program wrote it (the three
heads are all `model/classifier`), so the run's `flags.json` beside it does
(`task_type` is run_classifier's, `doc_stride` without it run_squad's,
`rerank_top_k` run_reranker's; a multi-label classifier is refused; a
checkpoint in a run's best/ folder is read with the run's files); `task=` says
it when the checkpoint was moved without its run files. Labels come from the
run's `label_list.json`. Every array is laid out as the original stores it
(`checkpoint_names.original_names`: the NSP and head matrices [C, H]).
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from export import saved_model_io
from official_bert import configs
from official_bert.modeling import finetuning_models
from official_bert.modeling import pretrainer as pretrainer_lib
from official_bert.training import checkpoint_names
from official_bert.training import checkpoints

TASKS = ("pretraining", "masked_lm", "encoder", "classifier", "regression",
         "squad", "ner", "reranker")
FINE_TUNED = ("classifier", "regression", "squad", "ner", "reranker")
# The original's names of the fine-tuning heads (run_classifier.py's
# create_model, run_squad.py's create_model); NER has no original program
# and keeps run_classifier's pair.
HEAD_NAMES = {"classifier": ("output_weights", "output_bias"),
              "regression": ("output_weights", "output_bias"),
              "ner": ("output_weights", "output_bias"),
              "reranker": ("output_weights", "output_bias"),
              "squad": ("cls/squad/output_weights", "cls/squad/output_bias")}
_CLASSIFIER = "model/classifier/"


@dataclasses.dataclass
class ExportedModel:
  """A checkpoint's weights by original name, its config, head and labels."""
  config: configs.BertConfig
  task: str
  arrays: dict             # original name -> float32 array (original layout)
  prefix: str              # the checkpoint read
  labels: list | None = None


def read(bert_config_file, init_checkpoint, task=None):
  """Reads `init_checkpoint` (prefix or directory) into an `ExportedModel`.

  Args:
    bert_config_file: the model's bert_config.json.
    init_checkpoint: an official_bert checkpoint (pretraining, converted,
      fine-tuned) or google-research/bert's TF1 checkpoint.
    task: one of `FINE_TUNED` to override the detection (a fine-tuned
      checkpoint without its run's flags.json); None detects.

  Raises:
    ValueError: one sentence naming the file and the fix.
  """
  config = configs.BertConfig.from_json_file(bert_config_file)
  prefix = checkpoints.resolve(init_checkpoint)
  try:
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  except tf.errors.OpError as e:
    raise ValueError(f"cannot read checkpoint {prefix}: "
                     f"{str(e.message).strip().splitlines()[0][:300]}; pass "
                     "a complete checkpoint (--init_checkpoint)") from None
  saved_model_io.check_layer_count(list(shapes), config, prefix,
                                   bert_config_file)
  with saved_model_io.quiet_restore(prefix):
    if "bert/embeddings/word_embeddings" in shapes:
      exported = _read_original(config, prefix, shapes)
    else:
      exported = _read_ours(config, prefix, shapes, task)
  if task is not None and exported.task != task:
    if not (task in FINE_TUNED and exported.task in FINE_TUNED):
      raise ValueError(f"--task={task} does not fit checkpoint {prefix}: it "
                       f"holds a {exported.task} model")
  return exported


def _arrays_of(model):
  table = checkpoint_names.original_names(model)
  return {name: (variable.numpy().T if transpose else variable.numpy())
          for name, (variable, transpose) in table.items()}


def _read_original(config, prefix, shapes):
  """google-research/bert's TF1 names: pretraining, encoder or a task head."""
  has_mlm = "cls/predictions/output_bias" in shapes
  has_nsp = "cls/seq_relationship/output_bias" in shapes
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=has_nsp, kernels="keras")
  target = model if has_mlm else model.encoder
  arrays, _ = checkpoints.read_original(prefix)
  try:
    checkpoint_names.assign_original(target, arrays, f"checkpoint {prefix}")
  except ValueError as e:
    raise ValueError(f"{e} (check --bert_config_file)") from None
  out = _arrays_of(target)
  task = ("pretraining" if has_nsp else "masked_lm") if has_mlm else "encoder"
  for head in ("squad", "classifier"):
    weights, bias = HEAD_NAMES[head]
    if not has_mlm and weights in shapes:
      task = head
      out[weights] = arrays[weights]
      out[bias] = arrays[bias]
      if head == "classifier" and arrays[weights].shape[0] == 1:
        task = "regression"
      break
  return ExportedModel(config, task, out, prefix)


def _read_ours(config, prefix, shapes, task):
  names = list(shapes)
  if any(n.startswith("model/cls_predictions/") for n in names):
    has_nsp = any(n.startswith("model/cls_seq_relationship/") for n in names)
    model = pretrainer_lib.BertPretrainer.from_bert_config(
        config, use_next_sentence=has_nsp, kernels="keras")
    checkpoints.restore_model(model, prefix)
    return ExportedModel(config, "pretraining" if has_nsp else "masked_lm",
                         _arrays_of(model), prefix)
  kernel = [n for n in names if n.startswith(_CLASSIFIER) and "kernel" in n]
  if not kernel:
    encoder = pretrainer_lib.BertPretrainer.from_bert_config(
        config, use_next_sentence=False, kernels="keras").encoder  # built
    checkpoints.restore_encoder(encoder, prefix)
    return ExportedModel(config, "encoder", _arrays_of(encoder), prefix)
  num_classes = shapes[kernel[0]][-1]
  run_dir = os.path.dirname(prefix)
  if (os.path.basename(run_dir) == "best"
      and not os.path.exists(os.path.join(run_dir, "flags.json"))):
    run_dir = os.path.dirname(run_dir)  # the best checkpoint of that run
  task = task or _fine_tuning_task(run_dir, prefix)
  if task in ("classifier", "regression"):
    task = "regression" if num_classes == 1 else "classifier"
  model_class = {"squad": finetuning_models.BertSpanLabeler,
                 "ner": finetuning_models.BertTokenClassifier}.get(
                     task, finetuning_models.BertClassifier)
  model = model_class.from_bert_config(config, num_classes=num_classes)
  checkpoints.restore_model(model, prefix)
  arrays = _arrays_of(model.encoder)
  weights, bias = HEAD_NAMES[task]
  arrays[weights] = model.classifier.kernel.numpy().T     # [H, C] -> [C, H]
  arrays[bias] = model.classifier.bias.numpy()
  labels = None
  if task in ("classifier", "ner"):
    labels = _labels(run_dir, num_classes)
  return ExportedModel(config, task, arrays, prefix, labels)


def _fine_tuning_task(run_dir, prefix):
  """Which program wrote the fine-tuned checkpoint, from its flags.json."""
  path = os.path.join(run_dir, "flags.json")
  try:
    with open(path, encoding="utf-8") as f:
      run_flags = json.load(f)
  except (OSError, json.JSONDecodeError):
    run_flags = None
  if isinstance(run_flags, dict):
    # run_classifier has doc_stride too (its windows): task_type first.
    if run_flags.get("task_type") == "multi_label":
      raise ValueError(f"checkpoint {prefix} is a multi-label classifier "
                       f"({path}: task_type multi_label), which this "
                       "exporter does not write (its classifiers are single-"
                       "label); export it with run_classifier --export_dir")
    if "rerank_top_k" in run_flags:
      return "reranker"
    if "task_type" in run_flags:
      return "classifier"
    if "doc_stride" in run_flags:
      return "squad"
    if "task_data_dir" in run_flags:
      return "ner"
  raise ValueError(f"checkpoint {prefix} is a fine-tuned model but {path} "
                   "does not say which program wrote it; pass --task="
                   "classifier, regression, squad, ner or reranker")


def _labels(run_dir, num_classes):
  """The run's label_list.json, or None (HF's LABEL_<i> names then)."""
  path = os.path.join(run_dir, "label_list.json")
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      labels = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read {path}: {e}; it should be the run's JSON "
                     "list of labels") from None
  if not isinstance(labels, list) or len(labels) != num_classes:
    raise ValueError(f"{path} lists {labels!r} but the checkpoint's head has "
                     f"{num_classes} outputs; pass the checkpoint's own run "
                     "directory")
  return [str(label) for label in labels]


def float32(arrays):
  return {name: np.ascontiguousarray(value, np.float32)
          for name, value in arrays.items()}
