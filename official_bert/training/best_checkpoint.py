"""The best checkpoint of a run by a dev metric: output_dir/best/.

    best/ckpt-<step>.index, .data-*  the model's weights at that step
                                     (`tf.train.Checkpoint(model=...)`, as
                                     training checkpoints name them)
    best/checkpoint                  TensorFlow's index, so tools given
                                     best/ (or output_dir: checkpoints.resolve)
                                     find it
    best/best.json                   {"step", "metric", "value", "checkpoint",
                                     "eval_results"}

Written in that order, the index and best.json through a temporary name
(cli.atomic_write), then the previous best's files are removed: a reader
(or a kill at any moment) sees the old best or the new one, never a mix.
"""

import glob
import json
import os
import shutil

import tensorflow as tf

from official_bert import cli
from official_bert.training import checkpoints

STATE = "best.json"


def lower_is_better(metric):
  return metric.endswith(("loss", "mse"))


class BestCheckpoint:
  """output_dir/best of `model`, chosen by `metric`.

  Args:
    directory: output_dir/best.
    model: the model whose weights are saved and loaded.
    metric: the eval_results key (its `eval_` prefix may be left out).
    is_chief: only the chief writes `directory`; other workers of a
      multi-worker job take part in the (collective) save into a scratch
      directory named by `worker_id`, deleted at once.
  """

  def __init__(self, directory, model, metric, is_chief=True, worker_id=None):
    self.directory = directory
    self.model = model
    self.metric = metric
    self.is_chief = is_chief
    self.worker_id = worker_id

  def resolve_metric(self, results):
    """The key of `results` `metric` names (with or without `eval_`), or
    None."""
    for name in (self.metric, "eval_" + self.metric):
      if name in results:
        self.metric = name
        return name
    return None

  def better(self, value, best):
    return value < best if lower_is_better(self.metric) else value > best

  def state(self):
    """best.json as a dict, or None when there is no best checkpoint."""
    path = os.path.join(self.directory, STATE)
    if not os.path.exists(path):
      return None
    with open(path, encoding="utf-8") as f:
      return json.load(f)

  def save(self, step, value, results):
    """Writes the model as the best checkpoint of `step`; its state."""
    name = f"ckpt-{step}"
    checkpoint = tf.train.Checkpoint(model=self.model)
    if not self.is_chief:
      scratch = os.path.join(os.path.dirname(self.directory),
                             f".worker_{self.worker_id}_best")
      checkpoint.write(os.path.join(scratch, name))
      shutil.rmtree(scratch, ignore_errors=True)
      return {"step": step, "metric": self.metric, "value": value}
    old = self.state()
    os.makedirs(self.directory, exist_ok=True)
    prefix = os.path.join(self.directory, name)
    with checkpoints.writing(checkpoint, prefix):
      checkpoint.write(prefix)
    state = {"step": step, "metric": self.metric, "value": value,
             "checkpoint": os.path.join(self.directory, name),
             "eval_results": {k: v for k, v in results.items()
                              if isinstance(v, (int, float, str))}}
    cli.atomic_write(os.path.join(self.directory, "checkpoint"),
                     f'model_checkpoint_path: "{name}"\n'
                     f'all_model_checkpoint_paths: "{name}"\n')
    cli.atomic_write(os.path.join(self.directory, STATE),
                     json.dumps(state, indent=2, sort_keys=True) + "\n")
    if old and old["step"] != step:
      for path in glob.glob(os.path.join(self.directory,
                                         f"ckpt-{old['step']}.*")):
        os.remove(path)
    return state

  def load_weights(self):
    """Loads the best checkpoint into the model; its state, or None."""
    state = self.state()
    if state is None:
      return None
    prefix = os.path.join(self.directory, f"ckpt-{state['step']}")
    tf.train.Checkpoint(model=self.model).read(
        prefix).assert_existing_objects_matched()
    return dict(state, checkpoint=prefix)

  def clear(self):
    """Removes a best checkpoint left by an earlier run (a fresh run)."""
    if self.is_chief and os.path.isdir(self.directory):
      shutil.rmtree(self.directory)
