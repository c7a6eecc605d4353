"""extend_checkpoint: domain words and longer positions on a trained BERT.

Claims, each with the bug that would break it:
- new rows are the mean of the old WordPieces' rows, in the right ids
  ([unusedN] slots first, in order; then appended): rows initialised with
  zeros, or an off-by-one slot, fail `test_plan_puts_words_in_slots_...`;
- text without new words gives the old outputs (1e-6) with positions
  extended too: a moved old row or position fails
  `test_cli_extended_model_gives_the_old_outputs`;
- a 2x-long input: its first half's outputs equal the old model's on the
  old-length input when the second half repeats it (a wrong period fails),
  and the difference for another continuation is measured and printed;
- continued pretraining on the new vocabulary moves the new rows, lowers the
  masked-LM loss on the new words, and --freeze_old_embeddings_steps keeps the
  old rows exactly (a mask on the wrong rows, or none, fails);
- a converted Hugging Face BERT survives the recipe (slow).
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from official_bert import configs
from official_bert.data import tokenization
from official_bert.modeling import pretrainer
from official_bert.training import checkpoints
from official_bert.training import extension
from tests import testing

SPECIAL = ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]",
           "[SEP]", "[MASK]", ".", ","]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
WORDS = ["the", "cell", "protein", "is", "in", "kin", "##ase", "gly",
         "##co", "##lysis", "enzyme", "makes", "energy", "uses"]
NEW_WORDS = ["Kinase", "glycolysis", "the", "covid-19", "kinase",
             "mitochondria", "atp", "nadh"]


def _vocab():
  vocab = SPECIAL + LETTERS + ["##" + c for c in LETTERS]
  vocab += [w for w in WORDS if w not in vocab]
  return vocab + [f"filler{i}" for i in range(testing.VOCAB_SIZE - len(vocab))]


def _write_source(directory, seed=0):
  """A tiny random BERT (weights spread out) as our checkpoint + vocab."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "vocab.txt"), "w") as f:
    f.write("\n".join(_vocab()) + "\n")
  config = testing.tiny_config()
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  model = pretrainer.BertPretrainer.from_bert_config(config)
  rng = np.random.default_rng(seed)
  for variable in model.weights:  # non-trivial biases, norms, rows
    variable.assign(variable.numpy() + rng.normal(
        0, 0.1, variable.shape).astype(np.float32))
  checkpoints.save_model(model, os.path.join(directory, "bert_model.ckpt"))
  with open(os.path.join(directory, "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "bert_model.ckpt"\n')
  config.to_json_file(os.path.join(directory, "bert_config.json"))
  return directory


def _load(path, use_next_sentence=True):
  """The pretrainer of a checkpoint directory or prefix (its config beside)."""
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  config = configs.BertConfig.from_json_file(
      os.path.join(directory, "bert_config.json"))
  model = pretrainer.BertPretrainer.from_bert_config(
      config, use_next_sentence=use_next_sentence)
  checkpoints.restore_model(model, path)
  return model


def _extend(source, out, *flags):
  return testing.run_cli(["-m", "official_bert.extend_checkpoint",
                          f"--init_checkpoint={source}", f"--output_dir={out}",
                          *flags], merge_stderr=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  return _write_source(str(tmp_path_factory.mktemp("source")))


@pytest.fixture(scope="module")
def words_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("words") / "words.txt"
  path.write_text("\n".join(NEW_WORDS) + "\n\n")
  return str(path)


@pytest.fixture(scope="module")
def extended(source, words_file, tmp_path_factory):
  """The CLI's output: the words file's words, positions 16 -> 32."""
  out = tmp_path_factory.mktemp("extended") / "out"
  umask = os.umask(0o022)  # inherited by the CLI
  try:
    proc = _extend(source, out, f"--new_words_file={words_file}",
                   "--max_position_embeddings=32")
  finally:
    os.umask(umask)
  return str(out), proc.stdout


def test_plan_puts_words_in_slots_then_appends_rows_as_piece_means():
  vocab = SPECIAL + LETTERS + ["##" + c for c in LETTERS] + WORDS[:10]
  path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                      f"extend_plan_vocab_{os.getpid()}.txt")
  with open(path, "w") as f:
    f.write("\n".join(vocab) + "\n")
  tokenizer = tokenization.FullTokenizer(path, do_lower_case=True)
  os.remove(path)
  size = len(vocab) + 2  # two spare rows past the last line
  plan = extension.plan_words(tokenizer, NEW_WORDS, size)
  ids = {token: i for i, token in enumerate(vocab)}
  # Normalised (uncased), deduplicated, known and split ones skipped.
  assert [w for w, _, _ in plan.added] == [
      "kinase", "glycolysis", "mitochondria", "atp", "nadh"]
  assert plan.known == ["the"] and plan.not_one_word == ["covid-19"]
  # Slots 1, 2, 3 in order, then the lines after the vocabulary.
  assert plan.new_ids == [1, 2, 3, len(vocab), len(vocab) + 1]
  assert plan.slots == 3 and plan.vocab_size == size
  assert plan.vocab[1:4] == ["kinase", "glycolysis", "mitochondria"]
  assert plan.vocab[len(vocab):] == ["atp", "nadh"]
  assert plan.vocab[4:len(vocab)] == vocab[4:]
  # The old tokenizer's pieces, written out by hand.
  pieces = {w: p for w, _, p in plan.added}
  assert pieces["kinase"] == [ids["kin"], ids["##ase"]]
  assert pieces["glycolysis"] == [ids["gly"], ids["##co"], ids["##lysis"]]
  assert pieces["atp"] == [ids["a"], ids["##t"], ids["##p"]]

  rng = np.random.default_rng(1)
  table = rng.normal(size=(size, 5)).astype(np.float32)
  bias = rng.normal(size=(size,)).astype(np.float32)
  grown = extension.extend_arrays(
      {extension.WORD_EMBEDDINGS: table, extension.MLM_BIAS: bias}, plan)
  rows, new_bias = grown[extension.WORD_EMBEDDINGS], grown[extension.MLM_BIAS]
  np.testing.assert_allclose(rows[1], (table[ids["kin"]] +
                                       table[ids["##ase"]]) / 2, rtol=1e-6)
  np.testing.assert_allclose(
      rows[len(vocab)], table[[ids["a"], ids["##t"], ids["##p"]]].mean(0),
      rtol=1e-6)
  np.testing.assert_allclose(new_bias[2], bias[[ids["gly"], ids["##co"],
                                                ids["##lysis"]]].mean(),
                             rtol=1e-6)
  untouched = [i for i in range(size) if i not in plan.new_ids]
  np.testing.assert_array_equal(rows[untouched], table[untouched])
  np.testing.assert_array_equal(new_bias[untouched], bias[untouched])
  # Grows when the words outnumber the slots and the spare rows.
  more = extension.plan_words(tokenizer, NEW_WORDS + ["zzyzx", "qwerty"],
                              len(vocab))
  assert more.vocab_size == len(more.vocab) == len(vocab) + 4
  assert extension.plan_words(tokenizer, NEW_WORDS, size,
                              max_new_words=2).new_ids == [1, 2]


def test_positions_repeat_the_old_rows_periodically():
  table = np.arange(12, dtype=np.float32).reshape(4, 3)
  longer = extension.extend_positions(table, 10)
  np.testing.assert_array_equal(longer[:4], table)
  np.testing.assert_array_equal(longer[4:8], table)
  np.testing.assert_array_equal(longer[8:], table[:2])
  with pytest.raises(ValueError, match="smaller than the checkpoint's 4"):
    extension.extend_positions(table, 3)


def test_freeze_rows_masks_the_gradient_for_the_first_steps():
  embeddings = tf.Variable(tf.ones([6, 2]))
  bias = tf.Variable(tf.ones([6]))
  other = tf.Variable(tf.ones([6, 2]))
  transform = extension.freeze_rows([embeddings, bias], [1, 4], num_steps=3)
  grads = [tf.ones([6, 2]), tf.ones([6]), tf.ones([6, 2]), None]
  variables = [embeddings, bias, other, tf.Variable(0.0)]
  for step, expected in ((0, [0, 1, 0, 0, 1, 0]), (2, [0, 1, 0, 0, 1, 0]),
                         (3, [1] * 6)):
    out = transform(grads, variables, tf.constant(step, tf.int64))
    np.testing.assert_array_equal(out[0].numpy(), np.repeat(
        np.array(expected, np.float32)[:, None], 2, axis=1))
    np.testing.assert_array_equal(out[1].numpy(), expected)
    np.testing.assert_array_equal(out[2].numpy(), np.ones([6, 2]))
    assert out[3] is None


def _old_text_inputs(seq, taken, seed=0):
  """Inputs whose ids are old tokens only (no slot taken by a new word)."""
  rng = np.random.default_rng(seed)
  allowed = np.array([i for i in range(4, testing.VOCAB_SIZE)
                      if i not in taken], np.int32)
  x = testing.random_inputs(seq=seq, seed=seed)
  x["input_word_ids"] = np.where(
      x["input_mask"] > 0, rng.choice(allowed, x["input_mask"].shape),
      0).astype(np.int32)
  x["masked_lm_positions"] = np.tile(np.arange(0, seq, 3, dtype=np.int32),
                                     (testing.BATCH, 1))
  return x


def test_cli_extended_model_gives_the_old_outputs(source, extended):
  out, stdout = extended
  assert re.search(r"added 5 words \(3 into \[unused\] slots, 2 appended\), "
                   r"vocab_size 99 -> 101; skipped 1 already in the "
                   r"vocabulary and 1 that are not one word; positions 16 -> "
                   r"32", stdout), stdout
  # Everything in the output has the umask's modes; nothing else left.
  modes = {name: oct(os.stat(os.path.join(out, name)).st_mode & 0o777)
           for name in os.listdir(out)}
  assert set(modes.values()) == {"0o644"}, modes
  assert not [n for n in os.listdir(os.path.dirname(out)) if n != "out"]
  with open(os.path.join(out, "extend_info.json")) as f:
    info = json.load(f)
  assert info["new_word_ids"] == [1, 2, 3, 99, 100]
  assert info["skipped_in_vocab"] == 1 and info["vocab_size"] == 101
  with open(os.path.join(out, "vocab.txt")) as f:
    vocab = f.read().splitlines()
  assert vocab[1:4] == ["kinase", "glycolysis", "mitochondria"]
  assert vocab[99:] == ["atp", "nadh"] and vocab[4:99] == _vocab()[4:]
  config = configs.BertConfig.from_json_file(
      os.path.join(out, "bert_config.json"))
  assert (config.vocab_size, config.max_position_embeddings) == (101, 32)

  old, new = _load(source), _load(out)
  x = _old_text_inputs(16, taken=info["new_word_ids"])  # the old max length
  enc_old = old.encoder({k: x[k] for k in ("input_word_ids", "input_mask",
                                           "input_type_ids")}, training=False)
  enc_new = new.encoder({k: x[k] for k in ("input_word_ids", "input_mask",
                                           "input_type_ids")}, training=False)
  for name in ("sequence_output", "pooled_output"):
    np.testing.assert_allclose(enc_new[name], enc_old[name], atol=1e-6,
                               err_msg=name)
  out_old, out_new = old(x, training=False), new(x, training=False)
  kept = [i for i in range(99) if i not in (1, 2, 3)]  # slots now new words
  np.testing.assert_allclose(np.asarray(out_new["mlm_logits"])[..., kept],
                             np.asarray(out_old["mlm_logits"])[..., kept],
                             atol=1e-6)
  np.testing.assert_allclose(out_new["next_sentence_logits"],
                             out_old["next_sentence_logits"], atol=1e-6)
  # "atp" (id 99) starts from its old pieces a ##t ##p: embedding and bias.
  pieces = [_vocab().index(t) for t in ("a", "##t", "##p")]
  np.testing.assert_allclose(
      new.encoder.embeddings.word_embeddings.embeddings.numpy()[99],
      old.encoder.embeddings.word_embeddings.embeddings.numpy()[pieces].mean(
          0), rtol=1e-6)
  np.testing.assert_allclose(
      new.cls_predictions.output_bias.numpy()[99],
      old.cls_predictions.output_bias.numpy()[pieces].mean(), rtol=1e-6)


def _interpolated(table, n):
  """The alternative to the periodic copy: the old table stretched to n rows."""
  old = np.arange(table.shape[0])
  where = np.linspace(0, table.shape[0] - 1, n)
  return np.stack([np.interp(where, old, table[:, j])
                   for j in range(table.shape[1])], axis=1).astype(np.float32)


def test_double_length_input_first_half_is_close_to_the_old_output(
    source, extended):
  out, _ = extended
  old, new = _load(source), _load(out)
  x = _old_text_inputs(16, taken=[1, 2, 3], seed=3)
  full = {k: np.ones_like(x[k]) if k == "input_mask" else x[k]
          for k in ("input_word_ids", "input_mask", "input_type_ids")}
  full["input_type_ids"] = np.zeros_like(full["input_mask"])
  reference = np.asarray(old.encoder(full, training=False)["sequence_output"])

  def prefix_difference(model, second_half):
    long = {k: np.concatenate([full[k], second_half[k]], axis=1) for k in full}
    output = np.asarray(model.encoder(long, training=False)["sequence_output"])
    return float(np.abs(output[:, :16] - reference).max())

  repeated = prefix_difference(new, full)
  other = _old_text_inputs(16, taken=[1, 2, 3], seed=4)
  other = {k: full[k] if k != "input_word_ids" else other[k] for k in full}
  continued = prefix_difference(new, other)
  # The same measures with the position table interpolated instead.
  positions = new.encoder.embeddings.position_embeddings
  positions.assign(_interpolated(positions.numpy()[:16], 32))
  repeated_interp = prefix_difference(new, full)
  continued_interp = prefix_difference(new, other)
  scale = float(np.abs(reference).mean())
  print(f"first 16 of 32 positions vs the old model on 16 (mean |output| "
        f"{scale:.3f}): periodic copy {repeated:.2e} when the second half "
        f"repeats the first, {continued:.3f} for another continuation; "
        f"interpolated table {repeated_interp:.3f} and {continued_interp:.3f}")
  # Repeated input + periodic positions: each key and value of the second
  # half equals the first half's, so attention gives the old outputs.
  assert repeated < 1e-5
  assert repeated_interp > 100 * max(repeated, 1e-7)
  # Another continuation: the first half attends to new tokens too, so it
  # moves; less than with an interpolated table, and less than the outputs.
  assert continued < continued_interp and continued < scale


@pytest.mark.slow
def test_bad_input_is_one_sentence_last(source, words_file, tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n  \n")
  full = tmp_path / "full"
  full.mkdir()
  (full / "x").write_text("x")
  small = tmp_path / "small_vocab"
  small.mkdir()
  for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001",
               "checkpoint", "bert_config.json"):
    os.symlink(os.path.join(source, name), small / name)
  (small / "vocab.txt").write_text(
      "\n".join(_vocab() + ["extra1", "extra2"]) + "\n")
  binary = tmp_path / "words.bin"
  binary.write_bytes(b"\x7fELF\x02\x01" + bytes(range(256)) * 8)
  out = str(tmp_path / "out")
  cases = [
      ([f"--init_checkpoint={source}", f"--output_dir={out}",
        f"--new_words_file={binary}"],
       f"--new_words_file={binary} holds NUL bytes: it is not a text file"),
      ([f"--init_checkpoint={source}", f"--output_dir={out}",
        f"--domain_corpus={empty}"],
       f"--domain_corpus={empty} holds no text (only blank lines)"),
      ([f"--init_checkpoint={tmp_path}/missing", f"--output_dir={out}",
        "--max_position_embeddings=32"],
       f"--init_checkpoint={tmp_path}/missing does not exist"),
      ([f"--init_checkpoint={source}", f"--output_dir={full}",
        "--max_position_embeddings=32"],
       f"--output_dir={full} is not empty"),
      ([f"--init_checkpoint={source}", f"--output_dir={out}",
        f"--new_words_file={empty}"],
       f"--new_words_file={empty} holds no word"),
      ([f"--init_checkpoint={source}", f"--output_dir={out}"],
       "Nothing to extend"),
      ([f"--init_checkpoint={source}", f"--output_dir={out}",
        "--max_position_embeddings=8"],
       "--max_position_embeddings=8 is smaller than the checkpoint's 16"),
      ([f"--init_checkpoint={small}", f"--output_dir={out}",
        f"--new_words_file={words_file}"],
       "has 101 lines but the checkpoint's vocab_size is 99"),
      ([f"--init_checkpoint={source}", f"--output_dir={out}",
        f"--new_words_file={words_file}", f"--domain_corpus={words_file}"],
       "Pass --new_words_file or --domain_corpus, not both"),
  ]
  for flags, expected in cases:
    proc = testing.run_cli(["-m", "official_bert.extend_checkpoint", *flags],
                           check=False, merge_stderr=True)
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    testing.assert_one_sentence_last(proc.returncode, lines,
                                     "extend_checkpoint", expected)
    assert not os.path.exists(out), flags  # nothing half-written


DOMAIN = [
    ["The kinase makes atp in the cell.", "Glycolysis uses the enzyme.",
     "Mitochondria make atp and nadh.", "The kinase is a protein."],
    ["Glycolysis makes nadh in the cell.", "The enzyme kinase uses atp.",
     "Mitochondria use nadh.", "The protein is in mitochondria."],
    ["Atp is energy in the cell.", "The kinase uses the energy.",
     "Glycolysis is in the cell.", "Nadh makes energy in mitochondria."],
]


def _domain_corpus(path, copies):
  with open(path, "w") as f:
    f.write("\n\n".join("\n".join(doc) for doc in DOMAIN * copies) + "\n")
  return str(path)


def _records(out_dir, corpus, vocab_file, seq, preds, dupe_factor=4):
  path = os.path.join(out_dir, "domain.tfrecord")
  testing.run_cli(["-m", "tfrecords.create_pretraining_data",
                   f"--input_file={corpus}", f"--output_file={path}",
                   f"--vocab_file={vocab_file}", f"--max_seq_length={seq}",
                   f"--max_predictions_per_seq={preds}",
                   f"--dupe_factor={dupe_factor}", "--masked_lm_prob=0.25",
                   "--num_workers=0"])
  return path


def _mlm_loss_on(model, records, seq, preds, ids):
  """Mean masked-LM cross-entropy over masked positions labelled `ids`."""
  spec = testing.original_feature_spec(seq, preds)
  total, count = 0.0, 0
  for raw in tf.data.TFRecordDataset(records).batch(32):
    ex = tf.io.parse_example(raw, spec)
    x = {"input_word_ids": ex["input_ids"], "input_mask": ex["input_mask"],
         "input_type_ids": ex["segment_ids"],
         "masked_lm_positions": ex["masked_lm_positions"]}
    x = {k: tf.cast(v, tf.int32) for k, v in x.items()}
    logits = model(x, training=False)["mlm_logits"]
    labels = ex["masked_lm_ids"].numpy()
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.cast(labels, tf.int32), logits).numpy()
    keep = np.isin(labels, ids) & (ex["masked_lm_weights"].numpy() > 0)
    total += ce[keep].sum()
    count += keep.sum()
  assert count >= 10, count
  return total / count


@pytest.mark.slow
def test_continued_pretraining_moves_new_rows_and_lowers_their_loss(
    extended, tmp_path):
  out, _ = extended
  with open(os.path.join(out, "extend_info.json")) as f:
    new_ids = json.load(f)["new_word_ids"]
  corpus = _domain_corpus(tmp_path / "domain.txt", copies=4)
  seq, preds = 24, 4  # 24 > the old 16 positions: the copied rows are used
  records = _records(str(tmp_path), corpus, os.path.join(out, "vocab.txt"),
                     seq, preds)
  with open(os.path.join(out, "vocab.txt")) as f:
    vocab = f.read().splitlines()
  tokenizer = tokenization.FullTokenizer(os.path.join(out, "vocab.txt"))
  ids = tokenizer.tokenize(tf.constant(["kinase atp"])).to_list()[0]
  assert [vocab[i] for i in ids] == ["kinase", "atp"]  # new ids in the data
  train = tmp_path / "train"
  testing.run_cli([
      "-m", "official_bert.run_pretraining", f"--input_file={records}",
      f"--output_dir={train}", f"--init_checkpoint={out}",
      f"--bert_config_file={out}/bert_config.json", "--do_train",
      f"--max_seq_length={seq}", f"--max_predictions_per_seq={preds}",
      "--train_batch_size=8", "--num_train_steps=40", "--num_warmup_steps=0",
      "--learning_rate=2e-3", "--steps_per_loop=10",
      "--save_checkpoints_steps=20", "--weight_decay=0",
      "--freeze_old_embeddings_steps=20"])
  before = _load(out)
  during = _load(str(train / "ckpt-20"))
  after = _load(str(train / "ckpt-40"))

  def rows(model):
    return (model.encoder.embeddings.word_embeddings.embeddings.numpy(),
            model.cls_predictions.output_bias.numpy())

  old = [i for i in range(len(vocab)) if i not in new_ids]
  for b, d, a in zip(rows(before), rows(during), rows(after)):
    # Frozen for 20 steps: old rows exact (no weight decay here), new moved.
    np.testing.assert_array_equal(d[old], b[old])
    assert np.abs(d[new_ids] - b[new_ids]).max() > 1e-3
    assert np.abs(a[old] - d[old]).max() > 1e-4  # unfrozen after step 20
  loss_before = _mlm_loss_on(before, records, seq, preds, new_ids)
  loss_after = _mlm_loss_on(after, records, seq, preds, new_ids)
  print(f"masked-LM loss on the new words: {loss_before:.3f} -> "
        f"{loss_after:.3f}")
  assert loss_after < loss_before - 0.5


@pytest.mark.slow
def test_converted_hugging_face_bert_survives_the_recipe(tmp_path):
  """Hugging Face BertForPreTraining (random) -> convert_checkpoint ->
  extend_checkpoint (words learned from a domain corpus, 2x positions) ->
  create_pretraining_data -> run_pretraining -> run_classifier, shortened."""
  torch = testing.require("torch")
  transformers = testing.require("transformers")
  config = testing.tiny_config()
  torch.manual_seed(0)
  hf = transformers.BertForPreTraining(
      transformers.BertConfig(**config.to_dict())).eval()
  hf.save_pretrained(str(tmp_path / "hf"))
  with open(tmp_path / "hf" / "vocab.txt", "w") as f:
    f.write("\n".join(_vocab()) + "\n")
  testing.run_cli(["-m", "official_bert.convert_checkpoint",
                   f"--source={tmp_path / 'hf'}",
                   f"--output_dir={tmp_path / 'converted'}"])
  corpus = _domain_corpus(tmp_path / "domain.txt", copies=4)
  ext = tmp_path / "extended"
  proc = _extend(tmp_path / "converted", ext, f"--domain_corpus={corpus}",
                 "--max_new_words=4", "--max_position_embeddings=32")
  # The learner keeps the five domain words the tiny vocabulary lacks; the
  # four saving the most WordPieces are added.
  assert "learned 5 whole words the vocabulary lacks" in proc.stdout and (
      "added 4 words (3 into [unused] slots, 1 appended), vocab_size 99 -> "
      "100") in proc.stdout, proc.stdout
  with open(ext / "extend_info.json") as f:
    info = json.load(f)
  assert set(info["new_words"]) < {"kinase", "glycolysis", "mitochondria",
                                   "atp", "nadh"}, info["new_words"]
  # The Hugging Face directory itself extends to the very same checkpoint.
  words = tmp_path / "words.txt"
  words.write_text("\n".join(info["new_words"]) + "\n")
  _extend(tmp_path / "hf", tmp_path / "extended_hf",
          f"--new_words_file={words}", "--max_position_embeddings=32")
  names = [n for n, _ in tf.train.list_variables(str(ext / "bert_model.ckpt"))
           if n.startswith("model/")]
  assert names == [n for n, _ in tf.train.list_variables(
      str(tmp_path / "extended_hf" / "bert_model.ckpt"))
                   if n.startswith("model/")]
  for name in names:
    np.testing.assert_array_equal(
        tf.train.load_variable(str(ext / "bert_model.ckpt"), name),
        tf.train.load_variable(
            str(tmp_path / "extended_hf" / "bert_model.ckpt"), name), name)
  assert (ext / "vocab.txt").read_text() == (
      tmp_path / "extended_hf" / "vocab.txt").read_text()
  # The extended encoder gives the converted one's outputs on old text.
  old, new = _load(str(tmp_path / "converted")), _load(str(ext))
  x = _old_text_inputs(16, taken=info["new_word_ids"])
  np.testing.assert_allclose(
      new(x, training=False)["next_sentence_logits"],
      old(x, training=False)["next_sentence_logits"], atol=1e-6)

  records = _records(str(tmp_path), corpus, str(ext / "vocab.txt"), 24, 4,
                     dupe_factor=1)
  testing.run_cli([
      "-m", "official_bert.run_pretraining", f"--input_file={records}",
      f"--output_dir={tmp_path / 'pretrained'}", f"--init_checkpoint={ext}",
      f"--bert_config_file={ext / 'bert_config.json'}", "--do_train",
      "--do_eval", "--max_seq_length=24", "--max_predictions_per_seq=4",
      "--train_batch_size=4", "--num_train_steps=3", "--num_warmup_steps=1",
      "--learning_rate=2e-5", "--steps_per_loop=3", "--max_eval_steps=2",
      "--freeze_old_embeddings_steps=2"])
  task = tmp_path / "task"
  task.mkdir()
  rows = "text,label\n" + "".join(
      f"{sentence},{'bio' if i % 2 else 'other'}\n"
      for i, sentence in enumerate(sum(DOMAIN, [])) if "," not in sentence)
  for split in ("train", "dev", "test"):
    (task / f"{split}.csv").write_text(rows)
  proc = testing.run_cli([
      "-m", "official_bert.run_classifier", f"--task_data_dir={task}",
      "--text_column=text", "--label_column=label",
      f"--bert_config_file={ext / 'bert_config.json'}",
      f"--vocab_file={ext / 'vocab.txt'}",
      f"--init_checkpoint={tmp_path / 'pretrained'}", "--do_train",
      "--do_eval", "--max_seq_length=32", "--train_batch_size=4",
      "--learning_rate=1e-4", "--num_train_epochs=1",
      f"--output_dir={tmp_path / 'classifier'}"], merge_stderr=True)
  assert "eval_accuracy" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.slow
def test_freezing_without_extend_info_is_one_sentence(source, tmp_path):
  """run_pretraining --freeze_old_embeddings_steps needs the new word ids:
  an --init_checkpoint without extend_info.json is refused before training."""
  from tests import input_pipeline_test  # pylint: disable=g-import-not-at-top
  records = tmp_path / "d.tfrecord"
  input_pipeline_test.write_records(
      records, input_pipeline_test.make_instances(4, seed=1))
  seq, preds = input_pipeline_test.SEQ, input_pipeline_test.PREDS
  proc = testing.run_cli([
      "-m", "official_bert.run_pretraining", f"--input_file={records}",
      f"--output_dir={tmp_path / 'out'}", f"--init_checkpoint={source}",
      f"--bert_config_file={source}/bert_config.json", "--do_train",
      f"--max_seq_length={seq}", f"--max_predictions_per_seq={preds}",
      "--train_batch_size=2", "--num_train_steps=2",
      "--freeze_old_embeddings_steps=1"], check=False, merge_stderr=True)
  lines = [l for l in proc.stdout.splitlines() if l.strip()]
  testing.assert_one_sentence_last(
      proc.returncode, lines, "run_pretraining",
      f"--freeze_old_embeddings_steps=1: {source}/extend_info.json does not "
      "exist; pass as --init_checkpoint the output_dir of extend_checkpoint")
  assert not os.path.exists(tmp_path / "out" / "ckpt-2.index")


def test_1024_token_input_through_a_model_extended_from_512():
  """The issue's sizes: a tiny model with 512 positions extended to 1024 (the
  library the CLI runs); one 1024-token input. Its first 512 outputs against
  the old model's on those 512 tokens: equal when the second half repeats
  the first, and the measured difference for another second half."""
  from official_bert.training import checkpoint_names  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(5)
  config = testing.tiny_config(max_position_embeddings=512)
  old = pretrainer.BertPretrainer.from_bert_config(config)
  table = checkpoint_names.original_names(old)
  arrays = {name: v.numpy().T if t else v.numpy()
            for name, (v, t) in table.items()}
  new = pretrainer.BertPretrainer.from_bert_config(
      config.replace(max_position_embeddings=1024))
  checkpoint_names.assign_original(
      new, extension.extend_arrays(arrays, max_position_embeddings=1024))
  rng = np.random.default_rng(0)
  first = rng.integers(5, testing.VOCAB_SIZE, (1, 512)).astype(np.int32)
  second = rng.integers(5, testing.VOCAB_SIZE, (1, 512)).astype(np.int32)

  def encode(model, ids):
    return np.asarray(model.encoder(
        {"input_word_ids": ids, "input_mask": np.ones_like(ids),
         "input_type_ids": np.zeros_like(ids)},
        training=False)["sequence_output"])

  reference = encode(old, first)
  repeated = encode(new, np.concatenate([first, first], 1))
  other = encode(new, np.concatenate([first, second], 1))
  assert repeated.shape == other.shape == (1, 1024, testing.HIDDEN)
  np.testing.assert_allclose(encode(new, first), reference, atol=1e-6)
  same = float(np.abs(repeated[:, :512] - reference).max())
  moved = np.abs(other[:, :512] - reference)
  print(f"1024 tokens through 512 -> 1024 positions: first 512 outputs vs "
        f"the old model on 512 (mean |output| "
        f"{float(np.abs(reference).mean()):.3f}): {same:.1e} with the input "
        f"repeated; another second half: max {float(moved.max()):.3f}, mean "
        f"{float(moved.mean()):.4f}")
  assert same < 1e-5
  assert float(moved.mean()) < 0.1 * float(np.abs(reference).mean())
