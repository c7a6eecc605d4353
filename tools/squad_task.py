"""A SQuAD-format task made from the shared Python-docs corpus (rule-labelled).

Contexts are 3 consecutive sentences of one document. A question is one of
its sentences with a span replaced by "what": a dotted name (`os.path`), a
call (`open()`), an ALL_CAPS constant or a number, found once in the
context; the span is the answer. With `impossible_fraction` > 0 (SQuAD v2.0)
that share of the questions is moved to a context of another document and
marked impossible (no answer).

    python -m tools.squad_task --out_dir=/tmp/pydocs_qa

writes train.json (4000 questions of documents 0-399) and dev.json (1000 of
documents 400-469), and
prints the sentence-overlap baseline's dev EM/F1 (the whole sentence that
shares the most words with the question; "" for v2.0 when no sentence
shares half of the question's words) and, for v1.1, the missing-words
baseline (that sentence's words the question lacks).
"""

import argparse
import json
import os
import random
import re

from official_bert.tasks.squad import squad_metrics
from tools import corpus

_SPAN = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?"  # os.path(.join())
    r"|[A-Za-z_]\w*\(\)"                                      # open()
    r"|[A-Z][A-Z0-9]*_[A-Z0-9_]+"                             # SEEK_SET
    r"|\d+(?:\.\d+)*)(?![\w(])")                              # 3.11, 42


def _questions(context, sentence_starts, sentences, rng, prefix):
  out = []
  for i, sentence in enumerate(sentences):
    matches = [m for m in _SPAN.finditer(sentence)
               if context.count(m.group()) == 1 and len(sentence.split()) >= 5]
    if not matches:
      continue
    m = rng.choice(matches)
    question = (sentence[:m.start()] + "what" + sentence[m.end():]).rstrip(". ")
    out.append({"id": f"{prefix}_{i}", "question": question + "?",
                "answers": [{"text": m.group(),
                             "answer_start": sentence_starts[i] + m.start()}],
                "is_impossible": False})
  return out


def make_split(docs, rng, impossible_fraction=0.0, max_questions=None):
  """SQuAD `data` list: one article per document."""
  articles, all_qas = [], []
  for d, doc in enumerate(docs):
    paragraphs = []
    for p in range(0, len(doc) - 2, 3):
      sentences = doc[p:p + 3]
      context = " ".join(sentences)
      starts = [sum(len(s) + 1 for s in sentences[:i]) for i in range(3)]
      qas = _questions(context, starts, sentences, rng, f"d{d}p{p}")
      paragraphs.append({"context": context, "qas": qas})
      all_qas.extend((d, len(paragraphs) - 1, qa) for qa in qas)
    articles.append({"title": f"doc{d}", "paragraphs": paragraphs})
  rng.shuffle(all_qas)
  if max_questions is not None:
    keep = {id(qa) for _, _, qa in all_qas[:max_questions]}
    for article in articles:
      for paragraph in article["paragraphs"]:
        paragraph["qas"] = [qa for qa in paragraph["qas"] if id(qa) in keep]
    all_qas = all_qas[:max_questions]
  # Impossible questions: moved to a paragraph of another document.
  for d, p, qa in all_qas[:int(len(all_qas) * impossible_fraction)]:
    articles[d]["paragraphs"][p]["qas"].remove(qa)
    other = rng.choice([a for a in range(len(articles)) if a != d
                        and articles[a]["paragraphs"]])
    qa.update(answers=[], is_impossible=True, id=qa["id"] + "_x")
    rng.choice(articles[other]["paragraphs"])["qas"].append(qa)
  for article in articles:
    article["paragraphs"] = [p for p in article["paragraphs"] if p["qas"]]
  return [a for a in articles if a["paragraphs"]]


def overlap_baseline(data, version_2=False):
  """Predictions: the context sentence sharing most words with the question."""
  predictions = {}
  for article in data:
    for paragraph in article["paragraphs"]:
      sentences = re.split(r"(?<=[.!?]) ", paragraph["context"])
      for qa in paragraph["qas"]:
        words = set(qa["question"].lower().split())
        scores = [len(words & set(s.lower().split())) for s in sentences]
        best = max(range(len(sentences)), key=lambda i: scores[i])
        answer = sentences[best]
        if version_2 and scores[best] < len(words) / 2:
          answer = ""
        predictions[qa["id"]] = answer
  return predictions


def missing_words_baseline(data):
  """Predictions: the words of the best-overlap sentence (as above) that the
  question lacks, in order (a stronger rule this task invites)."""
  predictions = {}
  for article in data:
    for paragraph in article["paragraphs"]:
      sentences = re.split(r"(?<=[.!?]) ", paragraph["context"])
      for qa in paragraph["qas"]:
        words = set(qa["question"].lower().rstrip("?").split())
        best = max(sentences,
                   key=lambda s: len(words & set(s.lower().split())))
        predictions[qa["id"]] = " ".join(
            w for w in best.split() if w.lower() not in words)
  return predictions


def write_task(out_dir, version_2=False, seed=0, max_train=None, max_dev=None,
               train_docs=range(0, 400), dev_docs=range(400, 470)):
  docs = corpus.documents()
  rng = random.Random(seed)
  fraction = 1 / 3 if version_2 else 0.0
  os.makedirs(out_dir, exist_ok=True)
  splits = {"train": make_split([docs[i] for i in train_docs], rng, fraction,
                                max_train),
            "dev": make_split([docs[i] for i in dev_docs], rng, fraction,
                              max_dev)}
  for name, data in splits.items():
    with open(os.path.join(out_dir, f"{name}.json"), "w",
              encoding="utf-8") as f:
      json.dump({"version": "v2.0" if version_2 else "1.1", "data": data}, f)
  return splits


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out_dir", required=True)
  parser.add_argument("--version_2_with_negative", action="store_true")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--max_train", type=int, default=4000)
  parser.add_argument("--max_dev", type=int, default=1000)
  args = parser.parse_args()
  splits = write_task(args.out_dir, args.version_2_with_negative, args.seed,
                      args.max_train, args.max_dev)
  for name, data in splits.items():
    print(f"{name}: {sum(1 for _ in squad_metrics.questions(data))} questions")
  baseline = overlap_baseline(splits["dev"], args.version_2_with_negative)
  if args.version_2_with_negative:
    result = squad_metrics.evaluate_v2(splits["dev"], baseline)
  else:
    result = squad_metrics.evaluate_v1(splits["dev"], baseline)
  print("sentence-overlap baseline on dev: " + json.dumps(result))
  if not args.version_2_with_negative:
    missing = squad_metrics.evaluate_v1(splits["dev"],
                                        missing_words_baseline(splits["dev"]))
    print("missing-words baseline on dev: " + json.dumps(missing))


if __name__ == "__main__":
  main()
