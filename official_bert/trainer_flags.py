"""The trainer's flags, defined once for every training program.

`run_pretraining` and the fine-tuning programs (through
`finetuning_flags.define_flags`) define the flags they share here: the
original's (`define_run`: --bert_config_file, --vocab_file, --output_dir,
--init_checkpoint, --max_seq_length, --do_train, --do_eval,
--train_batch_size, --eval_batch_size, --learning_rate,
--save_checkpoints_steps) and the loop's (`define`), each with its own
defaults where the programs differ on purpose:

  --distribution_strategy, --num_gpus, --num_cpu_devices, --tpu
  --mixed_precision, --optimizer, --jit_compile, --kernels
  --steps_per_loop      pretraining 1000 (the original's
                        iterations_per_loop), fine-tuning 100 (short runs
                        print more often)
  --max_grad_norm, --weight_decay, --adam_epsilon, --seed
  --keep_checkpoint_max pretraining 5, fine-tuning 2
  and google-research/bert's TPU flags (`tpu_flags`).

    trainer_flags.define(steps_per_loop=1000, keep_checkpoint_max=5)
    ...
    config = trainer_flags.driver_config(
        FLAGS, trainer_flags.program_values(FLAGS), num_train_steps=...)

`driver_config` is where flags become the frozen `DriverConfig` of the
shared driver (training/driver.py), which reads no flags.
"""

import dataclasses
import os
import sys

from absl import flags

from official_bert import tpu_flags
from official_bert.training import driver


def define(steps_per_loop, keep_checkpoint_max, flag_values=flags.FLAGS):
  """Defines the shared flags with the calling program's defaults (in
  `flag_values`, absl's global ones by default)."""
  fv = flag_values
  flags.DEFINE_enum("distribution_strategy", "default",
                    ["default", "one_device", "mirrored",
                     "multi_worker_mirrored", "tpu"],
                    "tf.distribute strategy; multi_worker_mirrored reads the "
                    "cluster from TF_CONFIG.", flag_values=fv)
  flags.DEFINE_integer("num_gpus", None,
                       "GPUs for mirrored/one_device (default: all visible; "
                       "0 = use the CPU devices).", flag_values=fv)
  flags.DEFINE_integer("num_cpu_devices", 1,
                       "Split the CPU into this many logical devices (with "
                       "--distribution_strategy=mirrored --num_gpus=0: "
                       "replicas on one CPU, for testing).", flag_values=fv)
  flags.DEFINE_string("tpu", None, "TPU name or grpc:// address for "
                      "--distribution_strategy=tpu.", flag_values=fv)
  flags.DEFINE_enum("mixed_precision", "float32",
                    ["float32", "mixed_bfloat16", "mixed_float16"],
                    "Compute dtype policy; mixed_float16 adds dynamic loss "
                    "scaling. Variables stay float32.", flag_values=fv)
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "keras_adamw", "lamb"],
                    "adamw: the original's AdamWeightDecayOptimizer (no bias "
                    "correction), for which the paper's rates were tuned; "
                    "keras_adamw: Keras's bias-corrected AdamW; lamb: LAMB "
                    "(large batches). See training/optimization.py.",
                    flag_values=fv)
  flags.DEFINE_bool("jit_compile", False,
                    "Compile the training step with XLA (one device per "
                    "process).", flag_values=fv)
  flags.DEFINE_enum("kernels", "auto", ["auto", "fast", "keras"],
                    "The model's kernels (official_bert/modeling/kernels.py):"
                    " auto = keras when XLA compiles the model (--jit_compile,"
                    " TPUs, the JAX backend), else fast.", flag_values=fv)
  flags.DEFINE_integer("steps_per_loop", steps_per_loop,
                       "Steps per tf.function call (between progress "
                       "lines); the original's iterations_per_loop.",
                       flag_values=fv)
  flags.DEFINE_float("max_grad_norm", 1.0,
                     "Clip the gradient's global norm to this (0 = off).",
                     flag_values=fv)
  flags.DEFINE_float("weight_decay", 0.01,
                     "Decoupled weight decay (not on LayerNorm and biases).",
                     flag_values=fv)
  flags.DEFINE_float("adam_epsilon", 1e-6,
                     "Adam's epsilon, added to the square root of the "
                     "second moment before any bias correction (the "
                     "original's 1e-6; torch's AdamW adds its 1e-8 after "
                     "it, so 1e-8 here is closer to Hugging Face's "
                     "default).", flag_values=fv)
  flags.DEFINE_integer("keep_checkpoint_max", keep_checkpoint_max,
                       "Checkpoints kept in --output_dir.", flag_values=fv)
  flags.DEFINE_integer("seed", 12345,
                       "Seed of the weights, dropout, data order (and "
                       "run_pretraining's dynamic masks).",
                       flag_values=fv)
  tpu_flags.define(flag_values=fv)


def define_run(max_seq_length=128, learning_rate=5e-5, train_batch_size=32,
               do_eval=True, flag_values=flags.FLAGS):
  """Defines google-research/bert's flags that run_pretraining and the
  fine-tuning programs share (the same names and defaults; run_squad passes
  max_seq_length=384 and has no --do_eval nor --eval_batch_size)."""
  fv = flag_values
  flags.DEFINE_string("bert_config_file", None, "The bert_config.json of the "
                      "model (to pretrain, or pretrained).", flag_values=fv)
  flags.DEFINE_string("vocab_file", None, "The model's vocab.txt (for "
                      "run_pretraining only with --masking=dynamic: the ids of "
                      "[MASK], [CLS] and [SEP], the random replacements and "
                      "the ## pieces of the TFRecords' vocabulary).",
                      flag_values=fv)
  flags.DEFINE_string("output_dir", None, "Where checkpoints, summaries and "
                      "results are written; rerunning with the same "
                      "directory resumes.", flag_values=fv)
  flags.DEFINE_string("init_checkpoint", None, "Pretrained (or converted) "
                      "checkpoint, a prefix or a directory: run_pretraining "
                      "warm-starts every weight (not the optimizer or step) "
                      "from it, e.g. phase 1 for phase 2; fine-tuning loads "
                      "its encoder and the task head starts fresh. Ignored "
                      "when --output_dir holds a checkpoint.", flag_values=fv)
  flags.DEFINE_integer("max_seq_length", max_seq_length, "Tokens per "
                       "sequence: the TFRecords' (must match the data), or "
                       "per packed example (longer ones are truncated or "
                       "windowed).", flag_values=fv)
  flags.DEFINE_bool("do_train", False, "Whether to train.", flag_values=fv)
  if do_eval:
    flags.DEFINE_bool("do_eval", False, "Whether to evaluate (fine-tuning: "
                      "on dev; run_pretraining: on --input_file).",
                      flag_values=fv)
  flags.DEFINE_integer("train_batch_size", train_batch_size, "Global "
                       "training batch size (all replicas and accumulation "
                       "steps together).", flag_values=fv)
  if do_eval:
    flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch "
                         "size.", flag_values=fv)
  flags.DEFINE_float("learning_rate", learning_rate, "Peak learning rate.",
                     flag_values=fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Save a checkpoint "
                       "every this many steps.", flag_values=fv)


def config_from_flags(flag_values, config_class, **values):
  """A task's config (a dataclass whose fields are named as the flags):
  each field the flag of its name's value, but those given in `values`."""
  names = [f.name for f in dataclasses.fields(config_class)
           if f.name not in values]
  return config_class(**{name: flag_values[name].value for name in names},
                      **values)


def shared_values(flag_values):
  """{name: value} of the flags defined here and in `tpu_flags`, for a
  program's flags.json (absl files them under these modules)."""
  modules = (__name__, tpu_flags.__name__)
  return {f.name: f.value
          for module, module_flags in flag_values.flags_by_module_dict().items()
          if module in modules for f in module_flags}


def program_values(flag_values, modules=()):
  """{name: value} of the flags the running program defines (absl files a
  `__main__`'s under sys.argv[0]) and those of `modules` (names), for its
  flags.json."""
  program = os.path.abspath(sys.argv[0]) if sys.argv else ""
  return {f.name: f.value
          for module, module_flags in flag_values.flags_by_module_dict().items()
          if module in modules or module == sys.argv[0] or (
              program and os.path.abspath(module) == program)
          for f in module_flags}


def driver_config(flag_values, program_flags, **fields):
  """The DriverConfig of a run: the flags defined here and the ones every
  training program defines alike (output_dir, init_checkpoint, do_train,
  train_batch_size, learning_rate, save_checkpoints_steps), then `fields`
  (the program's own: steps, ...); flags.json gets `program_flags` and
  `shared_values`."""
  fv = flag_values
  names = ("output_dir", "init_checkpoint", "do_train", "train_batch_size",
           "learning_rate", "save_checkpoints_steps", "distribution_strategy",
           "num_gpus", "num_cpu_devices", "tpu", "mixed_precision",
           "jit_compile", "kernels", "seed", "optimizer", "weight_decay",
           "adam_epsilon", "max_grad_norm", "steps_per_loop",
           "keep_checkpoint_max")
  values = {name: fv[name].value for name in names}
  resolver = tpu_flags.resolver_args(fv)
  return driver.DriverConfig(
      tpu_zone=resolver.get("zone"), gcp_project=resolver.get("project"),
      flags={**program_flags, **shared_values(fv)}, **values, **fields)
