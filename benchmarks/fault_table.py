r"""Every writer under two faults: a full disk, and SIGKILL then a rerun.

Each writer runs first undisturbed (the reference), then:
  * disk full: in a process whose file size limit (RLIMIT_FSIZE, SIGXFSZ
    ignored, so a write past it fails with EFBIG as `ulimit -f` makes it)
    is a fraction of the largest file the reference wrote; then rerun
    without the limit;
  * SIGKILL: killed as soon as its output location holds a file (its
    temporary files count), then rerun.
Each row: the last line printed, the exit status, the temporary files left
(`*_temp`, `.tmp`, `.incomplete`, hidden) and the rerun's result against the
reference. Real processes and real files, on tiny models (the tests'
fixture sizes), so it runs in minutes on 2 cores.

Usage:
  python -m benchmarks.fault_table [--fractions=0.125,0.5] [--writers=...]
"""

import dataclasses
import filecmp
import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable

from absl import app
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
from tools import corpus  # pylint: disable=g-import-not-at-top,wrong-import-position
# The tests' fixtures (sizes, data paths, records, the classifier's task).
from tools import tiny_fixtures as fixtures  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.DEFINE_list("fractions", ["0.125", "0.5"],
                  "File size limits, as fractions of the largest file the "
                  "undisturbed run writes.")
flags.DEFINE_list("writers", None, "Only these writers (default: all).")
FLAGS = flags.FLAGS


@dataclasses.dataclass
class Writer:
  name: str
  module: str
  argv: Callable  # (fixtures dir, output location) -> [flags]
  output: str  # the output location, relative to the case's directory
  # bytes: the same files with the same bytes as the undisturbed run;
  # names: the same file names (a SavedModel's bytes vary); resume: where
  # a trainer resumed; weights: that, and whether its last checkpoint holds
  # the undisturbed run's weights (and optimizer slots, step).
  compare: str = "names"
  prepare: Callable = None  # (fixtures, case dir, reference dir) -> None
  # SIGKILL when a new path under the case's directory holds one of these
  # (default: any new path): a checkpoint being written.
  kill_when: tuple = ()


def _pretraining(fx, out, steps=4):
  return ["--do_train", f"--input_file={fx}/part-*.tfrecord",
          f"--output_dir={out}", f"--bert_config_file={fx}/bert_config.json",
          f"--max_seq_length={fixtures.SEQ}", "--max_predictions_per_seq=3",
          "--train_batch_size=4", f"--num_train_steps={steps}",
          "--num_warmup_steps=2", "--learning_rate=1e-3", "--steps_per_loop=2",
          "--save_checkpoints_steps=2"]


def _resume_from_ckpt2(fx, case, reference):
  """The case's output_dir starts with the reference's ckpt-2 alone."""
  del fx
  out = os.path.join(case, "out")
  os.makedirs(out)
  for path in glob.glob(os.path.join(reference, "out", "ckpt-2.*")):
    shutil.copy(path, out)
  with open(os.path.join(out, "checkpoint"), "w", encoding="utf-8") as f:
    f.write('model_checkpoint_path: "ckpt-2"\n'
            'all_model_checkpoint_paths: "ckpt-2"\n')


def _classifier(fx, out):
  return [f"--task_data_dir={fx}/task", f"--bert_config_file={fx}/cls.json",
          f"--vocab_file={fixtures.VOCAB}", f"--output_dir={out}",
          "--label_column=part", "--max_seq_length=32", "--do_train",
          "--do_eval", "--do_predict", "--train_batch_size=16",
          "--num_train_epochs=1", "--steps_per_loop=2"]


def _ner(fx, out):
  # 40 sentences, in windows of 16 pieces, batch 8: 10 steps; a checkpoint
  # every 2, killed at ckpt-4 (kill_when).
  return [f"--task_data_dir={fx}/ner", f"--bert_config_file={fx}/cls.json",
          f"--vocab_file={fixtures.VOCAB}", f"--output_dir={out}",
          "--max_seq_length=16", "--do_train", "--do_eval", "--do_predict",
          "--train_batch_size=8", "--num_train_epochs=1",
          "--save_checkpoints_steps=2", "--steps_per_loop=1"]


def _squad(fx, out):
  # 40 questions, batch 8: 5 steps; a checkpoint every 2, killed at ckpt-4.
  return [f"--train_file={fx}/squad/train.json",
          f"--predict_file={fx}/squad/dev.json",
          f"--bert_config_file={fx}/cls.json", f"--vocab_file={fixtures.VOCAB}",
          f"--output_dir={out}", "--version_2_with_negative",
          "--max_seq_length=64", "--doc_stride=24", "--max_query_length=24",
          "--do_train", "--do_predict", "--train_batch_size=8",
          "--num_train_epochs=1", "--save_checkpoints_steps=2",
          "--steps_per_loop=1"]


def _embedding(fx, out):
  # 32 pairs, batch 8: 4 steps, ckpt-2, then ckpt-4 (kill_when).
  return [f"--task_data_dir={fx}/pairs", f"--bert_config_file={fx}/cls.json",
          f"--vocab_file={fixtures.VOCAB}", f"--output_dir={out}",
          "--max_seq_length=24", "--train_batch_size=8",
          "--learning_rate=1e-3", "--do_train", "--do_eval", "--do_predict",
          "--num_train_epochs=1", "--save_checkpoints_steps=2",
          "--steps_per_loop=1"]


def _extend(fx, out):
  return [f"--init_checkpoint={fx}/ckpt/ckpt-1",
          f"--bert_config_file={fx}/bert_config.json",
          f"--vocab_file={fixtures.TESTDATA}/export_vocab.txt",
          f"--new_words_file={fx}/new_words.txt",
          "--max_position_embeddings=32", f"--output_dir={out}"]


# The quickstart at its test's short sizes, smaller still (tests/
# quickstart_test.py's SHORT with 8 training steps).
QUICKSTART = ["--max_documents=60", "--vocab_size=2000", "--max_seq_length=64",
              "--max_predictions_per_seq=10", "--dupe_factor=2",
              "--num_train_steps=8", "--train_batch_size=16"]


def _model_flags(fx):
  return [f"--bert_config_file={fx}/bert_config.json",
          f"--init_checkpoint={fx}/ckpt/ckpt-1",
          f"--vocab_file={fixtures.TESTDATA}/export_vocab.txt"]


def _data(fx, out):
  return [f"--input_file={fx}/corpus.txt", f"--output_file={out}",
          f"--vocab_file={fixtures.VOCAB}", "--max_seq_length=32",
          "--max_predictions_per_seq=5", "--dupe_factor=2",
          "--window_tokens=3000"]


def _slug(name):
  return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


TF1 = "export_checkpoint --format=google_tf1"
WRITERS = [
    Writer("create_pretraining_data", "tfrecords.create_pretraining_data",
           lambda fx, out: _data(fx, out) + ["--num_workers=1"],
           "out/data.tfrecord", compare="bytes"),
    Writer("create_pretraining_data_beam",
           "tfrecords.create_pretraining_data_beam",
           lambda fx, out: _data(fx, out) + ["--num_output_shards=2"],
           "out/data", compare="bytes"),
    Writer("learn_vocab", "tfrecords.learn_vocab",
           lambda fx, out: [f"--input_file={fx}/corpus.txt",
                            f"--output_file={out}", "--vocab_size=300"],
           "out/vocab.txt", compare="bytes"),
    Writer("run_pretraining (resumed at ckpt-2)",
           "official_bert.run_pretraining", _pretraining, "out",
           compare="resume", prepare=_resume_from_ckpt2,
           kill_when=("ckpt-4",)),
    Writer("run_classifier", "official_bert.run_classifier", _classifier,
           "out", compare="resume", kill_when=("ckpt-",)),
    Writer("export_saved_model", "export.export_saved_model",
           lambda fx, out: _model_flags(fx) + [
               f"--export_dir={out}", f"--max_seq_length={fixtures.SEQ}"],
           "out/serving"),
    Writer("export_tfhub", "export.export_tfhub",
           lambda fx, out: _model_flags(fx) + [
               f"--export_dir={out}", f"--seq_length={fixtures.SEQ}"],
           "out/hub"),
    Writer("export_checkpoint --format=huggingface",
           "export.export_checkpoint",
           lambda fx, out: _model_flags(fx) + [
               "--format=huggingface", f"--export_dir={out}"], "out/hf"),
    Writer(TF1,
           "export.export_checkpoint",
           lambda fx, out: _model_flags(fx) + [
               "--format=google_tf1", f"--export_dir={out}"], "out/tf1"),
    Writer("convert_checkpoint", "official_bert.convert_checkpoint",
           # The source: the google_tf1 export's undisturbed output.
           lambda fx, out: [
               f"--source={fx}/../{_slug(TF1)}_ref/out/tf1",
               f"--output_dir={out}"], "out/converted"),
    Writer("extract_features", "official_bert.extract_features",
           lambda fx, out: _model_flags(fx) + [
               f"--input_file={fx}/sentences.txt", f"--output_file={out}",
               f"--max_seq_length={fixtures.SEQ}", "--layers=-1,-2"],
           "out/features.jsonl", compare="bytes"),
    Writer("run_ner", "official_bert.run_ner", _ner, "out",
           compare="resume", kill_when=("ckpt-4",)),
    Writer("run_squad", "official_bert.run_squad", _squad, "out",
           compare="resume", kill_when=("ckpt-4",)),
    Writer("run_embedding", "official_bert.run_embedding", _embedding, "out",
           compare="weights", kill_when=("ckpt-4",)),
    Writer("extend_checkpoint", "official_bert.extend_checkpoint", _extend,
           "out/extended"),
    Writer("quickstart", "official_bert.quickstart",
           lambda fx, out: [f"--work_dir={out}"] + QUICKSTART, "out/qs",
           compare="resume", kill_when=("pretraining/ckpt-4",)),
]


def make_fixtures(fx):
  """The tiny inputs every writer reads, in `fx`."""
  from official_bert.modeling import pretrainer  # pylint: disable=g-import-not-at-top
  from official_bert.training import checkpoints  # pylint: disable=g-import-not-at-top
  with open(corpus.PYDOCS, encoding="utf-8") as f:
    lines = f.read().split("\n")[:600]
  with open(f"{fx}/corpus.txt", "w", encoding="utf-8") as f:
    f.write("\n".join(l if i % 20 else "" for i, l in enumerate(lines)))
  with open(f"{fx}/sentences.txt", "w", encoding="utf-8") as f:
    f.write("\n".join(l for l in lines[1:200] if l.strip()) + "\n")
  for i in range(2):
    fixtures.write_records(f"{fx}/part-{i}.tfrecord",
                           fixtures.make_instances(24, seed=10 + i))
  fixtures.tiny_config().to_json_file(f"{fx}/bert_config.json")
  fixtures.tiny_config(vocab_size=30522, max_position_embeddings=64
                       ).to_json_file(f"{fx}/cls.json")
  fixtures.write_classification_task(f"{fx}/task", per_class_train=40,
                                     per_class_dev=10)
  from tools import pydocs_ner  # pylint: disable=g-import-not-at-top
  from tools import retrieval_task  # pylint: disable=g-import-not-at-top
  from tools import squad_task  # pylint: disable=g-import-not-at-top
  pydocs_ner.write_task(f"{fx}/ner", corpus.PYDOCS,
                        {"train": 40, "dev": 8, "test": 8})
  squad_task.write_task(f"{fx}/squad", version_2=True, max_train=40,
                        max_dev=8, train_docs=range(0, 80),
                        dev_docs=range(300, 340))
  retrieval_task.write_task(f"{fx}/pairs", 32, 16, 4)
  with open(f"{fx}/new_words.txt", "w", encoding="utf-8") as f:
    f.write("kinase\nglycolysis\nmitochondria\n")
  model = pretrainer.BertPretrainer.from_bert_config(fixtures.tiny_config())
  checkpoints.save_model(model, f"{fx}/ckpt/ckpt-1")


def _limit_files(limit):
  def preexec():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if limit is not None:
      _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
      resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), hard))
  return preexec


def _env():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


def run(writer, fx, case, limit=None):
  """Runs `writer` with its output under `case`; (status, last line, output)."""
  os.makedirs(os.path.dirname(os.path.join(case, writer.output)), exist_ok=True)
  proc = subprocess.run(
      [sys.executable, "-m", writer.module] + writer.argv(
          fx, os.path.join(case, writer.output)),
      cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True, preexec_fn=_limit_files(limit), timeout=600)
  lines = [l for l in proc.stdout.splitlines() if l.strip()]
  return proc.returncode, (lines[-1] if lines else ""), proc.stdout


def run_killed(writer, fx, case):
  """Starts `writer` and SIGKILLs it once `case` holds an output file;
  (status, last line, what it left running). Its own process group: a
  worker it started that outlives it is found (and then killed)."""
  os.makedirs(os.path.dirname(os.path.join(case, writer.output)), exist_ok=True)
  before = set(_files(case))
  with subprocess.Popen(
      [sys.executable, "-m", writer.module] + writer.argv(
          fx, os.path.join(case, writer.output)),
      cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True, start_new_session=True) as proc:
    def new_paths():
      return [p for p in set(_files(case)) - before
              if not writer.kill_when or any(k in p for k in writer.kill_when)]
    while proc.poll() is None and not new_paths():
      time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(1)
    survivors = _group(proc.pid)
    if survivors:
      os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
  lines = [l for l in out.splitlines() if l.strip()]
  left = (f"{len(survivors)} of its child processes still running 1 s "
          "later" if survivors else "")
  return proc.returncode, (lines[-1] if lines else ""), left


def _group(pgid):
  """The live processes of process group `pgid` (/proc/<pid>/stat's fields
  after the command name: the state, the parent, the group...)."""
  pids = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # gone meanwhile
      continue
    if int(fields[2]) == pgid and fields[0] != "Z":
      pids.append(int(pid))
  return pids


def _files(directory):
  return [os.path.relpath(os.path.join(parent, n), directory)
          for parent, dirs, files in os.walk(directory) for n in dirs + files]


def _temporary(path):
  return any(n.endswith(("_temp", ".incomplete")) or ".tmp" in n
             or n.startswith((".", "beam-temp-")) for n in path.split(os.sep))


def debris(case):
  found = [path for path in _files(case) if _temporary(path)]
  # A directory's contents are listed with it: show the top one.
  tops = [p for p in found if not any(p.startswith(q + os.sep) for q in found)]
  return ", ".join(sorted(tops)) or "none"


def _largest_file(directory):
  sizes = [os.path.getsize(os.path.join(directory, p)) for p in _files(directory)
           if os.path.isfile(os.path.join(directory, p))]
  return max(sizes)


def _same_files(a, b, compare_bytes):
  """Whether two output trees hold the same files (with the same bytes),
  temporary ones aside (shown as debris)."""
  fa = sorted(p for p in _files(a) if not _temporary(p))
  fb = sorted(p for p in _files(b) if not _temporary(p))
  if fa != fb or not compare_bytes:
    return fa == fb
  return all(filecmp.cmp(os.path.join(a, p), os.path.join(b, p), False)
             for p in fa if os.path.isfile(os.path.join(a, p)))


def rerun_result(writer, fx, case, reference):
  status, last, out = run(writer, fx, case)
  if status != 0:
    return f"exit {status}: {last[:120]}"
  if writer.compare in ("resume", "weights"):
    resumed = [l for l in out.splitlines() if "Resumed from" in l]
    weights = ("; " + same_weights(os.path.join(reference, writer.output),
                                   os.path.join(case, writer.output))
               if writer.compare == "weights" else "")
    return ("exit 0, " + (resumed[0].split("Resumed from ")[1].replace(
        case + "/", "") if resumed else "from scratch") + weights
            + f"; debris {debris(case)}")
  same = _same_files(os.path.join(reference, "out"),
                     os.path.join(case, "out"), writer.compare == "bytes")
  what = "bytes" if writer.compare == "bytes" else "files"
  return (f"exit 0, {what} {'equal to' if same else 'DIFFER from'} the "
          f"undisturbed run's; debris {debris(case)}")


def same_weights(reference_dir, case_dir, atol=1e-6):
  """Whether the latest checkpoints of two output directories hold the
  same variables with the same values (within `atol`): a rerun that
  resumed exactly ends where the undisturbed run ended."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  prefixes = [tf.train.latest_checkpoint(d) for d in (reference_dir,
                                                       case_dir)]
  if None in prefixes:
    return "no checkpoint to compare"
  readers = [tf.train.load_checkpoint(p) for p in prefixes]
  shapes = [r.get_variable_to_shape_map() for r in readers]
  names = sorted(n for n in shapes[0] if "OBJECT_GRAPH" not in n)
  if names != sorted(n for n in shapes[1] if "OBJECT_GRAPH" not in n):
    return "final checkpoint's variables DIFFER from the undisturbed run's"
  worst, compared = 0.0, 0
  for name in names:
    a, b = (r.get_tensor(name) for r in readers)
    if a.dtype.kind not in "fiu":
      continue
    compared += 1
    if a.shape != b.shape:
      return f"final weights DIFFER: {name} has another shape"
    worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b),
                                    initial=0)))
  verdict = "equal to" if worst <= atol else "DIFFER from"
  return (f"final weights ({os.path.basename(prefixes[1])}, {compared} "
          f"tensors) {verdict} the undisturbed run's (max diff {worst:.1g})")


def _cell(text, width=200):
  text = text.replace("|", "\\|").replace(ROOT, ".")
  return text if len(text) <= width else text[:width - 1] + "…"


def main(argv):
  del argv
  work = tempfile.mkdtemp(prefix="fault_table_")
  fx = os.path.join(work, "fixtures")
  os.makedirs(fx)
  make_fixtures(fx)
  rows = []
  for writer in WRITERS:
    if FLAGS.writers and writer.name.split()[0] not in FLAGS.writers:
      continue
    reference = os.path.join(work, _slug(writer.name) + "_ref")
    os.makedirs(reference)
    status, last, _ = run(writer, fx, reference)
    if status != 0:
      rows.append((writer.name, "none (reference run)", last, status, "", ""))
      continue
    largest = _largest_file(reference)
    faults = [(f"disk full at {float(f):g} of its largest file "
               f"({largest * float(f) / 1000:.0f} KB)", largest * float(f))
              for f in FLAGS.fractions] + [("SIGKILL mid-write", "kill")]
    for k, (fault, limit) in enumerate(faults):
      case = os.path.join(work, f"{_slug(writer.name)}_{k}")
      os.makedirs(case)
      if writer.prepare:
        writer.prepare(fx, case, reference)
      start = time.time()
      running = ""
      if limit == "kill":
        status, last, running = run_killed(writer, fx, case)
      else:
        status, last, _ = run(writer, fx, case, limit)
      left = debris(case) + (f"; {running}" if running else "")
      rerun = rerun_result(writer, fx, case, reference)
      rows.append((writer.name, fault, last.replace(case + "/", ""), status,
                   left, rerun))
      print(f"[fault_table] {writer.name}: {fault}: exit {status} "
            f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
  print("| writer | fault | last line | exit | debris left | rerun |")
  print("|---|---|---|---|---|---|")
  for row in rows:
    print("| " + " | ".join(_cell(str(c)) for c in row) + " |")
  shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  app.run(main)
