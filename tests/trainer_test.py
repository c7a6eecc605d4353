"""Tests for official_bert/training/trainer.py: replicas, accumulation, SIGTERM, NaN
(and, in the replicas process, GradCache's in-batch negatives on 2 replicas)."""

import json
import os
import signal
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from official_bert.modeling import pretrainer
from official_bert.training import distribution
from official_bert.training import preemption
from official_bert.training import trainer as trainer_lib
from tests import testing

# Runs in a subprocess: the CPU must be split into 2 logical devices before
# TensorFlow initialises. Trains ONE step on the same global batch of 6 and
# compares what the optimizer received with the gradient computed by hand on
# the whole batch: Adam's first moment after one step is (1 - beta_1) * g.
# Dropout is 0. Runs: (a) MirroredStrategy on 2 CPU replicas with a small
# max_grad_norm, so the global-norm clipping acts (its moment must equal the
# hand gradient clipped by hand: clipping each replica's half, or a limit not
# scaled with the loss scale, is far off; each replica gets its own 3
# examples, so the halves' norms differ); (b) the same unclipped (clipping
# hides any error in the gradient's scale: 2 replicas summing instead of
# averaging); (c) 1 replica with 2 accumulated micro-batches, clipped, whose
# weights must also equal (a)'s, and (c') the same unclipped (micro-batches
# summed instead of averaged); (d) (a) under mixed_float16 (loss scaling).
# XLA compiling the losses for a new shape or dtype costs most of a run
# (~25 s of CPU; a run that hits the cache ~3 s): the hand gradient is the
# reference, so no plain 1-replica run is needed (c covers that path), and
# (c)'s micro-batches have (a)'s per-replica shape. One layer: how the
# gradient is split, summed, clipped and scaled does not depend on depth,
# and each run traces half the layers (~6 s of the test's CPU).
_REPLICAS_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from official_bert.training import distribution
    distribution.split_cpu(2)
    import keras, tensorflow as tf
    from official_bert.training import optimization
    from official_bert.modeling import pretrainer
    from official_bert.training import trainer
    from tests import input_pipeline_test, testing

    out = sys.argv[1]
    MAX_NORM = 0.05
    config = testing.tiny_config(num_hidden_layers=1, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    rows = input_pipeline_test.make_instances(6, seed=5)
    data = ({"input_word_ids": rows.input_ids, "input_mask": rows.input_mask,
             "input_type_ids": rows.segment_ids,
             "masked_lm_positions": rows.masked_lm_positions},
            {"masked_lm_ids": rows.masked_lm_ids,
             "masked_lm_weights": rows.masked_lm_weights,
             "next_sentence_labels": rows.next_sentence_labels})
    data = tf.nest.map_structure(
        lambda a: a.astype("float32" if a.dtype.kind == "f" else "int32"), data)

    def train(strategy, accumulation, name, precision, max_grad_norm=MAX_NORM):
      distribution.set_mixed_precision(precision)
      def dataset_fn(context):
        # One input pipeline feeds both replicas consecutive batches: each
        # replica (and each micro-batch) gets its own part of the 6.
        n = 6 // context.num_input_pipelines
        start = context.input_pipeline_id * n
        mine = tf.nest.map_structure(lambda a: a[start:start + n], data)
        return tf.data.Dataset.from_tensor_slices(mine).batch(
            context.get_per_replica_batch_size(6) // accumulation).repeat()
      keras.utils.set_random_seed(1)
      with strategy.scope():
        model = pretrainer.BertPretrainer.from_bert_config(config)
        optimizer = optimization.create_optimizer(
            "adamw", 1e-2, num_train_steps=10, mixed_precision=precision)
      before = [v.numpy() for v in model.weights]
      t = trainer.Trainer(
          strategy, model, optimizer, pretrainer.pretraining_losses,
          trainer.TrainConfig(output_dir=f"{out}/{name}", num_train_steps=1,
                              steps_per_loop=1, max_grad_norm=max_grad_norm,
                              gradient_accumulation_steps=accumulation),
          metric_fn=pretrainer.pretraining_metric_counts, log=lambda _: None)
      result = t.train(dataset_fn)
      # A SIGTERM that reached this process (a shared machine's broad kill)
      # stops train() before its step (preemption.py): then nothing moved
      # and the moments are 0, "off by exactly 1.0" below. Say so instead.
      assert not result.preempted and result.step == 1, (
          f"{name}: train() stopped at step {result.step} (preempted: "
          f"{result.preempted}); was this process sent a SIGTERM?")
      assert int(optimizer.iterations.numpy()) == 1, name
      after = [v.numpy() for v in model.weights]
      # Adam's first step is ~lr*sign(g): the moments show the gradient scale.
      inner = getattr(optimizer, "inner_optimizer", optimizer)
      momentum = [m.numpy() / 0.1 for m in inner._momentums]  # = g
      return before, after, result.metrics, momentum

    def hand_gradient():
      distribution.set_mixed_precision("float32")
      keras.utils.set_random_seed(1)
      model = pretrainer.BertPretrainer.from_bert_config(config)
      with tf.GradientTape() as tape:
        loss = pretrainer.pretraining_losses(
            data[1], model(data[0], training=True))["loss"]
      return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss,
                                               model.trainable_variables)]

    diff = lambda a, b: max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
    # Relative per slot, with a floor at 1e-3 of the largest slot: the key
    # biases' true gradient is 0 (softmax ignores them), their ~1e-12 noise
    # must not count.
    def rel(a, b):
      floor = 1e-3 * max(float(np.max(np.abs(x))) for x in a)
      return max(float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(x))),
                                                    floor)
                 for x, y in zip(a, b))
    by_hand = hand_gradient()
    norm = float(np.sqrt(sum(np.sum(np.square(g)) for g in by_hand)))
    clipped_by_hand = [g * min(1.0, MAX_NORM / norm) for g in by_hand]
    mirrored = lambda: distribution.get_strategy("mirrored", num_gpus=0)
    two = train(mirrored(), 1, "two", "float32")
    unclipped = train(mirrored(), 1, "two_unclipped", "float32", 0.0)
    acc = train(tf.distribute.get_strategy(), 2, "acc", "float32")
    acc_unclipped = train(tf.distribute.get_strategy(), 2, "acc_unclipped",
                          "float32", 0.0)
    half = train(mirrored(), 1, "two_float16", "mixed_float16")
    report = {
        "norm": norm, "slots": len(two[3]),
        "init_diff": diff(two[0], acc[0]) + diff(two[0], unclipped[0]) +
                     diff(two[0], half[0]),
        "moved": [diff(r[0], r[1]) for r in (two, unclipped, acc, half)],
        "loss": [r[2]["loss"] for r in (two, unclipped, acc, half)],
        "two_vs_hand": rel(clipped_by_hand, two[3]),
        "unclipped_vs_hand": rel(by_hand, unclipped[3]),
        "acc_vs_hand": rel(clipped_by_hand, acc[3]),
        "acc_unclipped_vs_hand": rel(by_hand, acc_unclipped[3]),
        "acc_vs_two": diff(two[1], acc[1]),
        "float16_vs_hand": rel(clipped_by_hand, half[3])}
    # GradCache's in-batch negatives across the 2 replicas (its own check,
    # here to share this process's start-up).
    from tests import gradcache_test
    report["in_batch"] = gradcache_test.two_replica_report()
    print(json.dumps(report))
""")


@pytest.mark.slow
def test_one_vs_two_replicas_and_accumulation_same_update(tmp_path):
  proc = testing.run_cli(["-c", _REPLICAS_SCRIPT, str(tmp_path)],
                         timeout=1200)
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert report["norm"] > 10 * 0.05, report  # the clipping acts
  assert report["init_diff"] == 0.0
  assert min(report["moved"]) > 1e-3, report  # each step changed the weights
  assert report["slots"] >= 2 * len(testing.tiny_config().to_dict())
  # The gradient the optimizer got (its first moment) equals the one computed
  # by hand on the whole batch of 6, clipped by hand: on 2 replicas (clipping
  # each replica's half is off by O(1)), unclipped on 2 replicas (a 2x or 1/2x
  # scale error is off by 1), with 2 micro-batches on 1 replica.
  assert report["two_vs_hand"] < 1e-4, report
  assert report["unclipped_vs_hand"] < 1e-4, report
  assert report["acc_vs_hand"] < 1e-4, report
  # Unclipped with 2 micro-batches: summing them instead of averaging is 2x.
  assert report["acc_unclipped_vs_hand"] < 1e-4, report
  assert report["acc_vs_two"] < 1e-6, report  # and so the same weights
  # float16 gradients round to ~1e-3 relative (a few % on the smallest
  # entries); a loss scale not undone, or a clipping limit not scaled with
  # it, is off by a factor of up to 2**15.
  assert report["float16_vs_hand"] < 0.2, report
  # The logged loss is the global batch's mean in every set-up.
  np.testing.assert_allclose(report["loss"][1:3], report["loss"][0],
                             rtol=1e-5)
  np.testing.assert_allclose(report["loss"][3], report["loss"][0], rtol=1e-2)
  # An in-batch loss (run_embedding's) on 2 replicas with GradCache gives
  # the one replica's loss and gradient over the batch: each anchor scored
  # against both replicas' candidates (gradcache_test.two_replica_report).
  in_batch = report["in_batch"]
  assert in_batch["replicas"] == 2
  assert in_batch["loss"][1] == pytest.approx(in_batch["loss"][0], rel=1e-5)
  assert in_batch["two_vs_one"] < 1e-5, in_batch


def _trainer(tmp_path, num_train_steps, loss_fn=pretrainer.pretraining_losses,
             log=lambda _: None, seed=3,
             metric_fn=pretrainer.pretraining_metric_counts):
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  # One layer: SIGTERM, NaN, the loop's sums and its timing do not depend
  # on depth, and each test traces half the layers.
  model = pretrainer.BertPretrainer.from_bert_config(
      testing.tiny_config(num_hidden_layers=1))
  optimizer = optimization.create_optimizer("adamw", 1e-2, num_train_steps, 1)
  return trainer_lib.Trainer(
      tf.distribute.get_strategy(), model, optimizer, loss_fn,
      trainer_lib.TrainConfig(output_dir=str(tmp_path), num_train_steps=
                              num_train_steps, steps_per_loop=2,
                              save_checkpoints_steps=2),
      metric_fn=metric_fn, log=log)


def _dataset_fn(path):
  from official_bert.training import input_pipeline  # pylint: disable=g-import-not-at-top
  return input_pipeline.pretraining_dataset_fn(
      [path], 4, testing.SEQ, 3, is_training=True, seed=1)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  path = tmp_path_factory.mktemp("data") / "train.tfrecord"
  return input_pipeline_test.write_records(
      path, input_pipeline_test.make_instances(20, seed=2))


def test_sigterm_saves_and_rerun_resumes_step_and_optimizer(tmp_path, records):
  """train() from Python (no program installed the handler): SIGTERM stops it
  at the loop boundary with a checkpoint, then the process's own handler is
  back and gets the signal (by default the process would end there)."""
  lines, delivered = [], []

  def log(line):
    lines.append(line)
    if line.startswith("step 2/"):
      os.kill(os.getpid(), signal.SIGTERM)

  def record(signum, frame):  # pylint: disable=unused-argument
    delivered.append(signum)

  previous = signal.signal(signal.SIGTERM, record)
  try:
    first = _trainer(tmp_path, 6, log=log)
    result = first.train(_dataset_fn(records), global_batch_size=4)
    assert delivered == [signal.SIGTERM]  # after the save, once
    assert signal.getsignal(signal.SIGTERM) is record  # back as it was
  finally:
    signal.signal(signal.SIGTERM, previous)
  assert not preemption.requested()  # nothing pending for a later train()
  assert result.preempted and result.step == 2
  assert any(line.startswith("SIGTERM: saved checkpoint") for line in lines)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
  saved = [v.numpy() for v in first.model.weights]

  second = _trainer(tmp_path, 6, seed=99)  # other init: must be overwritten
  assert second.restore_or_init(init_fn=lambda: pytest.fail("warm start")) == 2
  assert int(second.optimizer.iterations.numpy()) == 2
  for a, b in zip(saved, [v.numpy() for v in second.model.weights]):
    np.testing.assert_array_equal(a, b)
  result = second.train(_dataset_fn(records), global_batch_size=4)
  assert result.step == 6 and not result.preempted
  assert int(second.optimizer.iterations.numpy()) == 6
  assert result.metrics["learning_rate"] == 0.0  # schedule ran to its end
  assert {"loss", "masked_lm_accuracy", "next_sentence_accuracy",
          "sequences_per_second"} <= set(result.metrics)
  assert sorted(os.listdir(tmp_path / "train"))  # TensorBoard events written


def test_sigterm_before_training_stops_at_start_and_is_consumed(tmp_path,
                                                                 records):
  """A program installs the handler first thing: a SIGTERM that arrives
  while the job starts up (here: before train()) is recorded, not fatal;
  train() stops before its first step, and the signal is consumed: the next
  train() call trains."""
  previous = signal.getsignal(signal.SIGTERM)
  lines = []
  try:
    preemption.install()  # as the programs' main() does
    t = _trainer(tmp_path, 4, log=lines.append)
    os.kill(os.getpid(), signal.SIGTERM)  # the process must survive this
    result = t.train(_dataset_fn(records), global_batch_size=4)
    assert result.preempted and result.step == 0
    assert any(line.startswith("SIGTERM before training started: stopped at "
                               "step 0") for line in lines), lines
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    assert int(t.optimizer.iterations.numpy()) == 0
    result = t.train(_dataset_fn(records), global_batch_size=4)
    assert result.step == 4 and not result.preempted
  finally:
    signal.signal(signal.SIGTERM, previous)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path,
                                                              records):
  calls = tf.Variable(0)

  def loss_fn(labels, outputs):
    losses = pretrainer.pretraining_losses(labels, outputs)
    # Steps 1-2 fine (checkpoint at 2), NaN from step 3 on.
    calls.assign_add(1)
    losses["loss"] = losses["loss"] * tf.where(calls > 2, float("nan"), 1.0)
    return losses

  t = _trainer(tmp_path, 6, loss_fn=loss_fn)
  with pytest.raises(trainer_lib.NonFiniteLossError) as error:
    t.train(_dataset_fn(records))
  assert "between steps 2 and 4" in str(error.value)
  assert "ckpt-2" in str(error.value)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")


def test_each_loss_and_metric_is_summed_over_the_loops_steps(tmp_path,
                                                            records):
  """The inner loop returns every key of loss_fn and metric_fn: losses
  averaged over the loop's steps, metric sums summed (here a loop of 2
  steps, the first run apart as the untimed warm-up). The values are
  constants, each distinct, so a value under another key or a step counted
  twice or not at all shows. Bugs caught: the metrics read from the losses'
  place in the loop's flat row (their offset dropped); a step's row left out
  of the sum."""
  def loss_fn(labels, outputs):
    losses = pretrainer.pretraining_losses(labels, outputs)
    return {"loss": losses["loss"], "aux_loss": tf.constant(2.5)}

  def metric_fn(labels, outputs):
    del labels, outputs
    return {"a_correct": tf.constant(3.0), "a_total": tf.constant(4.0),
            "z_count": tf.constant(5.0)}

  t = _trainer(tmp_path, 4, loss_fn=loss_fn, metric_fn=metric_fn)
  result = t.train(_dataset_fn(records), global_batch_size=4)
  assert result.step == 4 and len(result.history) == 2, result
  for loop in result.history:
    assert loop["aux_loss"] == pytest.approx(2.5), loop
    assert loop["a_accuracy"] == pytest.approx(0.75), loop
    assert loop["z_count"] == pytest.approx(10.0), loop
    assert 0.5 < loop["loss"] < 20, loop


def test_accuracies_divides_counts():
  got = trainer_lib.accuracies({"mlm_correct": 3.0, "mlm_total": 4.0,
                                "loss": 2.5})
  assert got == {"mlm_accuracy": 0.75, "loss": 2.5}


@pytest.mark.parametrize("jit_compile", [False, True])
def test_variable_without_gradient_is_skipped_and_others_train_as_before(
    tmp_path, jit_compile):
  """A head that never reads a trainable variable (the pooler under a span or
  token head): training runs, that variable keeps its value (no update, no
  weight decay), and every other variable ends exactly where it ends when the
  unused one is frozen (it takes no share of the clipped global norm).
  With jit_compile the gradients (None included) leave an XLA function."""
  import keras  # pylint: disable=g-import-not-at-top
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(4)
  x = rng.normal(size=(12, 5)).astype("float32")
  y = rng.normal(size=(12, 3)).astype("float32")

  def train(freeze_unused, name):
    keras.utils.set_random_seed(7)
    used = keras.layers.Dense(3, name="used")
    unused = keras.layers.Dense(2, name="unused")
    inputs = keras.Input((5,))
    model = keras.Model(inputs, used(inputs))
    unused.build((None, 5))
    model.unused = unused  # tracked: a trainable variable nothing reads
    unused.trainable = not freeze_unused
    assert len(model.trainable_variables) == (2 if freeze_unused else 4)
    before = {v.path: v.numpy() for v in model.weights}
    optimizer = optimization.create_optimizer("adamw", 1e-1, 3, 1,
                                              weight_decay=0.1)
    t = trainer_lib.Trainer(
        tf.distribute.get_strategy(), model, optimizer,
        lambda labels, out: {"loss": tf.reduce_mean((out - labels) ** 2)},
        trainer_lib.TrainConfig(output_dir=str(tmp_path / name),
                                num_train_steps=3, steps_per_loop=3,
                                max_grad_norm=0.01,  # clipping acts
                                jit_compile=jit_compile),
        log=lambda _: None)
    t.train(lambda _: tf.data.Dataset.from_tensor_slices((x, y)).batch(
        4).repeat())
    return before, {v.path: v.numpy() for v in model.weights}

  before, after = train(False, "trainable")
  _, frozen = train(True, "frozen")
  assert set(before) == set(frozen) and len(before) == 4
  for path in before:
    if "unused" in path:
      np.testing.assert_array_equal(after[path], before[path])
    else:
      assert np.max(np.abs(after[path] - before[path])) > 1e-3, path
      np.testing.assert_array_equal(after[path], frozen[path])

def test_first_rate_and_eta_exclude_tracing(tmp_path, records, monkeypatch):
  """With a fake clock: the inner loop's first call (tracing, compiling)
  costs 600 s, each step 1 s. The first progress line must show the step
  rate (4 sequences/s) and the ETA of the steps left at 1 s each (4 s).
  Bug caught: timing the first call (the first ETA was ~60% too high in
  real runs; here 20 min instead of 4 s)."""
  clock = [1000.0]
  real_make = trainer_lib.train_step.make_train_loop

  def make_train_loop(*args, **kwargs):
    loop = real_make(*args, **kwargs)
    traced = []

    def timed_loop(iterator, num_steps):
      result = loop(iterator, num_steps)
      clock[0] += (0.0 if traced else 600.0) + int(num_steps)
      traced.append(True)
      return result
    return timed_loop

  monkeypatch.setattr(trainer_lib.train_step, "make_train_loop",
                      make_train_loop)
  monkeypatch.setattr(trainer_lib, "time",
                      type("FakeTime", (), {"time": lambda: clock[0]}))
  lines = []
  t = _trainer(tmp_path, 6, log=lines.append)  # 3 loops of 2 steps
  t.train(_dataset_fn(records), global_batch_size=4)
  progress = [line for line in lines if line.startswith("step ")]
  assert len(progress) == 3, lines
  assert progress[0].startswith("step 2/6 ") and progress[1].startswith(
      "step 4/6 "), progress
  assert progress[0].endswith(" 4.0 seq/s ETA 0:00:04"), progress
  assert progress[1].endswith(" 4.0 seq/s ETA 0:00:02"), progress


def test_update_compiled_unless_the_optimizer_runs_fused_kernels():
  """The original's AdamWeightDecay outside any strategy updates with
  TensorFlow's fused kernels, which XLA is not asked to compile (3-4 s for
  BERT's update, no faster a step); Keras's AdamW, LAMB, and AdamWeightDecay
  under a strategy (its `update_step`) are compiled. Bugs caught: ignoring
  the optimizer (the first assert), asking it outside the strategy's scope
  (the last)."""
  from official_bert.training import optimization  # pylint: disable=g-import-not-at-top
  compiles = trainer_lib.train_step.compiles_update

  def make(name):
    return optimization.create_optimizer(name, 1e-4, 10)
  default = tf.distribute.get_strategy()
  assert not compiles(default, make("adamw"))
  assert compiles(default, make("keras_adamw"))
  assert compiles(default, make("lamb"))
  one_device = tf.distribute.OneDeviceStrategy("/cpu:0")
  with one_device.scope():
    adamw = make("adamw")
  assert compiles(one_device, adamw)


def test_workers_coordinate_with_a_heartbeat_timeout_busy_cpus_survive():
  """MultiWorkerMirroredStrategy's coordination service with our heartbeat
  timeout (TensorFlow's 10 s failed a healthy two-worker job compiling with
  XLA on 2 busy cores): the leader and jobs the strategy itself would use."""
  cluster = {"chief": ["localhost:1"], "worker": ["localhost:2",
                                                  "localhost:3"]}
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
      tf.train.ClusterSpec(cluster), task_type="worker", task_id=1)
  args = distribution.coordination_service_args(resolver)
  assert args["heartbeat_timeout_in_ms"] == 120_000
  assert distribution.HEARTBEAT_TIMEOUT_S * 1000 > 10_000
  assert args["service_leader"] == "/job:chief/replica:0/task:0"
  assert [(j.name, j.num_tasks) for j in args["coordinated_jobs"]] == [
      ("chief", 1), ("worker", 2)]
  evaluator = tf.distribute.cluster_resolver.SimpleClusterResolver(
      tf.train.ClusterSpec(cluster), task_type="evaluator", task_id=0)
  assert distribution.coordination_service_args(evaluator) is None
