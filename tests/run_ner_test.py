"""run_ner.py as a real program on a CoNLL task made from the Python docs
(tools/pydocs_ner.py): it trains, evaluates with the entity metric, writes
test_predictions.txt, exports a model whose tags from raw text equal those
predictions, resumes after SIGKILL, and rejects a line without a tag with
one sentence."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from official_bert.tasks.ner import ner_data
from tests import testing
from tools import pydocs_ner


def _task(directory):
  testing.require_shared_data()
  pydocs_ner.write_task(str(directory), testing.CORPUS,
                        {"train": 40, "dev": 12, "test": 1})
  # test = dev, so eval_results.txt can be recomputed from the predictions.
  shutil.copy(directory / "dev.txt", directory / "test.txt")
  return str(directory)


def _flags(task, config, out, *extra):
  return ["-m", "official_bert.run_ner", f"--task_data_dir={task}",
          f"--bert_config_file={config}", f"--vocab_file={testing.VOCAB}",
          f"--output_dir={out}", "--do_train", "--max_seq_length=16",
          # A low rate keeps the head's random tags varied, so comparing
          # served and file tags can see a windowing difference.
          "--train_batch_size=8", "--learning_rate=1e-5",
          "--num_train_epochs=2", "--save_checkpoints_steps=4",
          "--steps_per_loop=1", *extra]


def _popen(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=testing.ROOT + os.pathsep + os.environ.get(
                 "PYTHONPATH", ""))
  return subprocess.Popen([sys.executable] + args, cwd=testing.ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


@pytest.mark.slow
def test_trains_predicts_exports_and_resumes_after_sigkill(tmp_path):
  task = _task(tmp_path / "task")
  config = tmp_path / "bert_config.json"
  testing.tiny_config(vocab_size=30522, max_position_embeddings=32
                      ).to_json_file(str(config))
  out_dir = tmp_path / "out"
  flags_ = _flags(task, config, out_dir, "--do_eval", "--do_predict",
                  f"--export_dir={tmp_path / 'serving'}")
  # Killed (-9) after its first checkpoint, then run again to the end.
  # (That the resumed weights equal an uninterrupted run's is the
  # trainer's property, tested with run_pretraining; this checks run_ner
  # resumes at the checkpoint's step and batch.)
  killed = _popen(flags_)
  # 900 s: TF start-up can take minutes under load.
  testing.sigkill_after_first_checkpoint(killed, out_dir, timeout=900)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  first_prefix = tf.train.latest_checkpoint(str(out_dir))
  first = int(first_prefix.rsplit("-", 1)[1])
  assert not (out_dir / "eval_results.txt").exists()
  kept = tmp_path / "first"  # the rerun deletes old checkpoints
  os.makedirs(kept)
  for path in tf.io.gfile.glob(first_prefix + ".*"):
    shutil.copy(path, kept)
  # The int8 gate's mechanics on NER (1: any drop of the F1 passes).
  resumed = testing.run_cli(flags_ + ["--quantize=int8",
                                      "--max_quantization_drop=1",
                                      "--xla_single_text"])
  steps = int(resumed.stdout.split("run_ner done at step ")[1].split(":")[0])
  assert 4 <= first < steps, (first, steps)  # killed mid-run
  assert f"at step {first}" in resumed.stdout
  assert f"Trained steps {first}..{steps}" in resumed.stdout
  # The pooler (no gradient under the token head) is saved, as it was.
  testing.assert_pooler_kept_others_trained(
      str(kept / os.path.basename(first_prefix)),
      tf.train.latest_checkpoint(str(out_dir)))

  # test_predictions.txt: every test word with its gold and predicted tag.
  sentences = ner_data.read_conll(os.path.join(task, "test.txt"))
  with open(out_dir / "test_predictions.txt", encoding="utf-8") as f:
    blocks = [b.splitlines() for b in f.read().strip("\n").split("\n\n")]
  assert len(blocks) == len(sentences)
  predicted = []
  for sentence, lines in zip(sentences, blocks):
    rows = [line.split(" ") for line in lines]
    assert [r[0] for r in rows] == list(sentence.words)
    assert [r[1] for r in rows] == list(sentence.tags)
    predicted.append([r[2] for r in rows])
  # eval_results.txt (dev = test here) is the entity metric of those tags,
  # as seqeval (conlleval's reference in Python) computes it, not as the
  # program's own ner_data.entity_metrics does.
  from seqeval import metrics as seqeval_metrics  # pylint: disable=g-import-not-at-top
  with open(out_dir / "eval_results.txt") as f:
    results = {k: float(v) for k, v in (line.split(" = ") for line in f)}
  gold = [list(s.tags) for s in sentences]
  expected = {name: getattr(seqeval_metrics, f"{name}_score")(gold, predicted)
              for name in ("f1", "precision", "recall", "accuracy")}
  for key in ("f1", "precision", "recall", "accuracy"):
    assert results[f"eval_{key}"] == pytest.approx(expected[key]), key
  _assert_tags_of_the_checkpoint(config, out_dir, sentences, predicted)
  assert {"eval_loss", "loss", "global_step"} <= set(results)
  assert {f"int8_eval_{key}" for key in expected} <= set(results)
  assert (tmp_path / "serving" / "1" / "model.tflite").exists()
  assert results["global_step"] == steps
  # Varied predicted tags (not all "O"), so the comparison below means
  # something.
  assert len({t for tags in predicted for t in tags}) >= 3

  # The served model, on the raw text, gives the same tags, and offsets
  # that cut the words out of the text.
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  served = tf.saved_model.load(str(tmp_path / "serving" / "1"))
  texts = [" ".join(s.words) for s in sentences]
  out = served.signatures["serving_default"](text=tf.constant(texts))
  # --xla_single_text: a request of one text that fits one window runs
  # XLA-compiled, with the batch's tags and scores.
  library = served.signatures["serving_default"].graph.as_graph_def().library
  assert [f for f in library.function if f.attr["_XlaMustCompile"].b]
  short = min(range(len(texts)), key=lambda i: len(sentences[i].words))
  one = served.signatures["serving_default"](text=tf.constant([texts[short]]))
  n = int(out["num_words"][short])
  np.testing.assert_array_equal(one["tags"][0, :n], out["tags"][short, :n])
  np.testing.assert_allclose(one["scores"][0, :n], out["scores"][short, :n],
                             atol=1e-5)
  # Some sentences need several windows at --max_seq_length=16.
  assert max(len(s.words) for s in sentences) > 14
  for i, text in enumerate(texts):
    n = int(out["num_words"][i])
    assert n == len(sentences[i].words)
    tags = [t.decode() for t in out["tags"][i].numpy()]
    assert tags[:n] == predicted[i] and set(tags[n:]) <= {""}
    starts, ends = out["start_char"][i].numpy(), out["end_char"][i].numpy()
    assert [text[s:e] for s, e in zip(starts[:n], ends[:n])] == list(
        sentences[i].words)


def _assert_tags_of_the_checkpoint(config, out_dir, sentences, predicted):
  """The file's tags equal tags computed here without run_ner's packer or
  decoder: the latest checkpoint in a Keras BertTokenClassifier, each
  sentence that fits one window packed by hand from the original's Python
  tokenizer as [CLS] pieces [SEP], each word tagged at its first piece."""
  import json  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
  with open(out_dir / "label_list.json", encoding="utf-8") as f:
    labels = json.load(f)
  model = finetuning_models.BertTokenClassifier.from_bert_config(
      configs.BertConfig.from_json_file(str(config)), len(labels))
  seq = 16  # --max_seq_length
  zeros = np.zeros((1, seq), np.int32)
  model({"input_word_ids": zeros, "input_mask": zeros + 1,
         "input_type_ids": zeros}, training=False)
  tf.train.Checkpoint(model=model).read(
      tf.train.latest_checkpoint(str(out_dir))).expect_partial()
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, do_lower_case=True)
  checked = 0
  for sentence, tags in zip(sentences, predicted):
    pieces, first = ["[CLS]"], []
    for word in sentence.words:
      first.append(len(pieces))
      pieces.extend(tokenizer.tokenize(word))
    pieces.append("[SEP]")
    if len(pieces) > seq:
      continue
    ids, mask = zeros.copy(), zeros.copy()
    ids[0, :len(pieces)] = tokenizer.convert_tokens_to_ids(pieces)
    mask[0, :len(pieces)] = 1
    logits = np.asarray(model({"input_word_ids": ids, "input_mask": mask,
                               "input_type_ids": zeros}, training=False))
    assert [labels[i] for i in logits[0, first].argmax(-1)] == list(tags)
    checked += 1
  assert checked >= 3, checked


def test_a_line_without_tag_is_one_sentence_and_writes_nothing(tmp_path):
  testing.require_shared_data()
  task = tmp_path / "task"
  os.makedirs(task)
  (task / "train.txt").write_text("-DOCSTART- O\n\nEU B-ORG\nsays O\n\n"
                                  "Peter B-PER\n", encoding="utf-8")
  (task / "dev.txt").write_text("EU B-ORG\n\nrejects O\nGerman\n",
                                encoding="utf-8")
  (tmp_path / "bert_config.json").write_text("{}")
  out = tmp_path / "out"
  proc = testing.run_cli(
      ["-m", "official_bert.run_ner", f"--task_data_dir={task}",
       f"--bert_config_file={tmp_path / 'bert_config.json'}",
       f"--vocab_file={testing.VOCAB}", f"--output_dir={out}", "--do_train",
       "--do_eval"], check=False)
  assert proc.returncode == 1, proc.stdout + proc.stderr
  assert "Traceback" not in proc.stderr
  last = proc.stderr.strip().splitlines()[-1]
  assert f"{task / 'dev.txt'}:4: the line 'German' has no tag" in last, last
  assert not out.exists()
