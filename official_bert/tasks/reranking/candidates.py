"""Candidates for the reranker: a retriever's ranking, mined negatives, and
the ranking metrics (numpy).

A bi-encoder (the retriever, retriever.py) embeds each query and every
passage; `rank` orders the passages by cosine. Two things are taken from
that order:

  * dev: each query's top `rerank_top_k` passages, which the cross-encoder
    reorders (`top_candidates`);
  * training: each query's hard negatives, as sentence-transformers'
    reranker guide mines them (`util.mine_hard_negatives(num_negatives=5,
    range_min=10, range_max=100, max_score=0.8, relative_margin=0.05,
    sampling_strategy="top")`): the query's positives and its own text are
    taken out of its ranking, the first `range_min` passages left are
    skipped (likely unlabelled answers), and of the next ones up to rank
    `range_max` those scoring at most `max_score` and at most
    `p - |p| * margin` (p: the query's lowest positive score) are kept, the
    best `num_negatives` of them (`mine`). A query with fewer keeps what it
    has (sentence-transformers' "labeled-pair" output, what its
    BinaryCrossEntropyLoss reads).

`fused` combines the two orders of a query's candidates, the retriever's
(the candidates' own order) and the reranker's (its scores), by reciprocal
rank fusion (Cormack et al., 2009: each candidate scores the sum of
1 / (k + rank) over the orders, k = 60 as published, ranks from 1): the
reranker's judgement where it is sure, the retriever's where it is not.
On a task where the cross-encoder alone reranks below its retriever, the
fused order can still rank above both (docs/search.md).

`ranking_metrics` computes MRR@10 and nDCG@10 of any order (the retriever's,
or the reranker's scores) against each query's positives; a positive that
is not among a query's candidates counts as missed (as sentence-
transformers' CrossEncoderRerankingEvaluator with
`always_rerank_positives=False`).

Shapes: Q queries, P passages (the corpus), H hidden size.
"""

import numpy as np

NUM_NEGATIVES = 5  # sentence-transformers' reranker guide
RANK_RANGE = (10, 100)
MAX_SCORE = 0.8
MARGIN = 0.05


def _unit(x):
  x = np.asarray(x, np.float32)
  return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def cosine(queries, passages):
  """[Q, P] cosine similarities of float [Q, H] and [P, H] vectors."""
  return _unit(queries) @ _unit(passages).T


def rank(scores):
  """[Q, P] passage indices, best first (ties by passage index)."""
  return np.argsort(-scores, axis=1, kind="stable")


def top_candidates(scores, k):
  """Each query's `k` best passages (a list of Q int arrays, best first)."""
  return [row[:k] for row in rank(scores)]


def mine(scores, positives, own_text, num_negatives=NUM_NEGATIVES,
         rank_range=RANK_RANGE, max_score=MAX_SCORE, margin=MARGIN):
  """(negatives, skipped): each query's mined negatives (a list of Q lists
  of passage indices, best first, at most `num_negatives`) and how many
  candidates in the rank range the score limits left out.

  Args:
    scores: float [Q, P], the retriever's scores.
    positives: Q lists of passage indices: each query's positives.
    own_text: int [Q], the passage index of the query's own text, or -1.
    num_negatives, rank_range (first, last: 1-based ranks are first + 1 ..
      last, after the positives are taken out), max_score, margin: see the
      module docstring.
  """
  first, last = rank_range
  negatives, skipped = [], 0
  for i, order in enumerate(rank(scores)):
    taken_out = set(positives[i]) | ({int(own_text[i])} if own_text[i] >= 0
                                     else set())
    p = float(scores[i, positives[i]].min())
    window = [j for j in order if j not in taken_out][first:last]
    limit = min(max_score, p - abs(p) * margin)
    kept = [int(j) for j in window if scores[i, j] <= limit]
    skipped += len(window) - len(kept)
    negatives.append(kept[:num_negatives])
  return negatives, skipped


RRF_K = 60  # reciprocal rank fusion's constant, as published


def fused(scores, k=RRF_K):
  """Reciprocal rank fusion of each query's candidates (a list of Q float
  arrays of the reranker's scores, the candidates in the retriever's order,
  best first): 1 / (k + retriever rank) + 1 / (k + reranker rank), ranks
  from 1, the reranker's ties by the retriever's order. A list of Q float
  arrays, what `reranked` orders."""
  out = []
  for s in scores:
    s = np.asarray(s, np.float64)
    by_reranker = np.empty(len(s))
    by_reranker[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
    out.append(1 / (k + np.arange(1, len(s) + 1)) + 1 / (k + by_reranker))
  return out


def ranking_metrics(orders, relevant, k=10):
  """{"mrr_at_<k>", "ndcg_at_<k>"}: means over the queries.

  Args:
    orders: Q sequences of passage indices, best first (a query's
      candidates in the order judged).
    relevant: Q sets of passage indices (each query's positives; binary
      relevance). A positive outside a query's order counts as missed.
  """
  mrr, ndcg = [], []
  discount = 1.0 / np.log2(np.arange(2, k + 2))                  # [k]
  for order, answers in zip(orders, relevant):
    hits = np.array([j in answers for j in list(order)[:k]], bool)
    found = np.flatnonzero(hits)
    mrr.append(1.0 / (found[0] + 1) if len(found) else 0.0)
    ideal = discount[:min(len(answers), k)].sum()
    ndcg.append(discount[:len(hits)][hits].sum() / ideal if ideal else 0.0)
  return {f"mrr_at_{k}": float(np.mean(mrr)),
          f"ndcg_at_{k}": float(np.mean(ndcg))}


def reranked(candidates, scores):
  """Each query's candidates ordered by `scores` (a list of Q float arrays,
  one per candidate), best first; ties keep the candidates' order."""
  return [np.asarray(c)[np.argsort(-np.asarray(s), kind="stable")]
          for c, s in zip(candidates, scores)]
