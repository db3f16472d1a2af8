"""How every search kernel is asked and what it answers, one vocabulary from the kernels up (faiss's
``search(x, k, params)`` -> ``(D, I)``): ``search(queries, k, params)`` returns a :class:`Ranking`,
``(scores, rows)``, each of shape ``(queries, k)``, scores float64, best first, ties to the lower row
(BM25's and faiss HNSW's lists keep their library's order of ties).
A query with fewer than ``k`` results has its list filled after its last one with score −inf and row
−1; :func:`unfilled` takes one query's results without the fill, and the layers above keep the
kernel's order (``retrieval/core.py``'s ``Candidates`` is one query's, in the same vocabulary).

``params`` is a :class:`SearchParams`: the rows the search may return (``allowed``, a metadata
filter's), and in a kernel's own subclass its knobs (the hybrid graph's ``HybridParams``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

FILL_ROW = -1
FILL_SCORE = -np.inf


@dataclass(frozen=True)
class Allowed:
    """The node rows a filter allows: a mask over every row, the rows themselves, and their share."""

    mask: np.ndarray  # bool, one per node row
    rows: np.ndarray  # int64, ascending
    key: str  # the filter's canonical form

    @property
    def fraction(self) -> float:
        return len(self.rows) / max(len(self.mask), 1)

    def keep(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` are allowed (a mask over them)."""
        return self.mask[rows]


@dataclass(frozen=True)
class SearchParams:
    """What every search takes beside its queries and ``k``: the rows it may return (None: all)."""

    allowed: Allowed | None = None

    @property
    def mask(self) -> np.ndarray | None:
        return None if self.allowed is None else self.allowed.mask


class Ranking(NamedTuple):
    """What every search kernel answers: ``scores`` (float64) and ``rows`` (int64), each ``(queries, k)``."""

    scores: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, scores: np.ndarray, rows: np.ndarray) -> Ranking:
        """A kernel's own arrays in the vocabulary (a float32 kernel's scores widened: no value changes)."""
        return cls(np.asarray(scores, np.float64), np.asarray(rows, np.int64))


def filled(queries: int, k: int) -> Ranking:
    """``queries`` lists of ``k``, all fill."""
    return Ranking(np.full((queries, k), FILL_SCORE, np.float64), np.full((queries, k), FILL_ROW, np.int64))


def top_k(scores: np.ndarray, k: int, rows: np.ndarray | None = None, positive: bool = False) -> Ranking:
    """Per query (a row of ``scores``: a score per node of ``rows``, every node row without), its ``k``
    best, in the vocabulary above; ``positive``: only rows scoring above 0 (a sparse path's: a node
    sharing no term with the query is no result)."""
    found_scores, found_rows = filled(len(scores), k)
    for i, values in enumerate(scores):
        candidates = np.arange(len(values)) if rows is None else rows
        if positive:
            kept = values > 0
            candidates, values = candidates[kept], values[kept]
        order = best_of(values, candidates, k)
        found_scores[i, : len(order)], found_rows[i, : len(order)] = values[order], candidates[order]
    return Ranking(found_scores, found_rows)


def best_of(scores: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` best ``scores``, best first, ties to the lower of ``rows``: every tie of
    the k-th score is kept before the sort, so that ``argpartition``'s pick among them decides nothing."""
    k = min(k, len(scores))
    if k == 0:
        return np.zeros(0, np.int64)
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]
    tied = np.flatnonzero(scores >= kth)
    return tied[np.lexsort((rows[tied], -scores[tied]))][:k]


def allowed_scores(scores: np.ndarray, params: SearchParams) -> tuple[np.ndarray, np.ndarray | None]:
    """``scores`` (a row per query, a column per node row) cut to the rows ``params`` allows, and those
    rows (None: every row), as :func:`top_k` takes them."""
    if params.allowed is None:
        return scores, None
    return scores[:, params.allowed.rows], params.allowed.rows


def unfilled(scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One query's ``(scores, rows)`` without the fill."""
    kept = rows != FILL_ROW
    return scores[kept], rows[kept]
