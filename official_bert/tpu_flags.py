"""google-research/bert's TPU flags, so its command lines run as written.

The original's run_classifier, run_squad and run_pretraining define
--use_tpu, --tpu_name, --tpu_zone, --gcp_project, --master, --num_tpu_cores
and --iterations_per_loop for TPUEstimator; its extract_features defines
--use_tpu, --master, --num_tpu_cores and --use_one_hot_embeddings. Ours
define them with the original's defaults and map them onto our flags:

  --use_tpu=True              --distribution_strategy=tpu
  --tpu_name=X (or --master)  --tpu=X (a TPU name or grpc:// address)
  --tpu_zone, --gcp_project   the TPU's cluster resolver
  --iterations_per_loop=N     --steps_per_loop=N, when --steps_per_loop is
                              not given (a tf.function runs N steps per call,
                              as TPUEstimator ran N per session.run)
  --num_tpu_cores             accepted; TPUStrategy uses every core of the
                              TPU it connects to
  --use_one_hot_embeddings    accepted; a TPU speed choice of the original
                              that gives the same embeddings

    tpu_flags.define()                # in a program, beside its flags
    tpu_flags.apply(FLAGS)            # before the strategy is made
"""

from absl import app
from absl import flags


def define(extract_features=False, flag_values=flags.FLAGS):
  """Defines the original's TPU flags (extract_features: its four) in
  `flag_values`."""
  fv = flag_values
  flags.DEFINE_bool("use_tpu", False, "google-research/bert's flag: train "
                    "on a Cloud TPU (= --distribution_strategy=tpu).",
                    flag_values=fv)
  flags.DEFINE_string("master", None, "google-research/bert's flag: the TPU's "
                      "grpc:// address (= --tpu).", flag_values=fv)
  flags.DEFINE_integer("num_tpu_cores", 8, "google-research/bert's flag; "
                       "accepted: TPUStrategy uses every core of the TPU.",
                       flag_values=fv)
  if extract_features:
    flags.DEFINE_bool("use_one_hot_embeddings", False, "google-research/"
                      "bert's flag; accepted (same embeddings either way).",
                      flag_values=fv)
    return
  flags.DEFINE_string("tpu_name", None, "google-research/bert's flag: the "
                      "Cloud TPU's name (= --tpu).", flag_values=fv)
  flags.DEFINE_string("tpu_zone", None, "google-research/bert's flag: the "
                      "TPU's GCE zone (found from metadata if unset).",
                      flag_values=fv)
  flags.DEFINE_string("gcp_project", None, "google-research/bert's flag: the "
                      "TPU's project (found from metadata if unset).",
                      flag_values=fv)
  flags.DEFINE_integer("iterations_per_loop", 1000, "google-research/bert's "
                       "flag: steps per loop; sets --steps_per_loop when that "
                       "is not given.", flag_values=fv)


def apply(flag_values):
  """Maps the original's flags (as given) onto ours; call before the
  strategy is made."""
  fv = flag_values
  if "iterations_per_loop" in fv and fv["iterations_per_loop"].present and (
      "steps_per_loop" in fv and not fv["steps_per_loop"].present):
    fv.steps_per_loop = fv.iterations_per_loop
  if not fv.use_tpu:
    return
  if "distribution_strategy" not in fv:
    raise app.UsageError("--use_tpu: this program runs on this machine's "
                         "CPU or GPU; drop --use_tpu.")
  fv.distribution_strategy = "tpu"
  tpu = fv.tpu or (fv.tpu_name if "tpu_name" in fv else None) or fv.master
  if not tpu:
    raise app.UsageError("--use_tpu needs --tpu_name (the Cloud TPU's name, "
                         "or 'local' on a TPU VM) or --master (its grpc:// "
                         "address).")
  fv.tpu = tpu


def resolver_args(flag_values):
  """The cluster resolver's zone and project ({} when not given)."""
  return {key: flag_values[name].value
          for key, name in (("zone", "tpu_zone"), ("project", "gcp_project"))
          if name in flag_values and flag_values[name].value}
