"""What a classifier's export answers: its logits named for TF Serving.

The functions map the fine-tuned model's outputs (logits [B, C], or a dict
with `logits`) to the named outputs of the serving signatures
(export/serving.py traces them inside the SavedModel, so they are TF ops):

    classifier_outputs               logits, probabilities (softmax) [B, C]
    classifier_outputs_with_labels   + label [B] and label_names [B, C]
    regression_outputs               predictions [B]

run_classifier's export takes them from its task (`export_spec()`);
`export.serving` offers them to any exporter under the same names.
"""

import tensorflow as tf


def classifier_outputs(model_outputs):
  """Logits [B, C] (or a dict with `logits`) -> `logits`, `probabilities`."""
  if isinstance(model_outputs, dict):
    model_outputs = model_outputs["logits"]
  logits = tf.cast(model_outputs, tf.float32)
  return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}


def classifier_outputs_with_labels(label_names):
  """`classifier_outputs` plus the labels' names: `label` [B] string (the
  most probable label's name) and `label_names` [B, C] string (the names in
  the order of `probabilities`; per row, as TF Serving's row format needs
  every output batched)."""
  names = [str(name) for name in label_names]

  def outputs(model_outputs):
    named = classifier_outputs(model_outputs)
    table = tf.constant(names)
    if named["logits"].shape[-1] not in (None, len(names)):
      raise ValueError(f"the classifier has {named['logits'].shape[-1]} "
                       f"classes but {len(names)} label names")
    named["label"] = tf.gather(table, tf.argmax(named["logits"], axis=-1))
    named["label_names"] = tf.tile(table[tf.newaxis],
                                   [tf.shape(named["logits"])[0], 1])
    return named

  return outputs


def regression_outputs(model_outputs):
  """A one-output regression head [B, 1] -> `predictions` [B]."""
  if isinstance(model_outputs, dict):
    model_outputs = model_outputs["logits"]
  return {"predictions": tf.cast(model_outputs, tf.float32)[:, 0]}
