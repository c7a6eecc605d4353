"""Task distillation: a student fits a fine-tuned teacher's outputs.

A student run is the teacher's command plus `--teacher=DIR` (and usually
`--student_layers`). Before training, the teacher (the task's own model,
built from the teacher's bert_config.json and its checkpoint: its best/ one
when it kept one; or a run's export, through its serving_ids signature)
predicts once over the rows training reads, through the finetuner's
`predict` (each batch padded to its longest example). Its outputs are
cached beside the run:

    output_dir/teacher_outputs.npz   the outputs, one row per training row
    output_dir/teacher_outputs.json  what they were made from (`record`):
                                     the teacher's checkpoint and weights'
                                     digest, the training inputs' digest,
                                     --distill_data's, the .npz's digest,
                                     and the teacher's dev metrics

A rerun (or a resumed run) reuses them when the record matches ("teacher
outputs: reused ..."), else computes them again with a line naming what
changed. Both are written whole (a temporary name, then a rename), the
record last, so a run killed between the two computes them again.

The outputs then travel with the labels: training reads
`{"labels": the task's labels, "teacher": its outputs, "labelled": 1.0 or
0.0}` rows (`with_teacher`), the teacher never runs in a training step,
and the loss (`mixed_losses`) is

    (1 - alpha) * label_loss + alpha * distill_loss

each part from the task's `distill_losses` (training/task.py): the label
loss over the labelled rows only (`labelled` 0: a --distill_data text),
the distillation loss over every row, already multiplied by T^2 where it
compares softened distributions (Hinton et al. 2015; DistilBERT). The
helpers below are those losses' formulas (keras.ops only).
"""

import dataclasses
import json
import os
from typing import Optional

import numpy as np

from official_bert import derived_files

FILE = "teacher_outputs.npz"
RECORD = "teacher_outputs.json"

# A record's entries in words (the line that says why they are computed
# again names them).
MADE_FROM = {
    "teacher_checkpoint": "the teacher's checkpoint",
    "teacher_weights": "the teacher's weights",
    "training_inputs": "the training inputs",
    "distill_data": "--distill_data",
    "outputs": "the cached outputs",
}


@dataclasses.dataclass(frozen=True)
class DistillConfig:
  """A distillation's settings, with the flags' names.

  teacher: the teacher run's output_dir (or, for run_embedding, a
    checkpoint folder --init_checkpoint takes), or its export.
  bert_config_file: the teacher's bert_config.json (None for an export).
  export: the export's version directory (a SavedModel whose serving_ids
    signature gives the teacher's outputs), or None.
  alpha: the distillation loss's weight (the label loss gets 1 - alpha).
  temperature: T, by which both logits are divided before softmax/sigmoid.
  distill_data: the unlabelled texts' file, or None.
  """
  teacher: str
  bert_config_file: Optional[str]
  alpha: float = 0.5
  temperature: float = 2.0
  distill_data: Optional[str] = None
  export: Optional[str] = None


# ------------------------------------------------------ what DIR is ----
def kind(path):
  """"run" (flags.json, bert_config.json and a checkpoint), "export" (a
  SavedModel version, or a base path of numbered ones), "checkpoint" (a
  folder with a checkpoint index or bert_model.ckpt and its
  bert_config.json: a converted model), or None."""
  def has(*names):
    return os.path.exists(os.path.join(path, *names))
  if not os.path.isdir(path):
    return None
  checkpoint = (has("checkpoint") or has("best", "checkpoint")
                or has("bert_model.ckpt.index"))
  if has("flags.json") and has("bert_config.json") and checkpoint:
    return "run"
  if has("saved_model.pb") or any(
      name.isdigit() and has(name, "saved_model.pb")
      for name in os.listdir(path)):
    return "export"
  if checkpoint and has("bert_config.json"):
    return "checkpoint"
  return None


def export_version(path):
  """The SavedModel directory of an export: `path` itself, or its highest
  numbered version."""
  if os.path.exists(os.path.join(path, "saved_model.pb")):
    return path
  versions = [int(name) for name in os.listdir(path) if name.isdigit()
              and os.path.exists(os.path.join(path, name, "saved_model.pb"))]
  return os.path.join(path, str(max(versions)))


def export_outputs(named):
  """The model's outputs from an export's named outputs (numpy): a
  classifier's `logits`, a regression's `predictions` as [B, 1], an
  embedder's `sentence_embedding`; None for an export without them."""
  if "logits" in named:
    return named["logits"]
  if "predictions" in named:
    return named["predictions"][:, None]
  return named.get("sentence_embedding")


def run_flags(path):
  """A run's flags.json as a dict."""
  with open(os.path.join(path, "flags.json"), encoding="utf-8") as f:
    return json.load(f)


def vocab_file(path, which):
  """The teacher's vocabulary: a run's flags.json vocab_file, an export's
  asset, a folder's vocab.txt (None when it has none)."""
  if which == "run":
    return run_flags(path).get("vocab_file")
  if which == "export":  # its one asset, under the vocabulary's own name
    assets = os.path.join(export_version(path), "assets")
    names = os.listdir(assets) if os.path.isdir(assets) else []
    return os.path.join(assets, names[0] if len(names) == 1 else "vocab.txt")
  candidate = os.path.join(path, "vocab.txt")
  return candidate if os.path.exists(candidate) else None


def check_run_files(teacher, files):
  """ValueError (one sentence) when a file of `files` ({name: text}, the
  student's run files: label_list.json, pooling.json) that the teacher's
  folder also holds says something else."""
  for name, text in files.items():
    path = os.path.join(teacher, name)
    if not os.path.exists(path):
      continue
    with open(path, encoding="utf-8") as f:
      theirs = f.read()
    try:
      same = json.loads(theirs) == json.loads(text)
    except ValueError:
      same = theirs == text
    if not same:
      fix = ("pass its --pooling" if name == "pooling.json" else
             f"train it on data with the teacher's {name}")
      raise ValueError(
          f"--teacher {teacher}: its {name} ({theirs.strip()}) differs from "
          f"this run's ({text.strip()}); a student learns the teacher's "
          f"outputs, so {fix}")


# ------------------------------------------------------------- cache ----
def record(checkpoint, weights, inputs, distill_data):
  """What the outputs are made from: the teacher's checkpoint prefix (its
  name in words only: the weights decide), its weights' digest (`weights`:
  arrays, or a digest already made: an export's
  `derived_files.folder_digest`), the
  training inputs' digest and --distill_data's path."""
  return {"teacher_checkpoint": os.path.basename(checkpoint),
          "teacher_weights": (weights if isinstance(weights, str)
                              else derived_files.digest(weights)),
          "training_inputs": derived_files.digest(inputs),
          "distill_data": distill_data or ""}


def _flat(outputs):
  if isinstance(outputs, dict):
    return {f"outputs/{k}": np.asarray(v) for k, v in outputs.items()}
  return {"outputs": np.asarray(outputs)}


def _unflat(arrays):
  if "outputs" in arrays:
    return arrays["outputs"]
  return {k.split("/", 1)[1]: v for k, v in arrays.items()}


def reusable(output_dir, made_from):
  """(outputs, teacher_eval, why): the cached outputs and the teacher's
  dev metrics when output_dir holds outputs made from `made_from`, else
  (None, None, why they are computed again: None when there are none)."""
  content, old, why = derived_files.reusable(
      output_dir, FILE, RECORD, made_from, MADE_FROM, "outputs",
      file_changed="written")
  if content is None:
    return None, None, why
  import io  # pylint: disable=g-import-not-at-top
  with np.load(io.BytesIO(content)) as arrays:
    outputs = _unflat({k: arrays[k] for k in arrays.files})
  return outputs, old.get("teacher_eval"), None


def write(output_dir, outputs, made_from, teacher_eval):
  """teacher_outputs.npz, then teacher_outputs.json (`made_from`, the
  .npz's digest and `teacher_eval`), each whole."""
  import io  # pylint: disable=g-import-not-at-top
  from official_bert import atomic_io  # pylint: disable=g-import-not-at-top
  buffer = io.BytesIO()
  np.savez(buffer, **_flat(outputs))
  content = buffer.getvalue()
  with atomic_io.atomic_open(os.path.join(output_dir, FILE), "wb",
                             "the teacher's outputs") as f:
    f.write(content)
  made = dict(made_from, outputs=derived_files.digest(content),
              teacher_eval=teacher_eval or {})
  atomic_io.atomic_write(os.path.join(output_dir, RECORD),
                         json.dumps(made, indent=2, sort_keys=True) + "\n")


def with_teacher(labels, teacher, num_unlabelled):
  """Training's labels: {"labels", "teacher", "labelled" float32 [N] (0
  for the last `num_unlabelled` rows: --distill_data's texts)}."""
  n = len(next(iter(teacher.values())) if isinstance(teacher, dict)
          else teacher)
  labelled = np.ones(n, np.float32)
  if num_unlabelled:
    labelled[n - num_unlabelled:] = 0.0
  return {"labels": labels, "teacher": teacher, "labelled": labelled}


# ------------------------------------------------------------ losses ----
def mixed_losses(task, alpha, temperature, unlabelled=False):
  """(losses, metric_counts) for the trainer: the task's `distill_losses`
  parts mixed by `alpha`; the task's metric counts of the labels (none
  when some rows are `unlabelled`: their labels are placeholders)."""
  def losses(labels, outputs):
    parts = task.distill_losses(labels["labels"], labels["teacher"], outputs,
                                temperature, labels["labelled"])
    loss = ((1.0 - alpha) * parts["label_loss"]
            + alpha * parts["distill_loss"])
    return dict(parts, loss=loss)

  def metric_counts(labels, outputs):
    if unlabelled:
      return {}
    return task.metric_counts(labels["labels"], outputs)
  return losses, metric_counts


def weighted_mean(values, weights):
  """sum(values * weights) / max(sum(weights), 1): a mean over the rows
  (or positions) whose weight is 1."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  return ops.sum(values * weights) / ops.maximum(ops.sum(weights), 1.0)


def soft_cross_entropy(teacher_logits, logits, temperature):
  """T^2 * KL(softmax(teacher / T) || softmax(student / T)) over the last
  axis, per row (0 where the student matches the teacher)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  t = ops.cast(temperature, "float32")
  teacher_log = ops.log_softmax(ops.cast(teacher_logits, "float32") / t, -1)
  student_log = ops.log_softmax(ops.cast(logits, "float32") / t, -1)
  return t * t * ops.sum(ops.exp(teacher_log) * (teacher_log - student_log),
                         axis=-1)


def sigmoid_cross_entropy(teacher_logits, logits, temperature):
  """T^2 * the binary cross-entropy of sigmoid(student / T) to
  sigmoid(teacher / T), less the teacher's own entropy (the per-label
  KL), averaged over the last axis: per row."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  t = ops.cast(temperature, "float32")
  s = ops.cast(logits, "float32") / t
  q = ops.cast(teacher_logits, "float32") / t
  p = ops.sigmoid(q)
  # log sigmoid(x) = -softplus(-x); KL(p || sigmoid(s)) per label.
  kl = (p * (ops.softplus(-s) - ops.softplus(-q))
        + (1.0 - p) * (ops.softplus(s) - ops.softplus(q)))
  return t * t * ops.mean(kl, axis=-1)


def cut_like(teacher, outputs):
  """`teacher` [B, T, ...] cut to the student's positions [B, L, ...]
  (training pads each batch to its longest example)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  return teacher[:, :ops.shape(outputs)[1]]
