"""run_embedding (tasks/embedding/embedding_task.py): the loss against
sentence-transformers' MultipleNegativesRankingLoss and numpy, the retrieval
metrics on a hand-made case, the training file's hard negatives in the
loss, and the program: training raises dev MRR@10 above its starting
weights', eval_results.txt equals the metrics recomputed from the export's
`sentence_embedding`, sentence-transformers' `encode` of export_checkpoint's
output equals that signature, its pooling survives convert_checkpoint back,
a rerun from an early checkpoint ends with the uninterrupted run's weights,
the int8 model serves the same vectors, bad rows are one sentence naming
the file and line, and so is the benchmark without `datasets`."""

import glob
import json
import os
import re
import shutil

import numpy as np
import pytest

from official_bert.tasks.embedding import embedding_task
from official_bert.training import sentence_transformers_folder
from tests import testing
# The tiny config (BERT's vocabulary, 32 positions), eval_results.txt read.
from tests.multi_label_test import _config, _results  # pylint: disable=g-bad-import-order


def _mnrl_numpy(anchor, positive, negative=None, scale=20.0):
  candidates = positive if negative is None else np.concatenate(
      [positive, negative])
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
  scores = scale * unit(anchor) @ unit(candidates).T
  scores -= scores.max(1, keepdims=True)
  log_softmax = scores - np.log(np.exp(scores).sum(1, keepdims=True))
  return -np.mean(np.diag(log_softmax[:, :len(anchor)]))


def test_loss_is_sentence_transformers_multiple_negatives_ranking_loss():
  import torch  # pylint: disable=g-import-not-at-top
  from sentence_transformers.sentence_transformer import losses  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  # 3 anchors, 5 dimensions; vectors of different norms (cosine, not dot).
  anchor, positive, negative = (
      rng.normal(size=(3, 5)).astype(np.float32) * [[1.0], [3.0], [0.2]]
      for _ in range(3))
  loss = losses.MultipleNegativesRankingLoss(model=None)
  for roles in ((anchor, positive), (anchor, positive, negative)):
    expected = float(loss.compute_loss_from_embeddings(
        [torch.from_numpy(r) for r in roles], None))
    outputs = dict(zip(embedding_task.ROLES, roles))
    ours = float(embedding_task.ranking_losses(None, outputs)["loss"])
    assert ours == pytest.approx(expected, rel=1e-5)
    assert ours == pytest.approx(_mnrl_numpy(*roles), rel=1e-5)
  # The hard negatives matter: the loss with them differs.
  assert _mnrl_numpy(anchor, positive) != pytest.approx(
      _mnrl_numpy(anchor, positive, negative), rel=1e-3)


def test_retrieval_metrics_on_a_hand_made_case():
  # Query i's relevant document is document i; 2-d vectors, by angle.
  angle = lambda degrees: [np.cos(np.radians(degrees)),
                           np.sin(np.radians(degrees))]
  # Norms do not matter (documents 2 and 3: the same vector, a tie).
  documents = np.array([angle(0), angle(40), angle(80), angle(80)]) * [
      [1.0], [2.0], [0.5], [0.5]]
  queries = np.array([angle(5),     # doc 0 first: rank 1
                      angle(75),    # docs 2, 3 (80) before doc 1 (40): 3
                      angle(80),    # doc 2 ties doc 3, comes first: 1
                      angle(80)])   # doc 3 ties doc 2, which comes first: 2
  result = embedding_task.retrieval_metrics(queries, documents, k=2)
  assert result["recall_at_1"] == pytest.approx(2 / 4)
  assert result["recall_at_2"] == pytest.approx(3 / 4)
  assert result["mrr_at_2"] == pytest.approx((1 + 0 + 1 + 1 / 2) / 4)
  assert embedding_task.retrieval_metrics(queries, documents)[
      "mrr_at_10"] == pytest.approx((1 + 1 / 3 + 1 + 1 / 2) / 4)


def _write_pairs(directory, n_train=32, n_dev=16):
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  return retrieval_task.write_task(str(directory), n_train, n_dev, 4)


def _flags(task, out, config, *extra):
  return [f"--task_data_dir={task}", f"--bert_config_file={config}",
          f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
          "--max_seq_length=24", "--train_batch_size=8",
          "--learning_rate=1e-3", *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """One run of 4 steps ([CLS] pooling), a checkpoint every 2 (ckpt-2 and
  ckpt-4 kept), exported with --quantize=int8: {"task", "config", "out",
  "serving", "rows", "results" (eval_results.txt), "stdout", "argv"
  (output_dir -> its training flags)}."""
  testing.require_shared_data()
  root = tmp_path_factory.mktemp("embedding")
  task, out = root / "task", root / "out"
  rows = _write_pairs(task)
  config = _config(root)

  def argv(output_dir):
    return _flags(task, output_dir, config, "--do_train", "--do_eval",
                  "--pooling=cls", "--num_train_epochs=1",
                  "--save_checkpoints_steps=2", "--steps_per_loop=2")

  # With its int8 model (16 dev pairs: one rank swapped moves the MRR by
  # 1/32 or more, so the gate is loose here).
  proc = testing.run_program("official_bert.run_embedding", argv(out) + [
      f"--export_dir={root / 'serving'}", "--quantize=int8",
      "--max_quantization_drop=0.1"])
  return dict(task=task, config=config, out=out, serving=root / "serving",
              rows=rows, results=_results(out / "eval_results.txt"),
              stdout=proc.stdout, argv=argv)


def test_trains_exports_and_sentence_transformers_encode_agrees(
    trained, tmp_path):
  task, out, config = trained["task"], trained["out"], trained["config"]
  rows, results = trained["rows"], trained["results"]
  # run_embedding's own default update: Keras's bias-corrected AdamW with
  # torch's epsilon (measured better than the original's: sentence-
  # embeddings.md), not the other programs' AdamWeightDecay.
  run_flags = json.load(open(out / "flags.json"))
  assert (run_flags["optimizer"], run_flags["adam_epsilon"]) == (
      "keras_adamw", 1e-8)

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  served = tf.saved_model.load(str(trained["serving"] / "1")).signatures[
      "serving_default"]

  def embed(texts):
    return served(text=tf.constant(texts))["sentence_embedding"].numpy()

  dev = rows["dev"]
  expected = embedding_task.retrieval_metrics(
      embed([a for a, _ in dev]), embed([p for _, p in dev]))
  for key in ("mrr_at_10", "recall_at_1", "recall_at_10"):
    assert results[f"eval_{key}"] == pytest.approx(expected[key], abs=1e-6)

  # sentence-transformers reads export_checkpoint's output of the run: the
  # same vectors (cls pooling written), long texts cut alike.
  st_dir = tmp_path / "st"
  testing.run_program("export.export_checkpoint", [
      "--format=sentence_transformers", f"--bert_config_file={config}",
      f"--init_checkpoint={out}", f"--vocab_file={testing.VOCAB}",
      "--max_seq_length=24", f"--export_dir={st_dir}"])
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  model = SentenceTransformer(str(st_dir), device="cpu")
  texts = [a for a, _ in dev[:6]] + ["a", " ".join([dev[0][0]] * 4)]
  ours, theirs = embed(texts), model.encode(texts, batch_size=3)
  cosine = np.sum(ours * theirs, 1) / (
      np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
  assert cosine.min() >= 0.99999, cosine

  # Its pooling comes back through convert_checkpoint (the file as
  # sentence-transformers itself saves it) and is what a run from it uses.
  saved, converted = tmp_path / "st_saved", tmp_path / "converted"
  model.save(str(saved))
  testing.run_program("official_bert.convert_checkpoint", [
      f"--source={saved}", f"--output_dir={converted}"])
  assert sentence_transformers_folder.read_pooling(str(converted)) == "cls"
  again = testing.run_program("official_bert.run_embedding", _flags(
      task, tmp_path / "again", config, "--do_eval",
      f"--init_checkpoint={converted}"))
  assert "pooling: cls (--init_checkpoint's pooling.json)" in again.stdout
  again_results = _results(tmp_path / "again" / "eval_results.txt")
  assert again_results["eval_mrr_at_10"] == pytest.approx(
      results["eval_mrr_at_10"], abs=1e-6)


def test_int8_model_serves_the_sentence_embedding_and_is_gated_on_mrr(
    trained):
  # model.tflite answers as the SavedModel's serving_ids does: ids in,
  # `sentence_embedding` out, within cosine 0.99 on the dev texts; its
  # eval_results.txt keys are that model's retrieval metrics, and the
  # gate's metric is eval_mrr_at_10.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import litert_int8  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
      str(trained["task"]), "", splits=("dev",)))
  task.read()
  task.encode(tokenization.FullTokenizer(testing.VOCAB, True), 24)
  dev = task.splits["dev"][2]
  version = str(trained["serving"] / "1")
  int8 = litert_int8.Int8Model.load(version)
  assert int8.signature["outputs"] == ["sentence_embedding"]
  served = tf.saved_model.load(version).signatures["serving_ids"]
  vectors = {}
  for role in ("anchor", "positive"):
    a = int8.predict(dev[role], 5)["sentence_embedding"]
    b = served(**{k: tf.constant(v) for k, v in dev[role].items()})[
        "sentence_embedding"].numpy()
    cosine = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1)
                                 * np.linalg.norm(b, axis=1))
    assert cosine.min() >= 0.99, cosine
    # int8 weights, not float32's: LiteRT in float32 differs by ~6e-7,
    # int8 by ~4e-3 (vectors up to ~2).
    assert np.abs(a - b).max() > 1e-4
    vectors[role] = a
  expected = embedding_task.retrieval_metrics(vectors["anchor"],
                                              vectors["positive"])
  results = trained["results"]
  for key in ("mrr_at_10", "recall_at_1", "recall_at_10"):
    assert results[f"int8_eval_{key}"] == pytest.approx(expected[key],
                                                         abs=1e-6), key
  last = trained["stdout"].strip().splitlines()[-1]
  assert (f"int8 {version}/model.tflite (eval_mrr_at_10 float32 "
          f"{results['eval_mrr_at_10']:.4f}, int8 "
          f"{results['int8_eval_mrr_at_10']:.4f})") in last, last


def test_a_killed_run_resumes_exactly(trained, tmp_path):
  # Killed after ckpt-2 (of 4), then rerun: the output_dir holds what the
  # run had written by then (its run files and ckpt-2), and the rerun ends
  # where the uninterrupted run did, bit for bit: the shuffled, repeated
  # pairs skipped to step 2, the optimizer's moments, the learning-rate
  # schedule and the dropout seeds restored. (The real SIGKILL and rerun:
  # benchmarks/fault_table.py.)
  out = tmp_path / "out"
  os.makedirs(out)
  for name in ["flags.json", "bert_config.json", "pooling.json"] + [
      os.path.basename(p) for p in glob.glob(str(trained["out"] / "ckpt-2.*"))]:
    shutil.copy(trained["out"] / name, out)
  (out / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n'
                                  'all_model_checkpoint_paths: "ckpt-2"\n')
  resumed = testing.run_program("official_bert.run_embedding",
                                trained["argv"](out))
  assert f"Resumed from {out / 'ckpt-2'} at step 2" in resumed.stdout
  assert "Trained steps 2..4 " in resumed.stdout
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ours, reference = (tf.train.load_checkpoint(str(d / "ckpt-4"))
                     for d in (out, trained["out"]))
  names = reference.get_variable_to_shape_map()
  assert ours.get_variable_to_shape_map() == names
  assert any("optimizer" in name for name in names)  # the moments too
  for name in names:
    np.testing.assert_array_equal(ours.get_tensor(name),
                                  reference.get_tensor(name), err_msg=name)
  assert _results(out / "eval_results.txt") == {
      k: v for k, v in trained["results"].items() if not k.startswith("int8_")}


def test_the_training_files_negative_column_is_in_the_loss(tmp_path):
  """On the same weights (dropout off), the loss of the training pairs (8:
  one batch) from a train.tsv with a `negative` column is higher than from
  the same file without that column: each anchor's positive then competes
  with the batch's 8 hard negatives too (the denominator only grows). Bug
  caught: the task reading the column but leaving it out of train_data
  (its roles never including "negative"): in-batch negatives alone."""
  testing.require_shared_data()
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  with_negatives, without = tmp_path / "with", tmp_path / "without"
  _write_pairs(with_negatives, n_train=8, n_dev=4)
  rows = (with_negatives / "train.tsv").read_text(encoding="utf-8")
  assert rows.split("\n")[0] == "anchor\tpositive\tnegative"
  os.makedirs(without)
  (without / "train.tsv").write_text(
      "".join("\t".join(row.split("\t")[:2]) + "\n"
              for row in rows.splitlines()), encoding="utf-8")
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)
  bert_config = configs.BertConfig.from_json_file(_config(tmp_path))
  model, loss = None, {}
  for name, directory in (("with", with_negatives), ("without", without)):
    task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
        str(directory), "", splits=("train",)))
    task.read()
    task.encode(tokenizer, 24)
    model = model or task.build_model(bert_config, "keras")
    inputs, labels = task.train_data()  # 8 pairs: one batch
    loss[name] = float(task.losses(labels, model(inputs, training=False))[
        "loss"])
  # 0.59-0.67 higher over 8 untrained encoders (log 2 with [CLS] pooling,
  # whose vectors are all alike); equal when the column goes unused.
  assert loss["with"] > loss["without"] + 0.1, loss


def _write_table(directory, header, rows):
  os.makedirs(directory, exist_ok=True)
  (directory / "train.tsv").write_text(
      "".join("\t".join(row) + "\n" for row in [header] + rows),
      encoding="utf-8")


def test_every_negative_column_is_in_the_loss(tmp_path):
  """Several negative columns all enter the loss: on the same weights and
  8 pairs (one batch), the loss of anchor, positive, negative_1, negative_2
  (the mined layout, read by the default --negative_column=negative) is
  MultipleNegativesRankingLoss over the batch's positives and both
  negatives (numpy's, which the first test checks against
  sentence-transformers'), the same when the columns are named in a list
  (--negative_column=hard,harder), and higher than with negative_1 alone.
  Bug caught: reading only the first negative column (of the numbered ones
  or of the list)."""
  testing.require_shared_data()
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  rows = _write_pairs(tmp_path / "pairs", n_train=8, n_dev=8)
  # A second negative per row: a dev anchor (another document's sentence).
  table = [list(row) + [dev[0]] for row, dev in zip(rows["train"],
                                                    rows["dev"])]
  _write_table(tmp_path / "two", ["anchor", "positive", "negative_1",
                                  "negative_2"], table)
  _write_table(tmp_path / "listed", ["anchor", "positive", "hard", "harder"],
               table)
  _write_table(tmp_path / "first", ["anchor", "positive", "negative_1"],
               [row[:3] for row in table])
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)
  bert_config = configs.BertConfig.from_json_file(_config(tmp_path))
  model, loss, outputs = None, {}, {}
  for name, column in (("two", "negative"), ("listed", "hard,harder"),
                       ("first", "negative")):
    task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
        str(tmp_path / name), "", splits=("train",), negative_column=column))
    task.read()
    task.encode(tokenizer, 24)
    model = model or task.build_model(bert_config, "keras")
    inputs, labels = task.train_data()  # 8 rows: one batch
    outputs[name] = {k: np.asarray(v) for k, v in
                     model(inputs, training=False).items()}
    loss[name] = float(task.losses(labels, outputs[name])["loss"])
  two = outputs["two"]
  assert sorted(two) == ["anchor", "negative_1", "negative_2", "positive"]
  expected = _mnrl_numpy(two["anchor"], two["positive"], np.concatenate(
      [two["negative_1"], two["negative_2"]]))
  assert loss["two"] == pytest.approx(expected, rel=1e-5)
  assert loss["listed"] == pytest.approx(loss["two"], rel=1e-6)
  # 0.25-0.5 higher over untrained encoders: 8 more candidates per anchor.
  assert loss["two"] > loss["first"] + 0.05, loss


def test_the_next_sentence_task_pairs_each_sentence_with_the_next(tmp_path):
  # tools.retrieval_task --next_sentence (docs/search.md's hard task): each
  # positive is the line after its anchor in one document of the corpus,
  # no text is in two rows, and the train negative is another sentence of
  # that document.
  testing.require_shared_data()
  from tools import corpus  # pylint: disable=g-import-not-at-top
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  rows = retrieval_task.write_task(str(tmp_path), 60, 20, 5,
                                   next_sentence=True)
  follows = {}
  for doc in corpus.documents():
    for line, after in zip(doc, doc[1:]):
      follows.setdefault(" ".join(line.split()), set()).add(
          " ".join(after.split()))
  for split in ("train", "dev"):
    texts = [text for row in rows[split] for text in row[:2]]
    assert len(set(texts)) == len(texts), split
    for row in rows[split]:
      assert row[1] in follows[row[0]], row
  assert all(row[2] not in row[:2] for row in rows["train"])
  assert (tmp_path / "train.tsv").read_text().startswith(
      "anchor\tpositive\tnegative\n")


def test_the_context_task_pairs_each_sentence_with_its_passage(tmp_path):
  # tools.retrieval_task --context (docs/search.md's second hard task, the
  # Inverse Cloze Task): each positive is the CONTEXT sentences before and
  # after its anchor in one document, the anchor left out; no text is in two
  # rows of a split; the train negative is a whole passage of the anchor's
  # document that shares no sentence with its positive.
  testing.require_shared_data()
  from tools import corpus  # pylint: disable=g-import-not-at-top
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  rows = retrieval_task.write_task(str(tmp_path), 60, 400, 5, context=True)
  docs = [[" ".join(line.split()) for line in doc]
          for doc in corpus.documents()]
  where = {}  # sentence -> [(document, index)]
  for d, lines in enumerate(docs):
    for s, line in enumerate(lines):
      where.setdefault(line, []).append((d, s))

  def window(d, s):
    return range(max(0, s - retrieval_task.CONTEXT),
                 min(len(docs[d]), s + retrieval_task.CONTEXT + 1))

  def text(d, cells, leave_out=None):
    return " ".join(docs[d][i] for i in cells if i != leave_out)

  def places(row):  # [(document, the positive's sentences, the negative's)]
    found = []
    for d, s in where[row[0]]:
      if text(d, window(d, s), s) != row[1]:
        continue
      negatives = [window(d, i) for i in range(len(docs[d]))
                   if row[2:] and text(d, window(d, i)) == row[2]]
      found += [(d, window(d, s), n) for n in negatives or [()]]
    return found

  for split in ("train", "dev"):
    texts = [t for row in rows[split] for t in row]
    assert len(set(texts)) == len(texts), split
    taken = []  # the sentences of the rows found in one place
    for row in rows[split]:
      found = places(row)
      assert found, row  # the positive the anchor's passage, the negative
      # a whole passage of its document, sharing no sentence with it
      assert any(not set(ours) & set(its) for _, ours, its in found), row
      if len(found) == 1:
        d, ours, its = found[0]
        taken += [(d, i) for i in [*ours, *its]]
    # A split's passages share no sentence.
    assert len(set(taken)) == len(taken) > 0, split
  with pytest.raises(ValueError, match="pass one of them"):
    retrieval_task.write_task(str(tmp_path), 1, 1, 1, next_sentence=True,
                              context=True)


def test_training_raises_dev_mrr_above_its_starting_weights(tmp_path):
  """Dev MRR@10 after 24 steps (mean pooling, batch 16) is higher than that
  of the weights the training starts from: an eval-only run of the same
  seed, which builds the same weights (~0.88 here: an untrained encoder
  already ranks most rewordings first by their shared words). Bugs caught:
  a loss that pushes the wrong way (its sign, the wrong column as the
  class), no update, evaluation of the starting weights."""
  testing.require_shared_data()
  task, config = tmp_path / "task", _config(tmp_path)
  _write_pairs(task, n_train=128, n_dev=32)
  results = {}
  for name, extra in (("before", ["--do_eval"]),
                      ("after", ["--do_train", "--do_eval",
                                 "--num_train_epochs=3"])):
    flags_ = [f for f in _flags(task, tmp_path / name, config, *extra)
              if not f.startswith(("--learning_rate", "--train_batch_size"))]
    testing.run_program("official_bert.run_embedding", flags_ + [
        "--pooling=mean", "--train_batch_size=16", "--learning_rate=1e-3"])
    results[name] = _results(tmp_path / name / "eval_results.txt")
  before, after = (results[k]["eval_mrr_at_10"] for k in ("before", "after"))
  assert results["before"]["global_step"] == 0
  assert results["after"]["global_step"] == 24  # 128 pairs x 3 / batch 16
  assert before < 0.95, before  # room to rise
  assert after > before + 0.03, (before, after)


@pytest.mark.parametrize("files, flags_, match", [
    ({"dev.tsv": "anchor\tpositive\nopen the file\t\n"}, [],
     r"dev.tsv:2: the positive \('positive'\) is empty"),
    ({}, ["--positive_column=target"], r"train.tsv:2: no column 'target'"),
])
def test_bad_input_is_one_sentence(tmp_path, files, flags_, match):
  testing.require_shared_data()
  task = tmp_path / "task"
  os.makedirs(task)
  good = {"train.tsv": "anchor\tpositive\nopen the file\topen a file\n",
          "dev.tsv": "anchor\tpositive\nclose it\tclose that\n"}
  for name, text in dict(good, **files).items():
    (task / name).write_text(text)
  last = testing.refused_input("official_bert.run_embedding", _flags(
      task, tmp_path / "out", _config(tmp_path), "--do_train", "--do_eval",
      *flags_))
  assert re.search(match, last), last
  assert not os.path.exists(tmp_path / "out")


def test_benchmark_without_datasets_is_one_sentence(tmp_path, monkeypatch):
  # benchmarks/embedding_benchmark.py needs `datasets` (sentence-
  # transformers' trainer), which no requirements file installs: one
  # sentence with the fix, before it prepares anything. (None in
  # sys.modules: missing, whether or not this machine has it.)
  import sys  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(sys.modules, "datasets", None)
  last = testing.refused_input("benchmarks.embedding_benchmark", [
      f"--work_dir={tmp_path / 'work'}"])
  assert last.endswith("the datasets package, which is not installed: pip "
                       "install datasets"), last
  assert not (tmp_path / "work").exists()


def test_the_flags_poolings_are_the_models():
  from official_bert.modeling import sentence_embedder  # pylint: disable=g-import-not-at-top
  assert sentence_transformers_folder.POOLINGS == sentence_embedder.POOLINGS
