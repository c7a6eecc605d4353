"""--teacher: task distillation in every fine-tuning program
(training/distillation.py, the tasks' distill_losses, finetuning_flags.py).

One tiny teacher per program (a few steps, module fixtures); each student
starts from random weights with --distill_alpha=1 and --distill_temperature=1,
so its loss is the distillation loss alone and must fall. The classifier's
student also checks the cached outputs against the teacher's own logits row
by row, --distill_data's count in the log, the teacher's dev metrics in
eval_results.txt, --distill_alpha (alpha 1 ignores the labels: shuffled
labels give the same weights), the cache's reuse and recomputation, and an
exact resume."""

import glob
import json
import os
import re
import shutil

import numpy as np
import pytest

from tests import testing
from tools import tiny_fixtures

ML = "official_bert.run_classifier"


def _config(root, layers=1):
  path = str(root / f"bert_config_{layers}.json")
  testing.tiny_config(vocab_size=30522, max_position_embeddings=64,
                      num_hidden_layers=layers).to_json_file(path)
  return path


def _distill_losses(stdout):
  return [float(x) for x in re.findall(r"^step \d+/\d+ distill_loss (\S+)",
                                       stdout, re.M)]


def _falls(stdout):
  losses = _distill_losses(stdout)
  assert len(losses) >= 2, stdout
  assert losses[-1] < 0.7 * losses[0], losses


def _results(path):
  with open(path) as f:
    return {k: float(v) for k, v in (line.split(" = ") for line in f)}


def _tensors(prefix):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(str(prefix))
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          if name.startswith("model/")}


# ------------------------------------------------------ run_classifier ----
@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  """A classification task, its teacher (1 layer; 12 steps at a high rate,
  a checkpoint every 6: ckpt-6 and ckpt-12 kept), a --distill_data
  file."""
  testing.require_shared_data()
  root = tmp_path_factory.mktemp("distill")
  task = root / "task"
  rows = tiny_fixtures.write_classification_task(
      str(task), per_class_train=24, per_class_dev=8)
  config = _config(root)
  distill_data = root / "unlabelled.tsv"
  distill_data.write_text("sentence\n" + "".join(
      f"{s}\n" for s, _ in rows["test"]))

  def flags(out, *extra):
    return [f"--task_data_dir={task}", f"--bert_config_file={config}",
            f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
            "--label_column=part", "--max_seq_length=32",
            "--train_batch_size=8", "--learning_rate=3e-3",
            "--num_train_epochs=2", "--save_checkpoints_steps=6",
            "--keep_checkpoint_max=2", "--do_train", "--do_eval", *extra]

  teacher = root / "teacher"
  testing.run_program(ML, flags(teacher, "--steps_per_loop=6",
                                f"--export_dir={root / 'serving'}"))
  return dict(root=root, task=task, rows=rows, config=config,
              teacher=teacher, serving=root / "serving",
              distill_data=distill_data, flags=flags)


def _student_flags(c, out, *extra):
  return c["flags"](out, f"--teacher={c['teacher']}", "--distill_alpha=1",
                    "--distill_temperature=1", "--steps_per_loop=3",
                    "--seed=7", "--keep_checkpoint_max=3", *extra)


def _teacher_logits(c, texts_file):
  """The teacher's logits over train.tsv's rows, then texts_file's,
  computed here: its model restored and called on the encoded rows."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.classification import classification_task as ct  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  task = ct.ClassificationTask(ct.ClassificationConfig(
      data_dir=str(c["task"]), output_dir=str(c["root"] / "none"),
      label_column="part", do_train=True, distill_data=str(texts_file)))
  task.read()
  task.encode(tokenization.FullTokenizer(testing.VOCAB, True), 32)
  model = task.build_model(configs.BertConfig.from_json_file(
      str(c["teacher"] / "bert_config.json")), "keras")
  inputs = task.train_data()[0]
  model(inputs, training=False)
  checkpoints.restore_model(model, str(c["teacher"]))
  return np.asarray(model(inputs, training=False))


def test_classifier_student_fits_the_cached_teacher_and_resumes(
    classifier, tmp_path):
  c = classifier
  out = tmp_path / "student"
  proc = testing.run_program(ML, _student_flags(
      c, out, f"--distill_data={c['distill_data']}"))
  assert f"distill_data: 10 texts from {c['distill_data']}" in proc.stdout
  assert "written to" in proc.stdout and "teacher outputs: 58 rows" in (
      proc.stdout)
  _falls(proc.stdout)
  # The cache holds the teacher's own logits, row for row (48 labelled
  # rows, then the 10 unlabelled texts).
  with np.load(out / "teacher_outputs.npz") as cached:
    np.testing.assert_allclose(cached["outputs"],
                               _teacher_logits(c, c["distill_data"]),
                               atol=1e-5)
  # The teacher's dev metrics beside the student's.
  teacher = _results(c["teacher"] / "eval_results.txt")
  student = _results(out / "eval_results.txt")
  assert student["teacher_eval_accuracy"] == pytest.approx(
      teacher["eval_accuracy"])
  assert student["teacher_eval_loss"] == pytest.approx(teacher["eval_loss"],
                                                       abs=1e-5)

  # Killed after ckpt-6: its output_dir as it was then, rerun: resumes,
  # reuses the cache, and ends at the uninterrupted run's weights. The rerun
  # reads the training file with its labels shuffled: at --distill_alpha=1
  # the labels do not matter (their loss is only logged), so the weights are
  # the same too.
  resumed = tmp_path / "resumed"
  os.makedirs(resumed)
  for name in ["flags.json", "bert_config.json", "label_list.json",
               "teacher_outputs.npz", "teacher_outputs.json"] + [
                   os.path.basename(p) for p in glob.glob(str(out / "ckpt-6.*"))]:
    shutil.copy(out / name, resumed)
  (resumed / "checkpoint").write_text('model_checkpoint_path: "ckpt-6"\n')
  shuffled = tmp_path / "shuffled_task"
  shutil.copytree(c["task"], shuffled)
  lines = (shuffled / "train.tsv").read_text().splitlines()
  labels = [line.rsplit("\t", 1)[1] for line in lines[1:]]
  labels = labels[1:] + labels[:1]
  assert labels != [line.rsplit("\t", 1)[1] for line in lines[1:]]
  (shuffled / "train.tsv").write_text(lines[0] + "\n" + "".join(
      f"{line.rsplit(chr(9), 1)[0]}\t{label}\n"
      for line, label in zip(lines[1:], labels)))
  flags_ = _student_flags(c, resumed, f"--distill_data={c['distill_data']}",
                          "--nodo_eval")
  flags_[0] = f"--task_data_dir={shuffled}"
  again = testing.run_program(ML, flags_)
  assert "Resumed from" in again.stdout and "ckpt-6" in again.stdout
  assert "teacher outputs: reused" in again.stdout, again.stdout
  final = "ckpt-14"  # 58 rows x 2 epochs / 8
  ours, reference = _tensors(resumed / final), _tensors(out / final)
  assert ours.keys() == reference.keys()
  for name, value in reference.items():
    np.testing.assert_array_equal(ours[name], value, err_msg=name)

  # Another teacher under the same checkpoint name (ckpt-12 holding
  # ckpt-6's weights): computed again, with a line naming what changed
  # (nothing trains: the run is done).
  with np.load(out / "teacher_outputs.npz") as f:
    first = f["outputs"]
  teacher = tmp_path / "teacher"
  shutil.copytree(c["teacher"], teacher)
  for path in glob.glob(str(teacher / "ckpt-6.*")):
    os.replace(path, path.replace("ckpt-6", "ckpt-12"))
  flags_ = [f"--teacher={teacher}" if f.startswith("--teacher=") else f
            for f in _student_flags(
                c, out, f"--distill_data={c['distill_data']}")]
  changed = testing.run_program(ML, flags_)
  assert ("teacher_outputs.npz: the teacher's weights changed; computing "
          "them again") in changed.stdout, changed.stdout
  with np.load(out / "teacher_outputs.npz") as f:
    assert not np.allclose(f["outputs"], first)


def test_an_export_teaches_as_its_run_does(classifier, tmp_path):
  """--teacher=<the teacher's --export_dir>: its serving_ids signature
  gives the teacher's logits, row for row those of its run."""
  c = classifier
  out = tmp_path / "out"
  flags_ = [f"--teacher={c['serving']}" if f.startswith("--teacher=") else f
            for f in _student_flags(c, out, "--num_train_epochs=0.25",
                                    "--nodo_eval")]
  proc = testing.run_program(ML, flags_)
  assert f"teacher outputs: 48 rows by {c['serving'] / '1'}" in proc.stdout
  with np.load(out / "teacher_outputs.npz") as cached:
    np.testing.assert_allclose(
        cached["outputs"], _teacher_logits(c, c["distill_data"])[:48],
        atol=1e-4)


def test_a_windowed_student_fits_each_windows_logits(classifier, tmp_path):
  """--doc_stride: each training window fits the teacher's logits for that
  window (the teacher read whole texts; here it reads the windows)."""
  c = classifier
  stdout = testing.run_program(ML, _student_flags(
      c, tmp_path / "out", "--max_seq_length=16", "--doc_stride=8",
      "--nodo_eval", "--num_train_epochs=1")).stdout
  windows = int(re.search(r"train 48 examples \((\d+) windows\)",
                          stdout).group(1))
  assert windows > 48 and f"teacher outputs: {windows} rows" in stdout
  _falls(stdout)


# ------------------------------------------- the other programs' losses ----
def _teacher_run(directory, task, config_file):
  """A fine-tuned run's output_dir as --teacher reads it (flags.json,
  bert_config.json, label files, a checkpoint), written here for `task`
  (read): its model of 2 layers of random weights, the head's weights
  times 30 (confident outputs for the student to fit)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  config = configs.BertConfig.from_json_file(config_file)
  model = task.build_model(config, "keras")
  model(testing.random_inputs(batch=1, seq=16, vocab=99), training=False)
  for weight in model.weights:
    if not weight.path.startswith("bert_encoder"):
      weight.assign(weight * 30.0)
  os.makedirs(directory)
  tf.train.Checkpoint(model=model).write(str(directory / "ckpt-1"))
  (directory / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
  config.to_json_file(str(directory / "bert_config.json"))
  (directory / "flags.json").write_text(json.dumps(
      {"vocab_file": testing.VOCAB}))
  for name, text in task.run_files().items():
    (directory / name).write_text(text)
  return directory


def _student(module, argv, teacher):
  """A student of `teacher` from random weights, fitting it alone (alpha
  1, T 1); its stdout."""
  return testing.run_program(module, argv + [
      f"--teacher={teacher}", "--distill_alpha=1", "--distill_temperature=1",
      "--seed=7"]).stdout


def test_multi_label_student_fits_per_label_probabilities(classifier,
                                                           tmp_path):
  from official_bert.tasks.classification import classification_task as ct  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.classification import multi_label_task  # pylint: disable=g-import-not-at-top
  c = classifier
  task = multi_label_task.MultiLabelTask(ct.ClassificationConfig(
      data_dir=str(c["task"]), output_dir=str(tmp_path),
      label_column="part", task_type="multi_label", do_train=True))
  task.read()
  teacher = _teacher_run(tmp_path / "teacher", task, _config(tmp_path, 2))
  stdout = _student(ML, [
      f"--task_data_dir={c['task']}", f"--bert_config_file={_config(tmp_path)}",
      f"--vocab_file={testing.VOCAB}", f"--output_dir={tmp_path / 'out'}",
      "--label_column=part", "--task_type=multi_label", "--max_seq_length=32",
      "--train_batch_size=8", "--learning_rate=3e-3", "--do_train",
      "--nodo_eval", "--steps_per_loop=4", "--num_train_epochs=1.5"],
                    teacher)
  _falls(stdout)


def test_ner_student_fits_per_token_distributions(tmp_path):
  from official_bert.tasks.ner import ner_task  # pylint: disable=g-import-not-at-top
  from tools import pydocs_ner  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  data = tmp_path / "task"
  pydocs_ner.write_task(str(data), testing.CORPUS, {"train": 40, "dev": 4,
                                                     "test": 1})
  task = ner_task.NerTask(ner_task.NerConfig(
      data_dir=str(data), output_dir=str(tmp_path), do_train=True))
  task.read()
  teacher = _teacher_run(tmp_path / "teacher", task, _config(tmp_path, 2))
  stdout = _student("official_bert.run_ner", [
      f"--task_data_dir={data}", f"--bert_config_file={_config(tmp_path)}",
      f"--vocab_file={testing.VOCAB}", f"--output_dir={tmp_path / 'out'}",
      "--do_train", "--max_seq_length=16", "--train_batch_size=8",
      "--learning_rate=3e-3", "--steps_per_loop=4", "--num_train_epochs=1"],
                    teacher)
  _falls(stdout)


def test_squad_student_fits_start_and_end_distributions(tmp_path):
  from official_bert.tasks.squad import squad_task as squad_task_lib  # pylint: disable=g-import-not-at-top
  from tools import squad_task  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  squad_task.write_task(str(tmp_path / "task"), max_train=24, max_dev=4,
                        train_docs=range(0, 300), dev_docs=range(300, 470))
  task = squad_task_lib.SquadTask(squad_task_lib.SquadConfig())
  teacher = _teacher_run(tmp_path / "teacher", task, _config(tmp_path, 2))
  stdout = _student("official_bert.run_squad", [
      f"--train_file={tmp_path / 'task' / 'train.json'}",
      f"--bert_config_file={_config(tmp_path)}",
      f"--vocab_file={testing.VOCAB}", f"--output_dir={tmp_path / 'out'}",
      "--do_train", "--max_seq_length=64", "--doc_stride=24",
      "--max_query_length=24", "--train_batch_size=8",
      "--learning_rate=3e-3", "--steps_per_loop=2", "--num_train_epochs=3"],
                    teacher)
  _falls(stdout)


def _release_folder(directory, config_file):
  """A converted model's folder (what --init_checkpoint takes): a 2-layer
  encoder of random weights, bert_config.json and vocab.txt."""
  from official_bert import configs  # pylint: disable=g-import-not-at-top
  from official_bert.modeling import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  from official_bert.training import release_folder  # pylint: disable=g-import-not-at-top
  config = configs.BertConfig.from_json_file(config_file)
  encoder = encoder_lib.BertEncoder.from_bert_config(config)
  encoder(testing.random_inputs(batch=1, seq=8, vocab=99))
  release_folder.write(str(directory), encoder, config, vocab=testing.VOCAB)
  return directory


def test_embedding_student_fits_a_folders_embeddings_and_counts_texts(
    tmp_path):
  """run_embedding's teacher may be a converted model's folder (the encoder
  and the run's pooling): here 2 layers of random weights."""
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  testing.require_shared_data()
  task = tmp_path / "task"
  rows = retrieval_task.write_task(str(task), 32, 4, 4)
  texts = tmp_path / "texts.txt"
  texts.write_text("".join(f"{a}\n" for a, *_ in rows["test"]) + "\n")
  teacher = _release_folder(tmp_path / "teacher", _config(tmp_path, 2))
  config = _config(tmp_path)

  def flags(out):
    return [f"--task_data_dir={task}", f"--bert_config_file={config}",
            f"--vocab_file={testing.VOCAB}", f"--output_dir={out}",
            "--do_train", "--max_seq_length=24", "--train_batch_size=8",
            "--learning_rate=1e-3", "--steps_per_loop=4",
            f"--teacher={teacher}", "--distill_alpha=1", "--seed=7"]
  stdout = testing.run_program("official_bert.run_embedding", flags(
      tmp_path / "student") + ["--num_train_epochs=2",
                               f"--distill_data={texts}"]).stdout
  assert f"distill_data: 4 texts from {texts}" in stdout, stdout
  assert "teacher outputs: 36 rows" in stdout
  _falls(stdout)
  # With --mine_hard_negatives the teacher embeds the mined rows' texts,
  # their negatives too.
  mined = tmp_path / "mined"
  proc = testing.run_program("official_bert.run_embedding", flags(mined) + [
      "--mine_hard_negatives=1", "--num_train_epochs=0.25",
      "--train_batch_size=4"])
  with open(mined / "hard_negatives.tsv", encoding="utf-8") as f:
    rows = [line.rstrip("\n").split("\t") for line in f][1:]
  assert f"teacher outputs: {len(rows)} rows" in proc.stdout, proc.stdout
  with np.load(mined / "teacher_outputs.npz") as cached:
    assert sorted(cached.files) == ["outputs/anchor", "outputs/negative_1",
                                    "outputs/positive"]
    assert cached["outputs/negative_1"].shape[0] == len(rows)


# ------------------------------------------------------------ bad input ----
def _bad_teacher(c, tmp_path, what):
  """A copy of the classifier's teacher with `what` changed."""
  teacher = tmp_path / "teacher"
  shutil.copytree(c["teacher"], teacher)
  if what == "vocab":
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    flags_json = json.loads((teacher / "flags.json").read_text())
    flags_json["vocab_file"] = str(vocab)
    (teacher / "flags.json").write_text(json.dumps(flags_json))
  elif what == "labels":
    (teacher / "label_list.json").write_text('["c_api", "other"]\n')
  elif what == "neither":
    shutil.rmtree(teacher)
    os.makedirs(teacher)
  return teacher


@pytest.mark.parametrize("what, extra, expected", [
    ("vocab", [], "was trained with the vocabulary"),
    ("labels", [], "its label_list.json ([\"c_api\", \"other\"]) differs "
                   "from this run's"),
    ("neither", [], "is neither a run, a checkpoint folder nor an export; "
                    "pass a fine-tuned run's --output_dir"),
    ("", ["--init_checkpoint={teacher}", "--student_layers=0,1"],
     "--student_layers=0,1 must be increasing layer indices from 0 to 0"),
    ("", ["--task_type=multi_label"], "was trained with --task_type="
     "classification, this run has --task_type=multi_label; a student fits "
     "the teacher's outputs, so pass its --task_type."),
    ("", ["--distill_alpha=1.5"], "--distill_alpha must be in [0, 1], got 1.5"),
    ("", ["--distill_temperature=0"],
     "--distill_temperature must be positive, got 0.0"),
    ("no_teacher", ["--distill_alpha=0.3"],
     "--distill_alpha sets how a student fits its teacher: pass --teacher."),
    ("no_teacher", ["--distill_data={teacher}/flags.json"],
     "--distill_data sets how a student fits its teacher: pass --teacher."),
])
def test_bad_input_is_one_sentence(classifier, tmp_path, what, extra,
                                   expected):
  c = classifier
  teacher = _bad_teacher(c, tmp_path, what) if what not in (
      "", "no_teacher") else c["teacher"]
  out = tmp_path / "out"
  argv = c["flags"](out, *[e.format(teacher=teacher) for e in extra])
  if what != "no_teacher":
    argv.append(f"--teacher={teacher}")
  last = testing.refused_input(ML, argv)
  assert expected in last, last
  assert not out.exists()


def test_run_ner_refuses_distill_data(tmp_path, classifier):
  c = classifier
  (tmp_path / "train.txt").write_text("-DOCSTART- -X- -X- O\n\nA B-X\n")
  last = testing.refused_input("official_bert.run_ner", [
      f"--task_data_dir={tmp_path}", f"--bert_config_file={c['config']}",
      f"--vocab_file={testing.VOCAB}", f"--output_dir={tmp_path / 'out'}",
      "--do_train", f"--teacher={c['teacher']}",
      f"--distill_data={c['distill_data']}"])
  assert ("--distill_data adds unlabelled texts, which run_ner cannot take"
          in last), last


# ------------------------------------------------- the losses, by hand ----
def _np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _np_kl(teacher, student, t):
  p = _np_log_softmax(teacher / t)
  return t * t * (np.exp(p) * (p - _np_log_softmax(student / t))).sum(-1)


def test_each_tasks_distill_losses_against_numpy():
  """The formulas, each task's, against numpy written here: T^2 KL of the
  softened distributions (per token where tagged, start and end), the
  per-label sigmoid KL, regression's and embeddings' squared error; the
  label loss over the labelled rows only."""
  from official_bert.tasks.classification import classification_task as ct  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.classification import multi_label_task  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.embedding import embedding_task  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.ner import ner_task  # pylint: disable=g-import-not-at-top
  from official_bert.tasks.squad import squad_task  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  t = 2.5
  student, teacher = (rng.normal(size=(3, 4)).astype(np.float32) * 3
                      for _ in range(2))
  labels = np.array([0, 3, 1], np.int32)
  labelled = np.array([1.0, 0.0, 1.0], np.float32)

  def run(task, *args):
    return {k: float(v) for k, v in task.distill_losses(*args).items()}

  config = ct.ClassificationConfig(data_dir="", output_dir="")
  got = run(ct.ClassificationTask(config), labels, teacher, student, t,
            labelled)
  ce = -_np_log_softmax(student)[np.arange(3), labels]
  assert got["label_loss"] == pytest.approx((ce[0] + ce[2]) / 2, rel=1e-5)
  assert got["distill_loss"] == pytest.approx(
      _np_kl(teacher, student, t).mean(), rel=1e-5)
  # Regression: squared errors.
  regression = ct.ClassificationTask(ct.ClassificationConfig(
      data_dir="", output_dir="", task_type="regression"))
  got = run(regression, np.array([0.5, 1.0, 2.0], np.float32),
            teacher[:, :1], student[:, :1], t, labelled)
  assert got["distill_loss"] == pytest.approx(
      ((student[:, 0] - teacher[:, 0]) ** 2).mean(), rel=1e-5)
  assert got["label_loss"] == pytest.approx(
      ((student[0, 0] - 0.5) ** 2 + (student[2, 0] - 2.0) ** 2) / 2, rel=1e-5)
  # Multi-label: per label, KL of the two sigmoids at T, times T^2.
  got = run(multi_label_task.MultiLabelTask(config),
            (rng.random((3, 4)) > 0.5).astype(np.float32), teacher, student,
            t, labelled)
  p, q = (1 / (1 + np.exp(-teacher / t)), 1 / (1 + np.exp(-student / t)))
  kl = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
  assert got["distill_loss"] == pytest.approx(t * t * kl.mean(), rel=1e-4)
  # NER: per token where tagged; the teacher's logits cut to the batch's.
  tokens = rng.normal(size=(2, 5, 3)).astype(np.float32)
  full = rng.normal(size=(2, 7, 3)).astype(np.float32)  # T = 7 > 5
  tags = np.array([[-1, 0, 2, -1, -1], [-1, 1, 1, 0, -1]], np.int32)
  got = run(ner_task.NerTask(None), tags, full, tokens, t,
            np.ones(2, np.float32))
  mask = tags >= 0
  assert got["distill_loss"] == pytest.approx(
      _np_kl(full[:, :5], tokens, t)[mask].mean(), rel=1e-5)
  # SQuAD: the start and end distributions, averaged.
  starts, ends = (rng.normal(size=(2, 5)).astype(np.float32) for _ in "ab")
  t_starts, t_ends = (rng.normal(size=(2, 7)).astype(np.float32)
                      for _ in "ab")
  got = run(squad_task.SquadTask(None),
            {"start_positions": np.array([1, 2], np.int32),
             "end_positions": np.array([2, 4], np.int32)},
            {"start_logits": t_starts, "end_logits": t_ends},
            {"start_logits": starts, "end_logits": ends}, t,
            np.ones(2, np.float32))
  assert got["distill_loss"] == pytest.approx(
      (_np_kl(t_starts[:, :5], starts, t).mean()
       + _np_kl(t_ends[:, :5], ends, t).mean()) / 2, rel=1e-5)
  # Embeddings: the mean squared error of every role's vectors; no T.
  outputs = {r: rng.normal(size=(3, 4)).astype(np.float32)
             for r in ("anchor", "positive")}
  targets = {r: rng.normal(size=(3, 4)).astype(np.float32)
             for r in ("anchor", "positive")}
  got = run(embedding_task.EmbeddingTask(None), np.zeros(3, np.int32),
            targets, outputs, t, np.ones(3, np.float32))
  assert got["distill_loss"] == pytest.approx(np.mean(
      [((outputs[r] - targets[r]) ** 2).mean() for r in outputs]), rel=1e-5)
  assert got["label_loss"] == pytest.approx(float(
      embedding_task.ranking_losses(None, outputs)["loss"]), rel=1e-5)
