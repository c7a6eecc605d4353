"""run_embedding's large batches (training/train_step.py with a task's
InBatchLoss): GradCache's chunked gradient equals the whole batch's, with
dropout on and the same masks; --mini_batch_size trains through the
program; a mini-batch that does not divide the batch is one sentence.
Across two replicas (the candidates gathered): `two_replica_report`, run in
trainer_test's replicas process."""

import re

import numpy as np
import pytest

from official_bert.tasks.embedding import embedding_task
from official_bert.training import task as task_lib
from tests import testing

BATCH, MINI, SEQ = 256, 32, 7


def _inputs(batch, seed=0):
  """Anchor, positive and negative inputs of `batch` rows ([B, SEQ] each,
  each row padded after its own length)."""
  rng = np.random.default_rng(seed)
  inputs = {}
  for role in ("anchor", "positive", "negative"):
    lengths = rng.integers(2, SEQ + 1, batch)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    inputs[f"{role}_input_word_ids"] = (
        rng.integers(5, 99, (batch, SEQ)) * mask).astype(np.int32)
    inputs[f"{role}_input_mask"] = mask
    inputs[f"{role}_input_type_ids"] = np.zeros((batch, SEQ), np.int32)
  return inputs, np.zeros(batch, np.int32)


def _losses_and_metrics(labels, outputs):
  return (embedding_task.ranking_losses(labels, outputs),
          embedding_task.ranking_metric_counts(labels, outputs))


def _relative(reference, grads):
  """The largest difference, relative to each variable's largest gradient
  (floored at 1e-3 of the largest overall: the attention keys' bias has a
  gradient of ~0); the pooler, which the embeddings do not read, has none
  in both."""
  assert [g is None for g in grads] == [r is None for r in reference]
  pairs = [(r, g) for r, g in zip(reference, grads) if r is not None]
  floor = 1e-3 * max(float(np.max(np.abs(r))) for r, _ in pairs)
  return max(float(np.max(np.abs(g - r))) / max(float(np.max(np.abs(r))),
                                                floor) for r, g in pairs)


@pytest.fixture(scope="module")
def model():
  """The tiny 1-layer embedder, dropout on (0.1, as BERT's)."""
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import sentence_embedder  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(4)
  return sentence_embedder.BertSentenceEmbedder.from_bert_config(
      testing.tiny_config(num_hidden_layers=1))


def _cached(model, inputs, labels, mini):
  """train_step's per-replica gradient of one batch with mini-batch `mini`
  (0: the plain path), as numpy, and the loss."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.training import train_step  # pylint: disable=g-import-not-at-top
  optimizer = keras.optimizers.SGD()
  grads, losses, _ = train_step.replica_gradients(
      model, optimizer, _losses_and_metrics, [(inputs, labels)], 1,
      in_batch_loss=task_lib.InBatchLoss(("anchor",), mini))
  return [None if g is None else g.numpy() for g in grads], float(
      losses["loss"])


def test_the_chunked_gradient_is_the_whole_batchs_with_the_same_dropout(
    model):
  """--train_batch_size=256 --mini_batch_size=32: train_step's GradCache
  gradient (chunks embedded without a tape, the loss's gradient cached,
  each chunk re-run and backpropagated) equals, within 1e-5, the gradient
  of the loss over the whole batch taken through one tape, the embeddings
  drawn with the same dropout masks (the chunks run from the same seed
  state, under that tape). Bugs caught: a chunk's gradient not accumulated
  (1/8 of the gradient missing), the re-run drawing other dropout masks
  (the seed generators not set back), the seed state not left where (a)
  left it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.training import train_step  # pylint: disable=g-import-not-at-top
  inputs, labels = _inputs(BATCH)
  states = train_step.seed_states(model)
  start = [s.numpy() for s in states]
  cached, loss = _cached(model, inputs, labels, MINI)
  after = [s.numpy() for s in states]
  for state, value in zip(states, start):
    state.assign(value)
  with tf.GradientTape() as tape:
    parts = [model({k: v[i:i + MINI] for k, v in inputs.items()},
                   training=True) for i in range(0, BATCH, MINI)]
    outputs = {k: tf.concat([p[k] for p in parts], 0) for k in parts[0]}
    whole = embedding_task.ranking_losses(labels, outputs)["loss"]
  reference = [None if g is None else tf.convert_to_tensor(g).numpy()
               for g in tape.gradient(whole, model.trainable_variables)]
  assert loss == pytest.approx(float(whole), rel=1e-6)
  assert _relative(reference, cached) < 1e-5
  np.testing.assert_array_equal([s.numpy() for s in states], after)
  # Dropout acts: without it the loss and gradient are other ones.
  plain = model(inputs, training=False)
  assert float(embedding_task.ranking_losses(labels, plain)["loss"]) != (
      pytest.approx(loss, rel=1e-3))


def _program_flags(task, out, config, *extra):
  return [f"--task_data_dir={task}", f"--bert_config_file={config}",
          f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
          "--max_seq_length=24", "--train_batch_size=8", "--do_train",
          "--learning_rate=1e-3", "--num_train_epochs=1",
          "--steps_per_loop=1", "--negative_column=none", *extra]


def test_mini_batch_size_reaches_the_train_step(tmp_path, monkeypatch):
  """run_embedding --train_batch_size=8 --mini_batch_size=4 trains (one
  step) with the train step built for the task's InBatchLoss (the anchor
  its own, chunks of 4) and says so; the chunked step itself is the tests'
  above (the compiled loop: the replicas test's Trainer). Bug caught: the
  flag lost between the program, the task, the driver and the trainer."""
  testing.require_shared_data()
  from official_bert.training import train_step  # pylint: disable=g-import-not-at-top
  from tests.embedding_test import _config, _write_pairs  # pylint: disable=g-import-not-at-top
  task, config = tmp_path / "task", _config(tmp_path, num_hidden_layers=1)
  _write_pairs(task, n_train=8, n_dev=4)
  built = []
  make_train_loop = train_step.make_train_loop
  monkeypatch.setattr(train_step, "make_train_loop", lambda *args, **kw: (
      built.append(args[6]) or make_train_loop(*args, **kw)))
  proc = testing.run_program("official_bert.run_embedding", _program_flags(
      task, tmp_path / "out", config, "--mini_batch_size=4"))
  assert [options.in_batch_loss for options in built] == [
      task_lib.InBatchLoss(own_outputs=("anchor",), mini_batch_size=4)]
  assert "each batch's gradient 4 pairs at a time (GradCache)" in proc.stdout
  assert np.isfinite(float(re.search(r"step 1/1 loss (\S+)",
                                     proc.stdout).group(1)))
  assert (tmp_path / "out" / "ckpt-1.index").exists()


def test_a_mini_batch_that_does_not_divide_the_batch_is_one_sentence(
    tmp_path):
  # Refused before anything is read: the files need only exist.
  (tmp_path / "task").mkdir()
  testing.tiny_config().to_json_file(str(tmp_path / "bert_config.json"))
  last = testing.refused_input("official_bert.run_embedding", _program_flags(
      tmp_path / "task", tmp_path / "out", tmp_path / "bert_config.json",
      "--mini_batch_size=3"))
  assert last.endswith("--mini_batch_size=3 does not divide "
                       "--train_batch_size=8; pass a divisor of the batch (or "
                       "0 for none)."), last
  assert not (tmp_path / "out").exists()


def two_replica_report():
  """Run by trainer_test's replicas process (its CPU split into 2 logical
  devices before TensorFlow started; one process saves ~5 s of start-up):
  on MirroredStrategy's 2 replicas (4 pairs each; dropout off),
  train_step.replica_gradients with the task's InBatchLoss and
  --mini_batch_size 2 (GradCache, whose loss reads the gathered candidates
  as the plain step's does), all-reduced as make_train_loop all-reduces
  them; one replica's loss and gradient over the same 8 pairs by hand (a
  tape). Run eagerly, the functions the compiled step traces. (Not through
  the Trainer: its XLA-compiled loss and update cost several seconds and
  test nothing more here.)

  trainer_test.test_one_vs_two_replicas_and_accumulation_same_update checks
  that the two replicas give the one replica's loss and gradient over the
  batch of 8 (within 1e-5): each replica's anchors score against both
  replicas' positives and negatives (all-gathered, its own rows first), and
  the gathered rows' gradients go back to the replica whose rows they are
  (here in 2-pair chunks, the gradient cached). Bugs caught: replicas not
  gathering (each anchor against 8 candidates, not 16), the gathered rows
  in replica order (replica 1's anchors' targets off by 4)."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import sentence_embedder  # pylint: disable=g-import-not-at-top
  from official_bert.training import distribution  # pylint: disable=g-import-not-at-top
  from official_bert.training import train_step  # pylint: disable=g-import-not-at-top
  distribution.set_mixed_precision("float32")  # whatever ran before
  config = testing.tiny_config(num_hidden_layers=1, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
  inputs, labels = _inputs(8, seed=1)

  def build():
    keras.utils.set_random_seed(1)
    return sentence_embedder.BertSentenceEmbedder.from_bert_config(config)

  # One replica: the loss over the 8 pairs, its gradient through a tape.
  model = build()
  with tf.GradientTape() as tape:
    loss = embedding_task.ranking_losses(None, model(inputs, training=True))
  one = [None if g is None else tf.convert_to_tensor(g).numpy()
         for g in tape.gradient(loss["loss"], model.trainable_variables)]

  # Collective keys of its own: the strategies trainer_test made earlier in
  # the process all-reduced under the same group and instance keys, and
  # TensorFlow refuses an all-gather under a key an all-reduce had.
  mirrored = tf.distribute.MirroredStrategy
  base = mirrored._collective_key_base  # pylint: disable=protected-access
  mirrored._collective_key_base = base + 1000  # pylint: disable=protected-access
  try:
    strategy = distribution.get_strategy("mirrored", num_gpus=0)
  finally:
    mirrored._collective_key_base = base  # pylint: disable=protected-access
  with strategy.scope():
    model, optimizer = build(), keras.optimizers.SGD()
  dataset = strategy.experimental_distribute_dataset(
      tf.data.Dataset.from_tensors((inputs, labels)).unbatch().batch(8))

  def step(batch):  # eager: tracing it for 2 replicas took ~1.6 s more
    def replica(x, y):
      grads, losses, _ = train_step.replica_gradients(
          model, optimizer, _losses_and_metrics, [(x, y)], 2,
          in_batch_loss=task_lib.InBatchLoss(("anchor",), 2))
      present = [g for g in grads if g is not None]
      reduced = iter(tf.distribute.get_replica_context().all_reduce(
          tf.distribute.ReduceOp.SUM, present))
      return ([None if g is None else next(reduced) for g in grads],
              losses["loss"])
    grads, losses = strategy.run(replica, args=batch)
    return (strategy.experimental_local_results(grads)[0],
            strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, None))

  two, two_loss = step(next(iter(dataset)))
  return {"replicas": strategy.num_replicas_in_sync,
          "loss": [float(loss["loss"]), float(two_loss)],
          "two_vs_one": _relative(
              one, [None if g is None else g.numpy() for g in two])}
