"""What both exporters share: reading the model to export, writing atomically.

  * `load_pretrained(...)`: `bert_config.json` + any official_bert checkpoint
    -> the encoder (and the masked-LM head, when the checkpoint has one), with
    one clear `ValueError` for every kind of mismatch;
  * `check_vocab(...)`: the vocabulary fits the model;
  * `atomic_save(...)`: a SavedModel appears under its final name only when
    complete (written beside it under a hidden temporary name, then renamed),
    so an interrupted export never leaves a directory that looks finished;
    `atomic_dir(...)` does the same for any directory (export_checkpoint),
    `atomic_rewrap(...)` for an exporter's version with files added;
  * `op_types(...)`: every op a SavedModel's graph uses, split into core
    TensorFlow, TF Text and anything else (what a model server must link);
  * `define_model_flags()`: the command-line flags naming the model to export.
"""

import contextlib
import gc
import glob
import logging
import os
import secrets
import shutil

from absl import flags
import tensorflow as tf

from official_bert.training import checkpoints
from official_bert import atomic_io
from official_bert import configs
from official_bert import disk_full
from official_bert.modeling import pretrainer as pretrainer_lib
from official_bert.data import tokenization


def define_model_flags():
  """Defines (and requires) the exporters' model flags: --bert_config_file,
  --init_checkpoint, --vocab_file, --do_lower_case."""
  flags.DEFINE_string("bert_config_file", None,
                      "bert_config.json of the model.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Checkpoint prefix or directory (latest is used), or "
                      "google-research/bert's bert_model.ckpt or its folder.")
  flags.DEFINE_string("vocab_file", None, "The model's vocab.txt.")
  flags.DEFINE_bool("do_lower_case", True, "True for uncased models.")
  for name in ("bert_config_file", "init_checkpoint", "vocab_file"):
    flags.mark_flag_as_required(name)


def load_pretrained(bert_config_file, init_checkpoint, with_mlm=True):
  """Builds the model of `bert_config_file` and restores `init_checkpoint`.

  Args:
    bert_config_file: path of a `bert_config.json`.
    init_checkpoint: an official_bert checkpoint prefix or directory
      (pretraining, converted, fine-tuned or plain encoder), or
      google-research/bert's TF1 `bert_model.ckpt` (or its release folder).
    with_mlm: also restore the masked-LM head when the checkpoint has one.

  Returns:
    (encoder, mlm_head): a `BertEncoder` and its `MaskedLMHead`, or None for
    the head when the checkpoint has none (e.g. a fine-tuned classifier) or
    `with_mlm` is False.

  Raises:
    ValueError: one sentence naming the file and what differs.
  """
  config = configs.BertConfig.from_json_file(bert_config_file)
  prefix = checkpoints.resolve(init_checkpoint)
  try:
    names = list(tf.train.load_checkpoint(prefix).get_variable_to_shape_map())
  except tf.errors.OpError as e:  # truncated, corrupted, unreadable
    raise ValueError(f"cannot read checkpoint {prefix}: "
                     f"{_first_line(e.message)}; pass a complete checkpoint "
                     "(--init_checkpoint)") from None
  check_layer_count(names, config, prefix, bert_config_file)
  # An official_bert pretraining checkpoint or google-research/bert's TF1
  # bert_model.ckpt (original names) carries the masked-LM head.
  has_mlm = ("cls/predictions/output_bias" in names or
             any(n.startswith("model/cls_predictions/") for n in names))
  # Keras's kernels: whoever loads the export may compile it with XLA (a
  # fine-tuned TF-Hub module, a server), where the fast kernels are slow.
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      config, use_next_sentence=False, kernels="keras")
  with quiet_restore(prefix):
    if with_mlm and has_mlm:
      checkpoints.restore_model(model, prefix)
      return model.encoder, model.cls_predictions
    checkpoints.restore_encoder(model.encoder, prefix)
    return model.encoder, None


@contextlib.contextmanager
def quiet_restore(prefix):
  """Silences TF's restore warnings when a restore fails; names the file.

  A restore that raises (a config that does not fit the checkpoint) leaves a
  `tf.train.Checkpoint` with unrestored values; when it is collected TF logs
  one "Value in checkpoint could not be found" warning per variable, after
  the error a user should read last. Collect it here, with TF's logger muted.
  """
  try:
    yield
  except BaseException as e:
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
      e.__traceback__ = None
      gc.collect()
    finally:
      logger.setLevel(level)
    # TF's checkpoint reader raises IndexError on a truncated data file.
    if isinstance(e, (tf.errors.OpError, IndexError)):
      raise ValueError(f"cannot read checkpoint {prefix}: "
                       f"{_first_line(getattr(e, 'message', e))}; pass a "
                       "complete checkpoint (--init_checkpoint)") from None
    raise


def _first_line(text):
  lines = str(text).strip().splitlines()
  return lines[0][:300] if lines else ""


def sentence(error):
  """The one sentence a program prints for a ValueError or OSError."""
  if isinstance(error, OSError) and error.filename is not None:
    return (f"cannot write or read {error.filename}: {error.strerror}; check "
            "the path and its permissions")
  return str(error)


def check_layer_count(names, config, prefix, bert_config_file):
  # tf.train.Checkpoint ignores extra objects; a checkpoint with more layers
  # than the config would otherwise export a silently truncated model.
  layers = set()
  for name in names:
    for part in name.split("/"):
      if part.startswith("layer_") and part[6:].isdigit():
        layers.add(int(part[6:]))
  if layers and max(layers) + 1 != config.num_hidden_layers:
    raise ValueError(
        f"checkpoint {prefix} has {max(layers) + 1} Transformer layers but "
        f"{bert_config_file} says num_hidden_layers="
        f"{config.num_hidden_layers}; pass the bert_config.json that was "
        "saved with this checkpoint")


def check_vocab(vocab_file, vocab_size):
  """Loads the vocab (clear errors) and checks it fits `vocab_size` ids."""
  try:
    vocab = tokenization.load_vocab(vocab_file)
  except (tf.errors.OpError, OSError) as e:  # a directory, unreadable
    raise ValueError(f"cannot read vocab_file {vocab_file}: "
                     f"{_first_line(getattr(e, 'message', e))}; pass the "
                     "model's vocab.txt") from None
  if len(vocab) > vocab_size:
    raise ValueError(
        f"vocab_file {vocab_file} has {len(vocab)} tokens but the model's "
        f"bert_config vocab_size is {vocab_size}; pass the vocab.txt the "
        "model was trained with")
  return vocab


@contextlib.contextmanager
def atomic_dir(path, what="the export"):
  """Yields a hidden directory beside `path`, renamed to `path` when the
  block ends without error and removed otherwise; a full disk meanwhile
  raises disk_full.WriteFailed naming `what` and `path`.

  Hidden and non-numeric, so neither TF Serving's version scan nor a reader
  looking for `path` mistakes it for a finished export. os.mkdir, not
  tempfile.mkdtemp: the export gets the umask's modes (a model server
  running as another user reads it), not mkdtemp's 0700.
  """
  parent = os.path.dirname(path)
  os.makedirs(parent, exist_ok=True)
  prefix = f".{os.path.basename(path)}.tmp-"
  atomic_io.remove_stale(parent, prefix)  # a killed export's
  tmp = os.path.join(parent, f"{prefix}{os.getpid()}-{secrets.token_hex(4)}")
  with disk_full.writing(path, what):
    os.mkdir(tmp)
  try:
    with disk_full.writing(path, what, only_full=True):  # it reads too
      yield tmp
    with disk_full.writing(path, what):
      os.rename(tmp, path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def check_new(export_path):
  """`export_path` made absolute; a ValueError when it exists already (an
  exporter checks before it traces, and atomic_save again)."""
  export_path = os.path.abspath(export_path)
  if tf.io.gfile.exists(export_path):
    raise ValueError(f"export path {export_path} already exists; remove it "
                     "or choose another path")
  return export_path


def atomic_save(obj, export_path, signatures=None, after_save=None):
  """`tf.saved_model.save` that publishes `export_path` only when complete.

  Args:
    obj: the trackable root to save.
    export_path: final directory; must not exist yet.
    signatures: passed to `tf.saved_model.save`.
    after_save: optional `fn(tmp_dir)` that adds files (e.g. TF Serving
      warmup requests) before the rename.

  Returns:
    `export_path`.
  """
  export_path = check_new(export_path)
  with atomic_dir(export_path, "the SavedModel") as tmp:
    tf.saved_model.save(obj, tmp, signatures=signatures)
    if after_save is not None:
      after_save(tmp)
  return export_path


def atomic_rewrap(export_path, write, after_write=None):
  """Publishes `export_path` whole from an exporter that publishes its own
  version (its own `atomic_save`), with files added before anyone sees it.

  Args:
    export_path: final directory; must not exist yet.
    write: `fn(base_dir)` -> the directory the exporter wrote under
      `base_dir`, a hidden directory beside `export_path`.
    after_write: optional `fn(dir)` that adds files (model.tflite) to it.

  Returns:
    `export_path`, renamed into place with everything in it; after an
    error, nothing is there and the hidden directory is removed.
  """
  export_path = check_new(export_path)
  with atomic_dir(export_path, "the SavedModel") as tmp:
    written = write(tmp)
    if after_write is not None:
      after_write(written)
    # The exporter's version becomes `tmp` itself, renamed to export_path.
    for name in os.listdir(written):
      os.rename(os.path.join(written, name), os.path.join(tmp, name))
    os.rmdir(written)
  return export_path


def _tf_text_op_names():
  import tensorflow_text  # pylint: disable=g-import-not-at-top
  ops_dir = os.path.join(os.path.dirname(tensorflow_text.__file__),
                         "python", "ops")
  names = set()
  for library in glob.glob(os.path.join(ops_dir, "*.so")):
    # Already loaded by `import tensorflow_text`, this returns the library's
    # generated wrappers: one snake_case function per op it registers.
    module = tf.load_op_library(library)
    names.update(_op_key(name) for name in dir(module)
                 if not name.startswith("_"))
  return names


def _op_key(name):
  # "FastWordpieceTokenizeWithOffsets" and "fast_wordpiece_tokenize_with_
  # offsets" both become "fastwordpiecetokenizewithoffsets".
  return name.replace("_", "").replace(">", "").lower()


def op_types(export_path):
  """Op types in a SavedModel's graphs and functions, grouped by origin.

  Returns:
    dict with sorted lists `core` (ops of core TensorFlow, as listed by
    `tf.raw_ops`), `tf_text` (TF Text's kernels) and `other` (anything else:
    a model server without the matching library would fail to load it).
  """
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  proto = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(export_path, "saved_model.pb"),
                         "rb") as f:
    proto.ParseFromString(f.read())
  used = set()
  for meta_graph in proto.meta_graphs:
    used.update(node.op for node in meta_graph.graph_def.node)
    for function in meta_graph.graph_def.library.function:
      used.update(node.op for node in function.node_def)
  function_names = {function.signature.name
                    for meta_graph in proto.meta_graphs
                    for function in meta_graph.graph_def.library.function}
  used -= function_names  # Calls of the graph's own functions.
  core = set(dir(tf.raw_ops))
  text = _tf_text_op_names()
  tf_text = {op for op in used - core if _op_key(op) in text}
  return {"core": sorted(used & core), "tf_text": sorted(tf_text),
          "other": sorted(used - core - tf_text)}
