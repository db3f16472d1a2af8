"""GRASP's Stage 2 (§3.2, App. A): the graph branch fused with a partner ranking by reciprocal ranks,
with one weight for every query (static) or a weight from the plan's metadata (dynamic), and the
paper's full grids searched for the best validation Hit@1.

Static: ``w / (k + rank_g) + (1 - w) / (k + rank_m)``. Dynamic: ``w_hat / (k + rank_g) + 1 / (k + rank_m)``
with ``w_hat = w_bucket[bucket(n_cand)] * m_risk[risk_level]``, and ``w_hat = 0`` when the plan is invalid
or found nothing. An input whose weight is 0 is left out, so ``w_hat = 0`` (or ``w = 0``) returns the
partner's ranking exactly, candidates and order.

The grid search is exact and vectorised: every static setting is scored directly; for the dynamic
grid (1,290,240 settings) a query's top-1 depends only on ``k`` and on the one bucket weight and one
risk multiplier its (bucket, risk) cell reads, so each query is fused once per such triple, counts are
summed per cell, and every setting's Hit@1 is a sum of 20 table lookups. The fused top-1 here is
computed with the same arithmetic and tie rule as :func:`fuse`, so the chosen setting scores on the
operator exactly what it scored here.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from graphlake.kernels.fusion import RRF_CONSTANT, reciprocal_rank, rrf_term
from graphlake.kernels.plan.plans import RISK_LEVELS
from graphlake.kernels.results import Ranking

BUCKETS = ((1, 10), (11, 50), (51, 100), (101, 500), (501, None))  # n_cand ranges; 0 candidates: no bucket
STATIC_WEIGHTS = tuple(round(0.05 * i, 2) for i in range(21))
STATIC_CONSTANTS = (1, 2, 5, 10, 20, 40, 60, 80, 100)
DYNAMIC_CONSTANTS = (5, 10, 20, 40, 80, 150, 300)
BUCKET_WEIGHTS = ((1.0, 1.2, 1.4, 1.6, 2.0), (0.8, 1.0, 1.2, 1.4), (0.2, 0.4, 0.6, 0.8), (0.0, 0.05, 0.1), (0.0, 0.05, 0.1))
RISK_MULTIPLIERS = ((0.0, 0.25, 0.5, 0.75), (0.5, 0.75, 1.0, 1.25), (0.75, 1.0, 1.25, 1.5), (1.0, 1.25, 1.5, 2.0))  # no_trade .. aggressive


def bucket(n_cand: int) -> int | None:
    """The n_cand bucket (0..4), None for an empty candidate set."""
    if n_cand <= 0:
        return None
    return next(i for i, (low, high) in enumerate(BUCKETS) if n_cand >= low and (high is None or n_cand <= high))


def cell_name(valid: bool, n_cand: int, risk_level: str) -> str:
    """A query's (bucket, risk) cell as Fig. 2 labels it: bucket 0 for no candidates, ``invalid`` for a failed plan."""
    if not valid:
        return "invalid"
    b = bucket(n_cand)
    return f"{0 if b is None else b + 1}|{risk_level}"


def graph_weight(valid: bool, n_cand: int, risk_level: str, w_bucket: Sequence[float], m_risk: Sequence[float]) -> float:
    """Dynamic RRF's per-query graph weight; 0 for an invalid plan or an empty candidate set."""
    b = bucket(n_cand)
    if not valid or b is None:
        return 0.0
    return w_bucket[b] * m_risk[RISK_LEVELS.index(risk_level)]


def fuse(graph: np.ndarray, partner: np.ndarray, graph_weight: float, partner_weight: float, constant: float) -> Ranking:
    """The fused ranking of two lists of rows, best first (ties: the smaller row); an input of weight 0 contributes nothing."""
    return reciprocal_rank([graph, partner], [graph_weight, partner_weight], constant)


@dataclass
class ValidationQuery:
    """One validation query as the grid search sees it: both rankings (rows), its gold rows and plan metadata."""

    graph: np.ndarray
    partner: np.ndarray
    gold: frozenset[int]
    valid: bool
    n_cand: int
    risk_level: str


class _Pool:
    """One query's union of candidates with both reciprocal-rank terms, to fuse many weights at once."""

    def __init__(self, query: ValidationQuery) -> None:
        rows = np.unique(np.concatenate([query.graph, query.partner]).astype(np.int64))
        self.rows = rows
        self.gold = np.isin(rows, np.fromiter(query.gold, np.int64, len(query.gold)))
        self.graph_rank = _ranks(rows, query.graph)
        self.partner_rank = _ranks(rows, query.partner)

    def top_is_gold(self, graph_weights: np.ndarray, partner_weights: np.ndarray, constant: float) -> np.ndarray:
        """For each (graph, partner) weight pair: is the fused top-1 gold? (``fuse``'s arithmetic and ties)."""
        if len(self.rows) == 0:
            return np.zeros(len(graph_weights), bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            graph_term = rrf_term(self.graph_rank[None, :], graph_weights[:, None], constant)
            partner_term = rrf_term(self.partner_rank[None, :], partner_weights[:, None], constant)
        in_graph = np.isfinite(self.graph_rank)[None, :] & (graph_weights[:, None] != 0)
        in_partner = np.isfinite(self.partner_rank)[None, :] & (partner_weights[:, None] != 0)
        # a candidate's score is the graph term then the partner term added, as fuse() adds them
        scores = np.where(in_graph, graph_term, 0.0)
        scores = np.where(in_partner, np.where(in_graph, scores + partner_term, partner_term), scores)
        present = in_graph | in_partner
        scores = np.where(present, scores, -np.inf)
        best = scores.max(axis=1, keepdims=True)
        first = np.argmax(scores == best, axis=1)  # rows are sorted: the first maximum is the smaller row
        return self.gold[first] & present.any(axis=1)


def _ranks(rows: np.ndarray, ranking: np.ndarray) -> np.ndarray:
    ranks = np.full(len(rows), np.inf)
    ranks[np.searchsorted(rows, ranking.astype(np.int64))] = np.arange(1, len(ranking) + 1)
    return ranks


@dataclass
class FusionChoice:
    """The grid search's outcome: both winners, the chosen mode, and what the report shows."""

    mode: str  # static | dynamic
    static: dict
    dynamic: dict
    static_hits: np.ndarray  # (weights, constants) validation Hit@1 counts
    dynamic_top: list[dict]
    cells: dict[str, int]  # "bucket|risk" -> queries
    queries: int
    settings: dict[str, int]

    def as_json(self) -> dict:
        return {
            "mode": self.mode,
            "static": self.static,
            "dynamic": self.dynamic,
            "static_grid": {"weights": list(STATIC_WEIGHTS), "constants": list(STATIC_CONSTANTS), "hits": self.static_hits.tolist()},
            "dynamic_top": self.dynamic_top,
            "cells": self.cells,
            "queries": self.queries,
            "settings": self.settings,
        }


def search_static(queries: Sequence[ValidationQuery], pools: Sequence[_Pool] | None = None) -> tuple[dict, np.ndarray]:
    """The best static setting by Hit@1 (ties: the earlier weight, then constant) and the whole (weights, constants) grid of hits."""
    hits = np.zeros((len(STATIC_WEIGHTS), len(STATIC_CONSTANTS)), np.int64)
    weights = np.asarray(STATIC_WEIGHTS)
    for pool in pools if pools is not None else [_Pool(q) for q in queries]:
        for j, constant in enumerate(STATIC_CONSTANTS):
            hits[:, j] += pool.top_is_gold(weights, 1.0 - weights, constant)
    i, j = np.unravel_index(np.argmax(hits), hits.shape)
    return {"weight": STATIC_WEIGHTS[i], "constant": STATIC_CONSTANTS[j], "hits": int(hits[i, j])}, hits


def fuse_stage2(graph: np.ndarray, partner: np.ndarray, meta: Mapping, mode: str, setting: Mapping) -> Ranking:
    """Stage 2 for one query: static RRF with ``setting``'s weight and constant, or dynamic RRF with its vectors and the plan's metadata."""
    if mode == "static":
        return fuse(graph, partner, setting["weight"], 1.0 - setting["weight"], setting["constant"])
    valid, n_cand, risk = bool(meta.get("valid", True)), int(meta.get("n_cand", len(graph))), meta.get("risk_level", "normal")
    return fuse(graph, partner, graph_weight(valid, n_cand, risk, setting["w_bucket"], setting["m_risk"]), 1.0, setting["constant"])


def search_grid(queries: Sequence[ValidationQuery]) -> FusionChoice:
    """Every static and dynamic setting of App. A scored by validation Hit@1; the best of each (ties: the
    earlier setting in grid order), and the mode that wins (ties: static)."""
    pools = [_Pool(q) for q in queries]
    n = len(queries)
    static, static_hits = search_static(queries, pools)

    cells: dict[str, int] = {}
    base = 0  # queries the graph cannot touch (invalid or empty): the partner's top-1 decides
    tables = np.zeros((len(DYNAMIC_CONSTANTS), len(BUCKETS), len(RISK_LEVELS), 5, 4), np.int64)
    for query, pool in zip(queries, pools, strict=True):
        b = bucket(query.n_cand) if query.valid else None
        r = RISK_LEVELS.index(query.risk_level)
        cell = cell_name(query.valid, query.n_cand, query.risk_level)
        cells[cell] = cells.get(cell, 0) + 1
        if b is None:
            base += int(pool.top_is_gold(np.zeros(1), np.ones(1), RRF_CONSTANT)[0])
            continue
        products = np.array([wb * mr for wb, mr in itertools.product(BUCKET_WEIGHTS[b], RISK_MULTIPLIERS[r])])
        for c, constant in enumerate(DYNAMIC_CONSTANTS):
            hits = pool.top_is_gold(products, np.ones(len(products)), constant).reshape(len(BUCKET_WEIGHTS[b]), len(RISK_MULTIPLIERS[r]))
            tables[c, b, r, : hits.shape[0], : hits.shape[1]] += hits
    shape = tuple(len(w) for w in BUCKET_WEIGHTS) + tuple(len(m) for m in RISK_MULTIPLIERS)
    totals = np.zeros((len(DYNAMIC_CONSTANTS), *shape), np.int64)
    for c in range(len(DYNAMIC_CONSTANTS)):
        total = np.full(shape, base, np.int64)
        for b, r in itertools.product(range(len(BUCKETS)), range(len(RISK_LEVELS))):
            view = [1] * len(shape)
            view[b], view[len(BUCKETS) + r] = shape[b], shape[len(BUCKETS) + r]
            total = total + tables[c, b, r, : shape[b], : shape[len(BUCKETS) + r]].reshape(view)
        totals[c] = total
    flat = totals.reshape(-1)
    best = int(np.argmax(flat))
    top = np.argsort(-flat, kind="stable")[:10]
    dynamic = _dynamic_setting(np.unravel_index(best, totals.shape)) | {"hits": int(flat[best])}
    mode = "dynamic" if dynamic["hits"] > static["hits"] else "static"
    return FusionChoice(
        mode,
        static,
        dynamic,
        static_hits,
        [_dynamic_setting(np.unravel_index(int(t), totals.shape)) | {"hits": int(flat[t])} for t in top],
        dict(sorted(cells.items())),
        n,
        {"static": static_hits.size, "dynamic": int(flat.size)},
    )


def _dynamic_setting(index: tuple) -> dict:
    c, *rest = (int(i) for i in index)
    picks = rest[: len(BUCKETS)], rest[len(BUCKETS) :]
    return {
        "constant": DYNAMIC_CONSTANTS[c],
        "w_bucket": [BUCKET_WEIGHTS[b][i] for b, i in enumerate(picks[0])],
        "m_risk": [RISK_MULTIPLIERS[r][i] for r, i in enumerate(picks[1])],
    }
