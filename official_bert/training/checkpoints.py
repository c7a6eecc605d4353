"""The project's checkpoint format: one object graph for every tool.

Every checkpoint official_bert writes (pretraining, conversion from Google's
or Hugging Face's weights, fine-tuning) is a `tf.train.Checkpoint` whose root
has a `model` edge; pretraining and converted checkpoints hold a
`BertPretrainer` there (`model/encoder/...`, `model/cls_predictions/...`).
The trainer's checkpoints (`TrainingCheckpoints`, below) add `optimizer`,
`step` and `rng`. So any tool can read the encoder out of any of them:

    checkpoints.restore_encoder(encoder, "/path/to/output_dir")  # latest
    checkpoints.restore_encoder(encoder, "/path/to/ckpt-1000")   # a prefix

`restore_encoder(student, path, layers=(0, 2, 4))` fills a smaller encoder
with layers 0, 2 and 4 of the checkpoint's (and its embeddings and pooler):
a student of `--student_layers`, named by checkpoint_names.py.

The restore functions also read google-research/bert's own TF1 checkpoints
(`bert_model.ckpt`, variables named `bert/encoder/layer_0/...`) directly,
through the rename table of `checkpoint_names.py`; `convert_checkpoint.py`
turns one into the project format once, for tools that only resolve paths.
"""

import glob
import math
import os
import shutil

import keras
import tensorflow as tf

from official_bert import cli
from official_bert import disk_full
from official_bert.training import checkpoint_names

# Optimizer state and bookkeeping in original checkpoints: not weights.
ORIGINAL_SKIPPED_SUFFIXES = ("/adam_m", "/adam_v", "global_step",
                             "_CHECKPOINTABLE_OBJECT_GRAPH")


def resolve(path):
  """A checkpoint prefix for `path`: a prefix itself or a directory's latest.

  A directory without a `checkpoint` index file resolves to the
  `bert_model.ckpt` in it (google-research/bert's released model folders);
  a fine-tuning output_dir with a best checkpoint (`best/`, kept by
  --eval_every_steps: best_checkpoint.py) resolves to that one.
  """
  # Local paths (blocked_by skips gs:// and the like): say what hides the
  # checkpoint, not "not found".
  blocked = cli.blocked_by(path)
  if blocked:
    raise ValueError(f"checkpoint {path} cannot be reached: {blocked} is "
                     "not readable; check its permissions")
  if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
    raise ValueError(f"checkpoint directory {path} is not readable; check "
                     "its permissions")
  if tf.io.gfile.isdir(path):
    best = os.path.join(path, "best")
    if tf.io.gfile.isdir(best) and tf.train.latest_checkpoint(best):
      return tf.train.latest_checkpoint(best)
    latest = tf.train.latest_checkpoint(path)
    released = os.path.join(path, "bert_model.ckpt")
    if latest is None and tf.io.gfile.exists(released + ".index"):
      return released
    if latest is None:
      raise ValueError(f"checkpoint directory {path} holds no checkpoint "
                       "(no 'checkpoint' index file); pass a checkpoint prefix "
                       f"such as {path}/ckpt-1000")
    return latest
  if not tf.io.gfile.exists(path + ".index"):
    raise ValueError(f"checkpoint {path} not found: expected {path}.index "
                     "(pass a checkpoint prefix or the directory holding it)")
  return path


def training_checkpoint(model, optimizer, step):
  """The object graph of a training checkpoint: model, optimizer, step, rng.

  `optimizer` holds the optimizer's own variables (iterations, slots, loss
  scale) but not the optimizer object: that one also tracks the model's
  variables, and a checkpoint names each variable by its shortest path, which
  would put the weights under optimizer/ instead of model/. `rng` holds the
  dropout seed generators' states (the model's variables that are not
  weights), so a resumed run draws the same dropout masks as an
  uninterrupted one. Build the optimizer's slots first (`optimizer.build`),
  so a restore fills them at once.
  """
  weights = {id(v) for v in model.weights}
  seed_states = [v for v in model.variables if id(v) not in weights]
  return tf.train.Checkpoint(
      model=model,
      optimizer=tf.train.Checkpoint(variables=list(optimizer.variables)),
      step=step, rng=tf.train.Checkpoint(states=seed_states))


class TrainingCheckpoints:
  """`ckpt-<step>` checkpoints of a training run in `output_dir`.

  Args:
    checkpoint: the `training_checkpoint(...)` to save and restore.
    output_dir: where the checkpoints live (and are resumed from).
    max_to_keep: checkpoints kept; older ones are deleted.
    worker_id: None on the chief (or a single worker). Other workers of a
      multi-worker job must take part in every save (it is collective) but
      their copy is written to `output_dir/.worker_<id>` and deleted.
  """

  def __init__(self, checkpoint, output_dir, max_to_keep=5, worker_id=None):
    self.checkpoint = checkpoint
    self.output_dir = output_dir
    self.worker_id = worker_id
    directory = output_dir
    if worker_id is not None:
      directory = os.path.join(output_dir, f".worker_{worker_id}")
    self._directory = directory
    self.manager = tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep=max_to_keep,
        checkpoint_name="ckpt")

  def latest(self):
    """The latest checkpoint prefix in output_dir, or None."""
    return tf.train.latest_checkpoint(self.output_dir)

  def restore_latest(self):
    """Restores the latest checkpoint (every object must match); its prefix
    or None when output_dir holds none.

    A checkpoint whose files are cut short or damaged (a copy or a disk
    that failed; TensorFlow's reader raises IndexError "Read less bytes than
    requested" or DataLossError) is passed over for the newest older one
    that reads, with a line saying so; when none reads, one sentence. A
    checkpoint of another model (a run whose bert_config_file or task
    changed, rerun into the same output_dir) is one sentence too.
    """
    latest = self.latest()
    if not latest:
      return None
    older = [p for p in reversed(self.manager.checkpoints) if p != latest]
    unreadable = []
    for prefix in [latest] + older:
      try:
        status = self.checkpoint.read(prefix)
      except (IndexError, tf.errors.DataLossError,
              tf.errors.OutOfRangeError) as e:
        unreadable.append(f"{os.path.basename(prefix)}: "
                          f"{str(e).splitlines()[0][:60]}")
        continue
      except ValueError as e:  # a variable of another shape
        raise self._another_model(prefix, e) from None
      try:
        status.assert_existing_objects_matched()
      except AssertionError as e:  # a variable the checkpoint lacks
        raise self._another_model(prefix, e) from None
      if unreadable:
        print(f"Warning: checkpoint {', '.join(unreadable)} in "
              f"{self.output_dir} is truncated or corrupt; resuming from "
              f"{os.path.basename(prefix)}, the newest that reads (the "
              "damaged one is overwritten when training passes its step).",
              flush=True)
      return prefix
    raise cli.Error(
        f"Every checkpoint in --output_dir {self.output_dir} is truncated or "
        f"corrupt ({'; '.join(unreadable)}); pass a new --output_dir, or "
        "delete the ckpt-* files and the 'checkpoint' file to start over.")

  def _another_model(self, prefix, error):
    return cli.Error(
        f"--output_dir {self.output_dir} holds {os.path.basename(prefix)} of "
        f"another model (check bert_config_file): "
        f"{_first_line(error).rstrip('.')}; pass "
        "a new --output_dir, or delete the ckpt-* files and the 'checkpoint' "
        "file to start over.")

  def save(self, step):
    """Writes `ckpt-<step>` (on every worker: the save is collective).

    A full disk raises disk_full.WriteFailed after removing what the write
    left (TensorFlow's `ckpt-<step>_temp/`, a half `ckpt-<step>`), so the
    latest checkpoint stays the last complete one and a rerun resumes there.
    """
    # A save runs to its end before the next: a `_temp` directory here is
    # a killed run's (SIGKILL), left for the rerun to remove.
    for path in glob.glob(os.path.join(glob.escape(self._directory),
                                       "ckpt-*_temp")):
      shutil.rmtree(path, ignore_errors=True)
    with writing(self.checkpoint, os.path.join(self._directory,
                                                f"ckpt-{step}")):
      path = self.manager.save(checkpoint_number=step)
    if self.worker_id is not None:
      shutil.rmtree(self._directory, ignore_errors=True)
    return path


def save_model(model, prefix):
  """Writes `model` (a BertPretrainer or BertEncoder) under `prefix`.

  Returns the written prefix. The checkpoint's files appear only when
  complete (TensorFlow writes them under temporary names, then renames).
  """
  os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
  checkpoint = tf.train.Checkpoint(model=model)
  with writing(checkpoint, prefix):
    return checkpoint.write(prefix)


def writing(checkpoint, prefix):
  """disk_full.writing for `checkpoint` written at `prefix`: a full disk
  removes the write's leftovers and raises WriteFailed with the checkpoint's
  size."""
  def size():  # Keras 3's variables hold a tf.Variable without being one
    return sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size
               for v in tf.train.TrackableView(checkpoint).descendants()
               if isinstance(v, (tf.Variable, keras.Variable)))
  return disk_full.writing(
      prefix, "the checkpoint", needed=size,
      clean_up=lambda: disk_full.remove_checkpoint(prefix))


def restore_encoder(encoder, path, layers=None):
  """Restores `encoder`'s weights from any official_bert checkpoint.

  Accepts checkpoints whose `model` is a BertPretrainer (pretraining,
  conversion) or a model with an `encoder` attribute (fine-tuned models), and
  plain encoder checkpoints. Every encoder variable must be found: a
  mismatch raises one ValueError naming the checkpoint. `layers` (a
  student's, increasing): block i of `encoder` reads the checkpoint's block
  `layers[i]`; the checkpoint's other blocks are left unread.
  """
  prefix = resolve(path)
  if is_original(prefix):
    _assign_original(encoder, prefix, layers)
    return prefix
  reader = tf.train.load_checkpoint(prefix)
  names = reader.get_variable_to_shape_map()
  # The encoder, or its sublayers under the teacher's names.
  node = encoder if layers is None else tf.train.Checkpoint(
      **checkpoint_names.encoder_children(encoder, layers))
  if any(name.startswith("model/encoder/") for name in names):
    root = tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=node))
  else:
    root = tf.train.Checkpoint(model=node)
  return _read(root, prefix, "the encoder's config")


def restore_model(model, path):
  """Restores all of `model` (e.g. a BertPretrainer) from a checkpoint.

  A checkpoint holding only `model/encoder` (converted from an encoder-only
  source) restores the encoder; the heads keep their initialisation.
  """
  prefix = resolve(path)
  if is_original(prefix):
    _assign_original(model, prefix)
    return prefix
  names = [name for name in tf.train.load_checkpoint(prefix)
           .get_variable_to_shape_map() if name.startswith("model/")]
  if hasattr(model, "encoder") and names and all(
      name.startswith("model/encoder/") for name in names):
    return restore_encoder(model.encoder, prefix)
  return _read(tf.train.Checkpoint(model=model), prefix, "the model")


def is_original(prefix):
  """True for a google-research/bert TF1 checkpoint (original variable names)."""
  names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  return "bert/embeddings/word_embeddings" in names


def read_original(prefix):
  """A TF1 checkpoint's weights keyed by original name, and the names skipped.

  Returns `(arrays, ignored)`; `ignored` lists the Adam slots and the step.
  """
  reader = tf.train.load_checkpoint(prefix)
  arrays, ignored = {}, []
  for name in sorted(reader.get_variable_to_shape_map()):
    if name.endswith(ORIGINAL_SKIPPED_SUFFIXES):
      ignored.append(name)
    else:
      arrays[name] = reader.get_tensor(name)
  return arrays, ignored


def _assign_original(model, prefix, layers=None):
  """Loads an original TF1 checkpoint into `model` (encoder or pretrainer;
  `layers`: a student's, as `restore_encoder`).

  Tensors the model has no variable for (the heads, for an encoder) are
  left unused; a missing or mis-shaped one raises `ValueError`.
  """
  arrays, _ = read_original(prefix)
  try:
    checkpoint_names.assign_original(model, arrays, "the TF1 checkpoint",
                                     layers)
  except ValueError as e:
    raise ValueError(f"{prefix}: {e} (check bert_config_file)") from None


def _first_line(error):
  text = str(error).strip().splitlines()
  return text[0][:300] if text else type(error).__name__


def _read(root, prefix, what):
  """Reads `prefix` into `root`; a truncated or mismatched checkpoint is one
  sentence (ValueError) naming `what` it should fit."""
  try:
    status = root.read(prefix)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (IndexError, tf.errors.OpError) as e:  # truncated, corrupted
    raise ValueError(f"cannot read checkpoint {prefix}: {_first_line(e)}; "
                     "pass a complete checkpoint (--init_checkpoint)") from None
  except (AssertionError, ValueError) as e:
    raise ValueError(f"checkpoint {prefix} does not match {what} "
                     f"(check bert_config_file): {_first_line(e)}") from None
  return prefix
