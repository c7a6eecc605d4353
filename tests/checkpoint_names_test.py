"""The name table against google-research/bert's released BERT-Base names.

tests/testdata/bert_base_original_variables.txt is written out from the
original's modeling.py and run_pretraining.py scopes, not from our table, so
a renamed entry in checkpoint_names.py (e.g. `cls/seq_relationship/
output_bias`), a missing one or a wrong transpose fails here, where a test
writing its TF1 fixture from our own table would pass.
"""

import os

import numpy as np

from official_bert import configs
from official_bert.modeling import initializers
from official_bert.modeling import pretrainer as pretrainer_lib
from official_bert.training import checkpoint_names
from tests import testing


def _released_variables():
  path = os.path.join(testing.TESTDATA, "bert_base_original_variables.txt")
  with open(path, encoding="utf-8") as f:
    rows = [line.rstrip("\n").split("\t") for line in f
            if line.strip() and not line.startswith("#")]
  return {name: tuple(int(d) for d in shape.split(",")) for name, shape in rows}


def test_table_gives_the_released_bert_base_names_and_shapes(monkeypatch):
  released = _released_variables()
  # The file's own check: the encoder's 109,482,240 published parameters.
  assert sum(int(np.prod(shape)) for name, shape in released.items()
             if name.startswith("bert/")) == 109_482_240
  # Names and shapes do not depend on initial values; zeros are faster.
  monkeypatch.setattr(initializers, "truncated_normal", lambda stddev: "zeros")
  model = pretrainer_lib.BertPretrainer.from_bert_config(
      configs.PRESETS["bert_base"])
  ours = {name: tuple(variable.shape[::-1] if transpose else variable.shape)
          for name, (variable, transpose)
          in checkpoint_names.original_names(model).items()}
  assert sorted(set(released) - set(ours)) == []  # names we would not load
  assert sorted(set(ours) - set(released)) == []  # names Google never wrote
  assert {n: s for n, s in ours.items() if released[n] != s} == {}
