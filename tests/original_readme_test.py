"""google-research/bert's README commands and flags, run as written.

Each command below is the original README's, character for character,
except `python X.py` (ours is `python -m official_bert.X`), the directories
its environment variables name (a tiny model released in Google's TF1
layout, tiny GLUE/SQuAD files) and the official evaluation scripts, where
our `squad_evaluate` takes their place with their arguments. Tiny data
keeps the epochs and steps short. The TPU commands have no TPU here: they
must end in one sentence saying so.

The flag table is the original programs' flags with their defaults: each
must exist in ours with that default (--helpxml of each program).
"""

import json
import os
import re
import shlex
import shutil

import pytest

from tests import testing

# (program, flag) -> the original's default, as --helpxml prints it.
_TPU = {"use_tpu": "false", "tpu_name": None, "tpu_zone": None,
        "gcp_project": None, "master": None, "num_tpu_cores": "8",
        "iterations_per_loop": "1000"}
_FINETUNING = {"bert_config_file": None, "vocab_file": None,
               "output_dir": None, "init_checkpoint": None,
               "do_lower_case": "true", "do_train": "false",
               "do_predict": "false", "train_batch_size": "32",
               "predict_batch_size": "8", "learning_rate": "5e-05",
               "num_train_epochs": "3.0", "warmup_proportion": "0.1",
               "save_checkpoints_steps": "1000", **_TPU}
ORIGINAL_FLAGS = {
    "official_bert.run_classifier": {
        **_FINETUNING, "data_dir": None, "task_name": None,
        "max_seq_length": "128", "do_eval": "false", "eval_batch_size": "8"},
    "official_bert.run_squad": {
        **_FINETUNING, "train_file": None, "predict_file": None,
        "max_seq_length": "384", "doc_stride": "128",
        "max_query_length": "64", "n_best_size": "20",
        "max_answer_length": "30", "verbose_logging": "false",
        "version_2_with_negative": "false",
        "null_score_diff_threshold": "0.0"},
    "official_bert.run_pretraining": {
        **_TPU, "bert_config_file": None, "input_file": None,
        "output_dir": None, "init_checkpoint": None, "max_seq_length": "128",
        "max_predictions_per_seq": "20", "do_train": "false",
        "do_eval": "false", "train_batch_size": "32", "eval_batch_size": "8",
        "learning_rate": "5e-05", "num_train_steps": "100000",
        "num_warmup_steps": "10000", "save_checkpoints_steps": "1000",
        "max_eval_steps": "100"},
    "official_bert.extract_features": {
        "input_file": None, "output_file": None, "layers": "-1,-2,-3,-4",
        "bert_config_file": None, "max_seq_length": "128",
        "init_checkpoint": None, "vocab_file": None, "do_lower_case": "true",
        "batch_size": "32", "use_tpu": "false", "master": None,
        "num_tpu_cores": "8", "use_one_hot_embeddings": "false"},
    "tfrecords.create_pretraining_data": {
        "input_file": None, "output_file": None, "vocab_file": None,
        "do_lower_case": "true", "do_whole_word_mask": "false",
        "max_seq_length": "128", "max_predictions_per_seq": "20",
        "random_seed": "12345", "dupe_factor": "10",
        "masked_lm_prob": "0.15", "short_seq_prob": "0.1"},
}


@pytest.mark.parametrize("module", sorted(ORIGINAL_FLAGS))
def test_every_original_flag_exists_with_its_default(module):
  defaults = testing.flag_defaults(module)
  missing = sorted(set(ORIGINAL_FLAGS[module]) - set(defaults))
  assert not missing, f"{module} lacks the original's flags {missing}"
  differ = {name: (defaults[name], want)
            for name, want in ORIGINAL_FLAGS[module].items()
            if (defaults[name] or None) != want
            and not _same_number(defaults[name], want)}
  assert not differ, f"{module}: (ours, original's) defaults {differ}"


def _same_number(a, b):
  try:
    return float(a) == float(b)
  except (TypeError, ValueError):
    return False


# The original README's commands (google-research/bert, README.md), as
# written there; `python X.py` is mapped below.
README = {
    "data": """
python create_pretraining_data.py \\
  --input_file=./sample_text.txt \\
  --output_file=/tmp/tf_examples.tfrecord \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt \\
  --do_lower_case=True \\
  --max_seq_length=128 \\
  --max_predictions_per_seq=20 \\
  --masked_lm_prob=0.15 \\
  --random_seed=12345 \\
  --dupe_factor=5
""",
    "pretraining": """
python run_pretraining.py \\
  --input_file=/tmp/tf_examples.tfrecord \\
  --output_dir=/tmp/pretraining_output \\
  --do_train=True \\
  --do_eval=True \\
  --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
  --train_batch_size=32 \\
  --max_seq_length=128 \\
  --max_predictions_per_seq=20 \\
  --num_train_steps=20 \\
  --num_warmup_steps=10 \\
  --learning_rate=2e-5
""",
    "mrpc": """
python run_classifier.py \\
  --task_name=MRPC \\
  --do_train=true \\
  --do_eval=true \\
  --data_dir=$GLUE_DIR/MRPC \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt \\
  --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
  --max_seq_length=128 \\
  --train_batch_size=32 \\
  --learning_rate=2e-5 \\
  --num_train_epochs=3.0 \\
  --output_dir=/tmp/mrpc_output/
""",
    "mrpc_predict": """
python run_classifier.py \\
  --task_name=MRPC \\
  --do_predict=true \\
  --data_dir=$GLUE_DIR/MRPC \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt \\
  --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$TRAINED_CLASSIFIER \\
  --max_seq_length=128 \\
  --output_dir=/tmp/mrpc_output/
""",
    "squad11": """
python run_squad.py \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt \\
  --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
  --do_train=True \\
  --train_file=$SQUAD_DIR/train-v1.1.json \\
  --do_predict=True \\
  --predict_file=$SQUAD_DIR/dev-v1.1.json \\
  --train_batch_size=12 \\
  --learning_rate=3e-5 \\
  --num_train_epochs=2.0 \\
  --max_seq_length=384 \\
  --doc_stride=128 \\
  --output_dir=/tmp/squad_base/
""",
    "evaluate11": """
python $SQUAD_DIR/evaluate-v1.1.py $SQUAD_DIR/dev-v1.1.json ./squad/predictions.json
""",
    "squad11_tpu": """
python run_squad.py \\
  --vocab_file=$BERT_LARGE_DIR/vocab.txt \\
  --bert_config_file=$BERT_LARGE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_LARGE_DIR/bert_model.ckpt \\
  --do_train=True \\
  --train_file=$SQUAD_DIR/train-v1.1.json \\
  --do_predict=True \\
  --predict_file=$SQUAD_DIR/dev-v1.1.json \\
  --train_batch_size=24 \\
  --learning_rate=3e-5 \\
  --num_train_epochs=2.0 \\
  --max_seq_length=384 \\
  --doc_stride=128 \\
  --output_dir=gs://some_bucket/squad_large/ \\
  --use_tpu=True \\
  --tpu_name=$TPU_NAME
""",
    "squad20_tpu": """
python run_squad.py \\
  --vocab_file=$BERT_LARGE_DIR/vocab.txt \\
  --bert_config_file=$BERT_LARGE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_LARGE_DIR/bert_model.ckpt \\
  --do_train=True \\
  --train_file=$SQUAD_DIR/train-v2.0.json \\
  --do_predict=True \\
  --predict_file=$SQUAD_DIR/dev-v2.0.json \\
  --train_batch_size=24 \\
  --learning_rate=3e-5 \\
  --num_train_epochs=2.0 \\
  --max_seq_length=384 \\
  --doc_stride=128 \\
  --output_dir=gs://some_bucket/squad_large/ \\
  --use_tpu=True \\
  --tpu_name=$TPU_NAME \\
  --version_2_with_negative=True
""",
    "evaluate20": """
python $SQUAD_DIR/evaluate-v2.0.py $SQUAD_DIR/dev-v2.0.json ./squad/predictions.json --na-prob-file ./squad/null_odds.json
""",
    "squad20_threshold": """
python run_squad.py \\
  --vocab_file=$BERT_LARGE_DIR/vocab.txt \\
  --bert_config_file=$BERT_LARGE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_LARGE_DIR/bert_model.ckpt \\
  --do_train=False \\
  --train_file=$SQUAD_DIR/train-v2.0.json \\
  --do_predict=True \\
  --predict_file=$SQUAD_DIR/dev-v2.0.json \\
  --predict_batch_size=24 \\
  --learning_rate=3e-5 \\
  --num_train_epochs=2.0 \\
  --max_seq_length=384 \\
  --doc_stride=128 \\
  --output_dir=gs://some_bucket/squad_large/ \\
  --use_tpu=True \\
  --tpu_name=$TPU_NAME \\
  --version_2_with_negative=True \\
  --null_score_diff_threshold=$THRESH
""",
    "extract": """
python extract_features.py \\
  --input_file=/tmp/input.txt \\
  --output_file=/tmp/output.jsonl \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt \\
  --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
  --layers=-1,-2,-3,-4 \\
  --max_seq_length=128 \\
  --batch_size=8
""",
}

_PROGRAMS = {
    "python create_pretraining_data.py":
        "python -m tfrecords.create_pretraining_data",
    "python run_pretraining.py": "python -m official_bert.run_pretraining",
    "python run_classifier.py": "python -m official_bert.run_classifier",
    "python run_squad.py": "python -m official_bert.run_squad",
    "python extract_features.py": "python -m official_bert.extract_features",
    "python $SQUAD_DIR/evaluate-v1.1.py": "python -m official_bert.squad_evaluate",
    "python $SQUAD_DIR/evaluate-v2.0.py": "python -m official_bert.squad_evaluate",
}


def _command(name, tmp):
  """The README command with our programs and `tmp` in place of /tmp/."""
  text = README[name]
  for theirs, ours in _PROGRAMS.items():
    text = text.replace(theirs, ours)
  return text.replace("/tmp/", f"{tmp}/").strip()


def _squad_files(directory):
  """SQuAD v1.1/v2.0 train and dev files from the shared sample."""
  testing.require_shared_data()
  with open(os.path.join(testing.SHARED_DATA, "squad_v2_sample.json"),
            encoding="utf-8") as f:
    v2 = json.load(f)
  v1 = json.loads(json.dumps(v2))
  v1["version"] = "1.1"
  for article in v1["data"]:
    for paragraph in article["paragraphs"]:
      paragraph["qas"] = [qa for qa in paragraph["qas"]
                          if not qa.get("is_impossible") and qa["answers"]]
      for qa in paragraph["qas"]:
        qa.pop("is_impossible", None)
  os.makedirs(directory)
  for name, data in (("train-v1.1.json", v1), ("dev-v1.1.json", v1),
                     ("train-v2.0.json", v2), ("dev-v2.0.json", v2)):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
      json.dump(data, f)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  """The directories the README's variables name, and its working dir."""
  from tests import run_classifier_test  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  root = tmp_path_factory.mktemp("original_readme")
  # A tiny model with BERT's vocabulary and 512 positions, released as
  # Google releases theirs: bert_model.ckpt.* (TF1 names), no index file.
  # Two layers (at the commands' batch 32 x 128 positions, each further
  # layer costs more than the first: 4 layers took ~2.5x the CPU of 2); a
  # four-layer release for the extract_features command, which reads
  # -1..-4.
  import numpy as np  # pylint: disable=g-import-not-at-top

  def release(layers):
    config = testing.tiny_config(vocab_size=30522,
                                 max_position_embeddings=512,
                                 num_hidden_layers=layers)
    model = pretrainer.BertPretrainer.from_bert_config(config)
    model(testing.random_inputs(seq=8) | {"masked_lm_positions": np.ones(
        (testing.BATCH, 2), np.int32)}, training=False)
    arrays = {name: variable.numpy().T if transpose else variable.numpy()
              for name, (variable, transpose) in
              checkpoint_names.original_names(model).items()}
    directory = root / f"uncased_L-{layers}_H-32_A-4"
    testing.write_tf1_checkpoint(str(directory), arrays, config)
    os.remove(directory / "checkpoint")
    shutil.copy(testing.VOCAB, directory / "vocab.txt")
    return directory

  base, four_layers = release(2), release(4)
  mrpc_dev = run_classifier_test._mrpc_files(str(root / "glue" / "MRPC"),
                                             n_train=40)
  _squad_files(str(root / "squad"))
  work = root / "work"
  os.makedirs(work / "squad")
  # sample_text.txt: documents of the shared corpus (a blank line between);
  # six give ~400 instances, which the pretraining command's evaluation
  # (eval batch 8, up to 100 steps) reads in 51 steps.
  docs = testing.corpus_documents()[:6]
  (work / "sample_text.txt").write_text(
      "\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
  tmp = root / "tmp"
  os.makedirs(tmp)
  (tmp / "input.txt").write_text(
      "Who was Jim Henson ? ||| Jim Henson was a puppeteer\n",
      encoding="utf-8")
  return {"root": root, "work": work, "tmp": tmp, "mrpc_dev": mrpc_dev,
          "four_layers": four_layers, "env": {
      "BERT_BASE_DIR": str(base), "BERT_LARGE_DIR": str(base),
      "GLUE_DIR": str(root / "glue"), "SQUAD_DIR": str(root / "squad"),
      "TPU_NAME": "my-tpu", "THRESH": "-1.0"}}


def _run(world, name, **env):
  """The command, its variables expanded and its words split as bash does
  it, run in this process (testing.run_program) from the README's working
  directory; (exit status, its non-blank output lines)."""
  command = re.sub(r"\\\n\s*", "", _command(name, world["tmp"]))
  variables = dict(world["env"], **env)
  words = [re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], word)
           for word in shlex.split(command)]
  assert words[:2] == ["python", "-m"], words
  proc = testing.run_program(words[2], words[3:], check=False,
                             merge_stderr=True, cwd=world["work"])
  lines = [l for l in proc.stdout.splitlines() if l.strip()]
  return proc.returncode, lines


def _ok(world, name, **env):
  status, lines = _run(world, name, **env)
  assert status == 0, "\n".join(lines[-30:])
  return lines


def test_pretraining_commands_run_as_written(world):
  _ok(world, "data")
  tmp = world["tmp"]
  assert os.path.getsize(tmp / "tf_examples.tfrecord") > 0
  _ok(world, "pretraining")
  results = dict(line.split(" = ") for line in (
      tmp / "pretraining_output" / "eval_results.txt").read_text().split("\n")
                 if line)
  # The original's eval_results.txt keys, at the 20 steps asked for.
  assert results["global_step"] == "20"
  assert {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
          "next_sentence_loss", "loss"} <= set(results)


def test_mrpc_commands_run_as_written(world):
  import numpy as np  # pylint: disable=g-import-not-at-top
  _ok(world, "mrpc")
  tmp = world["tmp"]
  results = dict(line.split(" = ") for line in (
      tmp / "mrpc_output" / "eval_results.txt").read_text().split("\n")
                 if line)
  # The original's keys, and MRPC's F1, after 40 examples x 3 epochs / 32.
  assert {"eval_accuracy", "eval_loss", "global_step", "loss",
          "eval_f1"} <= set(results)
  assert results["global_step"] == "3"
  assert float(results["loss"]) == float(results["eval_loss"]) > 0
  assert json.loads((tmp / "mrpc_output" / "label_list.json").read_text()
                    ) == ["0", "1"]
  _ok(world, "mrpc_predict",
      TRAINED_CLASSIFIER=str(tmp / "mrpc_output"))
  rows = (tmp / "mrpc_output" / "test_results.tsv").read_text().splitlines()
  assert len(rows) == 9 and all(len(r.split("\t")) == 2 for r in rows)
  # The original writes str() of each float32 probability: the shortest
  # text that reads back to it (7-9 digits), not a fixed precision.
  values = [v for r in rows for v in r.split("\t")]
  assert all(v == str(np.float32(v)) for v in values), values
  assert any(len(v.lstrip("0.").replace("e-", "")) > 6 for v in values), values
  # test.tsv holds the dev rows: the eval figures are those of the predicted
  # probabilities on them (labels in the task's order, F1 of label "1").
  predicted = np.array([np.argmax([float(p) for p in r.split("\t")])
                        for r in rows])
  gold = np.array([label for label, _, _ in world["mrpc_dev"]])
  assert float(results["eval_accuracy"]) == pytest.approx(
      np.mean(predicted == gold))
  tp = np.sum((predicted == 1) & (gold == 1))
  assert float(results["eval_f1"]) == pytest.approx(
      2 * tp / (np.sum(predicted == 1) + np.sum(gold == 1)))


def test_squad_commands_run_as_written(world):
  _ok(world, "squad11")
  tmp, work = world["tmp"], world["work"]
  # The README evaluates ./squad/predictions.json: the file run_squad
  # wrote into --output_dir, copied there as a user would.
  shutil.copy(tmp / "squad_base" / "predictions.json",
              work / "squad" / "predictions.json")
  lines = _ok(world, "evaluate11")
  # evaluate-v1.1.py prints one JSON line: exact_match and f1.
  assert set(json.loads(lines[-1])) == {"exact_match", "f1"}


def test_tpu_commands_say_no_tpu_can_be_reached(world):
  for name in ("squad11_tpu", "squad20_tpu", "squad20_threshold"):
    status, lines = _run(world, name)
    testing.assert_one_sentence_last(
        status, lines, "run_squad",
        "No TPU can be reached as --tpu my-tpu (")
  # Without a TPU the v2.0 commands run here once the TPU flags and the
  # bucket are replaced, as the README's GPU notes say.
  out = world["tmp"] / "squad_large"
  for name in ("squad20_tpu", "squad20_threshold"):
    README[name + "_here"] = README[name].replace(
        "  --use_tpu=True \\\n  --tpu_name=$TPU_NAME \\\n", "").replace(
            "gs://some_bucket/squad_large/", "/tmp/squad_large/")
  # (Training at seq 384 is the v1.1 test's; here the prediction command,
  # from the released checkpoint, writes what evaluate-v2.0's command reads.)
  _ok(world, "squad20_threshold_here")
  shutil.copy(out / "predictions.json", world["work"] / "squad" /
              "predictions.json")
  shutil.copy(out / "null_odds.json", world["work"] / "squad" /
              "null_odds.json")
  lines = _ok(world, "evaluate20")
  result = json.loads("\n".join(lines[lines.index("{"):]))
  assert {"exact", "f1", "HasAns_exact", "NoAns_exact",
          "best_f1_thresh"} <= set(result)


def test_extract_features_command_runs_as_written(world):
  _ok(world, "extract", BERT_BASE_DIR=str(world["four_layers"]))
  (line,) = (world["tmp"] / "output.jsonl").read_text().splitlines()
  features = json.loads(line)["features"]
  assert [f["token"] for f in features][:3] == ["[CLS]", "who", "was"]
  assert [layer["index"] for layer in features[0]["layers"]] == [-1, -2, -3,
                                                                 -4]


@pytest.mark.parametrize("argv, steps_per_loop", [
    (["--iterations_per_loop=2"], 2),
    (["--iterations_per_loop=2", "--steps_per_loop=7"], 7),
    ([], 100),
])
def test_iterations_per_loop_sets_steps_per_loop(argv, steps_per_loop):
  """--iterations_per_loop (TPUEstimator's) is our --steps_per_loop unless
  that is given, and reaches flags.json with the trainer's flags."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from official_bert import tpu_flags  # pylint: disable=g-import-not-at-top
  from official_bert import trainer_flags  # pylint: disable=g-import-not-at-top
  values = flags.FlagValues()
  flags.DEFINE_string("output_dir", None, "", flag_values=values)
  trainer_flags.define(steps_per_loop=100, keep_checkpoint_max=2,
                       flag_values=values)
  values(["program"] + argv)
  tpu_flags.apply(values)
  assert values.steps_per_loop == steps_per_loop
  shared = trainer_flags.shared_values(values)
  assert shared["steps_per_loop"] == steps_per_loop
  assert {"iterations_per_loop", "use_tpu", "keep_checkpoint_max",
          "optimizer"} <= set(shared) and "output_dir" not in shared


def test_a_v2_file_predicted_without_the_v2_flag_is_read_as_v1_1(world):
  """The original reads a SQuAD v2.0 file as v1.1 without
  --version_2_with_negative: every question gets a span (no null answer),
  no null_odds.json; ours also scores it as evaluate-v1.1.py would, over
  the questions that have answers (the impossible ones have none to
  score)."""
  from tests import squad_evaluate_test  # pylint: disable=g-import-not-at-top
  tmp = world["tmp"]
  README["v2_as_v1"] = """
python run_squad.py \\
  --vocab_file=$BERT_BASE_DIR/vocab.txt \\
  --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
  --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
  --do_predict=True \\
  --predict_file=$SQUAD_DIR/dev-v2.0.json \\
  --max_seq_length=384 \\
  --doc_stride=128 \\
  --output_dir=/tmp/v2_as_v1/
"""
  _ok(world, "v2_as_v1")
  out = tmp / "v2_as_v1"
  predictions = json.loads((out / "predictions.json").read_text())
  with open(os.path.join(world["env"]["SQUAD_DIR"], "dev-v2.0.json"),
            encoding="utf-8") as f:
    data = json.load(f)["data"]
  qas = [qa for a in data for p in a["paragraphs"] for qa in p["qas"]]
  assert any(qa.get("is_impossible") for qa in qas)
  assert set(predictions) == {qa["id"] for qa in qas}
  assert all(predictions.values())  # a span for every question
  assert not (out / "null_odds.json").exists()
  answerable = [{"paragraphs": [{"qas": [qa for qa in p["qas"]
                                         if qa["answers"]]}
                                for p in a["paragraphs"]]} for a in data]
  printed, _ = squad_evaluate_test._official_v1(answerable, predictions)  # pylint: disable=protected-access
  written = dict(line.split(" = ") for line in
                 (out / "eval_results.txt").read_text().splitlines())
  expected = json.loads(printed)
  for key in ("exact_match", "f1"):
    assert float(written[key]) == pytest.approx(expected[key]), key
