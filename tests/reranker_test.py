"""run_reranker (tasks/reranking/): the losses against torch's, the ranking
metrics and the mining rules on hand-made cases, the training pairs' labels,
and one tiny run shared by the program tests: the `rerank` signature and
`serving_default` give the run's scores, the dev metrics recomputed from the
signature's scores over the retriever's candidates are eval_results.txt's,
sentence-transformers' CrossEncoder on export_checkpoint's output gives the
same scores, the int8 model passes its gate, a killed run resumes exactly,
and bad input is one sentence naming the file and line."""

import glob
import math
import os
import re
import shutil

import numpy as np
import pytest

from official_bert.tasks.reranking import candidates
from official_bert.tasks.reranking import reranking_task
from tests import testing
# The tiny config with BERT's vocabulary; eval_results.txt read.
from tests.multi_label_test import _config as _vocab_config, _results  # pylint: disable=g-bad-import-order


def _config(directory):
  """The tiny config with BERT's vocabulary, 32 positions and 1 layer
  (what the tests check does not depend on depth)."""
  return _vocab_config(directory, num_hidden_layers=1)


def test_losses_are_torchs():
  # bce: torch's BCEWithLogitsLoss with pos_weight (what sentence-
  # transformers' BinaryCrossEntropyLoss computes); listwise: the softmax
  # cross-entropy of each group with its positive as the class.
  import torch  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(5, 1)).astype(np.float32) * 3
  labels = np.array([1, 0, 0, 1, 0], np.float32)
  expected = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(2.5))(
      torch.from_numpy(logits[:, 0]), torch.from_numpy(labels))
  ours = reranking_task.bce_losses(labels, logits, 2.5)["loss"]
  assert float(ours) == pytest.approx(float(expected), rel=1e-6)
  groups = rng.normal(size=(3, 4)).astype(np.float32)
  positive = np.array([0, 2, 1], np.int32)
  expected = torch.nn.functional.cross_entropy(
      torch.from_numpy(groups), torch.from_numpy(positive).long())
  ours = reranking_task.listwise_losses(positive, groups)["loss"]
  assert float(ours) == pytest.approx(float(expected), rel=1e-6)


def test_ranking_metrics_on_a_hand_made_case():
  orders = [[3, 1, 2], [0, 1, 2], [2, 0, 1]]
  relevant = [{1}, {5}, {0, 1}]  # query 1's positive was not retrieved
  found = candidates.ranking_metrics(orders, relevant)
  assert found["mrr_at_10"] == pytest.approx((1 / 2 + 0 + 1 / 2) / 3)
  ideal = 1 + 1 / math.log2(3)
  ndcg = [1 / math.log2(3), 0, (1 / math.log2(3) + 1 / 2) / ideal]
  assert found["ndcg_at_10"] == pytest.approx(np.mean(ndcg))
  # Reranked by scores, ties keeping the candidates' order.
  order = candidates.reranked([np.array([7, 8, 9])], [[0.1, 0.5, 0.5]])[0]
  assert order.tolist() == [8, 9, 7]
  # Reciprocal rank fusion, k = 60: retriever ranks 1, 2, 3 (the order),
  # reranker ranks 3, 1, 2 -> 1/61 + 1/63, 1/62 + 1/61, 1/63 + 1/62.
  fused = candidates.fused([[0.1, 0.9, 0.5]])[0]
  np.testing.assert_allclose(
      fused, [1 / 61 + 1 / 63, 1 / 62 + 1 / 61, 1 / 63 + 1 / 62])
  assert candidates.reranked([np.array([7, 8, 9])],
                             [fused])[0].tolist() == [8, 7, 9]


def test_mining_takes_the_guides_window_and_limits():
  # One query, 8 passages; its positive is passage 0 (0.9), its own text
  # passage 1 (0.99). Ranked without them: 4 (0.86), 3 (0.845), 2 (0.83),
  # 5 (0.7), 6 (0.6), 7 (0.5).
  scores = np.array([[0.9, 0.99, 0.83, 0.845, 0.86, 0.7, 0.6, 0.5]])

  def mine(rank_range, max_score, margin):
    return candidates.mine(scores, [[0]], np.array([1]), 2, rank_range,
                           max_score, margin)
  # Ranks 1..5; limit min(0.85, 0.9 - 0.9 x 0.05): 4 over it.
  assert mine((0, 5), 0.85, 0.05) == ([[3, 2]], 1)
  # Ranks 3..5 (the first 2 skipped): 2, 5, 6.
  assert mine((2, 5), 0.85, 0.05) == ([[2, 5]], 0)
  # The score limit: 0.84.
  assert mine((0, 5), 0.84, 0.05) == ([[2, 5]], 2)
  # The margin: 10% under the positive, 0.81.
  assert mine((0, 5), 1.0, 0.1) == ([[5, 6]], 3)


def _tiny_task(directory, train, dev=None):
  os.makedirs(directory, exist_ok=True)
  for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
    if rows:
      (directory / name).write_text("".join("\t".join(r) + "\n"
                                            for r in rows), encoding="utf-8")


def test_training_pairs_are_labelled_and_grouped(tmp_path):
  """bce: one pair per distinct (query, passage), 1 for the query's
  positives (its other rows' too), 0 for its negatives; listwise: one
  group per row, its positive first (the label 0). Bugs caught: labels
  swapped or all one value, the positive not first in its group."""
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  _tiny_task(tmp_path, [
      ("anchor", "positive", "negative_1", "negative_2"),
      ("open a file", "use open", "close it", "delete it"),
      ("open a file", "call open()", "use open", "read it"),  # two answers
      ("sort a list", "use sorted", "use open", "reverse it")])
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)

  def encoded(pairs):
    return text_files.encode([text_files.Example(q, p, None, "")
                              for q, p in pairs], tokenizer, 16)[
                                  "input_word_ids"]
  config = reranking_task.RerankingConfig(str(tmp_path), "", ("train",))
  task = reranking_task.RerankingTask(config)
  task.read()
  task.encode(tokenizer, 16)
  inputs, labels = task.train_data()
  pairs = [("open a file", "use open", 1), ("open a file", "close it", 0),
           ("open a file", "delete it", 0), ("open a file", "call open()", 1),
           ("open a file", "read it", 0), ("sort a list", "use sorted", 1),
           ("sort a list", "use open", 0), ("sort a list", "reverse it", 0)]
  np.testing.assert_array_equal(inputs["input_word_ids"],
                                encoded([p[:2] for p in pairs]))
  np.testing.assert_array_equal(labels, [p[2] for p in pairs])
  assert task.positive_weight == pytest.approx(5 / 3)  # negatives / positive
  task = reranking_task.RerankingTask(dataclasses_replace(config,
                                                          loss="listwise"))
  task.read()
  task.encode(tokenizer, 16)
  inputs, labels = task.train_data()
  assert inputs["input_word_ids"].shape == (3, 3, 16)
  np.testing.assert_array_equal(inputs["input_word_ids"][1], encoded([
      ("open a file", "call open()"), ("open a file", "use open"),
      ("open a file", "read it")]))
  np.testing.assert_array_equal(labels, [0, 0, 0])


def dataclasses_replace(config, **changes):
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(config, **changes)


def _export_retriever(directory, config):
  """A random tiny encoder's text export (sentence_embedding out), as
  run_embedding's."""
  from export import serving  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  encoder = encoder_lib.BertEncoder.from_bert_config(
      configs.BertConfig.from_json_file(config), kernels="keras")
  rng = np.random.default_rng(1)  # the same weights in any test order
  for weight in encoder.weights:
    name = weight.path.split("/")[-1]
    weight.assign(np.ones(weight.shape) if name == "gamma" else
                  np.zeros(weight.shape) if name in ("beta", "bias") else
                  rng.normal(0, 0.05, weight.shape))
  return serving.export_saved_model(
      str(directory), encoder, testing.VOCAB, seq_length=24,
      warmup_texts=())


def _flags(task, out, config, *extra):
  return [f"--task_data_dir={task}", f"--bert_config_file={config}",
          f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
          "--max_seq_length=32", "--train_batch_size=8",
          "--learning_rate=1e-3", *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """One run of ~11 steps (bce, ~90 pairs: 32 queries' positives and up
  to 2 negatives each mined by a random retriever), evaluated and saved
  every 5 (ckpt-10 and the last kept), test pairs scored, exported with
  --quantize=int8: {"task", "config", "out", "serving", "retriever",
  "rows", "test", "results", "stdout", "argv"}."""
  testing.require_shared_data()
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("reranker")
  task, out, config = root / "task", root / "out", _config(root)
  rows = retrieval_task.write_task(str(task), 32, 16, 4)
  # test.tsv: pairs to score, a query's positive and another's.
  test = [(q, p) for (q, _), (_, p) in zip(rows["dev"][:6],
                                          rows["dev"][1:7])] + [
                                              tuple(r) for r in rows["dev"][:6]]
  (task / "test.tsv").write_text("".join(
      "\t".join(r) + "\n" for r in [("anchor", "positive")] + test))
  retriever = _export_retriever(root / "retriever", config)

  def argv(output_dir):
    # The random retriever's cosines are all near 1: no score limit, no
    # margin, negatives from its top 10.
    return _flags(task, output_dir, config, "--do_train", "--do_eval",
                  "--do_predict", f"--retriever={root / 'retriever'}",
                  "--negative_rank_range=0,10", "--max_negative_score=1",
                  "--negative_margin=0", "--num_negatives=2",
                  "--rerank_top_k=8", "--num_train_epochs=1",
                  "--eval_every_steps=5", "--save_checkpoints_steps=5")

  # 16 dev queries x 8 candidates: one swapped rank moves MRR@10 by up to
  # 1/32, and the float32 model is barely trained: the gate is loose here.
  proc = testing.run_program("official_bert.run_reranker", argv(out) + [
      f"--export_dir={root / 'serving'}", "--quantize=int8",
      "--max_quantization_drop=0.2"])
  return dict(task=task, config=config, out=out, serving=root / "serving",
              retriever=retriever, rows=rows, test=test,
              results=_results(out / "eval_results.txt"),
              stdout=proc.stdout, argv=argv)


@pytest.fixture(scope="module")
def served(trained):
  """The reranker's and the retriever's signatures, loaded once."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  reranker = tf.saved_model.load(str(trained["serving"] / "1"))
  retriever = tf.saved_model.load(trained["retriever"])
  return dict(rerank=reranker.signatures["rerank"],
              pairs=reranker.signatures["serving_default"],
              embed=retriever.signatures["serving_default"],
              keep=(reranker, retriever))


def _scores(path):
  return np.array([float(line) for line in open(path)])


def test_rerank_signature_gives_the_runs_scores_and_metrics(trained, served):
  """The `rerank` signature (one query, its passages) and serving_default
  (pairs) give test_results.tsv's scores (the run's predict, sigmoid of
  the logit) within 1e-5, and the dev metrics recomputed from the
  signature's scores over the retriever's top 8 are eval_results.txt's.
  Bugs caught: no sigmoid on `scores`, query and passage swapped in
  `rerank`, the retriever's order reported as the reranked one."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rerank, pairs = served["rerank"], served["pairs"]
  expected = _scores(trained["out"] / "test_results.tsv")
  test = trained["test"]
  got = np.concatenate([rerank(query=tf.constant(q if i % 2 else [q]),
                               passages=tf.constant([p]))["scores"].numpy()
                        for i, (q, p) in enumerate(test)])
  np.testing.assert_allclose(got, expected, atol=1e-5)
  by_pairs = pairs(text=tf.constant([q for q, _ in test]),
                   text_b=tf.constant([p for _, p in test]))
  np.testing.assert_allclose(by_pairs["scores"].numpy(), expected, atol=1e-5)
  np.testing.assert_allclose(tf.sigmoid(by_pairs["logits"]).numpy(),
                             expected, atol=1e-5)
  # Dev: the retriever's top 8 of the dev passages, reranked by `rerank`.
  embed = served["embed"]
  dev = trained["rows"]["dev"]
  queries = [q for q, _ in dev]
  passages = [p for _, p in dev]
  vectors = [embed(text=tf.constant(t))["sentence_embedding"].numpy()
             for t in (queries, passages)]
  top = candidates.top_candidates(candidates.cosine(*vectors), 8)
  answers = [rerank(query=tf.constant(q), passages=tf.constant(
      [passages[j] for j in c])) for q, c in zip(queries, top)]
  scores = [a["scores"].numpy() for a in answers]
  relevant = [{i} for i in range(len(dev))]
  ours = candidates.ranking_metrics(candidates.reranked(top, scores),
                                    relevant)
  theirs = candidates.ranking_metrics(top, relevant)
  # Fused on the logits, as the run does (sigmoids in float32 tie where
  # logits differ).
  logits = [a["logits"].numpy() for a in answers]
  both = candidates.ranking_metrics(
      candidates.reranked(top, candidates.fused(logits)), relevant)
  results = trained["results"]
  for key in ("mrr_at_10", "ndcg_at_10"):
    assert results[f"eval_fused_{key}"] == pytest.approx(both[key], abs=1e-6)
    assert results[f"eval_{key}"] == pytest.approx(ours[key], abs=1e-6)
    assert results[f"eval_retriever_{key}"] == pytest.approx(theirs[key],
                                                             abs=1e-6)
  assert abs(ours["mrr_at_10"] - theirs["mrr_at_10"]) > 0.05  # a new order
  assert results["eval_candidates_per_query"] == 8


SNIPPET_FIRST_LINES = "import numpy as np\nimport tensorflow as tf\n"


def retrieve_then_rerank_block():
  """docs/search.md's retrieve-then-rerank ```python block, as written."""
  with open(os.path.join(testing.ROOT, "docs", "search.md"),
            encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)
  found = [b for b in blocks if b.startswith(SNIPPET_FIRST_LINES)
           and 'signatures["rerank"]' in b]
  assert len(found) == 1, found
  return found[0]


def test_retrieve_then_rerank_block_runs(trained, served, capsys,
                                        monkeypatch):
  """The block runs as written, its two export paths the tiny run's: the
  retriever's top 3 of the corpus, reordered by the reranker's scores
  (checked against serving_default's scores of the same pairs). Its
  tf.saved_model.load answers with the exports `served` loaded (the same
  objects; ~2 s each saved). It runs before the tests that run the
  program again: a run sets TensorFlow's seed, which clears the kernels
  of every function instantiated so far, and each signature called after
  it is optimized anew (~0.2 s a call). Bug caught: a block that no longer
  runs (a renamed signature or output)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reranker, retriever = served["keep"]
  loaded = {str(trained["serving"] / "1"): reranker,
            trained["retriever"]: retriever}
  monkeypatch.setattr(tf.saved_model, "load", loaded.__getitem__)
  block = retrieve_then_rerank_block()
  for path, real in (("/tmp/minilm_serving/1", trained["retriever"]),
                     ("/tmp/rerank_serving/1",
                      str(trained["serving"] / "1"))):
    assert block.count(f'"{path}"') == 1, path
    block = block.replace(f'"{path}"', repr(real))
  namespace = {}
  exec(compile(block, "docs/search.md", "exec"), namespace)  # pylint: disable=exec-used
  corpus, query, top = (namespace[k] for k in ("corpus", "query", "top"))
  answer = served["pairs"](text=tf.constant([query] * len(top)),
                           text_b=tf.constant([corpus[i] for i in top]))
  scores = answer["scores"].numpy()
  expected = [corpus[i] for i in top[np.argsort(-scores, kind="stable")]]
  assert namespace["reranked"] == expected
  fused = candidates.fused([answer["logits"].numpy()])[0]
  assert capsys.readouterr().out.strip().splitlines() == [
      str(expected), str([corpus[i] for i in top[np.argsort(-fused,
                                                            kind="stable")]])]


def test_cross_encoder_on_the_hugging_face_export_gives_the_same_scores(
    trained, tmp_path):
  # export_checkpoint of the run's best checkpoint (what the run exported)
  # writes a one-label BertForSequenceClassification; sentence-transformers'
  # CrossEncoder.predict (its sigmoid) gives test_results.tsv's scores.
  testing.require("sentence_transformers")
  hf = tmp_path / "hf"
  proc = testing.run_program("export.export_checkpoint", [
      "--format=huggingface", f"--bert_config_file={trained['config']}",
      f"--init_checkpoint={trained['out'] / 'best'}",
      f"--vocab_file={testing.VOCAB}", f"--export_dir={hf}"])
  assert "huggingface, reranker from" in proc.stdout
  from sentence_transformers import CrossEncoder  # pylint: disable=g-import-not-at-top
  model = CrossEncoder(str(hf), device="cpu", max_length=32)
  assert model.config.num_labels == 1
  got = model.predict(trained["test"], batch_size=5)
  np.testing.assert_allclose(got, _scores(
      trained["out"] / "test_results.tsv"), atol=1e-4)


def test_int8_model_passes_its_gate(trained):
  # model.tflite is published with its dev metrics in eval_results.txt and
  # the gate's words on the last line.
  results = trained["results"]
  assert (trained["serving"] / "1" / "model.tflite").exists()
  assert "int8_eval_mrr_at_10" in results
  assert results["eval_mrr_at_10"] - results["int8_eval_mrr_at_10"] <= 0.2
  last = trained["stdout"].strip().splitlines()[-1]
  assert "model.tflite (eval_mrr_at_10 float32" in last, last
  assert "retriever alone: eval_mrr_at_10" in last, last


def test_a_killed_run_resumes_exactly(trained, tmp_path):
  # Killed after ckpt-10 (of 11 or so), then rerun: it ends with the
  # uninterrupted run's weights and optimizer slots bit for bit (the same
  # mined pairs, shuffled alike, skipped to step 10).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  kept = sorted(int(re.search(r"ckpt-(\d+)", p).group(1)) for p in
                glob.glob(str(trained["out"] / "ckpt-*.index")))
  first, last = kept  # ckpt-10 and the last (steps: the mined pairs / 8)
  assert first == 10 and last > first, kept
  out = tmp_path / "out"
  os.makedirs(out)
  for name in ["flags.json", "bert_config.json",
               reranking_task.RETRIEVED_FILE,
               reranking_task.RETRIEVED_RECORD] + [
                   os.path.basename(p) for p in glob.glob(
                       str(trained["out"] / f"ckpt-{first}.*"))]:
    shutil.copy(trained["out"] / name, out)
  (out / "checkpoint").write_text('model_checkpoint_path: "ckpt-10"\n'
                                  'all_model_checkpoint_paths: "ckpt-10"\n')
  # Training only: the run's dev evaluations and its scoring of test.tsv
  # do not touch the weights.
  resumed = testing.run_program("official_bert.run_reranker", [
      a for a in trained["argv"](out) if a not in ("--do_eval",
                                                    "--do_predict")])
  assert f"Resumed from {out / 'ckpt-10'} at step 10" in resumed.stdout
  # What the retriever gave the run (written before training): reused, so
  # the rerun does not load it.
  reused = (f"retriever: reused {out / reranking_task.RETRIEVED_FILE} (made "
            "from the same retriever, files and settings)")
  assert reused in resumed.stdout
  ours, reference = (tf.train.load_checkpoint(str(d / f"ckpt-{last}"))
                     for d in (out, trained["out"]))
  names = reference.get_variable_to_shape_map()
  assert any("optimizer" in name for name in names)
  for name in names:
    np.testing.assert_array_equal(ours.get_tensor(name),
                                  reference.get_tensor(name), err_msg=name)
  assert (out / "reranker_negatives.tsv").read_text() == (
      trained["out"] / "reranker_negatives.tsv").read_text()
  # Evaluation alone (no --do_train: no training pairs, no positive
  # weight) of the finished run: its line, and the same dev figures.
  alone = testing.run_program("official_bert.run_reranker", [
      a for a in trained["argv"](out) if a not in ("--do_train",
                                                    "--do_predict")])
  assert "reranker (bce): dev 16 queries" in alone.stdout
  assert "eval_fused_mrr_at_10 " in alone.stdout
  assert reused in alone.stdout
  assert _results(out / "eval_results.txt")["eval_retriever_mrr_at_10"] == (
      trained["results"]["eval_retriever_mrr_at_10"])


def test_a_rerun_runs_the_retriever_again_when_an_input_changed(
    trained, tmp_path, capsys, monkeypatch):
  """The task's encode (as a rerun's) with the run's reranker_retrieved
  files: reused when nothing changed (the same negatives, candidates and
  retriever figures as the run's, without loading the retriever); with
  another --rerank_top_k, mining flag, column or retriever, a changed dev
  file or an edited file, the line says what changed and the retriever runs
  again (here it is stopped as it loads). Bugs caught: a record that leaves
  out the settings, the retriever or a file, the cache read whatever its
  digest."""
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.reranking import retriever as retriever_lib  # pylint: disable=g-import-not-at-top
  out, task_dir = tmp_path / "out", tmp_path / "task"
  shutil.copytree(trained["task"], task_dir)
  os.makedirs(out)
  for name in (reranking_task.RETRIEVED_FILE,
               reranking_task.RETRIEVED_RECORD):
    shutil.copy(trained["out"] / name, out)
  tokenizer = tokenization.FullTokenizer(testing.VOCAB, True)

  class Loaded(Exception):
    pass

  def load(version):
    raise Loaded(version)
  monkeypatch.setattr(retriever_lib, "Retriever", load)

  def encode(**changes):
    config = reranking_task.RerankingConfig(
        str(task_dir), str(out), ("train", "dev"),
        retriever=str(trained["retriever"]), vocab_file=testing.VOCAB,
        rerank_top_k=8, num_negatives=2, negative_rank_range=(0, 10),
        max_negative_score=1.0, negative_margin=0.0)
    task = reranking_task.RerankingTask(dataclasses_replace(config,
                                                            **changes))
    task.read()
    capsys.readouterr()
    task.encode(tokenizer, 32)
    return task, capsys.readouterr().out

  task, said = encode()
  assert said.startswith(f"retriever: reused {out / reranking_task.RETRIEVED_FILE}")
  negatives = (trained["out"] / reranking_task.NEGATIVES_FILE).read_text()
  assert task.prepare_training(None, None, False, 0) == {
      reranking_task.NEGATIVES_FILE: negatives}  # the run's, not rewritten
  assert task.retriever_metrics == {
      k: v for k, v in trained["results"].items()
      if k.startswith("eval_retriever_")}
  assert [len(c) for c in task.splits["dev"].candidates] == [8] * 16
  # Another retriever: the same export with one weight changed.
  other = tmp_path / "other_retriever"
  shutil.copytree(trained["retriever"], other)
  data = sorted(glob.glob(str(other / "variables" / "variables.data-*")))[0]
  with open(data, "r+b") as f:
    byte = f.read(1)
    f.seek(0)
    f.write(bytes([byte[0] ^ 1]))
  for changes, what in [
      ({"rerank_top_k": 4}, "--rerank_top_k changed"),
      ({"negative_margin": 0.05}, "the mining (--num_negatives"),
      ({"negative_column": "other"}, "the columns changed"),
      ({"retriever": str(other)}, "the retriever (--retriever) changed")]:
    with pytest.raises(Loaded):
      encode(**changes)
    assert what in capsys.readouterr().out
  with open(task_dir / "dev.tsv", "a", encoding="utf-8") as f:
    f.write("one more query\tits answer\n")
  with pytest.raises(Loaded):
    encode()
  assert "the dev file changed since the retriever ran; running the " \
         "retriever again" in capsys.readouterr().out
  with open(out / reranking_task.RETRIEVED_FILE, "a", encoding="utf-8") as f:
    f.write(" ")
  with pytest.raises(Loaded):
    encode()
  assert (f"{reranking_task.RETRIEVED_FILE} changed since it was written"
          in capsys.readouterr().out)


def _bad_vocab(tmp_path):
  lines = open(testing.VOCAB, encoding="utf-8").read().splitlines()
  lines[2000] = "zzzzq"
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return path


@pytest.mark.parametrize("case", ["no_positive", "vocabulary",
                                  "no_sentence_embedding", "no_negatives",
                                  "teacher"])
def test_bad_input_is_one_sentence(trained, tmp_path, case):
  task = tmp_path / "task"
  shutil.copytree(trained["task"], task)
  extra = [f"--retriever={trained['retriever']}"]
  if case == "no_positive":
    with open(task / "dev.tsv", "a", encoding="utf-8") as f:
      f.write("how do I close a file\t \n")
    match = r"dev.tsv:18: the query 'how do I close a file' has no positive"
  elif case == "vocabulary":
    extra.append(f"--vocab_file={_bad_vocab(tmp_path)}")
    match = (r"assets/bert_uncased_vocab.txt:2001: the retriever's "
             r"vocabulary has '.*' where --vocab_file .* has 'zzzzq'")
  elif case == "no_sentence_embedding":  # the reranker's own export
    extra = [f"--retriever={trained['serving']}"]
    match = (r"serving/1/saved_model.pb: its serving_default takes "
             r"\['text', 'text_b'\] and returns \['logits', 'scores'\], not "
             "text in and sentence_embedding out")
  elif case == "teacher":
    extra.append(f"--teacher={trained['out']}")
    match = "run_reranker does not distil from a --teacher yet; drop --teacher"
  else:
    extra = []
    match = (r"train.tsv has no negatives .* and no --retriever mines them; "
             "add negative columns or pass --retriever")
    text = (task / "train.tsv").read_text().splitlines()
    (task / "train.tsv").write_text("".join(
        "\t".join(line.split("\t")[:2]) + "\n" for line in text))
  last = testing.refused_input("official_bert.run_reranker", _flags(
      task, tmp_path / "out", trained["config"], "--do_train", "--do_eval",
      *extra))
  assert re.search(match, last), last
  assert not os.path.exists(tmp_path / "out")


def test_benchmark_without_datasets_is_one_sentence(tmp_path, monkeypatch):
  # benchmarks/reranker_benchmark.py needs `datasets` (CrossEncoderTrainer),
  # which no requirements file installs: one sentence with the fix, before
  # it prepares anything. (Its --smoke run takes ~100 s: run by hand.)
  import sys  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(sys.modules, "datasets", None)
  last = testing.refused_input("benchmarks.reranker_benchmark", [
      f"--work_dir={tmp_path / 'work'}", "--smoke"])
  assert last.endswith("the datasets package, which is not installed: pip "
                       "install datasets"), last
  assert not (tmp_path / "work").exists()
