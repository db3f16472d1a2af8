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


def granker_smooth(features: np.ndarray, adjacency: np.ndarray | sp.spmatrix, degrees: np.ndarray, alpha: float) -> np.ndarray:
    """GRanker's latent fusion (Algorithm 2, lines 2-6): ``H' = (1 - alpha) H + alpha P H``.

    ``adjacency`` is the 0/1 subgraph among the retrieved nodes, ``degrees`` their degrees in the
    whole corpus graph. ``W = A D^-1`` weighs each neighbour by the reciprocal of its corpus degree,
    so a hub speaks softly; ``P`` row-normalises ``W``. A node with no retrieved neighbour has no row
    to normalise and keeps its own vector (as if ``P`` had a self-loop there), rather than shrinking
    it. The subgraph is held dense: it spans at most the budget's nodes (100), where a dense product
    costs less than building a sparse matrix.
    """
    a = adjacency.toarray() if sp.issparse(adjacency) else np.asarray(adjacency, dtype=np.float64)
    w = a / np.maximum(np.asarray(degrees, dtype=np.float64), 1.0)
    row_sums = w.sum(axis=1)
    isolated = row_sums == 0
    propagated = (w / np.where(isolated, 1.0, row_sums)[:, None]) @ features
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
    owner, neighbours = _links(graph, retrieved)  # owner i: the i-th retrieved node, rank i + 1
    is_retrieved = np.zeros(graph.shape[0], dtype=bool)
    is_retrieved[retrieved] = True
    outside = ~is_retrieved[neighbours]
    return _stex_scores(similarity, degrees, len(retrieved), owner[outside] + 1, neighbours[outside], beta)


def _stex_scores(similarity: np.ndarray, degrees: np.ndarray, r_max: int, rank: np.ndarray, neighbour: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """STeX's scores from its links: ``rank`` of a retrieved node (1..``r_max``) and an unretrieved ``neighbour`` of it."""
    if neighbour.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    # one sort of (neighbour, rank) keys groups each node's links with its best rank first
    span = r_max + 1
    neighbour, rank = np.divmod(np.sort(neighbour * span + rank), span)
    first = np.flatnonzero(np.concatenate([[True], neighbour[1:] != neighbour[:-1]]))
    rows, best_rank = neighbour[first], rank[first]
    adjacent = np.diff(np.append(first, neighbour.size))  # |A(n)|: links are unique pairs
    structural = np.zeros(rows.size)
    if r_max > 1:
        structural += 1.0 - (best_rank - 1) / (r_max - 1)
    c_max = np.minimum(np.asarray(degrees)[rows], r_max).astype(np.float64)
    bridging = c_max > 1
    structural[bridging] += (adjacent[bridging] - 1) / (c_max[bridging] - 1)
    scores = np.asarray(similarity, dtype=np.float64)[rows] + beta * structural
    order = np.argsort(-scores, kind="stable")  # rows ascend, so ties stay by row
    return rows[order], scores[order]


class _Retrieved:
    """FastInsight's retrieved nodes in the order they were added, with what each round reuses.

    GRanker needs the subgraph among them and STeX the links from them to nodes not yet retrieved.
    Both are kept and grown with each batch, so a round reads the graph only for the nodes it adds,
    where rebuilding them cost FastInsight two reads of every retrieved node's links per round.
    """

    def __init__(self, graph: sp.csr_matrix, degrees: np.ndarray, budget: int) -> None:
        self.graph, self.degrees = graph, np.asarray(degrees)
        self.position = np.full(graph.shape[0], -1)  # order of addition, -1 if not retrieved
        self.rows = np.zeros(0, np.int64)
        self.features = np.zeros((0, 0))
        self.adjacency = np.zeros((budget, budget))
        self.owner = np.zeros(0, np.int64)  # links to unretrieved nodes: position of the retrieved end
        self.neighbour = np.zeros(0, np.int64)
        self.rank = np.zeros(0, np.int64)  # 1-based rank by the last GRanker scores, per position

    def add(self, rows: np.ndarray, features: np.ndarray) -> None:
        start = len(self.rows)
        self.position[rows] = np.arange(start, start + len(rows))
        self.rows = np.concatenate([self.rows, rows])
        self.features = features if start == 0 else np.vstack([self.features, features])
        owner, neighbour = _links(self.graph, rows)
        owner += start
        inside = self.position[neighbour]
        linked = inside >= 0
        self.adjacency[owner[linked], inside[linked]] = self.adjacency[inside[linked], owner[linked]] = 1.0
        kept = self.position[self.neighbour] < 0
        self.owner = np.concatenate([self.owner[kept], owner[~linked]])
        self.neighbour = np.concatenate([self.neighbour[kept], neighbour[~linked]])

    def granker(self, head: Callable[[np.ndarray], np.ndarray], alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """GRanker (Algorithm 2) over the retrieved nodes: (positions best first, their scores)."""
        n = len(self.rows)
        smoothed = granker_smooth(self.features, self.adjacency[:n, :n], self.degrees[self.rows], alpha)
        scores = np.asarray(head(smoothed), dtype=np.float64)
        order = np.lexsort((self.rows, -scores))
        self.rank = np.empty(n, np.int64)
        self.rank[order] = np.arange(1, n + 1)
        return order, scores[order]

    def stex(self, similarity: np.ndarray, beta: float) -> np.ndarray:
        """STeX's candidates by the last GRanker ranking, best first."""
        rows, _ = _stex_scores(similarity, self.degrees, len(self.rows), self.rank[self.owner], self.neighbour, beta)
        return rows


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
    retrieved = _Retrieved(graph, degrees, budget)
    added = _best(similarity, min(batch, budget))
    while True:
        retrieved.add(added, scorer.features(added))
        order, scores = retrieved.granker(scorer.head, alpha)
        if len(retrieved.rows) >= budget:
            return retrieved.rows[order], scores
        room = min(batch, budget - len(retrieved.rows))
        added = retrieved.stex(similarity, beta)[:room]
        if len(added) < room:
            unseen = retrieved.position < 0
            unseen[added] = False
            candidates = np.flatnonzero(unseen)
            added = np.concatenate([added, candidates[_best(similarity[candidates], room - len(added))]])


def _best(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``values``, best first, ties by position; a partition, not a sort
    of the corpus, since only a batch is wanted."""
    if k < len(values):
        kth = np.partition(values, len(values) - k)[len(values) - k]
        positions = np.flatnonzero(values >= kth)
    else:
        positions = np.arange(len(values))
    return positions[np.lexsort((positions, -values[positions]))][:k]


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
