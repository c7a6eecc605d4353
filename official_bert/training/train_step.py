"""The training step and the inner loop: what runs per step, what XLA compiles.

One step: forward/backward on each of `gradient_accumulation_steps`
micro-batches, gradients summed over micro-batches and replicas (one
all-reduce), clipped by their global norm (`max_grad_norm`, the same on 1 or
N replicas), applied by the optimizer (a `LossScaleOptimizer` under
mixed_float16 unscales and skips non-finite steps). The inner loop runs
`num_steps` of them inside one `tf.function` (`strategy.run` per step) and
returns the summed losses and metrics. A loss that scores each example
against the whole batch (a training/task.py `InBatchLoss`: embedding's
in-batch negatives) reads the candidates of every replica
(`gather_candidates`) and, with a mini-batch size, gets GradCache's
gradient, computed a chunk at a time (`cached_gradients`).

What XLA compiles:
- the losses and metrics (except when XLA compiles the whole model anyway:
  `jit_compile`, TPUs): it fuses the softmax cross-entropy, its gradient and
  the accuracy's pass over the [B, P, V] logits;
- with a single replica (not on TPUs), the update (clipping and optimizer),
  which fuses its element-wise passes over all the weights; with several, the
  Keras optimizer synchronises replicas (`merge_call`), which a compiled
  function cannot do. Not an optimizer that updates with TensorFlow's fused
  kernels (the original's AdamWeightDecay outside any strategy,
  training/optimization.py): XLA has nothing left to fuse there and took
  3-4 s to compile BERT's update;
- with `jit_compile`, the forward and backward passes (one device per
  process).
Which kernels the model itself runs is the model's own choice, made by the
program that built it: this module traces whatever the model is and imports
no model code. benchmarks/pretraining_benchmark.py measures the effect of
each choice; the git log of docs/performance.md has the history.
"""

import dataclasses
import typing

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class StepOptions:
  """How one step is built (the Trainer's TrainConfig fields of the same names)."""
  gradient_accumulation_steps: int = 1
  max_grad_norm: float = 1.0
  jit_compile: bool = False
  remove_padding: bool = False
  in_batch_loss: typing.Any = None  # a training/task.py InBatchLoss


def is_tpu(strategy):
  return isinstance(strategy, tf.distribute.TPUStrategy)


def compiles_update(strategy, optimizer=None):
  """Whether the update (clipping + optimizer) runs under XLA (see above)."""
  if strategy.num_replicas_in_sync != 1 or is_tpu(strategy):
    return False
  fused_kernels = getattr(optimizer, "fused_kernels", None)
  if fused_kernels is not None:
    with strategy.scope():
      return not fused_kernels()
  return True


def replica_gradients(model, optimizer, losses_and_metrics, batches,
                      num_replicas, remove_padding=False, in_batch_loss=None):
  """Per replica: summed gradients and losses/metrics of the micro-batches.

  Each micro-batch's loss is scaled by 1 / (replicas * micro-batches), so the
  all-reduced sum is the gradient of the global batch's mean loss. Losses are
  averaged over micro-batches, metrics summed. A variable the loss never
  reads (the pooler under a span or token head) has the gradient None.
  `remove_padding`: the model is called with `remove_padding=True` (the
  fine-tuning models: position-wise work on the tokens only).
  `in_batch_loss` (a training/task.py InBatchLoss, or None): under several
  replicas the candidates are gathered from all of them (`gather_candidates`)
  before the loss; with its mini_batch_size, each micro-batch's gradient is
  `cached_gradients`'.
  """
  variables = model.trainable_variables
  call_kwargs = {"remove_padding": True} if remove_padding else {}
  scale = 1.0 / (num_replicas * len(batches))
  if in_batch_loss is not None and num_replicas > 1:
    own = in_batch_loss.own_outputs
    loss_fn = lambda labels, outputs: losses_and_metrics(
        labels, gather_candidates(outputs, own))
  else:
    loss_fn = losses_and_metrics
  chunk = in_batch_loss.mini_batch_size if in_batch_loss else 0
  grads, loss_sums, metric_sums = None, {}, {}
  for inputs, labels in batches:
    if chunk:
      step_grads, losses, metrics = cached_gradients(
          model, lambda l, o: scaled_losses(optimizer, loss_fn, scale, l, o),
          inputs, labels, chunk, call_kwargs)
    else:
      with tf.GradientTape() as tape:
        outputs = model(inputs, training=True, **call_kwargs)
        scaled, losses, metrics = scaled_losses(optimizer, loss_fn, scale,
                                                labels, outputs)
      step_grads = tape.gradient(scaled, variables)
    step_grads = [None if g is None else tf.convert_to_tensor(g)
                  for g in step_grads]
    grads = step_grads if grads is None else [
        None if a is None else a + b for a, b in zip(grads, step_grads)]
    for key, value in losses.items():
      loss_sums[key] = loss_sums.get(key, 0.0) + value / len(batches)
    for key, value in metrics.items():
      metric_sums[key] = metric_sums.get(key, 0.0) + value
  return grads, loss_sums, metric_sums


def scaled_losses(optimizer, loss_fn, scale, labels, outputs):
  """(the loss times `scale`, loss-scaled, to differentiate; the losses;
  the metrics)."""
  losses, metrics = loss_fn(labels, outputs)
  return optimizer.scale_loss(losses["loss"] * scale), losses, metrics


def seed_states(model):
  """The state variables of the model's dropout seed generators: its
  variables that are not weights (checkpoints save them as `rng`)."""
  weights = {id(v) for v in model.weights}
  return [v for v in model.variables if id(v) not in weights]


def gather_candidates(outputs, own_outputs):
  """`outputs` (a dict of [B, ...] per replica) with every key but
  `own_outputs` all-gathered from every replica, rotated so that replica
  r's B rows come first (then r + 1's, ..., 0's, ..., r - 1's): an
  example's own candidate keeps its row, so the loss is unchanged, and each
  replica's examples score against the global batch's candidates.
  all_gather's gradient sums every replica's share back to the replica whose
  rows they are."""
  context = tf.distribute.get_replica_context()
  gathered = dict(outputs)
  for key, value in outputs.items():
    if key not in own_outputs:
      every = context.all_gather(value, axis=0)               # [R * B, ...]
      gathered[key] = tf.roll(
          every, -context.replica_id_in_sync_group * tf.shape(value)[0],
          axis=0)
  return gathered


def cached_gradients(model, loss_fn, inputs, labels, chunk, call_kwargs):
  """GradCache (Gao et al., 2021; sentence-transformers'
  CachedMultipleNegativesRankingLoss): the gradient of the loss over the
  whole batch, `chunk` examples of activations at a time.

  (a) every chunk's outputs, with no tape (no activations kept); (b) the
  loss over all of them (`loss_fn(labels, outputs) -> (scaled loss, losses,
  metrics)`) and its gradient with respect to the outputs; (c) per chunk,
  the forward pass again under a tape, backpropagating its rows of (b)'s
  gradient; the chunks' gradients summed are the batch's. Dropout draws
  the same masks in (a) and (c): (a) records the seed generators' state
  before each chunk, and (c) sets it back before the chunk's re-run (after
  the last re-run they are where (a) left them). (a) and (c) are
  `tf.while_loop`s of one iteration at a time: one chunk's activations live
  at once, and the graph holds one copy of the model's passes whatever the
  number of chunks (unrolled, each chunk's copy added ~100 MiB to the
  first step's peak on all-MiniLM-L6-v2). Returns (gradients, losses,
  metrics).
  """
  variables = model.trainable_variables
  states = seed_states(model)
  size = tf.nest.flatten(inputs)[0].shape[0]
  if size is None or size % chunk:
    raise ValueError(f"mini_batch_size {chunk} must divide the per-replica "
                     f"batch, {size}")
  count = size // chunk

  def rows(tensors, i):
    """Chunk i's rows of each [size, ...] tensor (a slice of static size:
    XLA compiles it as a dynamic slice)."""
    pieces = []
    for t in tensors:
      rest = tf.shape(t)[1:]
      piece = tf.slice(t, tf.concat([[i * chunk], tf.zeros_like(rest)], 0),
                       tf.concat([[chunk], rest], 0))
      piece.set_shape([chunk] + list(t.shape[1:]))
      pieces.append(piece)
    return pieces

  def chunk_outputs(i):
    """Chunk i's outputs (flat), the seed generators' state read first."""
    read = [tf.identity(s.value) for s in states]
    with tf.control_dependencies(read):
      piece = tf.nest.pack_sequence_as(inputs, rows(tf.nest.flatten(inputs),
                                                    i))
      outputs = model(piece, training=True, **call_kwargs)
    return read, outputs

  # (a): chunk 0 gives the outputs' structure, the loop the other chunks.
  read, first = chunk_outputs(0)
  flat = [tf.stop_gradient(t) for t in tf.nest.flatten(first)]
  starts = [tf.TensorArray(r.dtype, size=count, element_shape=r.shape)
            .write(0, r) for r in read]
  parts = [tf.TensorArray(t.dtype, size=count, element_shape=t.shape)
           .write(0, t) for t in flat]

  def embed(i, starts, parts):
    read, outputs = chunk_outputs(i)
    return (i + 1, [a.write(i, r) for a, r in zip(starts, read)],
            [a.write(i, tf.stop_gradient(t))
             for a, t in zip(parts, tf.nest.flatten(outputs))])

  _, starts, parts = tf.while_loop(
      lambda i, *_: i < count, embed, (tf.constant(1), starts, parts),
      parallel_iterations=1)
  outputs = tf.nest.pack_sequence_as(first, [a.concat() for a in parts])
  for t, part in zip(tf.nest.flatten(outputs), flat):
    t.set_shape([size] + list(part.shape[1:]))
  with tf.GradientTape() as tape:                               # (b)
    tape.watch(outputs)
    scaled, losses, metrics = loss_fn(labels, outputs)
  cached = [tf.zeros_like(t) if g is None else g for g, t in zip(
      tf.nest.flatten(tape.gradient(scaled, outputs)),
      tf.nest.flatten(outputs))]
  unused = []  # which variables have no gradient (seen tracing the loop)

  def backprop(i, sums):                                        # (c)
    assigned = [s.assign(a.read(i)) for s, a in zip(states, starts)]
    with tf.control_dependencies([tf.nest.flatten(assigned)]):
      with tf.GradientTape() as tape:
        _, outputs = chunk_outputs(i)
    grads = tape.gradient(tf.nest.flatten(outputs), variables,
                          output_gradients=rows(cached, i))
    unused[:] = [g is None for g in grads]
    return i + 1, [total if g is None else total + tf.convert_to_tensor(g)
                   for total, g in zip(sums, grads)]

  with tf.control_dependencies([scaled]):
    zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
  _, sums = tf.while_loop(lambda i, _: i < count, backprop,
                          (tf.constant(0), zeros), parallel_iterations=1)
  return ([None if none else total for none, total in zip(unused, sums)],
          losses, metrics)


def clip_and_apply(optimizer, grads, variables, max_grad_norm):
  """Clips the (all-reduced) gradients by global norm and applies them.

  Under loss scaling the gradients are still multiplied by the scale, so the
  limit is too: the clipping is the same with and without it. Variables whose
  gradient is None are left out of both, as the original's optimizer skips
  them: no update, no weight decay, no share of the norm.
  """
  present = [(g, v) for g, v in zip(grads, variables) if g is not None]
  if not present:
    raise ValueError("The loss has no gradient for any trainable variable.")
  grads, variables = [g for g, _ in present], [v for _, v in present]
  if max_grad_norm > 0:
    limit = max_grad_norm
    dynamic_scale = getattr(optimizer, "dynamic_scale", None)
    if dynamic_scale is not None:
      limit = limit * tf.cast(tf.convert_to_tensor(dynamic_scale), tf.float32)
    grads, _ = tf.clip_by_global_norm(grads, limit)
  optimizer.apply(grads, variables)


def make_train_loop(strategy, model, optimizer, loss_fn, metric_fn, step,
                    options, transform_gradients=None):
  """The inner loop: `train_loop(iterator, num_steps) -> (losses, metrics)`.

  A `tf.function` that runs `num_steps` (>= 1) steps (each taking
  `options.gradient_accumulation_steps` batches from `iterator`), adds 1 to
  the `step` variable per step and returns the per-step mean losses summed
  over the steps and the metric sums.
  `transform_gradients(grads, variables, step) -> grads`, when given, edits
  the all-reduced gradients before clipping (the step counts from 0).
  """
  accumulation = options.gradient_accumulation_steps
  num_replicas = strategy.num_replicas_in_sync

  def losses_and_metrics(labels, outputs):
    return loss_fn(labels, outputs), metric_fn(labels, outputs)

  if not (options.jit_compile or is_tpu(strategy)):
    # Fuses the passes over the [B, P, V] logits (see docs/performance.md).
    losses_and_metrics = tf.function(losses_and_metrics, jit_compile=True,
                                     autograph=False)

  def replica_grads(batches):
    return replica_gradients(model, optimizer, losses_and_metrics, batches,
                             num_replicas, options.remove_padding,
                             options.in_batch_loss)

  def apply(grads):
    if transform_gradients is not None:
      grads = transform_gradients(grads, model.trainable_variables, step)
    clip_and_apply(optimizer, grads, model.trainable_variables,
                   options.max_grad_norm)

  if options.jit_compile:
    replica_grads = tf.function(replica_grads, jit_compile=True)
  if compiles_update(strategy, optimizer):
    apply = tf.function(apply, jit_compile=True)

  # Autograph only for the tf.range loop: converting the model and the
  # Keras optimizer's Python would multiply the tracing time.
  @tf.autograph.experimental.do_not_convert
  def replica_step(batches):
    grads, losses, metrics = replica_grads(batches)
    if num_replicas > 1:
      # The same variables lack a gradient on every replica (it is known
      # when tracing): only the others are reduced.
      present = [g for g in grads if g is not None]
      reduced = iter(tf.distribute.get_replica_context().all_reduce(
          tf.distribute.ReduceOp.SUM, present))
      grads = [None if g is None else next(reduced) for g in grads]
    apply(grads)
    return losses, metrics

  def reduce(per_replica, op):
    return {k: strategy.reduce(op, v, axis=None)
            for k, v in per_replica.items()}

  keys = {}

  @tf.autograph.experimental.do_not_convert
  def one_row(step_losses, step_metrics):
    keys["loss"], keys["metric"] = sorted(step_losses), sorted(step_metrics)
    return tf.stack([tf.cast(step_losses[k], tf.float32) for k in keys["loss"]]
                    + [tf.cast(step_metrics[k], tf.float32)
                       for k in keys["metric"]])

  @tf.function
  def train_loop(iterator, num_steps):
    # A step's losses and metrics go to one row of a TensorArray (in the
    # order of `keys`): their keys are known once the loop's body is traced,
    # so nothing traces the model beforehand to find them.
    rows = tf.TensorArray(tf.float32, size=num_steps, infer_shape=False)
    for i in tf.range(num_steps):
      batches = [next(iterator) for _ in range(accumulation)]
      step_losses, step_metrics = strategy.run(replica_step, args=(batches,))
      rows = rows.write(i, one_row(
          reduce(step_losses, tf.distribute.ReduceOp.MEAN),
          reduce(step_metrics, tf.distribute.ReduceOp.SUM)))
      step.assign_add(1)
    sums = tf.unstack(tf.reduce_sum(rows.stack(), axis=0),
                      num=len(keys["loss"]) + len(keys["metric"]))
    return (dict(zip(keys["loss"], sums)),
            dict(zip(keys["metric"], sums[len(keys["loss"]):])))

  return train_loop
