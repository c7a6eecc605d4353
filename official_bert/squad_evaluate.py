"""The official SQuAD evaluation as a command (evaluate-v1.1.py / -v2.0.py).

    python -m official_bert.squad_evaluate dev-v2.0.json predictions.json \\
      --na_prob_file=null_odds.json

prints the official script's JSON on one line: for a v1.1 data file
`exact_match`, `f1`; otherwise `exact`, `f1`, `total`, `HasAns_*`,
`NoAns_*` and with --na_prob_file `best_exact`, `best_exact_thresh`,
`best_f1`, `best_f1_thresh` (tasks/squad_metrics.py). --squad_version picks
the script when the file's "version" field should not.
"""

import json

from absl import app
from absl import flags

from official_bert import cli
from official_bert.tasks import squad
from official_bert.tasks import squad_metrics

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("na_prob_file", None, "v2.0: JSON of question id -> "
                      "probability (or score) of no answer, e.g. run_squad's "
                      "null_odds.json.")
  flags.DEFINE_float("na_prob_thresh", 1.0, "v2.0: predict no answer when the "
                     "no-answer probability is above this.")
  flags.DEFINE_enum("squad_version", None, ["1.1", "2.0"], "Which official "
                    "script to follow (default: the data file's version).")


def _load_dict(path, what):
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except OSError as e:
    raise cli.Error(f"{what} {path} cannot be read ({e.strerror}).")
  except (json.JSONDecodeError, UnicodeDecodeError):
    raise cli.Error(f"{what} {path} is not JSON; pass the {what} file "
                    "run_squad.py wrote.")
  if not isinstance(value, dict):
    raise cli.Error(f"{what} {path} is not a JSON object of question id -> "
                    "value.")
  return value


def main(argv):
  if len(argv) != 3:
    raise app.UsageError("pass the data file and the predictions file: "
                         "squad_evaluate DATA.json PREDICTIONS.json.")
  data_file, prediction_file = argv[1:]
  try:
    data = squad.load_squad_json(data_file)
    with open(data_file, encoding="utf-8") as f:
      version = str(json.load(f).get("version", ""))
  except ValueError as e:
    raise cli.Error(str(e))
  predictions = _load_dict(prediction_file, "predictions")
  version = FLAGS.squad_version or ("1.1" if version in ("1.1", "v1.1")
                                    else "2.0")
  try:
    if version == "1.1":
      result = squad_metrics.evaluate_v1(data, predictions)
    else:
      na_probs = (_load_dict(FLAGS.na_prob_file, "na_prob_file")
                  if FLAGS.na_prob_file else None)
      missing = sorted(set(predictions) - set(na_probs or predictions))
      if missing:
        raise cli.Error(f"na_prob_file {FLAGS.na_prob_file} has no value "
                        f"for question {missing[0]}.")
      result = squad_metrics.evaluate_v2(data, predictions, na_probs,
                                         FLAGS.na_prob_thresh)
  except (KeyError, TypeError, AttributeError, ValueError) as e:
    raise cli.Error(f"{data_file} or {prediction_file} is not in the SQuAD "
                    f"format ({type(e).__name__}: {e}).")
  print(json.dumps(result))


if __name__ == "__main__":
  define_flags()
  cli.run(main)
