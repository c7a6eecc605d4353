"""A benchmark's program run: `python -m ...` with its output in a log file."""

import subprocess
import sys
import time


def run(argv, log, cwd=None):
  """Runs `python -m argv...` (in `cwd`), its output to the file `log`;
  returns (that output, seconds). A failure is SystemExit naming the
  program and the log, with the output's tail."""
  start = time.time()
  with open(log, "w") as f:
    status = subprocess.run([sys.executable, "-m"] + list(argv), stdout=f,
                            stderr=subprocess.STDOUT, cwd=cwd, check=False)
  with open(log) as f:
    text = f.read()
  if status.returncode:
    raise SystemExit(f"{argv[0]} failed ({log}):\n{text[-3000:]}")
  return text, time.time() - start
