"""`BertConfig`: the `bert_config.json` format of google-research/bert.

The dataclass fields are exactly the 11 keys of `bert_config.json`. Keys the
format does not define (Hugging Face adds `directionality`, `model_type`, ...)
are kept in `extra` and written back, so load -> save loses nothing.

    config = BertConfig.from_json_file("uncased_L-12_H-768_A-12/bert_config.json")
    config.to_json_file("/tmp/bert_config.json")
    tiny = PRESETS["bert_tiny"]
"""

import dataclasses
import json
import math
from typing import Any, Mapping

from official_bert import atomic_io

# Activation names found in bert_config.json files and what they compute.
# Google's released checkpoints say "gelu", and their TF code computed the
# tanh approximation; Hugging Face reads "gelu" as the exact erf form. The two
# differ by < 1e-3 per activation, so either loads a released checkpoint well.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_approximate", "relu", "swish", "silu")

# The epsilon of every LayerNorm in the model (google-research/bert's). A
# config asking for another one (Hugging Face's `layer_norm_eps`, kept in
# `extra`) is refused rather than computed with the wrong epsilon.
LAYER_NORM_EPSILON = 1e-12


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """The hyperparameters of a BERT encoder, as in `bert_config.json`.

  Args:
    vocab_size: number of WordPiece ids.
    hidden_size: width H of every layer.
    num_hidden_layers: number of Transformer blocks L.
    num_attention_heads: heads A; must divide hidden_size.
    intermediate_size: width of the feed-forward layer (4H in the paper).
    hidden_act: one of `ACTIVATIONS`.
    hidden_dropout_prob: dropout on embeddings and every sublayer output.
    attention_probs_dropout_prob: dropout on the attention probabilities.
    max_position_embeddings: longest sequence the model accepts.
    type_vocab_size: number of segment (token type) ids.
    initializer_range: stddev of the truncated-normal initializer.
    extra: keys of the JSON file that are not BERT hyperparameters, kept
      verbatim for the round trip.
  """

  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict,
                                               compare=False)

  def __post_init__(self):
    for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size"):
      value = getattr(self, key)
      if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"bert_config: {key} must be a positive integer, "
                         f"got {value!r}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"bert_config: hidden_size ({self.hidden_size}) must be divisible "
          f"by num_attention_heads ({self.num_attention_heads})")
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f"bert_config: hidden_act {self.hidden_act!r} is not "
                       f"one of {', '.join(ACTIVATIONS)}")
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, key)
      if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"bert_config: {key} must be in [0, 1), got {value!r}")
    if not isinstance(self.initializer_range, (int, float)) or (
        self.initializer_range <= 0):
      raise ValueError("bert_config: initializer_range must be positive, "
                       f"got {self.initializer_range!r}")
    epsilon = self.extra.get("layer_norm_eps", LAYER_NORM_EPSILON)
    if not isinstance(epsilon, (int, float)) or not math.isclose(
        epsilon, LAYER_NORM_EPSILON, rel_tol=1e-6):
      raise ValueError(f"bert_config: layer_norm_eps {epsilon!r} is not "
                       f"supported; the model's LayerNorms use BERT's "
                       f"{LAYER_NORM_EPSILON} (remove the key or set it to "
                       f"{LAYER_NORM_EPSILON})")

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> "BertConfig":
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    known = {k: v for k, v in values.items() if k in names}
    extra = {k: v for k, v in values.items() if k not in names}
    return cls(**known, extra=extra)

  def to_dict(self) -> dict:
    values = dataclasses.asdict(self)
    extra = values.pop("extra")
    return {**values, **extra}

  @classmethod
  def from_json_file(cls, path: str, flag: str = "") -> "BertConfig":
    """Reads `bert_config.json`; errors name the file.

    `flag` (e.g. "--bert_config_file"): a program's flag that gave `path`;
    its errors then read "--bert_config_file=PATH ...", ready to print.
    """
    subject = f"{flag}={path}" if flag else f"bert_config_file {path}"
    try:
      with open(path, encoding="utf-8") as f:
        values = json.load(f)
    except FileNotFoundError:
      raise ValueError(f"{subject} does not exist; pass the "
                       "bert_config.json of your model") from None
    except json.JSONDecodeError as e:
      raise ValueError(f"{subject} is not valid JSON ({e}); fix it or pass "
                       "the bert_config.json of your model") from None
    except UnicodeDecodeError as e:  # a binary file, or another encoding
      raise ValueError(f"{subject} is not UTF-8 text (byte "
                       f"{e.start}); pass the bert_config.json of your "
                       "model") from None
    if not isinstance(values, dict):
      raise ValueError(f"{subject} must hold a JSON object; pass the "
                       "bert_config.json of your model")
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name != "extra" and f.name not in values]
    if missing:
      raise ValueError(f"{subject} lacks the keys {missing}")
    try:
      return cls.from_dict(values)
    except ValueError as e:
      raise ValueError(f"{subject}: {e}") from None

  def to_json_file(self, path: str) -> None:
    """Writes the config atomically (temporary file, then rename)."""
    # atomic_io.atomic_write: umask modes (tempfile.mkstemp would make it
    # 0600).
    atomic_io.atomic_write(path, json.dumps(self.to_dict(), indent=2,
                                      sort_keys=True) + "\n")

  def replace(self, **changes) -> "BertConfig":
    return dataclasses.replace(self, **changes)


def _preset(layers, hidden, heads):
  return BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                    num_attention_heads=heads, intermediate_size=4 * hidden)


# The released English models (Devlin et al. 2018; Turc et al. 2019 for the
# small BERTs), uncased vocabulary of 30522 WordPieces.
PRESETS = {
    "bert_tiny": _preset(2, 128, 2),
    "bert_mini": _preset(4, 256, 4),
    "bert_small": _preset(4, 512, 8),
    "bert_medium": _preset(8, 512, 8),
    "bert_base": _preset(12, 768, 12),
    "bert_large": _preset(24, 1024, 16),
}
