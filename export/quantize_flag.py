"""--quantize, defined once: export_saved_model and the fine-tuning programs
(official_bert/finetuning_flags.py) call `define` with their help text.

No TensorFlow here: the fine-tuning programs define and check their flags
before TensorFlow starts (tests/trainer_flags_test.py). The int8 export
itself is litert_int8.py.
"""

from absl import flags

CHOICES = ("none", "int8")  # int8: model.tflite with int8 weights (LiteRT)

# The flag belongs to the program that calls `define` (its --help section),
# not to this module.
flags.disclaim_key_flags()


def define(help_text):
  """Defines --quantize, one of CHOICES, default "none"."""
  flags.DEFINE_enum("quantize", "none", list(CHOICES), help_text)
