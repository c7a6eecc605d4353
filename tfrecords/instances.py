"""Masked-LM / next-sentence instances from windows of tokenized documents.

The algorithm of google-research/bert's create_pretraining_data.py, on token
ids, numpy only (so the data job's worker processes and Beam workers never
import TensorFlow):

  * per document, a target length: max_seq_length - 3, or with probability
    short_seq_prob a random length in [2, max_seq_length - 3];
  * sentences are gathered into a chunk until it reaches the target; a random
    split makes segment A (the first a_end sentences) and B (the rest);
  * with probability 1/2, and always when the chunk has one sentence, B is
    instead a run of sentences from another document starting at a random
    sentence (label 1, "random next"); the unused sentences go back;
  * the longer segment loses a token from its front or back at random until
    both fit `[CLS] A [SEP] B [SEP]` in max_seq_length;
  * 15% of the non-special tokens (at least 1, at most max_predictions_per_seq)
    are predicted: 80% become [MASK], 10% a random vocabulary id, 10% stay;
    with do_whole_word_mask, a word and its `##` pieces are chosen together.

With next_sentence_prediction=False (RoBERTa's FULL-SENTENCES), instances are
instead whole sentences packed in order up to max_seq_length - 2 tokens,
`[CLS] s1 s2 ... [SEP]`, crossing document boundaries (within a window) with
a [SEP] between two documents; no B segment (segment_ids all 0), no random
next draw, next_sentence_labels 0. A sentence longer than the room left
starts the next instance; one longer than a whole instance is cut to it.
short_seq_prob still draws shorter targets.

Differences from the original, by design (documented in
docs/pretraining-data.md): the "other document" is drawn from the same window of documents instead of the
whole corpus, and instances are shuffled within a window instead of globally,
so memory is bounded by a window. Each window's random streams are seeded
from (random_seed, window index, dupe index), so the output does not depend
on how many processes build it.
"""

import bisect
import dataclasses
import random

import numpy as np

from official_bert.data import features

# A window needs at least this many documents before it may close, so the
# random next segment almost always comes from another document.
MIN_WINDOW_DOCUMENTS = 16
# Instances assembled, masked and serialized at a time in a worker.
BATCH = 2048
# Seed stream tags (the dupe index is the third seed word for building).
_SHUFFLE, _MASK, _BUILD = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
  """The flags of the original that shape instances, plus the vocab facts."""
  vocab_size: int
  cls_id: int
  sep_id: int
  mask_id: int
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  dupe_factor: int = 10
  random_seed: int = 12345
  do_whole_word_mask: bool = False
  next_sentence_prediction: bool = True
  pack_sequences: bool = False
  # bool [vocab_size]: the id is a "##" continuation piece (whole-word mask).
  continuation: np.ndarray = None

  @classmethod
  def from_flags(cls, tokenizer, values):
    """Options from the job's flag values and the vocab facts of `tokenizer`.

    Args:
      tokenizer: a `FullTokenizer`, or None for placeholder vocab facts
        (enough to validate the flags before the vocab is loaded).
      values: any object with the `FLAG_FIELDS` attributes (absl FLAGS, a
        job config).
    """
    vocab = tokenizer.vocab if tokenizer else ["[PAD]"]
    return cls(
        vocab_size=len(vocab), cls_id=tokenizer.cls_id if tokenizer else 0,
        sep_id=tokenizer.sep_id if tokenizer else 0,
        mask_id=tokenizer.mask_id if tokenizer else 0,
        continuation=np.array([t.startswith("##") for t in vocab]),
        **{name: getattr(values, name) for name in FLAG_FIELDS})

  def validate(self):
    """Raises ValueError naming the flag and its value when inconsistent."""
    checks = [
        (self.max_seq_length >= 5, "max_seq_length", self.max_seq_length,
         "must be at least 5 ([CLS] A [SEP] B [SEP])"),
        (1 <= self.max_predictions_per_seq <= self.max_seq_length,
         "max_predictions_per_seq", self.max_predictions_per_seq,
         f"must be between 1 and --max_seq_length={self.max_seq_length}"),
        (0.0 < self.masked_lm_prob <= 1.0, "masked_lm_prob",
         self.masked_lm_prob, "must be in (0, 1]"),
        (0.0 <= self.short_seq_prob <= 1.0, "short_seq_prob",
         self.short_seq_prob, "must be in [0, 1]"),
        (self.dupe_factor >= 1, "dupe_factor", self.dupe_factor,
         "must be at least 1"),
    ]
    for ok, flag, value, rule in checks:
      if not ok:
        raise ValueError(f"--{flag}={value} {rule}.")
    if self.pack_sequences and self.next_sentence_prediction:
      raise ValueError("--pack_sequences puts several sequences in a row, "
                       "which has no one next-sentence label: pass "
                       "--next_sentence_prediction=false.")
    if self.do_whole_word_mask and self.continuation is None:
      raise ValueError("do_whole_word_mask needs the vocab's continuation table.")


# The original's flags that InstanceOptions holds, by the same names.
FLAG_FIELDS = ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob",
               "short_seq_prob", "dupe_factor", "random_seed",
               "do_whole_word_mask", "next_sentence_prediction",
               "pack_sequences")


@dataclasses.dataclass
class Window:
  """A run of whole documents, tokenized: the unit of work of one process.

  tokens: int32 [T], all sentences back to back; sentence_lengths: [S] (each
  >= 1, sum T); document_sizes: [D] sentences per document (each >= 1).
  """
  index: int
  tokens: np.ndarray
  sentence_lengths: np.ndarray
  document_sizes: np.ndarray


class Windower:
  """Groups a stream of tokenized lines into Windows of whole documents.

  Lines come in batches (`add`): their wordpiece ids back to back, the number
  of ids per line, and whether the line is blank. As the original: a blank
  line ends a document, a line without tokens is skipped, an empty document
  is dropped. A window closes at a document end once it holds at least
  `window_tokens` tokens and MIN_WINDOW_DOCUMENTS documents; a short tail
  is merged into the window before it (so one window is held back).
  """

  def __init__(self, window_tokens):
    self.window_tokens = window_tokens
    self._tokens = np.zeros(0, np.int32)
    self._lengths = np.zeros(0, np.int64)
    self._doc_ids = np.zeros(0, np.int64)  # per sentence, nondecreasing
    self._open_doc = 0  # id of the document the next line belongs to
    self._held = None  # last closed window, not yet emitted
    self._next_index = 0

  def add(self, tokens, line_lengths, is_blank):
    """Adds a batch of lines; returns the Windows completed by it."""
    line_lengths = np.asarray(line_lengths, np.int64)
    is_blank = np.asarray(is_blank, bool)
    # Lines after the k-th blank of the batch belong to document open + k.
    doc_of_line = self._open_doc + np.cumsum(is_blank)
    keep = line_lengths > 0
    self._tokens = np.concatenate([self._tokens, np.asarray(tokens, np.int32)])
    self._lengths = np.concatenate([self._lengths, line_lengths[keep]])
    self._doc_ids = np.concatenate([self._doc_ids, doc_of_line[keep]])
    self._open_doc += int(is_blank.sum())
    return self._cut(final=False)

  def finish(self):
    """Returns the last Windows (the open document counts as ended)."""
    self._open_doc += 1
    return self._cut(final=True)

  def _cut(self, final):
    out = []
    complete = int(np.searchsorted(self._doc_ids, self._open_doc))
    if complete:
      _, sizes = np.unique(self._doc_ids[:complete], return_counts=True)
      doc_tokens = np.add.reduceat(self._lengths[:complete],
                                   np.cumsum(sizes) - sizes)
      start_doc, tokens_in_window = 0, 0
      for d, n_tokens in enumerate(doc_tokens.tolist()):
        tokens_in_window += n_tokens
        if (d + 1 - start_doc >= MIN_WINDOW_DOCUMENTS and
            tokens_in_window >= self.window_tokens):
          out += self._close(sizes[start_doc:d + 1])
          start_doc, tokens_in_window = d + 1, 0
      if final and start_doc < len(sizes):
        rest = sizes[start_doc:]
        if len(rest) < MIN_WINDOW_DOCUMENTS and self._held is not None:
          self._held = _merge(self._held, self._take(rest))
        else:
          out += self._close(rest)
    if final and self._held is not None:
      out.append(self._held)
      self._held = None
    return out

  def _take(self, doc_sizes):
    """Removes the first documents (given their sizes) from the buffers."""
    n_sentences = int(doc_sizes.sum())
    lengths = self._lengths[:n_sentences]
    n_tokens = int(lengths.sum())
    window = Window(-1, self._tokens[:n_tokens], lengths,
                    np.asarray(doc_sizes, np.int64))
    self._tokens = self._tokens[n_tokens:]
    self._lengths = self._lengths[n_sentences:]
    self._doc_ids = self._doc_ids[n_sentences:]
    return window

  def _close(self, doc_sizes):
    window = self._take(doc_sizes)
    out = [] if self._held is None else [self._held]
    window.index = self._next_index
    self._next_index += 1
    self._held = window
    return out


def _merge(first, second):
  return Window(first.index, np.concatenate([first.tokens, second.tokens]),
                np.concatenate([first.sentence_lengths, second.sentence_lengths]),
                np.concatenate([first.document_sizes, second.document_sizes]))


def _seed(options, window_index, stream, dupe=0):
  return np.random.SeedSequence(
      options.random_seed % 2**63, spawn_key=(window_index, stream, dupe))


def _segments(window, options, dupe, out):
  """One dupe pass over a window's documents: appends segment spans to out.

  Each instance is (a_start, a_len, b_start, b_len, is_random_next), spans of
  window.tokens (a document's sentences are contiguous there).
  """
  rnd = random.Random(int(_seed(options, window.index, _BUILD, dupe)
                          .generate_state(1, np.uint64)[0]))
  uniform = rnd.random

  def randint(low, high):  # random.randint(low, high), without its overhead
    return low + int(uniform() * (high - low + 1))

  max_num_tokens = options.max_seq_length - 3
  # cum[k] = tokens before sentence k; documents are [first, end) sentences.
  cum = [0] + np.cumsum(window.sentence_lengths).tolist()
  doc_end = np.cumsum(window.document_sizes).tolist()
  doc_first = [0] + doc_end[:-1]
  n_docs = len(doc_end)
  for d in range(n_docs):
    first, end = doc_first[d], doc_end[d]
    target = max_num_tokens
    if uniform() < options.short_seq_prob:
      target = randint(2, max_num_tokens)
    chunk_start = first
    while chunk_start < end:
      # The chunk ends at the first sentence i that brings it to the target
      # (or at the document's last): the original adds one at a time.
      i = bisect.bisect_left(cum, cum[chunk_start] + target, chunk_start + 1,
                             end) - 1
      n_chunk = i - chunk_start + 1
      a_end = chunk_start + (1 if n_chunk == 1 else randint(1, n_chunk - 1))
      a_start, a_len = cum[chunk_start], cum[a_end] - cum[chunk_start]
      if n_chunk == 1 or uniform() < 0.5:
        is_random = 1
        for _ in range(10):
          r = randint(0, n_docs - 1)
          if r != d:
            break
        j = doc_first[r] + randint(0, doc_end[r] - doc_first[r] - 1)
        # Sentences j, j+1, ... of document r until B reaches its target.
        k = bisect.bisect_left(cum, cum[j] + target - a_len, j + 1, doc_end[r])
        b_start, b_len = cum[j], cum[k] - cum[j]
        i = a_end - 1  # The unused sentences of the chunk go back.
      else:
        is_random = 0
        b_start, b_len = cum[a_end], cum[i + 1] - cum[a_end]
      excess = a_len + b_len - max_num_tokens
      if excess > 0:
        # The original drops one token at a time from the longer segment
        # (B on ties), from the front or the back with probability 1/2.
        gap = min(excess, abs(a_len - b_len))
        cut_a = gap if a_len > b_len else 0
        cut_b = gap - cut_a
        cut_a += (excess - gap) // 2
        cut_b += (excess - gap + 1) // 2
        if cut_a:
          a_start += bin(rnd.getrandbits(cut_a)).count("1")
          a_len -= cut_a
        if cut_b:
          b_start += bin(rnd.getrandbits(cut_b)).count("1")
          b_len -= cut_b
      out.append((a_start, a_len, b_start, b_len, is_random))
      chunk_start = i + 1


def _packed(window, options, dupe, out):
  """One dupe pass of FULL-SENTENCES packing: appends (start, length, 0, 0,
  0) per instance, a span of window.tokens; the [SEP]s between documents
  inside it are added by `_assemble_packed` (and counted here)."""
  rnd = random.Random(int(_seed(options, window.index, _BUILD, dupe)
                          .generate_state(1, np.uint64)[0]))
  max_num_tokens = options.max_seq_length - 2

  def target():
    if rnd.random() < options.short_seq_prob:
      return rnd.randint(2, max_num_tokens)
    return max_num_tokens

  starts = np.cumsum(window.sentence_lengths) - window.sentence_lengths
  doc_of = np.repeat(np.arange(len(window.document_sizes)),
                     window.document_sizes)
  start = None  # token where the open instance starts
  for first, n, doc in zip(starts.tolist(), window.sentence_lengths.tolist(),
                           doc_of.tolist()):
    if start is not None:
      room = limit - used - (doc != last_doc)  # a [SEP] before a new document
      if n <= room:
        used += n + (doc != last_doc)
        end, last_doc = first + n, doc
        continue
      out.append((start, end - start, 0, 0, 0))
    limit = target()
    if n >= limit:  # a sentence fills an instance by itself (cut to fit)
      out.append((first, limit, 0, 0, 0))
      start = None
      continue
    start, end, used, last_doc = first, first + n, n, doc
  if start is not None:
    out.append((start, end - start, 0, 0, 0))


def _assemble_packed(window, spans, options):
  """Packed spans [N, 5] -> (input_ids, segment_ids, input_mask, candidate)
  [N, L]: `[CLS] tokens [SEP]`, a [SEP] before each document start inside."""
  length = options.max_seq_length
  n = len(spans)
  ids = np.zeros((n, length), np.int32)
  candidate = np.zeros((n, length), bool)
  input_mask = np.zeros((n, length), np.int32)
  doc_starts = np.cumsum(np.add.reduceat(
      window.sentence_lengths,
      np.cumsum(window.document_sizes) - window.document_sizes))[:-1]
  for row, (start, size) in enumerate(spans[:, :2].tolist()):
    inner = doc_starts[(doc_starts > start) & (doc_starts < start + size)]
    tokens = window.tokens[start:start + size]
    where = np.arange(size) + 1 + np.searchsorted(inner, np.arange(size) + start,
                                                  side="right")
    total = size + len(inner) + 2
    ids[row, :total] = options.sep_id
    ids[row, 0] = options.cls_id
    ids[row, where] = tokens
    candidate[row, where] = True
    input_mask[row, :total] = 1
  return ids, np.zeros_like(ids), input_mask, candidate


def _assemble(window, spans, options):
  """Spans [N, 5] -> (input_ids, segment_ids, input_mask, candidate) [N, L]."""
  a_start, a_len, b_start, b_len = (spans[:, k:k + 1].astype(np.int32)
                                    for k in range(4))
  pos = np.arange(options.max_seq_length, dtype=np.int32)[None, :]
  in_a = (pos >= 1) & (pos <= a_len)
  b_first = a_len + 2
  in_b = (pos >= b_first) & (pos < b_first + b_len)
  gather = np.where(in_a, a_start + pos - 1, np.where(in_b, b_start + pos - b_first, 0))
  ids = np.where(in_a | in_b, window.tokens[gather], 0)
  ids[:, 0] = options.cls_id
  rows = np.arange(len(spans))
  ids[rows, a_len[:, 0] + 1] = options.sep_id
  ids[rows, (b_first + b_len)[:, 0]] = options.sep_id
  segment_ids = ((pos >= b_first) & (pos <= b_first + b_len)).astype(np.int32)
  input_mask = (pos < b_first + b_len + 1).astype(np.int32)
  return ids, segment_ids, input_mask, in_a | in_b


def _choose_positions(candidate, num_to_predict, rng, options, ids):
  """Sorted predicted positions [N, P] (pad = L) for each row."""
  n, length = candidate.shape
  p = options.max_predictions_per_seq
  if not options.do_whole_word_mask:
    # A uniformly random k-subset of the candidates, by Floyd's algorithm
    # on all rows at once: step s draws t in [0, c - k + s] and takes t, or
    # c - k + s when t was taken already. Candidates are positions
    # 1..len(A) and len(A)+2..len(A)+len(B)+1, so index -> position is
    # a shift past [CLS], and past the middle [SEP].
    count = candidate.sum(axis=1)
    a_len = np.argmin(candidate[:, 1:], axis=1)  # first non-candidate after [CLS]
    k = np.minimum(num_to_predict, count)
    chosen = np.full((n, p), length, np.int64)
    uniform = rng.random((n, p))
    for step in range(p):
      top = count - k + step  # draw from [0, top]
      t = np.minimum((uniform[:, step] * (top + 1)).astype(np.int64), top)
      taken = (chosen[:, :step] == t[:, None]).any(axis=1)
      chosen[:, step] = np.where(step < k, np.where(taken, top, t), length)
    chosen.sort(axis=1)
    if not options.next_sentence_prediction:  # candidates anywhere
      candidate_positions = np.argsort(~candidate, axis=1, kind="stable")
      return np.where(chosen < length, np.take_along_axis(
          candidate_positions, np.minimum(chosen, length - 1), 1), length)
    return np.where(chosen < length,
                    chosen + 1 + (chosen >= a_len[:, None]), length)
  # Whole words: a piece continues the word before it when it is a "##"
  # piece and the position before it is a candidate too (the original would
  # also glue a "##" piece after [SEP] to the word before [SEP]). Words are
  # visited in random order and taken whole while they fit, as the original.
  positions = np.full((n, p), length, np.int64)
  cont = options.continuation[ids] & candidate
  cont[:, 1:] &= candidate[:, :-1]
  cont[:, 0] = False
  for row in range(n):
    starts = np.flatnonzero(candidate[row] & ~cont[row]).tolist()
    words = []
    for s in starts:
      w = s + 1
      while w < length and cont[row, w]:
        w += 1
      words.append((s, w))
    taken = []
    k = int(num_to_predict[row])
    for idx in rng.permutation(len(words)).tolist():
      if len(taken) >= k:
        break
      s, w = words[idx]
      if len(taken) + (w - s) > k:
        continue
      taken.extend(range(s, w))
    taken.sort()
    positions[row, :len(taken)] = taken
  return positions


def instance_batches(window, options):
  """All dupe passes over a window, shuffled -> features.Instances batches.

  Spans come first for the whole window; assembling and masking then go in
  batches of BATCH instances (a constant: the masking stream is drawn batch
  by batch, so BATCH is part of what fixes the output), which bounds a
  worker's memory and keeps arrays small.
  """
  spans = []
  for dupe in range(options.dupe_factor):
    if options.next_sentence_prediction:
      _segments(window, options, dupe, spans)
    else:
      _packed(window, options, dupe, spans)
  spans = np.asarray(spans, np.int64).reshape(-1, 5)
  shuffle = np.random.default_rng(_seed(options, window.index, _SHUFFLE))
  spans = spans[shuffle.permutation(len(spans))]
  rng = np.random.default_rng(_seed(options, window.index, _MASK))
  for start in range(0, len(spans), BATCH):
    yield _masked(window, spans[start:start + BATCH], options, rng)


def pack_instances(batch, options):
  """A batch of masked instances -> packed rows (features.Instances with
  sequence_ids; data/row_packing.py: first fit decreasing over the batch,
  each instance's tokens, segments and masks shifted to its place)."""
  from official_bert.data import row_packing  # pylint: disable=g-import-not-at-top
  inputs = {"input_word_ids": batch.input_ids, "input_mask": batch.input_mask,
            "input_type_ids": batch.segment_ids,
            "masked_lm_positions": batch.masked_lm_positions}
  labels = {"masked_lm_ids": batch.masked_lm_ids,
            "masked_lm_weights": batch.masked_lm_weights}
  rows, row_labels = row_packing.pack(
      inputs, labels, options.max_seq_length,
      row_packing.default_row_predictions(options.max_predictions_per_seq,
                                          row_packing.MAX_SEQUENCES_PER_ROW))
  as_int64 = lambda a: a.astype(np.int64)  # pylint: disable=unnecessary-lambda-assignment
  return features.Instances(
      input_ids=as_int64(rows["input_word_ids"]),
      input_mask=as_int64(rows["input_mask"]),
      segment_ids=as_int64(rows["input_type_ids"]),
      masked_lm_positions=as_int64(rows["masked_lm_positions"]),
      masked_lm_ids=as_int64(row_labels["masked_lm_ids"]),
      masked_lm_weights=row_labels["masked_lm_weights"],
      next_sentence_labels=as_int64(row_labels["next_sentence_labels"]),
      sequence_ids=as_int64(rows[row_packing.SEQUENCE_IDS]))


def build_instances(window, options):
  """All of a window's instances as one features.Instances."""
  batches = list(instance_batches(window, options))
  return features.Instances(**{
      f.name: np.concatenate([getattr(b, f.name) for b in batches])
      for f in dataclasses.fields(features.Instances)
      if getattr(batches[0], f.name) is not None})


def _masked(window, spans, options, rng):
  """Spans -> finished Instances: assembled, then masked."""
  assemble = (_assemble if options.next_sentence_prediction
              else _assemble_packed)
  ids, segment_ids, input_mask, candidate = assemble(window, spans, options)
  n_tokens = input_mask.sum(axis=1)
  num_to_predict = np.minimum(
      options.max_predictions_per_seq,
      np.maximum(1, np.round(n_tokens * options.masked_lm_prob).astype(np.int64)))
  positions = _choose_positions(candidate, num_to_predict, rng, options, ids)
  valid = positions < options.max_seq_length
  positions = np.where(valid, positions, 0)
  rows = np.arange(len(ids))[:, None]
  labels = np.where(valid, ids[rows, positions], 0)
  # 80% [MASK]; of the rest, half keep the token, half get a random id.
  shape = positions.shape
  to_mask = rng.random(shape) < 0.8
  keep = rng.random(shape) < 0.5
  random_ids = rng.integers(0, options.vocab_size, shape)
  replaced = np.where(to_mask, options.mask_id, np.where(keep, labels, random_ids))
  masked_ids = ids.copy()
  r, c = np.nonzero(valid)
  masked_ids[r, positions[r, c]] = replaced[r, c]
  return features.Instances(
      input_ids=masked_ids, input_mask=input_mask, segment_ids=segment_ids,
      masked_lm_positions=positions, masked_lm_ids=labels,
      masked_lm_weights=valid.astype(np.float32),
      next_sentence_labels=spans[:, 4])


@dataclasses.dataclass
class WindowResult:
  """What a worker sends back: serialized records and counts."""
  index: int
  blob: bytes
  lengths: np.ndarray
  documents: int
  sentences: int
  tokens: int
  random_next: int


def process_window(window, options, framed=False):
  """Window -> WindowResult (the worker's whole job).

  blob holds the serialized Examples back to back, or with framed=True the
  bytes of a TFRecord file holding them (record i then takes lengths[i] + 16
  bytes).
  """
  blobs, lengths, random_next = [], [], 0
  for batch in instance_batches(window, options):
    if options.pack_sequences:
      batch = pack_instances(batch, options)
    blob, batch_lengths = features.serialize_examples(batch)
    blobs.append(features.frame_records(blob, batch_lengths) if framed else blob)
    lengths.append(batch_lengths)
    random_next += int(batch.next_sentence_labels.sum())
  blob, lengths = b"".join(blobs), np.concatenate(lengths)
  return WindowResult(
      index=window.index, blob=blob, lengths=lengths,
      documents=len(window.document_sizes),
      sentences=len(window.sentence_lengths), tokens=len(window.tokens),
      random_next=random_next)
