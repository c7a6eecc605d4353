"""Raw text in, tokenized lines out: the reading half of the data job.

Input format of google-research/bert's create_pretraining_data.py: one
sentence per line, a blank line between documents (a file also ends its last
document). `Reader` streams the files in blocks and counts small problems
instead of failing on them (undecodable bytes are dropped, as the original,
and the line kept; empty files are skipped), but a file that holds NUL bytes
or whose lines are mostly undecodable is not text: InputError names it.
`tokenized_batches` tokenizes batches of lines with the project's
FullTokenizer on a few threads. Used by
create_pretraining_data.py and its Beam twin. TensorFlow is imported only by
`tokenized_batches`.
"""

import collections
import concurrent.futures
import glob
import os

import numpy as np

from official_bert import cli

# Lines per tokenizer call: big batches amortise the per-call cost.
LINES_PER_BATCH = 16384
# Bytes read from a file at a time (then cut at the last newline).
READ_BYTES = 1 << 22


class InputError(ValueError):
  """Bad input data or flags; the message is one sentence for the user."""


def expand_inputs(input_file):
  """Comma list of globs -> sorted file list; a glob matching nothing, a
  directory, an unreadable or a binary file raises (one sentence)."""
  files = []
  for pattern in filter(None, (p.strip() for p in input_file.split(","))):
    if os.path.isdir(pattern):
      raise InputError(f"--input_file={pattern} is a directory; pass text "
                       f"files or a glob such as {os.path.join(pattern, '*.txt')}.")
    matched = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not matched:
      if cli.blocked_by(pattern):
        raise InputError(str(cli.missing("input_file", pattern)))
      raise InputError(f"--input_file pattern {pattern} matches no file; "
                       "check the path.")
    files += matched
  if not files:
    raise InputError("--input_file is empty; give a comma list of text files.")
  for path in files:
    try:
      cli.check_text_file("input_file", path)
    except cli.Error as e:
      raise InputError(str(e)) from None
  return files


class Reader:
  """Yields (lines, is_blank) batches from the input files; counts problems."""

  def __init__(self, files):
    self.files = files
    self.total_bytes = sum(os.path.getsize(f) for f in files)
    self.bytes_read = 0
    self.undecodable_lines = 0
    self.lines = 0
    self.empty_files = []

  def _lines(self):
    for path in self.files:
      if os.path.getsize(path) == 0:
        self.empty_files.append(path)
        continue
      lines_before = self.lines
      undecodable_before = self.undecodable_lines
      with open(path, "rb") as f:
        rest = b""
        while True:
          block = f.read(READ_BYTES)
          self.bytes_read += len(block)
          if b"\0" in block:
            at = f.tell() - len(block) + block.index(b"\0")
            raise InputError(
                f"--input_file={path} holds NUL bytes (at byte {at}): it is "
                "not a text file; pass UTF-8 text, one sentence per line.")
          if not block:
            if rest:
              yield from self._decode(rest)
            break
          block = rest + block
          cut = block.rfind(b"\n") + 1
          rest = block[cut:]
          if cut:
            yield from self._decode(block[:cut - 1])
      lines = self.lines - lines_before
      bad = self.undecodable_lines - undecodable_before
      reason = cli.mostly_undecodable("input_file", path, bad, lines)
      if reason:
        raise InputError(reason)
      yield ""  # A file ends its last document.

  def _decode(self, block):
    try:
      lines = block.decode("utf-8").split("\n")
      self.lines += len(lines)
      return lines
    except UnicodeDecodeError:
      lines = []
      for raw in block.split(b"\n"):
        try:
          lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
          # As the original: drop the undecodable bytes, keep the rest.
          self.undecodable_lines += 1
          lines.append(raw.decode("utf-8", "ignore"))
      self.lines += len(lines)
      return lines

  def batches(self):
    """Yields (lines, is_blank, bytes read so far)."""
    batch = []
    for line in self._lines():
      batch.append(line)
      if len(batch) == LINES_PER_BATCH:
        yield batch, [not x.strip() for x in batch], self.bytes_read
        batch = []
    if batch:
      yield batch, [not x.strip() for x in batch], self.bytes_read


def tokenized_batches(reader, tokenizer, threads=2):
  """(ids int32, ids per line, is_blank, bytes read) per batch, in order.

  Eager calls (tracing the tokenizer into a graph costs seconds) on a few
  threads: TF ops release the GIL, so batches tokenize on several cores while
  the main thread writes.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def tokenize(lines, blank, bytes_read):
    ids = tokenizer.tokenize(tf.constant(lines, tf.string))
    return (ids.flat_values.numpy().astype(np.int32),
            ids.row_lengths().numpy(), np.asarray(blank), bytes_read)

  with concurrent.futures.ThreadPoolExecutor(threads) as executor:
    pending = collections.deque()
    for batch in reader.batches():
      pending.append(executor.submit(tokenize, *batch))
      if len(pending) > threads:
        yield pending.popleft().result()
    while pending:
      yield pending.popleft().result()
