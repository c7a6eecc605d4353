"""tasks/ner/ner_data.py: CoNLL reading, word windows, and the entity metric checked
against seqeval (the reference implementation of conlleval's figures)."""

import random

import numpy as np
import pytest

from official_bert.tasks.ner import ner_data
from tests import testing


def test_reads_conll_2003_files(tmp_path):
  path = tmp_path / "train.txt"
  path.write_text(
      "-DOCSTART- -X- -X- O\n\n"
      "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\n\n\n"
      "Peter\tB-PER\nBlackburn\tI-PER\n"
      "-DOCSTART- -X- -X- O\n"
      "os.path  B-MOD\n", encoding="utf-8")
  sentences = ner_data.read_conll(str(path))
  assert [s.words for s in sentences] == [
      ("EU", "rejects", "German"), ("Peter", "Blackburn"), ("os.path",)]
  assert [s.tags for s in sentences] == [
      ("B-ORG", "O", "B-MISC"), ("B-PER", "I-PER"), ("B-MOD",)]
  assert sentences[1].where == f"{path}:8"
  assert ner_data.label_list(sentences) == ["B-MISC", "B-MOD", "B-ORG", "B-PER",
                                       "I-PER", "O"]


def test_a_line_without_tag_names_file_and_line(tmp_path):
  path = tmp_path / "dev.txt"
  path.write_text("EU B-ORG\n\nrejects O\nGerman\ncall O\n", encoding="utf-8")
  with pytest.raises(ValueError, match=rf"{path}:4: the line 'German' has "
                     r"no tag; each line must be `word ... tag`"):
    ner_data.read_conll(str(path))
  (tmp_path / "empty.txt").write_text("-DOCSTART- O\n\n")
  with pytest.raises(ValueError, match=r"empty.txt has no sentences"):
    ner_data.read_conll(str(tmp_path / "empty.txt"))
  sentences = ner_data.read_conll(_write(tmp_path / "ok.txt", "a O\nb B-X\n"))
  with pytest.raises(ValueError, match=r"ok.txt:1 \(sentence starting "
                     r"there\): the tag 'B-X' of 'b' is not among"):
    ner_data.tag_ids(sentences, ["O"])


def _write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def test_conlleval_chunks_by_hand():
  # IOB1 (CoNLL-2003's own): I- after O starts a chunk, B- splits two
  # adjacent chunks of one type.
  assert ner_data.entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == {
      ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)}
  # A type change ends a chunk even inside I-s; IOBES's E-/S- end one.
  assert ner_data.entities(["B-PER", "I-LOC", "E-LOC", "S-ORG", "I-ORG"]) == {
      ("PER", 0, 0), ("LOC", 1, 2), ("ORG", 3, 3), ("ORG", 4, 4)}
  metrics = ner_data.entity_metrics([["B-PER", "I-PER", "O", "B-LOC"]],
                               [["B-PER", "O", "O", "B-LOC"]])
  assert metrics["precision"] == metrics["recall"] == 0.5
  assert metrics["f1_LOC"] == 1.0 and metrics["f1_PER"] == 0.0
  assert metrics["accuracy"] == 0.75


@pytest.mark.parametrize("scheme", ["IOB2", "IOB1", "IOBES"])
def test_entity_metrics_equal_seqeval(scheme):
  from seqeval import metrics as seqeval  # pylint: disable=g-import-not-at-top
  prefixes = {"IOB2": "BI", "IOB1": "BI", "IOBES": "BIES"}[
      scheme]
  rng = random.Random(len(scheme))

  def sentence(n):
    tags = []
    for _ in range(n):
      if rng.random() < 0.4:
        tags.append("O")
      else:
        tags.append(f"{rng.choice(prefixes)}-{rng.choice(['PER', 'LOC', 'M'])}")
    if scheme == "IOB1":  # B- only right after a chunk of the same type
      tags = [t.replace("B-", "I-") if i == 0 or tags[i - 1][2:] != t[2:]
              else t for i, t in enumerate(tags)]
    return tags

  gold = [sentence(rng.randint(1, 12)) for _ in range(300)]
  # Predictions: gold with some tags changed, so there are hits and misses.
  predicted = [[t if rng.random() < 0.7 else sentence(1)[0] for t in s]
               for s in gold]
  ours = ner_data.entity_metrics(gold, predicted)
  assert ours["f1"] > 0.2 and ours["num_gold_entities"] > 500
  assert ours["precision"] == pytest.approx(
      seqeval.precision_score(gold, predicted), abs=1e-12)
  assert ours["recall"] == pytest.approx(
      seqeval.recall_score(gold, predicted), abs=1e-12)
  assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, predicted),
                                     abs=1e-12)
  assert ours["accuracy"] == pytest.approx(
      seqeval.accuracy_score(gold, predicted), abs=1e-12)
  report = seqeval.classification_report(gold, predicted, output_dict=True)
  for kind in ("PER", "LOC", "M"):
    assert ours[f"f1_{kind}"] == pytest.approx(report[kind]["f1-score"],
                                               abs=1e-12)


def test_words_are_packed_into_windows_with_labels_on_first_pieces():
  testing.require_shared_data()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, do_lower_case=True)
  seq = 9  # windows of 7 pieces
  sentences = [
      ner_data.Sentence(("Call", "os.path.join()", "now"), ("O", "B-F", "O"), "a"),
      # 14 one-piece words: two full windows of 7.
      ner_data.Sentence(tuple("a b c d e f g h i j k l m n".split()),
                   tuple("O" * 13 + "B"), "b"),
      ner_data.Sentence(("\x07", "Unbelievably", "x"), ("O", "B-F", "O"), "c"),
      ner_data.Sentence(("z",), ("B-F",), "d"),
  ]
  labels = ["B", "B-F", "O"]
  ids = ner_data.tag_ids(sentences, labels)
  inputs, window, position, window_labels = ner_data.encode(
      sentences, tokenizer, seq, ids)
  words = [w for s in sentences for w in s.words]
  sentence_of = [i for i, s in enumerate(sentences) for _ in s.words]
  assert inputs["input_word_ids"].shape == (len(window_labels), seq)
  # Every word has one place; no two share it.
  assert len(set(zip(window, position))) == len(words)
  # A window never holds two sentences; a sentence's windows are in order.
  for w in set(window):
    assert len({sentence_of[i] for i in np.flatnonzero(window == w)}) == 1
  assert np.all(np.diff(window) >= 0)
  assert list(window[3:17]) == [3] * 7 + [4] * 7  # greedy, no overlap
  # The word's first piece is at its position, its label id there only.
  for i, word in enumerate(words):
    pieces = tokenizer.tokenize([word]).to_list()[0] or [tokenizer.unk_id]
    row = inputs["input_word_ids"][window[i]]
    assert row[position[i]] == pieces[0], word
    assert window_labels[window[i], position[i]] == np.concatenate(ids)[i]
  assert (window_labels >= 0).sum() == len(words)
  # [CLS] first, [SEP] after the last piece, padding masked.
  for r in range(len(window_labels)):
    n = inputs["input_mask"][r].sum()
    assert inputs["input_word_ids"][r][0] == tokenizer.cls_id
    assert inputs["input_word_ids"][r][n - 1] == tokenizer.sep_id
    assert n <= seq and not inputs["input_mask"][r][n:].any()
  # os.path.join() has 7 pieces (os . path . join ( )): 6 fit beside "call"?
  # No: it opens its own window and keeps its first 7.
  assert window[0] == 0 and window[1] == 1 and position[1] == 1
  assert list(inputs["input_word_ids"][1][1:8]) == tokenizer.tokenize(
      ["os.path.join()"]).to_list()[0][:7]
  # A word with no pieces (a control character) is [UNK].
  assert inputs["input_word_ids"][window[17]][position[17]] == tokenizer.unk_id
