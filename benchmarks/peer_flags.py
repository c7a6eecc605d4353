"""The flags every ours-against-a-peer fine-tuning benchmark shares: the
hyperparameters both sides train with, and the rounds run in turns."""

from absl import flags


def define(peer):
  """--epochs, --learning_rate, --batch_size, --seed, --rounds; `peer` names
  the other side in --rounds' help ("HF")."""
  flags.DEFINE_float("epochs", 1.0, "Training epochs.")
  flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate, both sides.")
  flags.DEFINE_integer("batch_size", 32, "Training and prediction batch.")
  flags.DEFINE_integer("seed", 12345, "Seed of both sides.")
  flags.DEFINE_integer("rounds", 1, "Rounds per task, each running ours then "
                       f"{peer}: medians of the rates (a noisy neighbour or a "
                       "frequency change hits one round, not the figure).")
