"""SQuAD data as the original: answers round-trip through the features and
get_final_text, windows over long contexts, and bad files are one sentence."""

import json
import os

import numpy as np
import pytest

from official_bert.tasks.squad import squad_data
from official_bert.tasks.squad import squad_answers
from official_bert.tasks.squad import squad_metrics
from tests import testing

SAMPLE = os.path.join(testing.SHARED_DATA, "squad_v2_sample.json")


@pytest.fixture(scope="module")
def tokenizer():
  testing.require_shared_data()
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  return tokenization.FullTokenizer(testing.VOCAB, do_lower_case=True)


def _perfect_logits(features):
  """Logits that point at each window's training label (answer or [CLS])."""
  n = len(features[0].input_ids)
  starts = np.full((len(features), n), -10.0)
  ends = np.full((len(features), n), -10.0)
  for i, f in enumerate(features):
    starts[i, f.start_position] = ends[i, f.end_position] = 10.0
  return starts.tolist(), ends.tolist()


@pytest.mark.parametrize("max_seq_length, doc_stride", [(384, 128), (48, 16)])
def test_perfect_logits_recover_every_answer(tokenizer, max_seq_length,
                                             doc_stride):
  examples = squad_data.read_squad_examples(SAMPLE, is_training=True,
                                       version_2_with_negative=True)
  features = squad_data.convert_examples_to_features(
      examples, tokenizer, max_seq_length, doc_stride, max_query_length=16,
      is_training=True)
  # 384: every sample context fits one window; 48: the long ones need several.
  if max_seq_length < 100:
    assert len(features) > len(examples)
  else:
    assert len(features) == len(examples)
  starts, ends = _perfect_logits(features)
  predictions, nbest, null_odds = squad_answers.postprocess(
      examples, features, starts, ends, tokenizer.vocab,
      version_2_with_negative=True)
  with open(SAMPLE, encoding="utf-8") as f:
    data = json.load(f)["data"]
  golds = dict(squad_metrics.questions(data))
  assert sum(1 for g in golds.values() if g) == 8
  for qid, answers in golds.items():
    # The exact answer text, punctuation around it dropped ("France." ->
    # "France"); "" for the 6 impossible questions.
    assert predictions[qid] == (answers[0] if answers else ""), qid
    assert (null_odds[qid] < 0) == bool(answers)
    assert nbest[qid][0]["text"] == predictions[qid]
  result = squad_metrics.evaluate_v2(data, predictions, null_odds)
  assert result["exact"] == 100.0 and result["f1"] == 100.0


def test_an_answer_one_piece_longer_than_max_answer_length_is_not_returned():
  # Context words a..f, one piece each, at window positions 3..8. The best
  # span (a..d, start 10 + end 10) is max_answer_length + 1 = 4 pieces long:
  # it must give way to the best span of at most 3 pieces, b..d (5 + 10),
  # ahead of a..c (10 + 4) and b..c (5 + 4).
  vocab = ["[CLS]", "q", "[SEP]", "a", "b", "c", "d", "e", "f"]
  words = vocab[3:]
  example = squad_data.SquadExample("q1", "q", " ".join(words), list(words))
  tokens = [0, 1, 2] + list(range(3, 9)) + [2]
  feature = squad_data.SquadFeature(
      unique_id=squad_data.FIRST_UNIQUE_ID, example_index=0, doc_span_index=0,
      tokens=tokens, token_to_orig_map={3 + i: i for i in range(6)},
      token_is_max_context={3 + i: True for i in range(6)},
      input_ids=tokens, input_mask=[1] * len(tokens),
      segment_ids=[0] * 3 + [1] * 7)
  starts, ends = [-10.0] * len(tokens), [-10.0] * len(tokens)
  starts[3], starts[4] = 10.0, 5.0  # a, b
  ends[6], ends[5] = 10.0, 4.0      # d, c
  predictions, nbest, _ = squad_answers.postprocess(
      [example], [feature], [starts], [ends], vocab, max_answer_length=3)
  assert predictions["q1"] == "b c d"
  texts = [entry["text"] for entry in nbest["q1"]]
  assert texts[:3] == ["b c d", "a b c", "b c"]
  assert "a b c d" not in texts


def test_answer_text_through_get_final_text():
  # The pieces lack case, accents and the punctuation glued to words.
  assert squad_answers.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
  assert squad_answers.get_final_text("1895", "(1895-1943).", True) == "1895"
  assert squad_answers.get_final_text("cafe", "Café,", True) == "Café"
  assert squad_answers.get_final_text("smith", "Smith", False) == "Smith"
  # Cased model: no match when the case differs -> the whole original text.
  assert squad_answers.get_final_text("smith", "Smith's", False) == "Smith's"


def _original_max_context(spans, n):
  """Best window per position, written independently: the largest
  min(left, right) + 0.01 * length, the first window on ties."""
  best = []
  for position in range(n):
    scores = [min(position - s, s + length - 1 - position) + 0.01 * length
              if s <= position < s + length else -1.0
              for s, length in spans]
    best.append(int(np.argmax(scores)))  # argmax takes the first maximum
  return best


def test_doc_spans_and_max_context_by_hand():
  assert squad_data.doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
  assert squad_data.doc_spans(10, 4, 8) == [(0, 4), (4, 4), (8, 2)]
  assert squad_data.doc_spans(4, 4, 2) == [(0, 4)]
  assert squad_data.doc_spans(0, 4, 2) == []
  spans = [(0, 4), (3, 4), (6, 4)]
  # Position 3: 0 pieces on its short side in both windows -> the first.
  assert squad_data.is_max_context(spans, 0, 3)
  assert not squad_data.is_max_context(spans, 1, 3)
  # Position 4: one piece left in window 1, none right in window 0.
  assert squad_data.is_max_context(spans, 1, 4)
  # Position 6: no piece on the short side in windows 1 and 2 -> window 1.
  assert squad_data.max_context_windows(spans, 10) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
  # The longer window wins a tie of sides (0.01 per piece).
  # (position 3: min(1, 1) + 0.03 in window 0, min(3, 1) + 0.05 in window 1)
  assert squad_data.is_max_context([(2, 3), (0, 5)], 0, 3) is False
  assert squad_data.is_max_context([(2, 3), (0, 5)], 1, 3) is True


def test_windows_over_a_context_longer_than_max_seq_length(tokenizer):
  examples = squad_data.read_squad_examples(SAMPLE, True, True)
  example = max(examples, key=lambda e: len(e.context) * (not e.is_impossible))
  assert example.orig_answer_text == "William the Conqueror"
  max_seq_length, doc_stride, max_query_length = 48, 12, 16
  features = squad_data.convert_examples_to_features(
      [example], tokenizer, max_seq_length, doc_stride, max_query_length, True)
  doc = tokenizer.tokenize([example.context]).to_list()[0]
  query = tokenizer.tokenize([example.question_text]).to_list()[0]
  query = query[:max_query_length]
  assert len(doc) > 5 * max_seq_length
  room = max_seq_length - len(query) - 3
  starts = list(range(0, len(doc) - room + doc_stride, doc_stride))
  spans = [(s, min(room, len(doc) - s)) for s in starts]
  assert spans[-1][0] + spans[-1][1] == len(doc) > spans[-2][0] + room - 1
  assert len(features) == len(spans)
  best = _original_max_context(spans, len(doc))
  answer = tokenizer.tokenize([example.orig_answer_text]).to_list()[0]
  answer_at = next(i for i in range(len(doc))
                   if doc[i:i + len(answer)] == answer)
  seen = []
  for index, (feature, (start, length)) in enumerate(zip(features, spans)):
    assert feature.doc_span_index == index
    n = sum(feature.input_mask)
    ids = feature.input_ids
    assert ids[:n] == ([tokenizer.cls_id] + query + [tokenizer.sep_id]
                       + doc[start:start + length] + [tokenizer.sep_id])
    assert set(ids[n:]) <= {0} and len(ids) == max_seq_length
    assert feature.segment_ids[:n] == [0] * (len(query) + 2) + [1] * (length + 1)
    offset = len(query) + 2
    for i in range(length):
      assert feature.token_is_max_context[offset + i] == (best[start + i] == index)
      if feature.token_is_max_context[offset + i]:
        seen.append(start + i)
    if start <= answer_at and answer_at + len(answer) <= start + length:
      assert (feature.start_position, feature.end_position) == (
          answer_at - start + offset, answer_at - start + offset + len(answer) - 1)
      assert ids[feature.start_position:feature.end_position + 1] == answer
    else:  # Not (wholly) in this window: [CLS].
      assert (feature.start_position, feature.end_position) == (0, 0)
  # Every context piece is predicted from exactly one window.
  assert seen == list(range(len(doc)))
  assert sum(f.start_position > 0 for f in features) >= 2


def test_context_pieces_equal_the_tokenizer_and_point_into_the_text(tokenizer):
  texts = ["Café  (Paris),\u00a0the FOO_BAR's  x", "  naïve\tΣίσυφος 北京 ok.",
           "", "a\u200bb (1895-1943)."]
  pieces = squad_data.context_pieces(tokenizer, texts)
  for i, text in enumerate(texts):
    ids = pieces["ids"][i].flat_values.numpy().tolist()
    assert ids == tokenizer.tokenize([text]).to_list()[0], text
    words, _ = squad_data.split_words(text)
    assert [w.decode() for w in pieces["words"][i].numpy()] == words
    raw = text.encode("utf-8")
    spans = [raw[s:e].decode("utf-8") for s, e in zip(
        pieces["piece_start"][i].flat_values.numpy(),
        pieces["piece_end"][i].flat_values.numpy())]
    tokens = [t.replace("##", "") for t in tokenizer.convert_ids_to_tokens(ids)]
    for span, token in zip(spans, tokens):
      # Same text but for case; accented words span their basic token.
      assert span.lower() == token or token in squad_answers.basic_tokenize([span])[0][0], (
          span, token)


def test_narrow_no_break_space_separates_context_words(tmp_path, tokenizer):
  # U+202F (in real SQuAD contexts) is whitespace to the original's reader.
  context = "in Paris\u202fFrance today."
  assert squad_data.split_words(context) == (
      ["in", "Paris", "France", "today."],
      [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3])
  path = tmp_path / "train.json"
  path.write_text(json.dumps({"data": [{"paragraphs": [{
      "context": context, "qas": [{"id": "q1", "question": "Where?",
                                   "answers": [{"text": "France",
                                                "answer_start": 9}]}]}]}]}))
  example, = squad_data.read_squad_examples(str(path), is_training=True,
                                       version_2_with_negative=False)
  assert example.doc_tokens == ["in", "Paris", "France", "today."]
  assert (example.start_position, example.end_position) == (2, 2)
  # The graph's words are the reader's (byte offsets: U+202F is 3 bytes).
  pieces = squad_data.context_pieces(tokenizer, [context])
  assert [w.decode() for w in pieces["words"][0].numpy()] == (
      example.doc_tokens)
  assert pieces["word_start"][0].numpy().tolist() == [0, 3, 11, 18]
  assert pieces["word_end"][0].numpy().tolist() == [2, 8, 17, 24]


@pytest.mark.parametrize("content, message", [
    ('{"version": "1.1"}', r"{path} has no \"data\" list"),
    ("this is not json", r"{path} is not JSON \(line 1: Expecting value\)"),
    (json.dumps({"data": [{"paragraphs": [{"context": "Paris is in France.",
                 "qas": [{"id": "q42", "question": "Where?", "answers": [
                     {"text": "France", "answer_start": 3}]}]}]}]}),
     r"{path} has no training question whose answer text is at its "
     r"answer_start \(1 skipped: q42\); fix answer_start or the text\.$"),
])
def test_bad_squad_files_are_one_sentence(tmp_path, content, message):
  testing.require_shared_data()
  path = tmp_path / "train.json"
  path.write_text(content)
  config = tmp_path / "bert_config.json"
  testing.tiny_config(vocab_size=30522).to_json_file(str(config))
  out = tmp_path / "out"
  proc = testing.run_cli([
      "-m", "official_bert.run_squad", f"--bert_config_file={config}",
      f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
      f"--train_file={path}", "--do_train"], check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "Traceback" not in proc.stderr
  last = proc.stderr.strip().splitlines()[-1]
  import re  # pylint: disable=g-import-not-at-top
  assert re.search(message.format(path=re.escape(str(path))), last), last
  assert not os.path.exists(out)


# "France" is at 12; at 3 the words are "is in"; 13 is inside "France." (the
# original's check finds the text in the answer's words); 100 is past the end.
_CONTEXT = "Paris is in France. Rollo was a Viking."


def _question(qid, text, start):
  return {"id": qid, "question": "Where?",
          "answers": [{"text": text, "answer_start": start}]}


def _squad_file(tmp_path, qas, version="v2.0"):
  path = tmp_path / "squad_data.json"
  path.write_text(json.dumps({"version": version, "data": [{"paragraphs": [
      {"context": _CONTEXT, "qas": qas}]}]}))
  return str(path)


def test_training_answers_not_at_answer_start_are_skipped_as_the_original(
    tmp_path):
  path = _squad_file(tmp_path, [
      _question("good", "France", 12), _question("bad", "France", 3),
      _question("inside", "France", 13), _question("far", "France", 100),
      _question("empty", " ", 12)])
  skipped = []
  examples = squad_data.read_squad_examples(path, True, False, skipped)
  assert [e.qas_id for e in examples] == ["good", "inside"]
  assert skipped == ["bad", "far", "empty"]
  # Both point at the word "France." (word 3), as the original's positions.
  assert [(e.start_position, e.end_position) for e in examples] == [(3, 3),
                                                                    (3, 3)]


def test_prediction_reads_no_answers(tmp_path):
  qas = [_question("bad", "France", 3), _question("far", "x", 100),
         {"id": "junk", "question": "?", "answers": "not a list"},
         {"id": "imp", "question": "?", "answers": [], "is_impossible": True},
         {"id": "bad_start", "question": "?",
          "answers": [{"text": "x", "answer_start": "3"}]}]
  path = _squad_file(tmp_path, qas)
  examples = squad_data.read_squad_examples(path, False, False)
  assert [e.qas_id for e in examples] == [q["id"] for q in qas]
  assert not any(e.is_impossible for e in examples)  # read as v1.1
  examples = squad_data.read_squad_examples(path, False, True)
  assert [e.qas_id for e in examples if e.is_impossible] == ["imp"]


def test_a_v2_file_predicted_without_the_v2_flag_reads_as_v1_1():
  testing.require_shared_data()
  examples = squad_data.read_squad_examples(SAMPLE, False, False)
  assert len(examples) == 14 and not any(e.is_impossible for e in examples)
  # Training on it still needs the flag (the original: "exactly 1 answer").
  with pytest.raises(ValueError, match=r"question 5ad39d53604f3c001a3fe8d3 "
                     r"is impossible \(SQuAD v2.0\); pass "
                     r"--version_2_with_negative\.$"):
    squad_data.read_squad_examples(SAMPLE, True, False)


def test_files_that_are_not_squad_are_still_one_sentence_for_prediction(
    tmp_path):
  path = _squad_file(tmp_path, [{"question": "no id"}])
  with pytest.raises(ValueError, match=r"paragraphs\[0\] has a question "
                     r"without an \"id\" or \"question\" string\.$"):
    squad_data.read_squad_examples(path, False, False)


def test_run_squad_reports_the_skipped_questions_in_one_line(tmp_path):
  """A train file with 6 misaligned answers among good ones, and a v2.0
  predict file without --version_2_with_negative: both are read (the run
  then stops at the unusable vocab, after reading, before training)."""
  train = _squad_file(tmp_path, [_question("good", "France", 12)] + [
      _question(f"bad{i}", "France", 3) for i in range(6)])
  predict = tmp_path / "predict.json"
  predict.write_text(json.dumps({"version": "v2.0", "data": [{"paragraphs": [
      {"context": _CONTEXT, "qas": [
          _question("p1", "France", 3),
          {"id": "imp", "question": "?", "answers": [],
           "is_impossible": True}]}]}]}))
  config, vocab = tmp_path / "bert_config.json", tmp_path / "vocab.txt"
  # 512 positions: --max_seq_length=384 fits, so the vocab is what stops it.
  testing.tiny_config(vocab_size=30522, max_position_embeddings=512
                      ).to_json_file(str(config))
  vocab.write_bytes(b"\x00\xff")
  proc = testing.run_cli([
      "-m", "official_bert.run_squad", f"--bert_config_file={config}",
      f"--vocab_file={vocab}", f"--output_dir={tmp_path / 'out'}",
      f"--train_file={train}", "--do_train", f"--predict_file={predict}",
      "--do_predict"], check=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert proc.stdout.splitlines() == [
      f"{train}: skipped 6 training questions whose answer text is not at its "
      "answer_start (as the original): bad0, bad1, bad2, bad3, bad4, ..."]
  assert "holds NUL bytes" in proc.stderr.strip().splitlines()[-1]
