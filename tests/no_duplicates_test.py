"""No training batch of run_embedding repeats a text
(tasks/embedding/no_duplicates.py, sentence-transformers'
NoDuplicatesBatchSampler): on a training file whose passages repeat (a
plain shuffle's batches repeat texts), the task's order and the batches the
finetuner builds from it hold no text twice; the order is the same for a
seed (a resumed run skips to the same place); a file with too few distinct
rows for one batch is one sentence naming it."""

import numpy as np
import pytest

from official_bert.tasks.embedding import embedding_task
from official_bert.tasks.embedding import no_duplicates
from tests import testing
from tests.embedding_test import _config, _write_table  # pylint: disable=g-bad-import-order

BATCH = 8


def _task(directory, rows, **config):
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  _write_table(directory, ["anchor", "positive", "negative"], rows)
  task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
      str(directory), config.pop("output_dir", ""), splits=("train",),
      **config))
  task.read()
  task.encode(tokenization.FullTokenizer(testing.VOCAB, True), 16)
  return task


def _repeats(task, rows):
  """The texts that more than one of `rows` (indices) hold, any column."""
  texts = task.splits["train"][1]
  seen, repeated = set(), set()
  for i in rows:
    for text in {texts[role][i] for role in texts}:
      (repeated if text in seen else seen).add(text)
  return repeated


def duplicated_rows():
  """40 rows whose positives and negatives come from 30 passages (a text is
  one row's positive and another's negative, rows share a positive), and
  one anchor asked twice."""
  rng = np.random.default_rng(0)
  words = ["file", "path", "socket", "thread", "queue", "lock", "string",
           "bytes", "list", "dict"]
  passages = [f"the {a} holds a {b}" for a in words[:6] for b in words[5:]]
  rows = []
  for i in range(40):
    positive, negative = rng.choice(len(passages), 2, replace=False)
    rows.append([f"which {words[i % 10]} is number {i // 10 + (i == 39)}",
                 passages[positive], passages[negative]])
  return rows


@pytest.fixture(scope="module")
def duplicated(tmp_path_factory):
  """The task of `duplicated_rows`."""
  testing.require_shared_data()
  return _task(tmp_path_factory.mktemp("no_duplicates") / "task",
               duplicated_rows())


def test_no_batch_of_the_order_repeats_a_text(duplicated):
  task = duplicated
  plain = np.random.default_rng(3).permutation(40)[:40].reshape(-1, BATCH)
  assert any(_repeats(task, batch) for batch in plain)  # what it prevents
  order = task.train_order(BATCH, 3, 100)
  assert len(order) >= 100 and len(order) % BATCH == 0
  for batch in order.reshape(-1, BATCH):
    assert not _repeats(task, batch), batch
  np.testing.assert_array_equal(task.train_order(BATCH, 3, 100), order)
  assert not np.array_equal(task.train_order(BATCH, 4, 100)[:BATCH],
                            order[:BATCH])
  # One epoch: full batches, each row at most once, in the permutation's
  # order but for the deferred rows.
  row_texts = [{text for text in (a, p, n)} for a, p, n in zip(
      *task.splits["train"][1].values())]
  permutation = np.random.default_rng([3, 0]).permutation(40)
  epoch = np.concatenate(no_duplicates.epoch_batches(row_texts, permutation,
                                                     BATCH))
  assert len(set(epoch.tolist())) == len(epoch) >= 3 * BATCH
  np.testing.assert_array_equal(order[:len(epoch)], epoch)


def test_the_finetuners_batches_repeat_no_text(duplicated, tmp_path,
                                               monkeypatch):
  """The batches training reads (Finetuner.train's dataset, cut to their
  longest text) hold no token sequence twice. Bug caught: the finetuner
  shuffling the rows itself, not in the task's order."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import driver  # pylint: disable=g-import-not-at-top
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top
  task = duplicated
  run = finetuner.Finetuner(
      driver.DriverConfig(output_dir=str(tmp_path / "out"),
                          num_train_steps=6, train_batch_size=BATCH, seed=3),
      task, configs.BertConfig.from_json_file(_config(tmp_path)))
  seen = {}
  monkeypatch.setattr(run, "train_steps", lambda dataset_fn, *_: seen.update(
      dataset_fn=dataset_fn))
  run.train(*task.train_data())
  batches = list(seen["dataset_fn"](tf.distribute.InputContext()).take(6))
  assert len(batches) == 6
  for inputs, _ in batches:
    ids = [tuple(row) for role in task.roles
           for row in inputs[f"{role}_input_word_ids"].numpy().tolist()]
    assert len(ids) == 3 * BATCH and len(set(ids)) == len(ids)


def test_no_global_batch_of_a_run_repeats_a_text_after_mining(
    tmp_path, monkeypatch):
  """Every batch of a whole run (12 steps of 4 rows), the training rows
  holding 2 negatives mined by the model (as run_task mines them: the
  Finetuner's predict), repeats no text, on one replica and across 2
  replicas' halves (the dataset for an InputContext of 2 replicas, one
  input pipeline: MirroredStrategy's, which hands the replicas consecutive
  batches, as trainer_test's replicas test relies on); with the candidates
  gathered across replicas, the global batch is what must hold each text
  once. The mined rows share texts (a row's negative is another's
  positive), so batches that ignored them would repeat some. Bugs caught:
  the order comparing the file's roles, not the mined ones; each replica's
  half ordered on its own. (One mining for both replica counts: mining
  was half the test's time.)"""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.training import driver  # pylint: disable=g-import-not-at-top
  from official_bert.training import finetuner  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  steps, batch = 12, 4
  task = _task(tmp_path / "task", duplicated_rows(),
               output_dir=str(tmp_path / "out"), mine_hard_negatives=2,
               hard_negative_margin=0.0)
  run = finetuner.Finetuner(
      driver.DriverConfig(output_dir=str(tmp_path / "out"),
                          num_train_steps=steps, train_batch_size=batch,
                          seed=3),
      task, configs.BertConfig.from_json_file(_config(tmp_path)).replace(
          num_hidden_layers=1))
  task.prepare_training(lambda inputs, fill=0.0: run.predict(inputs, 8, fill),
                        run.model, False, 0)
  assert task.roles == ("anchor", "positive", "negative_1", "negative_2")
  texts = lambda inputs: [tuple(int(i) for i in row if i)  # no padding
                          for role in task.roles for row in np.asarray(
                              inputs[f"{role}_input_word_ids"])]
  rows = [set(texts({k: v[i:i + 1] for k, v in task.train_data()[0].items()}))
          for i in range(task.num_train_examples)]
  assert any(a & b for i, a in enumerate(rows) for b in rows[i + 1:])
  seen = {}
  monkeypatch.setattr(run, "train_steps", lambda dataset_fn, *_: seen.update(
      dataset_fn=dataset_fn))
  run.train(*task.train_data())
  for replicas in (1, 2):
    halves = list(seen["dataset_fn"](tf.distribute.InputContext(
        1, 0, replicas)).take(steps * replicas))
    for step in range(steps):
      global_batch = [text for inputs, _ in halves[step * replicas:
                                                   (step + 1) * replicas]
                      for text in texts(inputs)]
      assert len(global_batch) == 4 * batch
      assert len(set(global_batch)) == len(global_batch), (replicas, step)


def test_too_few_distinct_rows_for_a_batch_is_one_sentence(tmp_path):
  testing.require_shared_data()
  task = _task(tmp_path / "task", [["a b", "c d", "e f"]] * 9)
  with pytest.raises(ValueError) as e:
    task.train_order(BATCH, 3, 16)
  assert str(e.value) == (
      f"{tmp_path / 'task' / 'train.tsv'}: no batch of 8 rows without a "
      "repeated text among 9 rows: a text twice in a batch would be its own "
      "negative; lower --train_batch_size")
