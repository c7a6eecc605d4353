"""squad_evaluate against the official scripts' command lines and output.

The expected output comes from `_official_v2` / `_official_v1` below: short
transcriptions of evaluate-v2.0.py's and evaluate-v1.1.py's published code
(their own normalize_answer, F1, thresholds, PR curves and printing), not
from tasks/squad/squad_metrics.py, so the command is compared byte for byte with
what the official scripts print.
"""

import collections
import json
import os
import re
import string

import pytest

from tests import testing

SAMPLE = os.path.join(testing.SHARED_DATA, "squad_v2_sample.json")


# ------------------------------------------ the official scripts, transcribed
def _normalize(s):
  s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
  return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def _f1_v2(gold, pred):
  g, p = _normalize(gold).split(), _normalize(pred).split()
  same = sum((collections.Counter(g) & collections.Counter(p)).values())
  if not g or not p:
    return int(g == p)
  if same == 0:
    return 0
  prec, rec = same / len(p), same / len(g)
  return 2 * prec * rec / (prec + rec)


def _pr(scores, na_probs, has_ans, num_true_pos):
  qids = sorted(na_probs, key=lambda k: na_probs[k])
  true_pos, precisions, recalls, ap = 0.0, [1.0], [0.0], 0.0
  for i, q in enumerate(qids):
    if has_ans[q]:
      true_pos += scores[q]
    cur_p, cur_r = true_pos / float(i + 1), true_pos / float(num_true_pos)
    if i == len(qids) - 1 or na_probs[q] != na_probs[qids[i + 1]]:
      ap += cur_p * (cur_r - recalls[-1])
      precisions.append(cur_p)
      recalls.append(cur_r)
  return precisions, recalls, 100.0 * ap


def _official_v2(data, preds, na_probs=None, thresh=1.0, images=False):
  """evaluate-v2.0.py's main(): (stdout text, out_eval, PR curves)."""
  given = na_probs is not None
  na_probs = na_probs if given else {k: 0.0 for k in preds}
  qas = [qa for art in data for p in art["paragraphs"] for qa in p["qas"]]
  has_ans = {qa["id"]: bool(qa["answers"]) for qa in qas}
  printed, exact_raw, f1_raw = [], {}, {}
  for qa in qas:
    golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
    if qa["id"] not in preds:
      printed.append("Missing prediction for %s" % qa["id"])
      continue
    pred = preds[qa["id"]]
    exact_raw[qa["id"]] = max(int(_normalize(a) == _normalize(pred))
                              for a in golds)
    f1_raw[qa["id"]] = max(_f1_v2(a, pred) for a in golds)

  def threshold(scores):
    return {q: float(not has_ans[q]) if na_probs[q] > thresh else s
            for q, s in scores.items()}

  exact, f1 = threshold(exact_raw), threshold(f1_raw)

  def eval_dict(qids):
    return collections.OrderedDict([
        ("exact", 100.0 * sum(exact[k] for k in qids) / len(qids)),
        ("f1", 100.0 * sum(f1[k] for k in qids) / len(qids)),
        ("total", len(qids))])

  out = eval_dict(list(exact))
  for prefix, want in (("HasAns", True), ("NoAns", False)):
    qids = [k for k, v in has_ans.items() if v == want]
    if qids:
      out.update((f"{prefix}_{k}", v) for k, v in eval_dict(qids).items())
  curves = {}
  if given:
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
      cur = best = sum(1 for k in has_ans if not has_ans[k])
      best_thresh = 0.0
      for q in sorted(na_probs, key=lambda k: na_probs[k]):
        if q not in raw:
          continue
        cur += raw[q] if has_ans[q] else (-1 if preds[q] else 0)
        if cur > best:
          best, best_thresh = cur, na_probs[q]
      out[f"best_{name}"] = 100.0 * best / len(raw)
      out[f"best_{name}_thresh"] = best_thresh
  if given and images:
    num_true_pos = sum(1 for v in has_ans.values() if v)
    oracle = {k: float(v) for k, v in has_ans.items()}
    for name, scores in (("exact", exact_raw), ("f1", f1_raw),
                         ("oracle", oracle)):
      curves[name] = _pr(scores, na_probs, has_ans, num_true_pos)
      out[f"pr_{name}_ap"] = curves[name][2]
  return "".join(line + "\n" for line in printed), out, curves


def _official_v1(data, preds):
  """evaluate-v1.1.py: (stdout, stderr)."""
  f1 = exact = total = 0
  err = ""
  for art in data:
    for p in art["paragraphs"]:
      for qa in p["qas"]:
        total += 1
        if qa["id"] not in preds:
          err += "Unanswered question " + qa["id"] + " will receive score 0.\n"
          continue
        golds = [a["text"] for a in qa["answers"]]
        pred = preds[qa["id"]]
        exact += max(_normalize(pred) == _normalize(g) for g in golds)
        scores = []
        for g in golds:
          pt, gt = _normalize(pred).split(), _normalize(g).split()
          same = sum((collections.Counter(pt) & collections.Counter(gt))
                     .values())
          if same == 0:
            scores.append(0)
            continue
          prec, rec = 1.0 * same / len(pt), 1.0 * same / len(gt)
          scores.append((2 * prec * rec) / (prec + rec))
        f1 += max(scores)
  out = {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}
  return json.dumps(out) + "\n", err


# -------------------------------------------------------------- the inputs
# Hand-made predictions for the 14 questions of the shared sample: exact,
# partial, articles and punctuation, wrong, and for the impossible ones
# empty, "the" (normalises to "") and an answer.
PREDICTIONS = {
    "56ddde6b9a695914005b9628": "France.",
    "56ddde6b9a695914005b9629": "the 10th century",
    "56ddde6b9a695914005b962a": "Iceland and Norway",
    "5ad39d53604f3c001a3fe8d3": "",
    "5ad39d53604f3c001a3fe8d4": "Rollo",
    "56dddf4066d3e219004dad5f": "william conqueror",
    "5ad3a266604f3c001a3fea2b": "the",
    "56e16182e3433e1400422e28": "complexity theory",
    "5ad5316b5b96ef001a10ab76": "Turing",
    "56e16839cd28a01900c67887": "",
    "56e16839cd28a01900c67888": "Mathematical models of computation!",
    "56e16839cd28a01900c67889": "time",
    "5ad532575b96ef001a10ab7f": "",
    "5ad532575b96ef001a10ab80": "space and time",
}
# With ties (the PR curve takes a point only between different values), an
# integer, and values above and below the 0.5 threshold used below.
NA_PROBS = dict(zip(PREDICTIONS, [
    0.1, 0.4, 0.4, 0.9, 0.6, 0.2, 0.7, 0.3, 0.55, 0.8, 0.05, 0.45, 1, 0.3]))


@pytest.fixture(name="files")
def _files(tmp_path):
  testing.require_shared_data()
  with open(SAMPLE, encoding="utf-8") as f:
    dataset = json.load(f)
  pred, na = tmp_path / "pred.json", tmp_path / "na_prob.json"
  pred.write_text(json.dumps(PREDICTIONS))
  na.write_text(json.dumps(NA_PROBS))
  return dataset, str(pred), str(na)


def _evaluate(*args, check=True):
  return testing.run_cli(["-m", "official_bert.squad_evaluate", *args],
                         check=check)


@pytest.mark.parametrize("flags, na_probs, thresh", [
    ([], None, 1.0),
    (["--na-prob-file", "NA"], NA_PROBS, 1.0),
    (["-n", "NA", "-t", "0.5", "-v"], NA_PROBS, 0.5),
    (["--na-prob-file=NA", "--na-prob-thresh=0.5", "--verbose"], NA_PROBS,
     0.5),
    (["--na_prob_file=NA", "--na_prob_thresh=0.5"], NA_PROBS, 0.5),  # aliases
])
def test_prints_what_evaluate_v2_prints(files, flags, na_probs, thresh):
  dataset, pred, na = files
  proc = _evaluate(SAMPLE, pred, *[f.replace("NA", na) for f in flags])
  printed, out_eval, _ = _official_v2(dataset["data"], PREDICTIONS, na_probs,
                                     thresh)
  assert printed == ""
  assert proc.stdout == json.dumps(out_eval, indent=2) + "\n"


@pytest.mark.parametrize("flag", ["-o", "--out-file", "--out_file"])
def test_out_file_is_written_as_evaluate_v2_writes_it(files, tmp_path, flag):
  dataset, pred, na = files
  out = tmp_path / "eval.json"
  proc = _evaluate(SAMPLE, pred, "-n", na, flag, str(out))
  _, out_eval, _ = _official_v2(dataset["data"], PREDICTIONS, NA_PROBS)
  assert proc.stdout == ""  # The official prints nothing with --out-file.
  assert out.read_text() == json.dumps(out_eval)


def test_missing_predictions_are_named_as_the_official_names_them(files,
                                                                    tmp_path):
  dataset, _, _ = files
  some = dict(list(PREDICTIONS.items())[2:])  # (in the sample's order)
  pred = tmp_path / "some.json"
  pred.write_text(json.dumps(some))
  proc = _evaluate(SAMPLE, str(pred))
  with pytest.raises(KeyError):  # The official stops after naming them,
    _official_v2(dataset["data"], some)
  printed = "".join(f"Missing prediction for {qid}\n"
                    for qid in list(PREDICTIONS)[:2])
  # we score the predicted questions.
  assert proc.stdout.startswith(printed)
  assert json.loads(proc.stdout[len(printed):])["total"] == len(some)


def test_v1_1_file_prints_what_evaluate_v1_1_prints(files, tmp_path):
  dataset, _, _ = files
  data = [a for a in dataset["data"]]
  for art in data:  # v1.1 has no impossible questions.
    for p in art["paragraphs"]:
      p["qas"] = [qa for qa in p["qas"] if qa["answers"]]
  v1 = tmp_path / "dev-v1.1.json"
  v1.write_text(json.dumps({"version": "1.1", "data": data}))
  some = {k: v for k, v in list(PREDICTIONS.items())[1:]}
  pred = tmp_path / "pred.json"
  pred.write_text(json.dumps(some))
  proc = _evaluate(str(v1), str(pred))
  stdout, stderr = _official_v1(data, some)
  assert proc.stdout == stdout
  assert stderr and stderr in proc.stderr


_FAKE_PYPLOT = '''
import json, os
LOG = os.environ["FAKE_PYPLOT_LOG"]
def _log(name, *args, **kwargs):
  with open(LOG, "a") as f:
    f.write(json.dumps([name, list(args[:2]) if name == "step" else None])
            + "\\n")
def savefig(path):
  _log("savefig")
  open(path, "w").write("png")
def __getattr__(name):
  return lambda *args, **kwargs: _log(name, *args, **kwargs)
'''


def test_out_image_dir_draws_the_official_curves(files, tmp_path):
  """With a stand-in matplotlib that records its calls: the official's
  `pr_*_ap` keys, the curves' points and the PNG names."""
  dataset, pred, na = files
  fake = tmp_path / "fake"
  (fake / "matplotlib").mkdir(parents=True)
  (fake / "matplotlib" / "__init__.py").write_text("def use(name):\n  pass\n")
  (fake / "matplotlib" / "pyplot.py").write_text(_FAKE_PYPLOT)
  log, images = tmp_path / "calls.jsonl", tmp_path / "images"
  proc = testing.run_cli(
      ["-m", "official_bert.squad_evaluate", SAMPLE, pred, "-n", na, "-p",
       str(images)],
      env={"PYTHONPATH": f"{fake}{os.pathsep}{testing.CHILD_PATH}",
           "FAKE_PYPLOT_LOG": str(log)})
  _, out_eval, curves = _official_v2(dataset["data"], PREDICTIONS, NA_PROBS,
                                     images=True)
  assert proc.stdout == json.dumps(out_eval, indent=2) + "\n"
  assert sorted(os.listdir(images)) == [
      "na_prob_hist_hasAns.png", "na_prob_hist_noAns.png", "pr_exact.png",
      "pr_f1.png", "pr_oracle.png"]
  steps = [json.loads(line)[1] for line in log.read_text().splitlines()
           if json.loads(line)[0] == "step"]
  assert steps == [[curves[n][1], curves[n][0]]
                   for n in ("exact", "f1", "oracle")]


def test_out_image_dir_without_matplotlib_is_one_sentence(files, tmp_path):
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
    pytest.skip("matplotlib is installed")
  except ImportError:
    pass
  _, pred, na = files
  proc = _evaluate(SAMPLE, pred, "-n", na, "-p", str(tmp_path / "im"),
                   check=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].endswith(
      "--out-image-dir needs matplotlib, which is not installed; pip install "
      "matplotlib or leave out --out-image-dir.")


@pytest.mark.parametrize("args, sentence", [
    (["PRED_MISSING"], "cannot be read (No such file or directory)."),
    (["--na-prob-thresh=x"], "argument --na-prob-thresh/--na_prob_thresh/-t: "
     "invalid float value: 'x'; run with --help for the arguments."),
    (["--bogus"], "unrecognized arguments: --bogus; run with --help for the "
     "arguments."),
])
def test_bad_input_is_one_sentence(files, tmp_path, args, sentence):
  _, pred, _ = files
  missing = str(tmp_path / "missing.json")
  if args == ["PRED_MISSING"]:
    args, pred = [], missing
  proc = _evaluate(SAMPLE, pred, *args, check=False)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].endswith(sentence)
