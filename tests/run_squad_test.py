"""run_squad.py as a real program: a tiny BERT fine-tuned on a rule-labelled
SQuAD v2.0 task from the Python docs is killed (SIGKILL) mid-training,
resumes, learns its questions (far above the sentence-overlap baseline),
writes the official evaluation, and its exported model answers the SQuAD
sample's questions from raw text exactly as predictions.json."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from official_bert.tasks.squad import squad_metrics
from tests import testing
from tools import squad_task

SAMPLE = os.path.join(testing.SHARED_DATA, "squad_v2_sample.json")


def _flags(tmp_path, out, *extra):
  return ["-m", "official_bert.run_squad",
          f"--bert_config_file={tmp_path / 'bert_config.json'}",
          f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
          "--version_2_with_negative", "--max_seq_length=64",
          "--doc_stride=24", "--max_query_length=24", *extra]


@pytest.mark.slow
def test_trains_resumes_after_sigkill_predicts_and_serves(tmp_path):
  testing.require_shared_data()
  testing.tiny_config(vocab_size=30522, max_position_embeddings=64,
                      hidden_size=64, intermediate_size=128).to_json_file(
                          str(tmp_path / "bert_config.json"))
  splits = squad_task.write_task(
      str(tmp_path / "task"), version_2=True, max_train=160, max_dev=10,
      train_docs=range(0, 300), dev_docs=range(300, 470))
  # One predict file: the task's training questions and the SQuAD sample's.
  # (A model this small only memorises; docs/squad.md measures
  # held-out questions.)
  with open(SAMPLE, encoding="utf-8") as f:
    sample = json.load(f)["data"]
  predict_file = tmp_path / "predict.json"
  predict_file.write_text(json.dumps({"version": "v2.0",
                                      "data": splits["train"] + sample}))
  out = tmp_path / "out"
  train = [f"--train_file={tmp_path / 'task' / 'train.json'}", "--do_train",
           "--train_batch_size=16", "--num_train_epochs=10",
           "--learning_rate=7e-4", "--save_checkpoints_steps=5",
           "--steps_per_loop=5"]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=testing.ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  killed = subprocess.Popen([sys.executable] + _flags(tmp_path, out, *train),
                            cwd=testing.ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.time() + 900  # start-up alone can take minutes on a loaded machine
  # The checkpoint state file is written last: then ckpt-5 is complete.
  while not os.path.exists(out / "checkpoint") and killed.poll() is None:
    assert time.time() < deadline
    time.sleep(0.05)
  killed.send_signal(signal.SIGKILL)
  killed.wait()
  assert killed.returncode == -signal.SIGKILL, killed.stderr.read()[-3000:]
  steps = int(160 / 16 * 10)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  first_prefix = tf.train.latest_checkpoint(str(out))
  first = int(first_prefix.rsplit("-", 1)[1])
  assert 5 <= first < steps
  assert not os.path.exists(out / "predictions.json")
  kept = tmp_path / "first"  # the rerun deletes old checkpoints
  os.makedirs(kept)
  for path in tf.io.gfile.glob(first_prefix + ".*"):
    shutil.copy(path, kept)

  # The rerun checkpoints at its end only: 19 saves of the 2M-parameter
  # model (vocab 30,522) and its Adam slots were ~1.5 s of CPU.
  proc = testing.run_cli(_flags(
      tmp_path, out, *train, "--save_checkpoints_steps=100", "--do_predict",
      f"--predict_file={predict_file}",
      f"--export_dir={tmp_path / 'serving'}",
      # This early every question would be "no answer": a high threshold
      # keeps the spans' text in predictions.json and the served answers.
      "--null_score_diff_threshold=1000",
      # The int8 gate's mechanics on SQuAD (this model only memorises, so
      # any drop passes: 1 = the whole F1 range).
      "--quantize=int8", "--max_quantization_drop=1",
      # One question whose context fits one window: XLA-compiled (the
      # answers equal: serving_test); the contexts here need several.
      "--xla_single_text"), timeout=1200)
  assert f"Resumed from {out / f'ckpt-{first}'} at step {first}" in proc.stdout
  assert f"Trained steps {first}..{steps}" in proc.stdout, proc.stdout[-3000:]
  assert "Initialised the encoder" not in proc.stdout
  # The pooler (no gradient under the span head) is saved, as it was.
  testing.assert_pooler_kept_others_trained(
      str(kept / os.path.basename(first_prefix)),
      tf.train.latest_checkpoint(str(out)))

  with open(out / "predictions.json") as f:
    predictions = json.load(f)
  with open(out / "null_odds.json") as f:
    null_odds = json.load(f)
  with open(out / "nbest_predictions.json") as f:
    nbest = json.load(f)
  questions = dict(squad_metrics.questions(splits["train"] + sample))
  assert set(predictions) == set(null_odds) == set(nbest) == set(questions)
  for qid, entries in nbest.items():
    assert [list(e) for e in entries[:1]] == [
        ["text", "probability", "start_logit", "end_logit"]]
    assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
    assert "" in [e["text"] for e in entries]  # v2.0 keeps the null answer
  # eval_results.txt: the official evaluation with null_odds as the
  # no-answer probabilities, over both parts of the predict file.
  with open(out / "eval_results.txt") as f:
    written = {k: float(v) for k, v in (line.split(" = ") for line in f)}
  # Against the transcription of the official evaluate-v2.0.py in
  # squad_evaluate_test, not the program's own squad_metrics.
  from tests import squad_evaluate_test  # pylint: disable=g-import-not-at-top
  _, expected, _ = squad_evaluate_test._official_v2(  # pylint: disable=protected-access
      splits["train"] + sample, predictions, null_odds)
  assert len(expected) > 10
  for key, value in expected.items():
    assert written[key] == pytest.approx(value), key
  assert written["global_step"] == steps
  assert {f"int8_{key}" for key in expected} <= set(written)
  assert "int8 " in proc.stdout.splitlines()[-1]
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  int8 = litert_int8.Int8Model.load(str(tmp_path / "serving" / "1"))
  assert sorted(int8.signature["outputs"]) == ["end_logits", "start_logits"]

  # It learned its training questions: the loss falls, and the best span
  # (nbest's first non-empty answer: the threshold would pick "no answer"
  # for most questions this early) is far above the sentence that shares
  # most words with the question.
  import re  # pylint: disable=g-import-not-at-top
  losses = [float(x) for x in re.findall(r"^step \d+/\d+ loss ([\d.]+)",
                                         proc.stdout, flags=re.M)]
  assert len(losses) >= 3 and losses[-1] < losses[0] - 1.0, losses
  best_spans = {q: next((e["text"] for e in nbest[q] if e["text"]), "")
                for q, golds in squad_metrics.questions(splits["train"])
                if golds}
  ours = squad_metrics.evaluate_v2(splits["train"], best_spans)
  baseline = squad_metrics.evaluate_v2(
      splits["train"], squad_task.overlap_baseline(splits["train"], True))
  print("tiny model HasAns_f1", ours["HasAns_f1"], "baseline",
        baseline["HasAns_f1"], "losses", losses)
  assert ours["HasAns_f1"] > baseline["HasAns_f1"] + 10, (ours, baseline)

  # The served model: raw question and context in, the same answers out.
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  served = tf.saved_model.load(str(tmp_path / "serving" / "1"))
  ids, texts, contexts = [], [], []
  for article in sample:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        ids.append(qa["id"])
        texts.append(qa["question"])
        contexts.append(paragraph["context"])
  got = served.signatures["serving_default"](
      question=tf.constant(texts), context=tf.constant(contexts))
  answers = [a.decode("utf-8") for a in got["answer"].numpy()]
  assert answers == [predictions[q] for q in ids]
  library = served.signatures["serving_default"].graph.as_graph_def().library
  assert [f for f in library.function if f.attr["_XlaMustCompile"].b]
  assert all(answers)  # (the threshold above)
  np.testing.assert_allclose(got["null_score_diff"].numpy(),
                             [null_odds[q] for q in ids], atol=1e-4)
  for i, answer in enumerate(answers):
    start, end = got["start_char"][i], got["end_char"][i]
    assert contexts[i][start:end] == answer if answer else start == end == -1
  assert list(got["no_answer"].numpy()) == [not a for a in answers]
  # Only core TF and TF Text ops: TF Serving with TF Text loads it.
  from export import saved_model_io  # pylint: disable=g-import-not-at-top
  ops = saved_model_io.op_types(str(tmp_path / "serving" / "1"))
  assert ops["other"] == [] and "RegexSplitWithOffsets" in ops["tf_text"]


@pytest.mark.parametrize("extra, message", [
    (["--do_train"], "--do_train needs --train_file."),
    (["--do_predict", f"--predict_file={SAMPLE}", "--max_query_length=61"],
     "--max_seq_length=64 leaves no room for the context after "
     "--max_query_length=61 and 3 special tokens; raise --max_seq_length."),
    (["--do_predict", f"--predict_file={SAMPLE}", "--kernels=fast",
      "--train_batch_size=0"], "--train_batch_size must be positive, got 0."),
])
def test_flag_errors_are_one_sentence_before_tensorflow(tmp_path, extra,
                                                         message):
  """The checks finetuning.py shares, and run_squad's own, with its modes."""
  testing.require_shared_data()
  testing.tiny_config().to_json_file(str(tmp_path / "bert_config.json"))
  out = tmp_path / "out"
  proc = testing.run_cli(_flags(tmp_path, out, *extra), check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].endswith(message), proc.stderr
  assert not out.exists()
