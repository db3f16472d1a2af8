"""Budgeted reranking over a corpus graph: FastInsight (GRanker + STeX) and GAR.

Both spend at most ``budget`` cross-encoder evaluations per query and grow the scored set in batches;
they differ in how they choose the next batch and how they score. The cross-encoder is a
:class:`PairScorer`: ``features`` gives each (query, node) pair's [CLS] vector (cached by the
caller) and ``head`` maps vectors to scores, so GRanker can smooth the vectors between the two.

Graph arguments are a corpus-wide undirected CSR adjacency (rows = node rows) and its degrees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from threadpoolctl import ThreadpoolController

_THREADS = ThreadpoolController()  # the BLAS that NumPy loaded


@dataclass(frozen=True)
class PairScorer:
    """A cross-encoder split at its [CLS] vector: ``features(rows) -> (n, d)``, ``head((n, d)) -> (n,)``."""

    features: Callable[[np.ndarray], np.ndarray]
    head: Callable[[np.ndarray], np.ndarray]

    def scores(self, rows: np.ndarray) -> np.ndarray:
        return self.head(self.features(rows))


def granker_smooth(features: np.ndarray, adjacency: sp.spmatrix, degrees: np.ndarray, alpha: float) -> np.ndarray:
    """GRanker's latent fusion (Algorithm 2, lines 2-6): ``H' = (1 - alpha) H + alpha P H``.

    ``adjacency`` is the subgraph among the retrieved nodes (each stored entry one edge, none
    repeated), ``degrees`` their degrees in the whole corpus graph. ``W = A D^-1`` weighs each
    neighbour by the reciprocal of its corpus degree, so a hub speaks softly; ``P`` row-normalises ``W``. A node with no
    retrieved neighbour has no row to normalise and keeps its own vector (as if ``P`` had a
    self-loop there), rather than shrinking it. ``P`` is built from the CSR arrays in one go: the
    sparse algebra it replaces cost more than the product.
    """
    a = sp.csr_matrix(adjacency)
    w = 1.0 / np.maximum(np.asarray(degrees, dtype=np.float64), 1.0)[a.indices]
    owner = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    row_sums = np.bincount(owner, weights=w, minlength=a.shape[0])
    isolated = row_sums == 0
    p = sp.csr_matrix((w / row_sums[owner], a.indices, a.indptr), shape=a.shape)
    propagated = p @ features
    propagated[isolated] = features[isolated]
    return (1.0 - alpha) * features + alpha * propagated


def _links(graph: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(i, neighbour)`` for every edge of ``rows[i]``, read straight from the CSR arrays: slicing a
    scipy matrix each batch cost FastInsight more than all its arithmetic."""
    starts = graph.indptr[rows]
    counts = graph.indptr[rows + 1] - starts
    owner = np.repeat(np.arange(len(rows)), counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(starts, counts)
    return owner, graph.indices[offsets]


def stex(
    similarity: np.ndarray,
    graph: sp.csr_matrix,
    degrees: np.ndarray,
    retrieved: np.ndarray,
    beta: float,
) -> tuple[np.ndarray, np.ndarray]:
    """STeX (Algorithm 3): unretrieved neighbours of ``retrieved`` (best first), ordered by their score.

    ``S = I_Sim + beta * I_Struct`` with ``I_Sim = similarity[n]`` (``q . v_n`` for every node, computed
    once per query by the caller); ``I_Struct`` adds rank proximity (``1 - (r_best - 1) / (R - 1)``,
    ``r_best`` the best 1-based rank among the node's retrieved neighbours) and a bridging factor
    (``(|A(n)| - 1) / (C - 1)``, ``C = min(deg(n), R)``), each only where its denominator is positive.
    Returns (rows, scores), best first, ties by row.
    """
    retrieved = np.asarray(retrieved, dtype=np.int64)
    r_max = len(retrieved)
    owner, neighbours = _links(graph, retrieved)  # owner i: the i-th retrieved node (rank i + 1), ascending
    is_retrieved = np.zeros(graph.shape[0], dtype=bool)
    is_retrieved[retrieved] = True
    outside = ~is_retrieved[neighbours]
    rank, neighbour = owner[outside] + 1, neighbours[outside]
    if neighbour.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    # a stable sort keeps each node's links in rank order, so its first link carries its best rank
    rows, first, adjacent = np.unique(neighbour, return_index=True, return_counts=True)  # |A(n)|: links are unique pairs
    best_rank = rank[first]
    structural = np.zeros(rows.size)
    if r_max > 1:
        structural += 1.0 - (best_rank - 1) / (r_max - 1)
    c_max = np.minimum(np.asarray(degrees)[rows], r_max).astype(np.float64)
    bridging = c_max > 1
    structural[bridging] += (adjacent[bridging] - 1) / (c_max[bridging] - 1)
    scores = np.asarray(similarity, dtype=np.float64)[rows] + beta * structural
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order]


def _subgraph(graph: sp.csr_matrix, rows: np.ndarray) -> sp.csr_matrix:
    """The 0/1 adjacency among ``rows`` (in their order)."""
    position = np.full(graph.shape[0], -1)
    position[rows] = np.arange(len(rows))
    owner, neighbours = _links(graph, rows)
    inside = position[neighbours] >= 0
    indptr = np.concatenate([[0], np.cumsum(np.bincount(owner[inside], minlength=len(rows)))])
    return sp.csr_matrix((np.ones(int(inside.sum())), position[neighbours[inside]], indptr), shape=(len(rows), len(rows)))


@_THREADS.wrap(limits=1, user_api="blas")
def fastinsight(
    query: np.ndarray,
    vectors: np.ndarray,
    graph: sp.csr_matrix,
    degrees: np.ndarray,
    scorer: PairScorer,
    batch: int = 10,
    budget: int = 100,
    alpha: float = 0.2,
    beta: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """FastInsight (Algorithm 1): vector top-``batch``, GRanker, then STeX batches re-ranked until ``budget``.

    When STeX offers fewer than a batch (the retrieved nodes have few unretrieved neighbours), the
    batch is filled with the next nodes by vector similarity, which is STeX's own score for a node
    without structural support; without it the loop could stall below the budget.
    Its vector products run on one BLAS thread: idle BLAS threads spin, and they slowed the
    cross-encoder's tokenizer between them by 3-4x on a 16-core machine (FastInsight's mean on 2Wiki
    went from 221 to 138 ms per query, benchmarks/results/gpu_qpt.md).
    Returns (rows, GRanker scores) of every retrieved node, best first.
    """
    similarity = np.asarray(vectors @ query, dtype=np.float64)
    budget = min(budget, len(similarity))
    retrieved = _best(similarity, batch)
    features = scorer.features(retrieved)
    retrieved, features, scores = _granker(retrieved, features, graph, degrees, scorer, alpha)
    while len(retrieved) < budget:
        room = min(len(retrieved) + batch, budget) - len(retrieved)
        added, _ = stex(similarity, graph, degrees, retrieved, beta)
        added = added[:room]
        if len(added) < room:
            unseen = np.ones(len(similarity), dtype=bool)
            unseen[retrieved] = unseen[added] = False
            candidates = np.flatnonzero(unseen)
            added = np.concatenate([added, candidates[_best(similarity[candidates], room - len(added))]])
        retrieved = np.concatenate([retrieved, added])
        features = np.vstack([features, scorer.features(added)])
        retrieved, features, scores = _granker(retrieved, features, graph, degrees, scorer, alpha)
    return retrieved, scores


def _best(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``values``, best first, ties by position; a partition, not a sort
    of the corpus, since only a batch is wanted."""
    if k < len(values):
        kth = np.partition(values, len(values) - k)[len(values) - k]
        positions = np.flatnonzero(values >= kth)
    else:
        positions = np.arange(len(values))
    return positions[np.lexsort((positions, -values[positions]))][:k]


def _granker(rows, features, graph, degrees, scorer, alpha):
    """GRanker over ``rows``: smoothed features -> head -> rows re-sorted best first (features follow)."""
    scores = np.asarray(scorer.head(granker_smooth(features, _subgraph(graph, rows), degrees[rows], alpha)), dtype=np.float64)
    order = np.lexsort((rows, -scores))
    return rows[order], features[order], scores[order]


def gar(
    initial: np.ndarray,
    graph: sp.csr_matrix,
    scorer: PairScorer,
    batch: int = 10,
    budget: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """GAR (MacAvaney et al., CIKM 2022): alternate batches from the initial ranking and the graph frontier.

    Even iterations take the best unscored nodes of ``initial``; odd ones the best of the frontier,
    the unscored neighbours of scored nodes, each ranked by the best score among the scored nodes
    that reached it. An empty source yields to the other. Scored nodes come first by score, then
    the unscored rest of ``initial`` in its order (GAR's backfill). Returns (rows, scores); backfilled
    nodes get scores below every scored one.
    """
    initial = np.asarray(initial, dtype=np.int64)
    scored: dict[int, float] = {}
    frontier: dict[int, float] = {}
    budget = min(budget, graph.shape[0])
    turn = 0
    while len(scored) < budget:
        room = min(batch, budget - len(scored))
        from_initial = [int(r) for r in initial if r not in scored][:room]
        from_frontier = [r for r, _ in sorted(frontier.items(), key=lambda item: (-item[1], item[0]))][:room]
        take = from_frontier if (turn % 2 and from_frontier) or not from_initial else from_initial
        if not take:
            break
        rows = np.asarray(take, dtype=np.int64)
        for row, value in zip(take, np.asarray(scorer.scores(rows), dtype=np.float64).tolist(), strict=True):
            scored[row] = value
            frontier.pop(row, None)
        for row in take:
            for neighbour in graph.indices[graph.indptr[row] : graph.indptr[row + 1]].tolist():
                if neighbour not in scored:
                    frontier[neighbour] = max(frontier.get(neighbour, -np.inf), scored[row])
        turn += 1
    ordered = sorted(scored, key=lambda row: (-scored[row], row))
    rest = [int(r) for r in initial if int(r) not in scored]
    floor = min(scored.values(), default=0.0)
    rows = np.asarray(ordered + rest, dtype=np.int64)
    scores = np.asarray([scored[r] for r in ordered] + [floor - 1.0 - i for i in range(len(rest))], dtype=np.float64)
    return rows, scores
