"""Reciprocal-rank fusion, defined once (Cormack et al., 2009): a ranked item's term is
``weight / (constant + rank)``, ranks from 1, and an item's fused score the sum of its terms over the
rankings it is in, added in the rankings' order. Every fusion of rankings uses it: the ``rrf`` operator,
the learned fusion's fallback, GRASP's static and dynamic fusion and its grid search, the placement
of a fresh segment's nodes, and the fusion of several corpora's answers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphlake.kernels.results import Ranking

RRF_CONSTANT = 60.0  # the usual constant, Cormack et al.'s


def rrf_term(rank: np.ndarray | int, weight: np.ndarray | float = 1.0, constant: float = RRF_CONSTANT) -> np.ndarray | float:
    """The term a ranking of ``weight`` gives an item at ``rank`` (1 for its first)."""
    return weight / (constant + rank)


def reciprocal_rank(rankings: Sequence[np.ndarray], weights: Sequence[float] | None = None, constant: float = RRF_CONSTANT) -> Ranking:
    """``rankings`` (rows, best first) fused: ``(scores, rows)`` best first, float64, ties to the lower
    row. A ranking of weight 0 contributes nothing, not even its rows."""
    fused: dict[int, float] = {}
    for weight, rows in zip([1.0] * len(rankings) if weights is None else weights, rankings, strict=True):
        if weight == 0:
            continue
        for rank, row in enumerate(np.asarray(rows).tolist(), start=1):
            fused[row] = fused.get(row, 0.0) + rrf_term(rank, weight, constant)
    rows = np.fromiter(fused, np.int64, len(fused))
    scores = np.fromiter(fused.values(), np.float64, len(fused))
    order = np.lexsort((rows, -scores))
    return Ranking(scores[order], rows[order])
