r"""Wall time and peak memory of create_pretraining_data.py against its peer.

Runs, as subprocesses on the same input and flags (dupe_factor=5,
max_seq_length=128, max_predictions_per_seq=20, the other flags at the
original's defaults):
  * ours      tfrecords/create_pretraining_data.py on the corpus x --repeat
  * peer      TF Model Garden's official/nlp/data/create_pretraining_data.py
              (the original's algorithm; package tf-models-official, skipped
              with a message when it is not installed) on the same input
  * ours x1   on the corpus once, to show that memory does not grow with it.
Peak memory is the largest sampled sum of RSS over the process and all its
children (sampled every 50 ms from /proc).

Usage:
  python -m benchmarks.create_pretraining_data_benchmark [--repeat=4] [--skip_peer]
"""

import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))

flags.DEFINE_string("corpus", os.path.join(SHARED, "pydocs_corpus.txt"),
                    "Text corpus (one sentence per line, blank between documents).")
flags.DEFINE_string("vocab_file", os.path.join(SHARED, "bert_uncased_vocab.txt"),
                    "BERT vocab.txt.")
flags.DEFINE_integer("repeat", 4, "The corpus is repeated this many times.")
flags.DEFINE_integer("dupe_factor", 5, "--dupe_factor of both programs.")
flags.DEFINE_bool("skip_peer", False, "Do not run the Model Garden peer.")
flags.DEFINE_integer("num_workers", None, "--num_workers of ours (default: all cores).")
FLAGS = flags.FLAGS


def _children(pid):
  """pid and all its descendants (from /proc/<pid>/task/*/children)."""
  found, stack = [], [pid]
  while stack:
    p = stack.pop()
    found.append(p)
    try:
      for task in os.listdir(f"/proc/{p}/task"):
        with open(f"/proc/{p}/task/{task}/children") as f:
          stack += [int(c) for c in f.read().split()]
    except OSError:
      pass
  return found


def _rss_kb(pid):
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1])
  except OSError:
    pass
  return 0


def run_measured(args, env=None):
  """Runs a command: (wall s, peak summed RSS MB, CPU s of the tree, stderr tail).

  CPU seconds (user + system, the process and its waited-for children) are
  less sensitive than wall time to other jobs on a shared machine.
  """
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                  PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  full_env.update(env or {})
  start = time.time()
  with tempfile.TemporaryFile() as err:
    proc = subprocess.Popen(args, cwd=ROOT, env=full_env,
                            stdout=subprocess.DEVNULL, stderr=err)
    peak = 0
    while proc.poll() is None:
      peak = max(peak, sum(_rss_kb(p) for p in _children(proc.pid)))
      time.sleep(0.05)
    wall = time.time() - start
    err.seek(0)
    tail = err.read().decode("utf-8", "replace")[-3000:]
  if proc.returncode != 0:
    raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{tail}")
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return wall, peak / 1024, cpu, tail


def count_records(path):
  """Records in an uncompressed TFRecord file (reads the framing only)."""
  n = 0
  with open(path, "rb") as f:
    while True:
      header = f.read(12)
      if len(header) < 12:
        return n
      length = int.from_bytes(header[:8], "little")
      f.seek(length + 4, os.SEEK_CUR)
      n += 1


def _flags(input_file, output_file):
  return [f"--input_file={input_file}", f"--output_file={output_file}",
          f"--vocab_file={FLAGS.vocab_file}", "--do_lower_case=True",
          "--max_seq_length=128", "--max_predictions_per_seq=20",
          f"--dupe_factor={FLAGS.dupe_factor}", "--masked_lm_prob=0.15",
          "--short_seq_prob=0.1", "--random_seed=12345"]


def _peer_available():
  probe = subprocess.run(
      [sys.executable, "-c", "import official.nlp.data.create_pretraining_data"],
      capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  if probe.returncode != 0:
    print("peer skipped: TF Model Garden is not importable "
          f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else '?'}); "
          "install it with `pip install --no-deps tf-models-official==2.20.0`.")
    return False
  return True


def _report(name, wall, peak_mb, cpu, instances):
  print(f"{name:<20} {wall:7.1f} s wall {cpu:7.1f} s CPU {instances:>9,} "
        f"instances {instances / wall:>8,.0f} instances/s {peak_mb:7,.0f} MB "
        f"peak (load {os.getloadavg()[0]:.1f})", flush=True)


def main(argv):
  del argv
  ours_args = [sys.executable, "-m", "tfrecords.create_pretraining_data"]
  if FLAGS.num_workers is not None:
    ours_args.append(f"--num_workers={FLAGS.num_workers}")
  with tempfile.TemporaryDirectory() as tmp:
    with open(FLAGS.corpus, encoding="utf-8") as f:
      text = f.read()
    big = os.path.join(tmp, f"corpus_x{FLAGS.repeat}.txt")
    with open(big, "w", encoding="utf-8") as f:
      for _ in range(FLAGS.repeat):
        f.write(text.rstrip("\n") + "\n\n")
    print(f"corpus x{FLAGS.repeat}: {os.path.getsize(big) / 1e6:.1f} MB, "
          f"{len(text.split()) * FLAGS.repeat / 1e6:.2f} M words; "
          f"dupe_factor={FLAGS.dupe_factor}, max_seq_length=128, "
          f"max_predictions_per_seq=20; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)

    out = os.path.join(tmp, "ours.tfrecord")
    wall, peak, cpu, _ = run_measured(ours_args + _flags(big, out))
    ours = (wall, peak, cpu, count_records(out))
    _report(f"ours x{FLAGS.repeat}", *ours)
    os.remove(out)

    out = os.path.join(tmp, "ours1.tfrecord")
    wall, peak, cpu, _ = run_measured(ours_args + _flags(FLAGS.corpus, out))
    ours_1 = (wall, peak, cpu, count_records(out))
    _report("ours x1", *ours_1)
    os.remove(out)
    print(f"memory x{FLAGS.repeat} / x1: {ours[1] / ours_1[1]:.2f}")

    if not FLAGS.skip_peer and _peer_available():
      out = os.path.join(tmp, "peer.tfrecord")
      wall, peak, cpu, _ = run_measured(
          [sys.executable, "-m", "official.nlp.data.create_pretraining_data"] +
          _flags(big, out))
      peer = (wall, peak, cpu, count_records(out))
      _report(f"Model Garden x{FLAGS.repeat}", *peer)
      print(f"speed-up: {peer[0] / ours[0]:.1f}x wall, {peer[2] / ours[2]:.1f}x "
            f"CPU; peak memory: {ours[1] / peer[1]:.2f} of the peer's")


if __name__ == "__main__":
  app.run(main)
