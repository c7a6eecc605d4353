"""Named-entity recognition on CoNLL files: run_ner's task.

Reading the splits and packing words into windows (tasks/ner/ner_data.py: one TF
packer, also the exported signature's), the model (`BertTokenClassifier`),
the loss over each word's first WordPiece, eval_results.txt's entity-level
values (conlleval's), test_predictions.txt and the best metric. The program
builds an `NerConfig` from its flags; training/finetuner.py's `run_task`
runs it:

    task = NerTask(NerConfig(data_dir="conll2003", output_dir="/tmp/ner",
                             do_train=True, do_eval=True))
    task.read()                  # every file checked, no TensorFlow yet
    task.encode(tokenizer, max_seq_length=128)
"""

import dataclasses
import json
import os

import numpy as np

from official_bert.data import text_files
from official_bert.training import classifier_metrics
from official_bert.training import distillation
from official_bert.training import task as task_lib
from official_bert.tasks.ner import ner_data

SPLIT_NAMES = {"train": ("train",), "dev": ("dev", "valid"), "test": ("test",)}
EXTENSIONS = ("", ".txt", ".conll")


@dataclasses.dataclass(frozen=True)
class NerConfig:
  """An NER run's data and modes, with the flags' names (data_dir is
  --task_data_dir; output_dir holds a previous run's label_list.json)."""
  data_dir: str
  output_dir: str
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  eval_every_steps: int = 0


def split_file(data_dir, split):
  """The one CoNLL file of `split` in `data_dir`."""
  return text_files.find_split_file(data_dir, split, SPLIT_NAMES[split],
                                         EXTENSIONS)


def token_losses(labels, logits):
  """{"loss": mean cross-entropy over the labelled positions (labels >= 0)}."""
  import keras  # pylint: disable=g-import-not-at-top
  from keras import ops  # pylint: disable=g-import-not-at-top
  weights = ops.cast(ops.greater_equal(labels, 0), "float32")       # [B, T]
  per_token = keras.losses.sparse_categorical_crossentropy(
      ops.maximum(labels, 0), logits, from_logits=True)             # [B, T]
  return {"loss": ops.sum(per_token * weights) /
                  ops.maximum(ops.sum(weights), 1.0)}


def token_metric_counts(labels, logits):
  """Correct/total over labelled positions (logged as label_accuracy)."""
  from keras import ops  # pylint: disable=g-import-not-at-top
  weights = ops.cast(ops.greater_equal(labels, 0), "float32")
  predicted = ops.cast(ops.argmax(logits, -1), "int32")
  correct = ops.cast(ops.equal(predicted, ops.cast(labels, "int32")), "float32")
  return {"label_correct": ops.sum(correct * weights),
          "label_total": ops.sum(weights)}


def word_tags(logits, window, position, sentences, labels):
  """Each sentence's predicted tags from the windows' logits [R, T, C]:
  each word's logits [N, C] are at its first piece (window, position)."""
  flat = np.argmax(logits[window, position], -1)
  tags, start = [], 0
  for sentence in sentences:
    tags.append([labels[i] for i in flat[start:start + len(sentence.words)]])
    start += len(sentence.words)
  return tags


def eval_results(sentences, tags, loss, step):
  """eval_results.txt's values: conlleval's entity-level eval_precision,
  eval_recall, eval_f1 (and per type), word accuracy, the loss, the step."""
  metrics = ner_data.entity_metrics([s.tags for s in sentences], tags)
  result = {f"eval_{k}": v for k, v in metrics.items()}
  result.update(eval_loss=loss, loss=loss, global_step=step)
  return result


class NerTask:
  """run_ner's task: `read`, `encode`, then what `run_task` calls (a
  training/task.py `FinetuningTask`; tests/task_test.py checks it)."""

  example_name = "examples"
  best_metric = "eval_f1"
  metric_range = 1.0
  prepares_every_epoch = False  # nothing to prepare
  num_distill_texts = 0  # run_ner takes no --distill_data

  def __init__(self, config):
    self.config = config
    self.labels = self.tokenizer = None
    self.splits = {}  # split -> (sentences, tag ids per sentence)
    self.encoded = {}  # split -> (sentences, inputs, window, position, labels)

  # ---------------------------------------------------- preprocessing ----
  def read(self):
    """Reads and checks every file the run needs (ValueError, OSError or
    UnicodeDecodeError: one sentence naming the file)."""
    config = self.config
    self.labels = self._labels()
    evaluating = config.do_eval or (config.do_train and config.eval_every_steps)
    for split, wanted in (("train", config.do_train), ("dev", evaluating),
                          ("test", config.do_predict)):
      if wanted:
        sentences = ner_data.read_conll(split_file(config.data_dir, split))
        self.splits[split] = (sentences, ner_data.tag_ids(sentences, self.labels))
    if len(self.labels) < 2:
      raise ValueError(f"the train file has only the tag {self.labels}; NER "
                       "needs at least two.")

  def _labels(self):
    """The training file's tags, or a previous run's label_list.json."""
    saved = os.path.join(self.config.output_dir, "label_list.json")
    if os.path.exists(saved) and not self.config.do_train:
      with open(saved, encoding="utf-8") as f:
        return json.load(f)
    try:
      train = split_file(self.config.data_dir, "train")
    except ValueError:
      raise ValueError(f"--task_data_dir {self.config.data_dir} has no train "
                       f"file and {saved} does not exist: the tags are "
                       "unknown; run --do_train first or add the train "
                       "file") from None
    return ner_data.label_list(ner_data.read_conll(train))

  def encode(self, tokenizer, max_seq_length):
    """Packs each split's words into windows (ner_data.encode)."""
    self.tokenizer = tokenizer
    for split, (sentences, ids) in self.splits.items():
      self.encoded[split] = (sentences,) + ner_data.encode(
          sentences, tokenizer, max_seq_length, ids)

  @property
  def num_train_examples(self):
    """Windows, not sentences: the steps count batches of windows."""
    return len(self.encoded["train"][4]) if "train" in self.encoded else 0

  def run_files(self):
    return {"label_list.json": json.dumps(self.labels) + "\n"}

  def log_start(self, run_description):
    """The tags, the splits and the first window decoded, for the log."""
    print(f"NER: tags {self.labels}, "
          + ", ".join(f"{split} {len(e[0])} sentences in {len(e[4])} windows"
                      for split, e in self.encoded.items())
          + f"; {run_description}", flush=True)
    for split, (sentences, inputs, _, _, window_labels) in list(
        self.encoded.items())[:1]:
      n = int(inputs["input_mask"][0].sum())
      print(f"{split} window 0 ({sentences[0].where}): " + " ".join(
          token + (f"/{self.labels[label]}" if label >= 0 else "")
          for token, label in zip(self.tokenizer.convert_ids_to_tokens(
              inputs["input_word_ids"][0][:n]), window_labels[0][:n])),
            flush=True)

  # ------------------------------------------------- model and losses ----
  def build_model(self, bert_config, kernels):
    """The loss never reaches the pooler: it gets no gradient and stays as
    loaded (train_step.py skips it, as the original's optimizer skips
    variables without a gradient), and is saved and exported with the
    rest."""
    from official_bert.modeling import finetuning_models  # pylint: disable=g-import-not-at-top
    return finetuning_models.BertTokenClassifier.from_bert_config(
        bert_config, len(self.labels), kernels=kernels)

  def losses(self, labels, logits):
    return token_losses(labels, logits)

  def metric_counts(self, labels, logits):
    return token_metric_counts(labels, logits)

  def teacher_outputs(self, predict):
    """The teacher's per-token logits [N, T, C] over the training rows."""
    return predict(self.train_data()[0])

  def distill_losses(self, labels, teacher, logits, temperature, labelled):
    """Per token, masked like the label loss (the positions with a tag):
    the cross-entropy to the labels, and T^2 KL to the teacher's softened
    distribution (its logits cut to the batch's length)."""
    import keras  # pylint: disable=g-import-not-at-top
    from keras import ops  # pylint: disable=g-import-not-at-top
    tagged = ops.cast(ops.greater_equal(labels, 0), "float32")      # [B, T]
    label = keras.losses.sparse_categorical_crossentropy(
        ops.maximum(labels, 0), logits, from_logits=True)           # [B, T]
    soft = distillation.soft_cross_entropy(
        distillation.cut_like(teacher, logits), logits, temperature)
    return {"label_loss": distillation.weighted_mean(
                label, tagged * labelled[:, None]),
            "distill_loss": distillation.weighted_mean(soft, tagged)}

  def train_data(self):
    _, inputs, _, _, window_labels = self.encoded["train"]
    return inputs, window_labels

  def prepare_training(self, predict, model, resumed, epoch):
    # The tagged sentences are all it trains on.
    del predict, model, resumed, epoch
    return {}

  def train_order(self, batch_size, seed, num_examples):
    del batch_size, seed, num_examples  # windows train apart: shuffled
    return None

  def in_batch_loss(self):
    """None: each sentence's loss reads its own logits alone."""
    return None

  def init_head(self, model):
    """Nothing: the token head keeps its initializers."""

  def example_inputs(self):
    return {k: v[:1] for k, v in next(iter(self.encoded.values()))[1].items()}

  # ------------------------------------------ evaluation and prediction ----
  def _tags(self, split, predict):
    """(sentences, predicted tags, the words' mean cross-entropy)."""
    sentences, inputs, window, position, window_labels = self.encoded[split]
    logits = predict(inputs)                                   # [R, T, C]
    loss = classifier_metrics.mean_cross_entropy(
        logits[window, position], window_labels[window, position])
    return (sentences, word_tags(logits, window, position, sentences,
                                 self.labels), loss)

  def evaluate(self, predict, step):
    return eval_results(*self._tags("dev", predict), step)

  def eval_summary(self, result):
    return f"entity F1 {result['eval_f1']:.4f}"

  def predict(self, predict, step):
    """({"test_predictions.txt": conlleval's input}, the summary's words)."""
    del step
    sentences, tags, _ = self._tags("test", predict)
    return ({"test_predictions.txt": ner_data.format_predictions(sentences, tags)},
            f"{len(sentences)} test sentences tagged", None)

  def tune(self, predict):
    del predict  # nothing to choose on dev: a word's likeliest tag is its tag
    return {}

  # ----------------------------------------------------------- export ----
  def export_spec(self):
    """The tags: export/ner_serving.py's outputs are the words, their tags
    and character offsets."""
    return task_lib.ExportSpec(labels=tuple(self.labels))
