"""A hit's ``relevance``: its method's raw score mapped to the chance that a hit so scored is relevant,
fitted per method and corpus on the method's stored run over the corpus's judged queries (isotonic
regression of "the node's document is in the query's gold" on the score). A corpus with none (one the
application writes) borrows the fit of another corpus of the lake searched by the same method with the
same dense and sparse models, the one with the most judged queries, and says so in every answer: a
threshold then means there what it means on that corpus. Raw scores live on each
method's own scale (BM25 7.7, dense 0.72, rrf 0.033); relevance is one scale, so one threshold
(``min_relevance``) means the same for every method.

The fit is the pool-adjacent-violators algorithm in numpy, a few lines: scikit-learn's
``IsotonicRegression`` fits the same, but importing it costs a fresh query 0.4 CPU-s."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from graphlake.retrieval.index.tables import numbers
from graphlake.retrieval.queries import gold_by_query

MIN_JUDGED_QUERIES = 10  # fewer, and the fit says more about those queries than about the method
KIND = "isotonic"


@dataclass(frozen=True)
class Calibration:
    """Scores (increasing) and the relevance each maps to; between two, the line through them."""

    scores: np.ndarray
    relevance: np.ndarray
    queries: int
    judged: int  # (query, node) pairs fitted on
    borrowed_from: str | None = None  # the corpus it was fitted on, when not the one searched

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        return np.interp(scores, self.scores, self.relevance)

    def said(self) -> str:
        fitted_on = f"{KIND} on {self.queries} judged queries ({self.judged:,} ranked nodes of the stored run)"
        if self.borrowed_from is None:
            return fitted_on
        return f"borrowed from corpus {self.borrowed_from!r} (the same method and models; this corpus has no judged queries): {fitted_on} there, so read it as that corpus's odds"


def fitted(runs: pa.Table, queries: pa.Table, qrels: pa.Table) -> Calibration | str:
    """The calibration of a stored run against the gold of its evaluated queries (those of no training
    split: a learned method's scores on what it learned from are optimistic), or why there is none."""
    evaluated = {query for query, split in zip(queries.column("query_id").to_pylist(), queries.column("split").to_pylist(), strict=True) if split != "train"}
    gold = {query: {doc for doc, grade in relevance.items() if grade > 0} for query, relevance in gold_by_query(qrels, positive=False).items() if query in evaluated}
    queries, docs = runs.column("query_id").to_pylist(), runs.column("doc_id").to_pylist()
    judged = [i for i, query in enumerate(queries) if gold.get(query)]
    asked = len({queries[i] for i in judged})
    if asked < MIN_JUDGED_QUERIES:
        return f"{asked} judged queries in its stored run, fewer than {MIN_JUDGED_QUERIES} (`graphlake eval` on a corpus with queries and qrels makes one)"
    scores = numbers(runs.column("score").combine_chunks())[judged]
    labels = np.fromiter((docs[i] in gold[queries[i]] for i in judged), dtype=np.float64, count=len(judged))
    if labels.min() == labels.max():
        return f"its stored run ranks {'only relevant' if labels[0] else 'no relevant'} nodes for its {asked} judged queries"
    order = np.argsort(scores, kind="stable")
    x, y = _isotonic(scores[order], labels[order])
    return Calibration(x, y, asked, len(judged))


def _isotonic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pool adjacent violators over ``y`` ordered by ``x`` (ties pooled first): the non-decreasing step
    function closest to ``y`` in squared error, as (block mean score, block mean label) points."""
    keys, start = np.unique(x, return_index=True)
    counts = np.diff(np.append(start, len(x))).astype(np.float64)
    sums = np.add.reduceat(y, start)
    means, weights, at = [], [], []  # the blocks: label mean, weight, score mean
    for key, total, count in zip(keys, sums, counts, strict=True):
        mean, weight, score = total / count, count, key * count
        while means and means[-1] > mean:
            mean = (means[-1] * weights[-1] + mean * weight) / (weights[-1] + weight)
            score += at.pop() * weights[-1]
            weight += weights.pop()
            means.pop()
        means.append(mean), weights.append(weight), at.append(score / weight)
    return np.asarray(at), np.asarray(means)
