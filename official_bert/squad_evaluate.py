"""The official SQuAD evaluation as a command (evaluate-v1.1.py / -v2.0.py).

The official evaluate-v2.0.py's command line, with our program in its place:

    python -m official_bert.squad_evaluate dev-v2.0.json predictions.json \\
      -n null_odds.json [-o eval.json] [-t 1.0] [-p out_images] [-v]

`data.json pred.json`, `--out-file/-o`, `--na-prob-file/-n`,
`--na-prob-thresh/-t` (default 1.0), `--out-image-dir/-p`, `--verbose/-v`
(accepted and, as in the official script, unused); the underscore spellings
(`--na_prob_file`, `--na_prob_thresh`, `--out_file`, `--out_image_dir`) are
aliases. The metrics are tasks/squad/squad_metrics.py's.

Output, as the official scripts: for a v2.0 file `json.dumps(out_eval,
indent=2)` on stdout (`exact`, `f1`, `total`, `HasAns_*`, `NoAns_*`, with
--na-prob-file `best_exact`, `best_exact_thresh`, `best_f1`,
`best_f1_thresh`, and with --out-image-dir too `pr_exact_ap`, `pr_f1_ap`,
`pr_oracle_ap`), or with --out-file `json.dump(out_eval, f)` to that file and
nothing on stdout; a question without a prediction is named on stdout
(`Missing prediction for ID`; the official script then stops with a
KeyError, we score the predicted questions). For a file whose "version" is
"1.1", evaluate-v1.1.py's `json.dumps({"exact_match": ..., "f1": ...})`
(questions without a prediction score 0 and are named on stderr).
--squad_version picks the script when the file's "version" should not.
--out-image-dir draws the official precision-recall curves and no-answer
histograms (PNG) and needs matplotlib, which is not one of our
requirements.
"""

import argparse
import json
import os
import sys

from official_bert import cli
from official_bert.tasks.squad import squad_data
from official_bert.tasks.squad import squad_metrics


class _Parser(argparse.ArgumentParser):
  """argparse whose errors are one sentence and exit status 1 (cli.fail)."""

  def error(self, message):
    cli.fail(f"{message}; run with --help for the arguments.")


def parse_args(argv):
  parser = _Parser(
      prog="squad_evaluate",
      description="Official evaluation script for SQuAD version 2.0 (and "
      "1.1 for a version 1.1 data file).")
  parser.add_argument("data_file", metavar="data.json",
                      help="Input data JSON file.")
  parser.add_argument("pred_file", metavar="pred.json",
                      help="Model predictions.")
  parser.add_argument("--out-file", "--out_file", "-o", metavar="eval.json",
                      help="Write accuracy metrics to file (default is "
                      "stdout).")
  parser.add_argument("--na-prob-file", "--na_prob_file", "-n",
                      metavar="na_prob.json",
                      help="Model estimates of probability of no answer "
                      "(run_squad's null_odds.json).")
  parser.add_argument("--na-prob-thresh", "--na_prob_thresh", "-t",
                      type=float, default=1.0,
                      help="Predict \"\" if no-answer probability exceeds "
                      "this (default = 1.0).")
  parser.add_argument("--out-image-dir", "--out_image_dir", "-p",
                      metavar="out_images", default=None,
                      help="Save precision-recall curves to directory "
                      "(needs matplotlib).")
  parser.add_argument("--verbose", "-v", action="store_true")
  parser.add_argument("--squad_version", "--squad-version",
                      choices=["1.1", "2.0"], default=None,
                      help="Which official script to follow (default: the "
                      "data file's version).")
  if len(argv) == 0:
    parser.print_help()
    cli.fail("pass the data file and the predictions file: squad_evaluate "
             "data.json pred.json.")
  return parser.parse_args(argv)


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


def _pyplot():
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise cli.Error("--out-image-dir needs matplotlib, which is not "
                    "installed; pip install matplotlib or leave out "
                    "--out-image-dir.") from None
  return plt


def _plot_pr_curve(plt, precisions, recalls, out_image, title):
  plt.step(recalls, precisions, color="b", alpha=0.2, where="post")
  plt.fill_between(recalls, precisions, step="post", alpha=0.2, color="b")
  plt.xlabel("Recall")
  plt.ylabel("Precision")
  plt.xlim([0.0, 1.05])
  plt.ylim([0.0, 1.05])
  plt.title(title)
  plt.savefig(out_image)
  plt.clf()


def _histogram_na_prob(plt, na_probs, qids, image_dir, name):
  if not qids:
    return
  x = [na_probs[q] for q in qids]
  plt.hist(x, weights=[1.0 / len(x)] * len(x), bins=20, range=(0.0, 1.0))
  plt.xlabel("Model probability of no-answer")
  plt.ylabel("Proportion of dataset")
  plt.title(f"Histogram of no-answer probability: {name}")
  plt.savefig(os.path.join(image_dir, f"na_prob_hist_{name}.png"))
  plt.clf()


def _precision_recall_analysis(plt, out_eval, data, predictions, na_probs,
                               image_dir):
  """The official run_precision_recall_analysis: three curves' average
  precision into out_eval, their PNGs and two histograms into image_dir."""
  os.makedirs(image_dir, exist_ok=True)
  has_answer = {q: bool(g) for q, g in squad_metrics.questions(data)}
  exact_raw, f1_raw = squad_metrics.raw_scores_v2(data, predictions)
  oracle = {q: float(has) for q, has in has_answer.items()}
  for name, scores, title in (
      ("exact", exact_raw, "Precision-Recall curve for Exact Match score"),
      ("f1", f1_raw, "Precision-Recall curve for F1 score"),
      ("oracle", oracle, "Oracle Precision-Recall curve (binary task of "
       "HasAns vs. NoAns)")):
    curve = squad_metrics.precision_recall_curve(scores, na_probs, has_answer)
    if curve is None:
      break  # No answerable question: the official draws no curve.
    precisions, recalls, ap = curve
    _plot_pr_curve(plt, precisions, recalls,
                   os.path.join(image_dir, f"pr_{name}.png"), title)
    out_eval[f"pr_{name}_ap"] = ap
  for name, wanted in (("hasAns", True), ("noAns", False)):
    _histogram_na_prob(plt, na_probs, [q for q, has in has_answer.items()
                                       if has == wanted and q in na_probs],
                       image_dir, name)


def _write(path, result):
  try:
    with cli.atomic_open(path) as f:
      json.dump(result, f)
  except OSError as e:
    raise cli.Error(f"--out-file {path} cannot be written ({e.strerror}); "
                    "pass a path in a writable directory.")


def main(argv):
  opts = parse_args(argv[1:])
  plt = _pyplot() if opts.out_image_dir else None
  data_file, prediction_file = opts.data_file, opts.pred_file
  try:
    data = squad_data.load_squad_json(data_file)
    with open(data_file, encoding="utf-8") as f:
      version = str(json.load(f).get("version", ""))
  except ValueError as e:
    raise cli.Error(str(e))
  predictions = _load_dict(prediction_file, "predictions")
  version = opts.squad_version or ("1.1" if version in ("1.1", "v1.1")
                                   else "2.0")
  try:
    qids = [qid for qid, _ in squad_metrics.questions(data)]
    if version == "1.1":
      for qid in qids:
        if qid not in predictions:
          print(f"Unanswered question {qid} will receive score 0.",
                file=sys.stderr)
      result = squad_metrics.evaluate_v1(data, predictions)
      text = json.dumps(result)
    else:
      for qid in qids:
        if qid not in predictions:
          print(f"Missing prediction for {qid}")
      na_probs = (_load_dict(opts.na_prob_file, "na_prob_file")
                  if opts.na_prob_file else None)
      if na_probs is not None:
        missing = [q for q in qids if q in predictions and q not in na_probs]
        if missing:
          raise cli.Error(f"na_prob_file {opts.na_prob_file} has no value "
                          f"for question {missing[0]}.")
      result = squad_metrics.evaluate_v2(data, predictions, na_probs,
                                         opts.na_prob_thresh)
      if na_probs is not None and plt is not None:
        _precision_recall_analysis(plt, result, data, predictions, na_probs,
                                   opts.out_image_dir)
      text = json.dumps(result, indent=2)
  except (KeyError, TypeError, AttributeError, ValueError) as e:
    raise cli.Error(f"{data_file} or {prediction_file} is not in the SQuAD "
                    f"format ({type(e).__name__}: {e}).")
  if opts.out_file:
    _write(opts.out_file, result)
  else:
    print(text)


if __name__ == "__main__":
  try:
    main(sys.argv)
  except cli.Error as e:
    cli.fail(str(e))
