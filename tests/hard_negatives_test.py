"""--mine_hard_negatives (tasks/embedding/hard_negatives.py): `mine` on a
hand-made case; on the embedding task with a tiny model, the mined file's
layout, each anchor's negatives recomputed from the vectors (the best K
passages that are neither its positive, nor its own text, nor within the
margin of its positive: a planted near-duplicate of a positive is mined
without the margin and not with it); a rerun reuses the file, a changed
training file, starting weights or mined file redo it and the log says
why, a resumed run keeps it whatever its weights; and run_embedding's
flags: mined, trained on, reused by the rerun."""

import glob
import os
import re
import shutil

import numpy as np
import pytest

from official_bert.tasks.embedding import embedding_task
from official_bert.tasks.embedding import hard_negatives
from tests import testing
from tests.embedding_test import _config, _flags, _write_pairs, _write_table  # pylint: disable=g-bad-import-order

K = 3
# The tiny untrained encoder's vectors are all alike (cosines 0.9-1): a
# margin of 1% of the positive's score, not the default 5%, leaves most
# anchors K candidates.
MARGIN = 0.01


def test_mine_on_a_hand_made_case():
  # 2-d vectors by angle; passage 0 is anchor 0's positive (at 10 degrees).
  angle = lambda d: [np.cos(np.radians(d)), np.sin(np.radians(d))]
  corpus = np.array([angle(d) for d in (10, 12, 30, 50, 70, 0)]) * [
      [1.0], [2.0], [0.5], [1.0], [3.0], [1.0]]  # norms do not matter
  anchors = np.array([angle(0), angle(60)])
  # Anchor 0: positive 0 (cos 10 = 0.985; margin 0.05 -> 0.936): passage 1
  # (cos 12 = 0.978) is a near-duplicate, 5 is its own text; 2, 3, 4 are
  # left, best first. Anchor 1: positives 3 and 4 (cos 10 both), own text
  # none; the margin skips none of 0, 1, 2 (cos 50, 48, 30) nor 5 (60).
  mined = hard_negatives.mine(anchors, corpus, [[0], [3, 4]], [5, -1], K,
                              relative_margin=0.05, chunk_elements=6)
  np.testing.assert_array_equal(mined.negatives, [[2, 3, 4], [2, 1, 0]])
  np.testing.assert_allclose(mined.scores, np.cos(np.radians(
      [[30, 50, 70], [30, 48, 50]])), rtol=1e-6)
  assert mined.skipped == 1  # passage 1 for anchor 0
  # Without a margin passage 1 comes first; with a wide one, anchor 0 has
  # fewer than K candidates (-1).
  assert hard_negatives.mine(anchors, corpus, [[0], [3, 4]], [5, -1], K,
                             None).negatives[0].tolist() == [1, 2, 3]
  assert hard_negatives.mine(anchors, corpus, [[0], [3, 4]], [5, -1], K,
                             0.3).negatives[0].tolist() == [3, 4, -1]


def _task(data, out, **config):
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
      str(data), str(out), splits=("train",), pooling="mean",
      mine_hard_negatives=K, hard_negative_margin=MARGIN, **config))
  task.read()
  task.encode(tokenization.FullTokenizer(testing.VOCAB, True), 24)
  return task


_STEPS = {}  # id(model) -> (model, its predict step)


def _predictor(model):
  """finetuner.predict as run_task's Finetuner calls it: batches cut to
  their longest (a multiple of 8), one step per model, traced once (a step
  per call traced the model again each time: ~1.5 s of this file)."""
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top

  def predict(inputs):
    if id(model) not in _STEPS:
      _STEPS[id(model)] = model, finetuner.predict_step(model, inputs, 8)
    return finetuner.predict(model, inputs, 16, 8, step=_STEPS[id(model)][1])
  return predict


def _prepare(task, model, resumed=False):
  """task.prepare_training as run_task calls it (the Finetuner's predict),
  with its files written to output_dir."""
  files = task.prepare_training(_predictor(model), model, resumed, 0)
  for name, text in files.items():
    with open(f"{task.config.output_dir}/{name}", "w", encoding="utf-8") as f:
      f.write(text)
  return files


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
  """24 training rows with planted trouble, mined once with a tiny model:
  {"data", "out", "task", "model", "embed", "rows" (the file's), "table"}.
  Row 0's answer has a near-duplicate (its last word dropped) as row 1's
  negative and itself as row 2's; anchor 0 has a second row (another
  positive: both are its answers)."""
  testing.require_shared_data()
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("hard_negatives")
  table = [list(row) for row in _write_pairs(root / "pairs", 24, 4)["train"]]
  anchor, answer = table[0][0], table[0][1]
  table[1][2] = " ".join(answer.split()[:-1])
  table[2][2] = answer
  table.append([anchor, table[5][2], table[6][2]])
  data, out = root / "data", root / "out"
  _write_table(data, ["anchor", "positive", "negative"], table)
  out.mkdir()
  task = _task(data, out)
  keras.utils.set_random_seed(1)
  model = task.build_model(configs.BertConfig.from_json_file(_config(root)),
                           "keras")
  files = _prepare(task, model)
  assert list(files) == [hard_negatives.FILE, hard_negatives.RECORD]
  from official_bert.data import text_files  # pylint: disable=g-import-not-at-top

  def embed(texts):  # the vectors of raw texts, encoded as the task does
    return _predictor(model)(text_files.encode(
        [text_files.Example(t, None, None, "") for t in texts],
        task.tokenizer, 24))
  lines = files[hard_negatives.FILE].splitlines()
  return dict(data=data, out=out, task=task, model=model, embed=embed,
              header=lines[0].split("\t"),
              rows=[line.split("\t") for line in lines[1:]], table=table)


def test_the_mined_file_holds_each_anchors_best_negatives(mined):
  rows, table = mined["rows"], mined["table"]
  assert mined["header"] == ["anchor", "positive", "negative_1",
                             "negative_2", "negative_3"]
  # Training reads them: K negatives each.
  assert mined["task"].roles == ("anchor", "positive", "negative_1",
                                 "negative_2", "negative_3")
  assert mined["task"].splits["train"][1]["negative_3"] == [
      row[4] for row in rows]
  # Recomputed from the vectors: the passages (positives and negatives of
  # the file) an anchor may take, and the K best of them; one row per
  # (anchor, positive) of the file, in its order, but for the anchors with
  # fewer than K (none here: test_mine_on_a_hand_made_case drops one).
  passages = list(dict.fromkeys(
      [row[1] for row in table] + [row[2] for row in table if len(row) > 2]))
  vectors = mined["embed"](passages)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  answers = {}
  for row in table:
    answers.setdefault(row[0], set()).add(row[1])
  anchors = list(answers)
  anchor_vectors = mined["embed"](anchors)
  best = {}
  for a, anchor in enumerate(anchors):
    scores = unit(vectors) @ unit(anchor_vectors[a])
    p = min(scores[passages.index(t)] for t in answers[anchor])
    allowed = [(s, t) for s, t in zip(scores, passages)
               if t not in answers[anchor] and t != anchor
               and s <= p - abs(p) * MARGIN]
    if len(allowed) >= K:
      best[anchor] = [t for _, t in sorted(allowed, key=lambda x: -x[0])[:K]]
  assert rows == [row[:2] + best[row[0]] for row in table if row[0] in best]
  # The planted near-duplicate of anchor 0's answer: the best candidate
  # without the margin, not mined with it; its exact copy is never mined.
  near, answer = mined["table"][1][2], mined["table"][0][1]
  scores = unit(vectors) @ unit(anchor_vectors[0])
  others = [(s, t) for s, t in zip(scores, passages)
            if t not in answers[anchors[0]]]
  assert max(others)[1] == near
  assert rows[0][0] == anchors[0]
  assert near not in rows[0][2:] and answer not in rows[0][2:]


def test_a_rerun_reuses_the_file_and_a_changed_input_redoes_it(
    mined, tmp_path, capsys):
  import keras  # pylint: disable=g-import-not-at-top
  data, out, model = mined["data"], mined["out"], mined["model"]
  path = out / hard_negatives.FILE
  capsys.readouterr()
  again = _task(data, out)
  assert _prepare(again, model) == {}
  assert f"hard negatives: reused {path} (made from the same training file " \
         "and settings and starting weights)" in capsys.readouterr().out
  np.testing.assert_array_equal(
      again.train_data()[0]["negative_2_input_word_ids"],
      mined["task"].train_data()[0]["negative_2_input_word_ids"])

  # Other starting weights: mined again; a resumed run keeps the file (its
  # checkpoints were trained on it), whatever its weights.
  other = keras.models.clone_model(model)
  other.set_weights([w + 0.01 for w in model.get_weights()])
  assert _prepare(_task(data, out), other, resumed=True) == {}
  assert "this run resumes from checkpoints trained on it" in (
      capsys.readouterr().out)
  copy = tmp_path / "out"
  copy.mkdir()
  for name in (hard_negatives.FILE, hard_negatives.RECORD):
    (copy / name).write_bytes((out / name).read_bytes())
  assert list(_prepare(_task(data, copy), other)) == [
      hard_negatives.FILE, hard_negatives.RECORD]
  said = capsys.readouterr().out
  assert (f"hard negatives: {copy / hard_negatives.FILE}: the weights "
          "training starts from changed since it was mined; mining again"
          in said), said

  # A changed training file (one row fewer), and a mined file edited since.
  changed = tmp_path / "changed"
  _write_table(changed, ["anchor", "positive", "negative"],
               mined["table"][:-1])
  _prepare(_task(changed, copy), other)
  assert ("the training file and the encoding (the vocabulary, "
          "--do_lower_case or --max_seq_length) changed since it was "
          "mined; mining again") in capsys.readouterr().out
  with open(copy / hard_negatives.FILE, "a", encoding="utf-8") as f:
    f.write("a\tb\tc\td\te\n")
  _prepare(_task(changed, copy), other)
  assert f"{hard_negatives.FILE} changed since it was mined; mining again" in (
      capsys.readouterr().out)


def test_only_remine_every_epoch_prepares_every_epoch_and_its_parts(mined):
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top
  assert not mined["task"].prepares_every_epoch
  assert _task(mined["data"], mined["out"],
               remine_every_epoch=True).prepares_every_epoch
  # The run's steps cut where each epoch ends; a last fraction of one too.
  assert finetuner.epoch_parts(8, 2.0) == [(0, 0, 4), (1, 4, 8)]
  assert finetuner.epoch_parts(25, 2.5) == [(0, 0, 10), (1, 10, 20),
                                            (2, 20, 25)]
  assert finetuner.epoch_parts(1, 3.0) == [(0, 0, 1)]
  assert finetuner.epoch_parts(7, 1.0) == [(0, 0, 7)]


def _same_checkpoints(ours, reference):
  """Whether two checkpoints hold the same variables, bit for bit (the
  optimizer's moments too)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ours, reference = (tf.train.load_checkpoint(str(p))
                     for p in (ours, reference))
  names = reference.get_variable_to_shape_map()
  assert any("optimizer" in name for name in names)
  return ours.get_variable_to_shape_map() == names and all(
      np.array_equal(ours.get_tensor(n), reference.get_tensor(n))
      for n in names)


def test_run_embedding_mines_every_epoch_and_a_killed_run_resumes_exactly(
    tmp_path):
  """--mine_hard_negatives with --remine_every_epoch: mined by the starting
  weights, then again by epoch 1's last weights for epoch 2, the run cut at
  the epoch but not its learning-rate schedule; a run killed in epoch 2
  reuses that epoch's file (as any rerun reuses what it mined) and ends
  where the uninterrupted run did, bit for bit, so epoch 2 trained on its
  own file's rows, from the right batch."""
  testing.require_shared_data()
  task, out = tmp_path / "task", tmp_path / "out"
  _write_pairs(task, 18, 8)
  config = _config(tmp_path, num_hidden_layers=1)  # depth is not tested

  # 2 epochs: 9 steps (18 pairs x 2 / 4) cut at step 4 (of 4.5), epoch 2's
  # order two permutations of 4 batches (its rows' 2 left over); a
  # checkpoint every 2 steps.
  def argv(output_dir, *extra):
    return _flags(task, output_dir, config, "--do_train",
                  "--mine_hard_negatives=2",
                  "--hard_negative_margin=0.01", "--num_train_epochs=2",
                  "--pooling=mean", "--train_batch_size=4",
                  "--save_checkpoints_steps=2", "--steps_per_loop=2",
                  "--keep_checkpoint_max=4", *extra)
  first = testing.run_program("official_bert.run_embedding",
                              argv(out, "--remine_every_epoch"))
  epoch_2 = out / "hard_negatives_epoch_2.tsv"
  assert re.search(r"hard negatives: mined 18 rows, 2 negatives each, from "
                   r"18 anchors .* within the margin \(0.01\).* \(the weights "
                   rf"training starts from\), written to {out / hard_negatives.FILE}\n",
                   first.stdout)
  assert re.search(r"hard negatives: mined .* \(the weights epoch 1 ended "
                   rf"with\), written to {epoch_2}\n", first.stdout)
  header = (out / hard_negatives.FILE).read_text().splitlines()[0]
  assert header == "anchor\tpositive\tnegative_1\tnegative_2"
  assert epoch_2.read_text().splitlines()[0] == header
  assert epoch_2.read_text() != (out / hard_negatives.FILE).read_text()
  assert "Trained steps 0..4 " in first.stdout
  assert "Trained steps 4..9 " in first.stdout
  # 1e-3 decayed linearly to 0 over the run's 9 steps (no warmup step).
  assert re.search(r"step 4/9 .* learning_rate 0.0005556 ", first.stdout)

  # Killed after ckpt-6 (in epoch 2): the output_dir holds what the run had
  # written by then; the rerun skips to epoch 2's third batch.
  killed = tmp_path / "killed"
  killed.mkdir()
  for name in ["flags.json", "bert_config.json", "pooling.json",
               hard_negatives.FILE, hard_negatives.RECORD, epoch_2.name,
               "hard_negatives_epoch_2.json"] + [
                   os.path.basename(p) for p in glob.glob(str(out / "ckpt-6.*"))]:
    shutil.copy(out / name, killed)
  (killed / "checkpoint").write_text('model_checkpoint_path: "ckpt-6"\n'
                                     'all_model_checkpoint_paths: "ckpt-6"\n')
  resumed = testing.run_program("official_bert.run_embedding",
                                argv(killed, "--remine_every_epoch"))
  assert (f"hard negatives: reused {killed / epoch_2.name} (made from the "
          "same training file and settings, and this run resumes from "
          "checkpoints trained on it)") in resumed.stdout
  assert "hard negatives: mined" not in resumed.stdout
  assert "Trained steps 6..9 " in resumed.stdout
  assert _same_checkpoints(killed / "ckpt-9", out / "ckpt-9")

  for flags_, said in [
      ([a for a in argv(out, "--do_eval") if a != "--do_train"],
       "--mine_hard_negatives mines the training file's negatives: pass "
       "--do_train."),
      ([a for a in argv(out, "--remine_every_epoch")
        if not a.startswith("--mine_hard")],
       "--remine_every_epoch mines the negatives again every epoch: pass "
       "--mine_hard_negatives=K too."),
      (argv(out, "--remine_every_epoch", f"--teacher={out}"),
       "--teacher's outputs are computed once for the training rows, which "
       "--remine_every_epoch mines anew every epoch; drop one of them.")]:
    last = testing.refused_input("official_bert.run_embedding", flags_)
    assert last.endswith(said), last
