"""int8 export: a LiteRT model with int8 weights beside the SavedModel.

`--quantize=int8` adds `<version>/model.tflite`, the file TF Serving serves
instead of the SavedModel when started with `--prefer_tflite_model=true`. It
is the export's `serving_ids` signature (int32 `input_word_ids`,
`input_mask`, `input_type_ids` [B, T] in, the same numeric outputs), converted
by TensorFlow's own LiteRT converter with `Optimize.DEFAULT`: dynamic-range
quantization, the weights of every dense layer int8 per output channel, the
activations quantized per row on the fly (LiteRT's XNNPACK int8 kernels;
the embeddings, LayerNorm, softmax and GELU stay float32). As in the float32
export, the position-wise work runs on the tokens only (`remove_padding`;
`sequence_output` is 0 at padding): 32 short texts ~1.8x the texts/s of
every layer on [B, T].

Why LiteRT and not int8 inside the SavedModel, and why ids in: measured
(docs/export-and-serving.md), TensorFlow's own SavedModel quantizer
(`tf.quantization.experimental.quantize_saved_model`, dynamic range) keeps
float32 kernels and dequantizes the weights on every call (1.8x slower than
float32 for one text) or, with the `UNIFORM_QUANTIZED` op set, runs
reference kernels (15x slower); the LiteRT model is 2-5x faster than the
float32 SavedModel. TF Serving's LiteRT runtime registers LiteRT's builtin
ops only (`tflite_session.cc`), so the TF Text tokenizer cannot come along:
the raw-text signatures stay in the (float32) SavedModel.

    content = convert(module, "serving_ids")   # a ServingModule
    write(version_dir, content)
    model = Int8Model(content)                 # or Int8Model.load(version_dir)
    outputs = model(input_word_ids=..., input_mask=..., input_type_ids=...)

`convert(module, "serving_ids", int8=False)` is the same model in float32
(`--litert` without `--quantize=int8`): LiteRT's XNNPACK float32 kernels
answer one short text faster than TensorFlow's or XLA's float32 matmuls on
a few rows (docs/distillation.md); `Int8Model` runs it as well.
"""

import os
import shutil
import tempfile
import warnings

import numpy as np
import tensorflow as tf

LITERT_FILE = "model.tflite"


def numeric(outputs):
  """`outputs` (fn -> dict of Tensors) less its string Tensors (label
  names): LiteRT's builtin ops hold numbers only."""

  def numbers(model_outputs):
    return {name: value for name, value in outputs(model_outputs).items()
            if value.dtype != tf.string}

  return numbers


def model_outputs(outputs):
  """A model's own outputs, named: a dict as it is, one Tensor `logits`;
  floating values as float32 (what a gate compares)."""
  if not isinstance(outputs, dict):
    outputs = {"logits": outputs}
  return {name: tf.cast(value, tf.float32) if value.dtype.is_floating
          else value for name, value in outputs.items()}


def convert(module, signature, int8=True):
  """LiteRT flatbuffer bytes of `module.signature(signature)`, int8
  (or with `int8=False` float32: `--litert` without `--quantize=int8`).

  Raises:
    ValueError: an op without a LiteRT builtin (one sentence).
  """
  work = tempfile.mkdtemp(prefix="litert_int8.")
  try:
    path = os.path.join(work, "saved_model")
    tf.saved_model.save(module, path,
                        signatures={signature: module.signature(signature)})
    converter = tf.lite.TFLiteConverter.from_saved_model(
        path, signature_keys=[signature])
    if int8:
      converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
      return converter.convert()
    except Exception as e:  # pylint: disable=broad-except
      ops = str(e).split("TF Select ops:")[-1].split("\n")[0].strip()
      raise ValueError(f"the LiteRT conversion found ops LiteRT has "
                       f"no builtin for ({ops}); export without "
                       f"--quantize=int8 and --litert") from None
  finally:
    shutil.rmtree(work, ignore_errors=True)


def write(version_dir, content):
  """Writes `<version_dir>/model.tflite` (whole or not at all)."""
  path = os.path.join(version_dir, LITERT_FILE)
  with tempfile.NamedTemporaryFile(dir=version_dir, delete=False,
                                   suffix=".tmp") as f:
    f.write(content)
  os.chmod(f.name, 0o666 & ~_umask())
  os.replace(f.name, path)
  return path


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask


class Int8Model:
  """The LiteRT interpreter on an int8 export's signature.

  Args:
    content: the flatbuffer bytes (`convert`'s).
    signature: the signature to run.
    num_threads: the interpreter's threads (None: LiteRT's default).
  """

  def __init__(self, content, signature="serving_ids", num_threads=None):
    with warnings.catch_warnings():  # tf.lite.Interpreter's move notice
      warnings.simplefilter("ignore")
      self._interpreter = tf.lite.Interpreter(model_content=content,
                                              num_threads=num_threads)
    self._runner = self._interpreter.get_signature_runner(signature)
    self.signature = self._interpreter.get_signature_list()[signature]

  @classmethod
  def load(cls, version_dir, **kwargs):
    with open(os.path.join(version_dir, LITERT_FILE), "rb") as f:
      return cls(f.read(), **kwargs)

  def __call__(self, **inputs):
    """Numpy (or array-like) inputs -> dict of numpy outputs; inputs the
    signature does not take (a feature's id) are left out."""
    return self._runner(**{name: np.asarray(inputs[name], np.int32)
                           for name in self.signature["inputs"]})

  def predict(self, inputs, batch_size):
    """`__call__` over `inputs` (dict of numpy [N, T]) in batches of
    `batch_size`, the outputs concatenated."""
    size = len(next(iter(inputs.values())))
    parts = [self(**{name: value[start:start + batch_size]
                     for name, value in inputs.items()})
             for start in range(0, size, batch_size)]
    return {name: np.concatenate([part[name] for part in parts])
            for name in parts[0]} if parts else {}
