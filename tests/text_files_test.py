"""Task files (TSV/CSV/JSONL) to examples and packed inputs; one-sentence
errors with file and line."""

import json
import os

import numpy as np
import pytest

from official_bert.data import text_files
from official_bert.data import tokenization
from tests import testing

PAIR = text_files.Columns(text="question", text_b="answer", label="gold")


def _write(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def test_the_three_formats_read_the_same_examples(tmp_path):
  tsv = _write(tmp_path / "train.tsv",
               "id\tquestion\tanswer\tgold\n1\tWhy?\tBecause.\tyes\n\n"
               "2\tHow\tso, then\tno\n")
  csv_path = _write(tmp_path / "a.csv",
                    'id,question,answer,gold\n1,Why?,Because.,yes\n'
                    '2,How,"so, then",no\n')
  jsonl = _write(tmp_path / "b.jsonl",
                 json.dumps({"question": "Why?", "answer": "Because.",
                             "gold": "yes"}) + "\n\n" +
                 json.dumps({"question": "How", "answer": "so, then",
                             "gold": "no"}) + "\n")
  read = [text_files.read_examples(p, PAIR) for p in (tsv, csv_path, jsonl)]
  for examples in read:
    assert [(e.text, e.text_b, e.label) for e in examples] == [
        ("Why?", "Because.", "yes"), ("How", "so, then", "no")]
  assert read[0][1].where == f"{tsv}:4" and read[2][1].where == f"{jsonl}:3"
  assert text_files.label_list(read[0]) == ["no", "yes"]
  np.testing.assert_array_equal(
      text_files.label_ids(read[1], ["no", "yes"]), [1, 0])
  assert text_files.find_split_file(str(tmp_path), "train") == tsv
  # The test split may lack the label column.
  unlabelled = _write(tmp_path / "test.jsonl",
                      '{"question": "q", "answer": "a"}\n')
  [example] = text_files.read_examples(unlabelled, PAIR, require_label=False)
  assert example.label is None


@pytest.mark.parametrize("name, text, columns, match", [
    ("dev.tsv", "", PAIR, r"dev.tsv is empty"),
    ("dev.tsv", "question\tanswer\tlabel\nq\ta\tyes\n", PAIR,
     r"dev.tsv:2: no column 'gold' \(found \['answer', 'label', 'question'\]\); "
     r"name the right one with --label_column"),
    ("dev.tsv", "question\tanswer\tgold\nq\ta\tyes\nq\ta, b\tno\textra\n", PAIR,
     r"dev.tsv:3: 4 fields, but the header has 3"),
    ("dev.csv", 'question,answer,gold\n"multi\nline",a,yes\nq,a\n', PAIR,
     r"dev.csv:4: 2 fields, but the header has 3"),
    ("dev.jsonl", '{"question": "q", "answer": "a", "gold": 1}\n{"question":\n',
     PAIR, r"dev.jsonl:2: not valid JSON"),
    ("dev.jsonl", '["q", "a"]\n', PAIR, r"dev.jsonl:1: a JSON list, not an object"),
])
def test_bad_files_are_one_sentence_with_file_and_line(tmp_path, name, text,
                                                       columns, match):
  path = _write(tmp_path / name, text)
  with pytest.raises(ValueError, match=match) as error:
    text_files.read_examples(path, columns)
  assert "\n" not in str(error.value) and path in str(error.value)


def test_unknown_label_and_bad_regression_value(tmp_path):
  path = _write(tmp_path / "dev.tsv", "question\tanswer\tgold\nq\ta\tyes\n"
                "q\ta\tmaybe\n")
  examples = text_files.read_examples(path, PAIR)
  with pytest.raises(ValueError, match=rf"{path}:3: label 'maybe' is not among "
                     r"the training labels \['no', 'yes'\]"):
    text_files.label_ids(examples, ["no", "yes"])
  with pytest.raises(ValueError, match=rf"{path}:2: label 'yes' is not a number"):
    text_files.label_ids(examples, None, regression=True)
  with pytest.raises(ValueError, match="no test file"):
    text_files.find_split_file(str(tmp_path), "test")
  _write(tmp_path / "dev.jsonl", "{}\n")
  with pytest.raises(ValueError, match="several dev files"):
    text_files.find_split_file(str(tmp_path), "dev")


def test_encode_packs_and_truncates_the_longer_side():
  testing.require_shared_data()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB)
  examples = [
      text_files.Example("the quick brown fox jumps", "a dog", "x", "f:1"),
      text_files.Example("hello", "world", "y", "f:2")]
  got = text_files.encode(examples, tokenizer, max_seq_length=8)
  a = tokenizer.tokenize(["the quick brown fox jumps"]).to_list()[0]
  b = tokenizer.tokenize(["a dog"]).to_list()[0]
  # Budget 8 - 3 = 5: a loses tokens until 3 + 2 fit.
  assert got["input_word_ids"][0].tolist() == [101] + a[:3] + [102] + b + [102]
  assert got["input_type_ids"][0].tolist() == [0] * 5 + [1] * 3
  hello, world = (tokenizer.tokenize([w]).to_list()[0][0]
                  for w in ("hello", "world"))
  assert got["input_word_ids"][1].tolist() == [101, hello, 102, world, 102,
                                               0, 0, 0]
  assert got["input_mask"][1].tolist() == [1] * 5 + [0] * 3
  assert got["input_type_ids"][1].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
  single = text_files.encode(
      [text_files.Example("the quick brown fox jumps", None, "x", "f:1")],
      tokenizer, max_seq_length=4)
  assert single["input_word_ids"][0].tolist() == [101] + a[:2] + [102]


def test_pair_truncation_cuts_text_b_on_ties():
  # The original's _truncate_seq_pair: pop from the longer, b on ties.
  # a, b of 5 each into 7: 5/4 (tie: b), 4/4 (a longer), 4/3 (tie: b).
  a, b = text_files._truncate_pair([1, 2, 3, 4, 5],  # pylint: disable=protected-access
                                        [11, 12, 13, 14, 15], 7)
  assert (a, b) == ([1, 2, 3, 4], [11, 12, 13])
  testing.require_shared_data()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB)
  got = text_files.encode(
      [text_files.Example("the cat sat", "on the mat", "x", "f:1")],
      tokenizer, max_seq_length=8)
  the, cat, sat, on, mat = tokenizer.convert_tokens_to_ids(
      ["the", "cat", "sat", "on", "mat"])
  # Budget 8 - 3 = 5 for 3 + 3 pieces: b gives up "mat".
  assert got["input_word_ids"][0].tolist() == [101, the, cat, sat, 102, on,
                                               the, 102]
  assert got["input_type_ids"][0].tolist() == [0] * 5 + [1] * 3
