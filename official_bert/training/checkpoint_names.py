"""The one place where variable names are translated.

Our layers mirror google-research/bert's variable scopes, so every variable
has an *original name* (the TF1 checkpoint's, e.g.
`bert/encoder/layer_3/attention/self/query/kernel`). This module maps:

    our variables  <->  original names  <->  Hugging Face state-dict names

and loads a dict of arrays keyed by either naming into a model, reporting
missing, unused and mis-shaped tensors in one error. A student encoder that
keeps some layers of a teacher's (`--student_layers`) reads each of its
blocks under the name of the teacher's block it keeps (`layers`).
"""

import re

import numpy as np


def original_names(model, layers=None):
  """Maps original TF1 names to `(variable, transpose)` of `model`.

  Args:
    model: a `BertEncoder` or a `BertPretrainer` (anything with `.encoder`).
    layers: for a student, the teacher's layer index of each of its blocks
      (block i is named `bert/encoder/layer_{layers[i]}`); None: its own.

  `transpose` is True where the original stores the matrix transposed to our
  kernel (only `cls/seq_relationship/output_weights`, [2, H] vs [H, 2]).
  """
  encoder = getattr(model, "encoder", model)
  table = {}

  def dense(prefix, layer):
    table[prefix + "/kernel"] = (layer.kernel, False)
    table[prefix + "/bias"] = (layer.bias, False)

  def layer_norm(prefix, layer):
    table[prefix + "/gamma"] = (layer.gamma, False)
    table[prefix + "/beta"] = (layer.beta, False)

  emb = encoder.embeddings
  table["bert/embeddings/word_embeddings"] = (emb.word_embeddings.embeddings, False)
  table["bert/embeddings/token_type_embeddings"] = (
      emb.token_type_embeddings.embeddings, False)
  table["bert/embeddings/position_embeddings"] = (emb.position_embeddings, False)
  layer_norm("bert/embeddings/LayerNorm", emb.layer_norm)
  for i, block in enumerate(encoder.encoder_layers):
    prefix = f"bert/encoder/layer_{_teacher_layer(i, layers)}"
    dense(f"{prefix}/attention/self/query", block.attention.query)
    dense(f"{prefix}/attention/self/key", block.attention.key)
    dense(f"{prefix}/attention/self/value", block.attention.value)
    dense(f"{prefix}/attention/output/dense", block.attention.output_dense)
    layer_norm(f"{prefix}/attention/output/LayerNorm", block.attention_layer_norm)
    dense(f"{prefix}/intermediate/dense", block.intermediate)
    dense(f"{prefix}/output/dense", block.output_dense)
    layer_norm(f"{prefix}/output/LayerNorm", block.output_layer_norm)
  dense("bert/pooler/dense", encoder.pooler)

  mlm = getattr(model, "cls_predictions", None)
  if mlm is not None:
    dense("cls/predictions/transform/dense", mlm.dense)
    layer_norm("cls/predictions/transform/LayerNorm", mlm.layer_norm)
    table["cls/predictions/output_bias"] = (mlm.output_bias, False)
  nsp = getattr(model, "cls_seq_relationship", None)
  if nsp is not None:
    table["cls/seq_relationship/output_weights"] = (nsp.dense.kernel, True)
    table["cls/seq_relationship/output_bias"] = (nsp.dense.bias, False)
  return table


def encoder_children(encoder, layers=None):
  """{name: sublayer} of a `BertEncoder` under the names of its checkpoint's
  object graph (`model/encoder/<name>/...`: `embeddings`, `layer_N`,
  `pooler`, the attributes `BertEncoder.build` sets); with `layers`, a
  student's blocks under the names of the teacher's blocks they keep, so a
  `tf.train.Checkpoint` of these children reads them from the teacher's
  checkpoint."""
  children = {"embeddings": encoder.embeddings, "pooler": encoder.pooler}
  for i, block in enumerate(encoder.encoder_layers):
    children[f"layer_{_teacher_layer(i, layers)}"] = block
  return children


def _teacher_layer(index, layers):
  return index if layers is None else layers[index]


# Hugging Face's names, derived from the original ones by rule (the same
# rule as transformers' own TF1 loader): "/" -> ".", layer_N -> layer.N,
# kernel -> weight (torch Linear stores [out, in], so transposed),
# LayerNorm gamma/beta -> weight/bias.
_HF_SPECIAL = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}
# HF tensors that duplicate another one (tied decoder) or are buffers.
_HF_IGNORED = re.compile(
    r"(^|\.)(position_ids|token_type_ids)$|^cls\.predictions\.decoder\.")


def hf_name(original_name):
  """Returns `(hf_name, transpose)` for an original name."""
  if original_name in _HF_SPECIAL:
    return _HF_SPECIAL[original_name], False
  name = re.sub(r"layer_(\d+)", r"layer.\1", original_name)
  transpose = name.endswith("/kernel")
  name = re.sub(r"/(kernel|gamma)$", "/weight", name)
  name = re.sub(r"/beta$", "/bias", name)
  if "_embeddings" in name.rsplit("/", 1)[-1]:
    name += "/weight"
  return name.replace("/", "."), transpose


def from_hf_state_dict(state_dict):
  """Re-keys a Hugging Face BERT state dict by original names.

  Accepts BertModel names (no `bert.` prefix), BertForPreTraining and
  BertForMaskedLM names. Returns `(arrays, ignored)`: arrays keyed by
  original name, laid out as the original checkpoint stores them, and the HF
  names that have no counterpart (listed, not silently dropped).
  """
  reverse = {}
  def add(original):
    name, transpose = hf_name(original)
    reverse[name] = (original, transpose)
  # Every name the largest model can have; keys not present are simply absent.
  for original in _all_original_names(state_dict):
    add(original)
  arrays, ignored = {}, []
  for key, value in state_dict.items():
    full = key if key.startswith(("bert.", "cls.")) else "bert." + key
    value = np.asarray(value)
    if full in reverse:
      original, transpose = reverse[full]
      arrays[original] = value.T if transpose else value
    elif not _HF_IGNORED.search(full):
      ignored.append(key)
  return arrays, ignored


def _all_original_names(state_dict):
  layers = {int(m.group(1)) for k in state_dict
            for m in [re.search(r"encoder\.layer\.(\d+)\.", k)] if m}
  names = ["bert/embeddings/word_embeddings",
           "bert/embeddings/token_type_embeddings",
           "bert/embeddings/position_embeddings",
           "bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/beta",
           "bert/pooler/dense/kernel", "bert/pooler/dense/bias",
           "cls/predictions/transform/dense/kernel",
           "cls/predictions/transform/dense/bias",
           "cls/predictions/transform/LayerNorm/gamma",
           "cls/predictions/transform/LayerNorm/beta",
           *_HF_SPECIAL]
  for i in sorted(layers):
    for sub in ("attention/self/query", "attention/self/key",
                "attention/self/value", "attention/output/dense",
                "intermediate/dense", "output/dense"):
      names += [f"bert/encoder/layer_{i}/{sub}/kernel",
                f"bert/encoder/layer_{i}/{sub}/bias"]
    for sub in ("attention/output/LayerNorm", "output/LayerNorm"):
      names += [f"bert/encoder/layer_{i}/{sub}/gamma",
                f"bert/encoder/layer_{i}/{sub}/beta"]
  return names


def assign_original(model, arrays, source="checkpoint", layers=None):
  """Assigns arrays keyed by original name to `model`'s variables
  (`layers`: a student's, as `original_names`).

  Raises one ValueError listing every missing tensor and shape mismatch.
  Returns the sorted list of array names the model has no variable for
  (e.g. the MLM head's weights when loading into a bare encoder).
  """
  table = original_names(model, layers)
  missing = sorted(name for name in table if name not in arrays)
  mismatched = []
  for name, (variable, transpose) in table.items():
    if name in arrays:
      value = np.asarray(arrays[name])
      if transpose:
        value = value.T
      if tuple(value.shape) != tuple(variable.shape):
        mismatched.append(f"{name}: {source} has {tuple(value.shape)}, "
                          f"model expects {tuple(variable.shape)}")
  if missing or mismatched:
    parts = []
    if missing:
      parts.append(f"missing tensors {missing[:10]}"
                   + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""))
    if mismatched:
      parts.append("shape mismatches: " + "; ".join(mismatched[:10]))
    raise ValueError(f"{source} does not match the model config: "
                     + "; ".join(parts))
  for name, (variable, transpose) in table.items():
    value = np.asarray(arrays[name])
    variable.assign(value.T if transpose else value)
  return sorted(set(arrays) - set(table))
