"""Hugging Face and sentence-transformers directories from an `ExportedModel`.

  * `write_huggingface(model, directory, ...)`: `model.safetensors` (numpy
    API: no torch at export time), `config.json`, and the tokenizer files
    (`vocab.txt`, `tokenizer_config.json`, `special_tokens_map.json`, and
    `tokenizer.json` when the `tokenizers` package is importable), so
    `AutoTokenizer` / `AutoModel*.from_pretrained(directory)` work offline.
    The head picks the class (`ARCHITECTURES`); the weights are exactly the
    set the class's `save_pretrained` writes (the tied MLM decoder is left to
    `tie_weights`, the pooler dropped where the class has none), so loading
    reports no missing or unexpected weight.
  * `write_sentence_transformers(...)`: the encoder alone as `BertModel` plus
    the classic sentence-transformers modules: mean pooling over the input
    mask, as the serving export's `sentence_embedding` (export/serving.py's
    `mean_pool`), or a run_embedding model's own pooling (mean or [CLS]),
    and `2_Normalize` when that output is normalised.

Names come from `checkpoint_names.hf_name`, the project's one name table.
"""

import dataclasses
import json
import os
import shutil

from export import checkpoint_heads
from official_bert import cli
from official_bert import configs
from official_bert.training import checkpoint_names

ARCHITECTURES = {
    "pretraining": "BertForPreTraining",
    "masked_lm": "BertForMaskedLM",
    "encoder": "BertModel",
    "classifier": "BertForSequenceClassification",
    "regression": "BertForSequenceClassification",
    "squad": "BertForQuestionAnswering",
    "ner": "BertForTokenClassification",
    "reranker": "BertForSequenceClassification",
}
# Hugging Face builds these without a pooler (add_pooling_layer=False).
_NO_POOLER = ("masked_lm", "squad", "ner")
# Our hidden_act -> HF's ACT2FN name of the same function: "gelu" is the
# exact erf form in both; the tanh approximation is HF's "gelu_new".
HIDDEN_ACT = {"gelu": "gelu", "gelu_new": "gelu_new",
              "gelu_approximate": "gelu_new", "relu": "relu",
              "swish": "silu", "silu": "silu"}
# The fine-tuning heads' HF names (torch Linear weights are [out, in], as
# the original's output_weights [C, H]: no transpose).
_HEAD_HF_NAMES = {"classifier": "classifier", "regression": "classifier",
                  "ner": "classifier", "squad": "qa_outputs",
                  "reranker": "classifier"}
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]",
                  "pad_token": "[PAD]", "cls_token": "[CLS]",
                  "mask_token": "[MASK]"}


def state_dict(model, encoder_only=False):
  """{HF name: float32 array} for `model` (`checkpoint_heads.ExportedModel`).

  `encoder_only`: `BertModel`'s names (no `bert.` prefix, pooler kept).
  """
  task = "encoder" if encoder_only else model.task
  out = {}
  head = checkpoint_heads.HEAD_NAMES.get(task, ())
  for original, value in model.arrays.items():
    if original in head:
      continue
    if task == "encoder" and not original.startswith("bert/"):
      continue
    if task in _NO_POOLER and original.startswith("bert/pooler/"):
      continue
    name, transpose = checkpoint_names.hf_name(original)
    if task == "encoder":
      name = name[len("bert."):]
    out[name] = value.T if transpose else value
  if task in _HEAD_HF_NAMES:
    weights, bias = head
    out[_HEAD_HF_NAMES[task] + ".weight"] = model.arrays[weights]
    out[_HEAD_HF_NAMES[task] + ".bias"] = model.arrays[bias]
  return checkpoint_heads.float32(out)


def config_json(model, encoder_only=False):
  """The `config.json` dict of the export (BertConfig's fields by HF name)."""
  config = model.config
  task = "encoder" if encoder_only else model.task
  values = {key: value for key, value in config.to_dict().items()
            if key in {f.name for f in _config_fields()}}
  values.update(
      architectures=[ARCHITECTURES[task]], model_type="bert",
      hidden_act=HIDDEN_ACT[config.hidden_act],
      layer_norm_eps=configs.LAYER_NORM_EPSILON, pad_token_id=0,
      position_embedding_type="absolute", classifier_dropout=None,
      tie_word_embeddings=True, dtype="float32")
  if task in ("classifier", "ner"):
    labels = model.labels or [f"LABEL_{i}" for i in range(
        model.arrays[checkpoint_heads.HEAD_NAMES[task][0]].shape[0])]
    values["id2label"] = {str(i): label for i, label in enumerate(labels)}
    values["label2id"] = {label: i for i, label in enumerate(labels)}
    if task == "classifier":
      values["problem_type"] = "single_label_classification"
  elif task == "regression":
    values["id2label"] = {"0": "LABEL_0"}
    values["label2id"] = {"LABEL_0": 0}
    values["problem_type"] = "regression"
  elif task == "reranker":
    # One label, as sentence-transformers' CrossEncoder saves a reranker:
    # its predict returns the sigmoid of the logit.
    values["id2label"] = {"0": "LABEL_0"}
    values["label2id"] = {"LABEL_0": 0}
    values["sentence_transformers"] = {
        "activation_fn": "torch.nn.modules.activation.Sigmoid"}
  return values


def _config_fields():
  return [f for f in dataclasses.fields(configs.BertConfig)
          if f.name != "extra"]


def write_huggingface(model, directory, vocab_file, do_lower_case,
                      encoder_only=False):
  """Writes the HF model directory into `directory` (which exists).

  Returns the list of file names written (tokenizer.json is one of them
  when the tokenizers package is importable).
  """
  from safetensors.numpy import save  # pylint: disable=g-import-not-at-top
  # save() and a plain open(): the umask's modes (save_file makes 0600).
  with open(os.path.join(directory, "model.safetensors"), "wb") as f:
    f.write(save(state_dict(model, encoder_only), metadata={"format": "pt"}))
  _write_json(directory, "config.json", config_json(model, encoder_only))
  return ["model.safetensors", "config.json"] + write_tokenizer(
      directory, vocab_file, do_lower_case, model.config)


def write_tokenizer(directory, vocab_file, do_lower_case, config):
  """vocab.txt, tokenizer_config.json, special_tokens_map.json [+ tokenizer.json]."""
  with open(vocab_file, "rb") as src, open(
      os.path.join(directory, "vocab.txt"), "wb") as dst:
    shutil.copyfileobj(src, dst)
  _write_json(directory, "tokenizer_config.json", {
      "tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
      # As google-research/bert's BasicTokenizer: accents are stripped
      # exactly when the text is lower-cased; CJK characters split apart.
      "strip_accents": None, "tokenize_chinese_chars": True,
      "do_basic_tokenize": True, "never_split": None,
      "model_max_length": config.max_position_embeddings,
      "clean_up_tokenization_spaces": False, **SPECIAL_TOKENS})
  _write_json(directory, "special_tokens_map.json", SPECIAL_TOKENS)
  written = ["vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]
  try:
    from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
  except ImportError:
    return written  # AutoTokenizer builds the same tokenizer from vocab.txt.
  tokenizer = BertWordPieceTokenizer(
      vocab_file, lowercase=do_lower_case, strip_accents=None,
      clean_text=True, handle_chinese_chars=True, wordpieces_prefix="##")
  tokenizer.save(os.path.join(directory, "tokenizer.json"))
  return written + ["tokenizer.json"]


def write_sentence_transformers(model, directory, vocab_file, do_lower_case,
                                max_seq_length, normalize, pooling="mean"):
  """The encoder as BertModel plus sentence-transformers' module files;
  `pooling` "mean" or "cls" (run_embedding's, modeling/sentence_embedder.py)."""
  written = write_huggingface(model, directory, vocab_file, do_lower_case,
                              encoder_only=True)
  modules = [("sentence_transformers.models.Transformer", ""),
             ("sentence_transformers.models.Pooling", "1_Pooling")]
  if normalize:
    modules.append(("sentence_transformers.models.Normalize", "2_Normalize"))
  _write_json(directory, "modules.json", [
      {"idx": i, "name": str(i), "path": path, "type": kind}
      for i, (kind, path) in enumerate(modules)])
  # The text is lower-cased by the tokenizer (do_lower_case in its config);
  # sentence-transformers' own lower-casing stays off.
  _write_json(directory, "sentence_bert_config.json",
              {"max_seq_length": max_seq_length, "do_lower_case": False})
  os.mkdir(os.path.join(directory, "1_Pooling"))
  # Mean over the attention mask ([CLS] and [SEP] included), as
  # serving.mean_pool over input_mask; or the [CLS] position's output.
  _write_json(directory, "1_Pooling/config.json", {
      "word_embedding_dimension": model.config.hidden_size,
      "pooling_mode_cls_token": pooling == "cls",
      "pooling_mode_mean_tokens": pooling == "mean",
      "pooling_mode_max_tokens": False,
      "pooling_mode_mean_sqrt_len_tokens": False,
      "pooling_mode_weightedmean_tokens": False,
      "pooling_mode_lasttoken": False, "include_prompt": True})
  if normalize:
    os.mkdir(os.path.join(directory, "2_Normalize"))
  _write_json(directory, "config_sentence_transformers.json", {
      "similarity_fn_name": "cosine", "prompts": {},
      "default_prompt_name": None})
  return written + ["modules.json", "sentence_bert_config.json",
                    "1_Pooling/config.json",
                    "config_sentence_transformers.json"]


def _write_json(directory, name, value):
  cli.atomic_write(os.path.join(directory, name),
                   json.dumps(value, indent=2, sort_keys=True) + "\n")
