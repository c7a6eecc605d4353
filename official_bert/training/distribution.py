"""Distribution strategy and mixed-precision policy, shared by every trainer.

    strategy = distribution.get_strategy("mirrored", num_gpus=2)
    distribution.set_mixed_precision("mixed_bfloat16")   # before building models
    with strategy.scope():
      model = ...

Strategies (`--distribution_strategy`):
  default                the default strategy: one device, no tf.distribute wrapping
  one_device             OneDeviceStrategy on /gpu:0 (or /cpu:0 with --num_gpus=0)
  mirrored               MirroredStrategy over --num_gpus GPUs (all visible when
                         unset; the CPU when there are none)
  multi_worker_mirrored  MultiWorkerMirroredStrategy; workers from TF_CONFIG
  tpu                    TPUStrategy on --tpu (name or grpc:// address)

XLA (`jit_compile`) compiles for one device; with a multi-device strategy
in one process it fails on this stack ("variable on another device"), so
`check_jit_compile` refuses that combination with one sentence.
"""

import json
import os

import keras
import tensorflow as tf

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


# How long a worker may go without a heartbeat before the coordination
# service declares it failed and aborts every collective. TensorFlow's
# default (10 s) fails healthy jobs whose workers share busy CPUs: a worker
# compiling its step with XLA on a loaded machine missed it (a real failure
# of our two-worker test on a 2-core machine). A crashed worker is still
# found within this time; a preempted one saves first (SIGTERM handling).
HEARTBEAT_TIMEOUT_S = 120


def coordination_service_args(resolver):
  """The arguments of the coordination service MultiWorkerMirroredStrategy
  would start for `resolver`'s cluster, with HEARTBEAT_TIMEOUT_S; None for a
  task outside it (an evaluator)."""
  from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.python.distribute import multi_worker_util  # pylint: disable=g-import-not-at-top
  cluster_spec = resolver.cluster_spec()
  jobs = [coordination_config_pb2.CoordinatedJob(
              name=job, num_tasks=cluster_spec.num_tasks(job))
          for job in ("chief", "worker") if job in cluster_spec.jobs]
  if resolver.task_type not in ("chief", "worker") or not jobs:
    return None
  return dict(service_type="standalone",
              service_leader=multi_worker_util.coordination_leader(
                  cluster_spec),
              coordinated_jobs=jobs,
              heartbeat_timeout_in_ms=HEARTBEAT_TIMEOUT_S * 1000)


def _configure_coordination_service():
  """Starts our coordination service settings; the strategy keeps a service
  configured before it (no public API sets the heartbeat timeout)."""
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
  args = coordination_service_args(
      tf.distribute.cluster_resolver.TFConfigClusterResolver())
  if args:
    context.context().configure_coordination_service(**args)


def get_strategy(name="default", num_gpus=None, tpu=None,
                 tpu_resolver_args=None):
  """The tf.distribute strategy called `name` (see the module docstring);
  `tpu_resolver_args`: the TPU's `zone` and `project`, if given."""
  if name not in STRATEGIES:
    raise ValueError(f"--distribution_strategy must be one of {STRATEGIES}, "
                     f"got {name!r}")
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "multi_worker_mirrored":
    # Before anything starts the TensorFlow runtime (listing devices does):
    # collectives are configured at start-up.
    if "TF_CONFIG" not in os.environ:
      raise ValueError("--distribution_strategy=multi_worker_mirrored needs "
                       "the TF_CONFIG environment variable (cluster and task) "
                       "set on every worker.")
    json.loads(os.environ["TF_CONFIG"])  # a clear JSON error early
    _configure_coordination_service()
    return tf.distribute.MultiWorkerMirroredStrategy()
  gpus = tf.config.list_logical_devices("GPU")
  if name == "one_device":
    use_gpu = gpus and num_gpus != 0
    return tf.distribute.OneDeviceStrategy("/gpu:0" if use_gpu else "/cpu:0")
  if name == "mirrored":
    if num_gpus is None:
      devices = [d.name for d in gpus] or None
    elif num_gpus == 0:
      devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    else:
      if num_gpus > len(gpus):
        raise ValueError(f"--num_gpus={num_gpus} but only {len(gpus)} GPUs "
                         "are visible; lower --num_gpus.")
      devices = [d.name for d in gpus[:num_gpus]]
    return tf.distribute.MirroredStrategy(devices)
  if not tpu:
    raise ValueError("--distribution_strategy=tpu needs --tpu (the TPU name "
                     "or grpc:// address).")
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu, **(tpu_resolver_args or {}))
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, OSError, RuntimeError, tf.errors.OpError) as e:
    # urllib's URLError (no GCE metadata server) is an OSError.
    reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
    raise ValueError(
        f"No TPU can be reached as --tpu {tpu} ({type(e).__name__}: "
        f"{reason}); run on a Cloud TPU VM (--tpu=local) or give the TPU's "
        "name, zone and project, or drop --use_tpu/--distribution_strategy="
        "tpu to run on this machine.") from None
  return tf.distribute.TPUStrategy(resolver)


def split_cpu(num_devices):
  """Splits the CPU into `num_devices` logical devices (before TF starts).

  Lets MirroredStrategy run real replicas on a CPU-only machine
  (`--distribution_strategy=mirrored --num_gpus=0`).
  """
  cpus = tf.config.list_physical_devices("CPU")
  configured = tf.config.get_logical_device_configuration(cpus[0])
  if configured is not None and len(configured) == num_devices:
    return  # split already (a fine-tuning run does it before its tokenizer)
  tf.config.set_logical_device_configuration(
      cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices)


def set_mixed_precision(policy):
  """Sets Keras's global dtype policy; call before building the model."""
  if policy not in PRECISIONS:
    raise ValueError(f"--mixed_precision must be one of {PRECISIONS}, "
                     f"got {policy!r}")
  keras.mixed_precision.set_global_policy(policy)


def check_jit_compile(strategy, jit_compile):
  """Raises when XLA is asked for with several devices in this process."""
  if jit_compile and num_local_devices(strategy) > 1:
    raise ValueError(
        f"--jit_compile compiles for one device, but the strategy has "
        f"{num_local_devices(strategy)} devices in this process; drop "
        "--jit_compile or use one device per process (multi_worker_mirrored).")


def num_local_devices(strategy):
  """Replicas this process runs (the default strategy has one)."""
  try:
    return len(strategy.extended.worker_devices)
  except RuntimeError:  # the default strategy does not list its device
    return 1


def is_chief(strategy):
  """True on the worker that writes checkpoints, summaries and logs."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type in (None, "chief") or (
      task_type == "worker" and task_id == 0 and
      "chief" not in resolver.cluster_spec().as_dict())
