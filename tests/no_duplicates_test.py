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


def _task(directory, rows):
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  _write_table(directory, ["anchor", "positive", "negative"], rows)
  task = embedding_task.EmbeddingTask(embedding_task.EmbeddingConfig(
      str(directory), "", splits=("train",)))
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


@pytest.fixture(scope="module")
def duplicated(tmp_path_factory):
  """40 rows whose positives and negatives come from 30 passages (a text is
  one row's positive and another's negative, rows share a positive), and
  one anchor asked twice."""
  testing.require_shared_data()
  rng = np.random.default_rng(0)
  words = ["file", "path", "socket", "thread", "queue", "lock", "string",
           "bytes", "list", "dict"]
  passages = [f"the {a} holds a {b}" for a in words[:6] for b in words[5:]]
  rows = []
  for i in range(40):
    positive, negative = rng.choice(len(passages), 2, replace=False)
    rows.append([f"which {words[i % 10]} is number {i // 10 + (i == 39)}",
                 passages[positive], passages[negative]])
  return _task(tmp_path_factory.mktemp("no_duplicates") / "task", rows)


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


def test_too_few_distinct_rows_for_a_batch_is_one_sentence(tmp_path):
  testing.require_shared_data()
  task = _task(tmp_path / "task", [["a b", "c d", "e f"]] * 9)
  with pytest.raises(ValueError) as e:
    task.train_order(BATCH, 3, 16)
  assert str(e.value) == (
      f"{tmp_path / 'task' / 'train.tsv'}: no batch of 8 rows without a "
      "repeated text among 9 rows: a text twice in a batch would be its own "
      "negative; lower --train_batch_size")
