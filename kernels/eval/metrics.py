"""Ranking metrics, per query, with the papers' definitions.

A ranking is a list of document ids, best first; gold maps document id -> graded relevance, and a
document counts as relevant when its relevance is > 0. Definitions:

* ``recall@k`` (HippoRAG, SPRIG): |top-k ∩ relevant| / |relevant|;
* ``capped_recall@k`` (BEIR): |top-k ∩ relevant| / min(k, |relevant|);
* ``ndcg@k``: trec_eval's ``ndcg_cut`` (linear gain = relevance, log2(rank + 1) discount, ideal
  ranking over every judged relevant document), as BEIR and FastInsight report it;
* ``hit@k``: 1 if any relevant document is in the top-k;
* ``mrr``: 1 / rank of the first relevant document (0 if none), over the whole ranking;
* ``pr@k`` (GraphER): 1 only if every relevant document is in the top-k.

Queries without any relevant document have no defined value and are left out by :func:`evaluate`,
as trec_eval leaves out queries absent from the qrels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

Ranking = Sequence[str]
Gold = Mapping[str, int]

METRICS_AT_K = ("recall", "capped_recall", "ndcg", "hit", "pr")
GRAPH_METRICS = ("tr", "misstr")  # need the corpus graph: Topological Recall, computed by kernels.topological_recall


def _relevant(gold: Gold) -> set[str]:
    return {doc for doc, relevance in gold.items() if relevance > 0}


def recall_at_k(ranking: Ranking, gold: Gold, k: int) -> float:
    relevant = _relevant(gold)
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def capped_recall_at_k(ranking: Ranking, gold: Gold, k: int) -> float:
    relevant = _relevant(gold)
    return len(relevant.intersection(ranking[:k])) / min(k, len(relevant))


def ndcg_at_k(ranking: Ranking, gold: Gold, k: int) -> float:
    dcg = sum(max(gold.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k]))
    ideal = sorted((r for r in gold.values() if r > 0), reverse=True)[:k]
    idcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
    return dcg / idcg


def hit_at_k(ranking: Ranking, gold: Gold, k: int) -> float:
    return float(bool(_relevant(gold).intersection(ranking[:k])))


def pr_at_k(ranking: Ranking, gold: Gold, k: int) -> float:
    return float(_relevant(gold).issubset(ranking[:k]))


def mrr(ranking: Ranking, gold: Gold) -> float:
    relevant = _relevant(gold)
    return next((1.0 / (rank + 1) for rank, doc in enumerate(ranking) if doc in relevant), 0.0)


def random_ndcg_at_k(gold: Gold, documents: int, k: int) -> float:
    """Expected ``ndcg@k`` of a uniformly random ranking of a corpus of ``documents`` documents that
    holds every gold one: each rank holds each document with probability 1 / documents, so its
    expected gain is the corpus's mean gain. The floor a method must clear to be doing anything."""
    gains = sorted((r for r in gold.values() if r > 0), reverse=True)
    discounts = [1 / math.log2(rank + 2) for rank in range(min(k, documents))]
    ideal = sum(gain * discount for gain, discount in zip(gains, discounts))
    return sum(gains) / documents * sum(discounts) / ideal


_AT_K: dict[str, Callable[[Ranking, Gold, int], float]] = {
    "recall": recall_at_k,
    "capped_recall": capped_recall_at_k,
    "ndcg": ndcg_at_k,
    "hit": hit_at_k,
    "pr": pr_at_k,
}


def parse_metric(name: str) -> tuple[str, int | None]:
    """``"ndcg@10"`` -> ``("ndcg", 10)``; ``"mrr"`` -> ``("mrr", None)``; unknown names are an error."""
    base, _, cutoff = name.lower().partition("@")
    if base == "mrr" and not cutoff:
        return base, None
    if base not in (*_AT_K, *GRAPH_METRICS) or not cutoff.isdigit() or int(cutoff) < 1:
        known = ", ".join(f"{m}@k" for m in (*METRICS_AT_K, *GRAPH_METRICS))
        raise ValueError(f"unknown metric {name!r}; use mrr or one of {known}")
    return base, int(cutoff)


def evaluate(rankings: Mapping[str, Ranking], qrels: Mapping[str, Gold], metrics: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-query values ``{query_id: {metric: value}}`` for every query with relevant gold.

    A judged query missing from ``rankings`` counts as an empty ranking (all zeros).
    """
    parsed = [(name, *parse_metric(name)) for name in metrics]
    values: dict[str, dict[str, float]] = {}
    for query_id, gold in qrels.items():
        if not _relevant(gold):
            continue
        ranking = list(dict.fromkeys(rankings.get(query_id, ())))
        values[query_id] = {name: mrr(ranking, gold) if base == "mrr" else _AT_K[base](ranking, gold, cutoff) for name, base, cutoff in parsed}
    return values


def mean(per_query: Mapping[str, Mapping[str, float]], metric: str) -> float:
    """Average over the evaluated queries (0.0 when there are none)."""
    values = [scores[metric] for scores in per_query.values()]
    return sum(values) / len(values) if values else 0.0


def rank_by_score(scores: Mapping[str, float]) -> list[str]:
    """Order documents by score, best first, breaking ties as trec_eval does (document id, descending)."""
    return sorted(scores, key=lambda doc: (scores[doc], doc), reverse=True)


def bootstrap_interval(values: Sequence[float], samples: int = 10_000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-query values (queries resampled with replacement)."""
    return _interval(_resampled_means(np.asarray(values, dtype=np.float64), samples, seed), confidence)


def _resampled_means(values: np.ndarray, samples: int, seed: int) -> np.ndarray:
    if values.size == 0:
        raise ValueError("need at least one per-query value")
    return values[np.random.default_rng(seed).integers(0, values.size, size=(samples, values.size))].mean(axis=1)


def _interval(means: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired_bootstrap(baseline: Sequence[float], system: Sequence[float], samples: int = 10_000, confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Mean per-query difference ``system - baseline`` with a percentile bootstrap interval.

    Queries are resampled with replacement, keeping each query's pair together (Sakai 2006). The
    p-value is the two-sided share of resampled differences on the other side of zero.
    """
    a, b = np.asarray(baseline, dtype=np.float64), np.asarray(system, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two equally long, non-empty lists of per-query values, got {a.size} and {b.size}")
    differences = b - a
    means = _resampled_means(differences, samples, seed)
    low, high = _interval(means, confidence)
    observed = float(differences.mean())
    other_side = np.mean(means <= 0) if observed > 0 else np.mean(means >= 0)
    return {
        "difference": observed,
        "low": low,
        "high": high,
        "p_value": float(min(1.0, 2 * other_side)),
        "queries": int(differences.size),
    }
