"""Score propagation over graphs: Personalized PageRank (power iteration and push) and GraphER's
Graph Cohesive Smoothing.

Graphs are sparse adjacency matrices ``A`` (``A[i, j] > 0``: an edge i -> j). Both papers write the
update as ``p <- alpha s + (1 - alpha) W p`` with ``alpha`` the weight of the seeds (the restart
probability): SPRIG's ``P^T`` with ``P`` row-stochastic and GraphER's column-normalised ``W`` are the
same matrix, ``A^T D_out^-1``, under which score flows out of a node along its edges. GCS instead
row-normalises, so a node takes the weighted mean of its neighbours' scores.

A :class:`Walk` holds the normalised matrices of one graph so a query pays only for the
propagation. On an undirected graph (SPRIG's entity-passage graph) PPR is also a symmetric positive
definite linear system, which conjugate gradients solve in a few dozen products where power
iteration needs hundreds for the same accuracy (:func:`ppr_cg`). The vector code takes an array module ``xp`` (numpy, or cupy with cupyx sparse
matrices) so one path serves CPU and GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class Walk:
    """A graph prepared for propagation: row-stochastic ``P`` (push), ``P^T`` (power) and dangling nodes."""

    transition: sp.csr_matrix  # P[i, j] = A[i, j] / sum_k A[i, k]
    flow: sp.csr_matrix  # P^T: (flow @ p)[j] is the score arriving at j
    dangling: np.ndarray  # bool, nodes without out-edges (their mass returns to the seeds)
    out_edges: np.ndarray  # edge count per node, push's threshold scale
    # undirected graphs only: D^-1/2 A D^-1/2 and sqrt(D), for ppr_cg
    symmetric: sp.csr_matrix | None = None
    sqrt_degree: np.ndarray | None = None
    # bipartite ones (rows < split only link to rows >= split): the off-diagonal block B and B^T
    bipartite: tuple[sp.csr_matrix, sp.csr_matrix] | None = None

    @classmethod
    def from_adjacency(cls, adjacency: sp.spmatrix, split: int | None = None) -> Walk:
        """``split``: the first side's size if the graph may be bipartite (passages, then entities)."""
        adjacency = sp.csr_matrix(adjacency, dtype=np.float64)
        weights = np.asarray(adjacency.sum(axis=1)).ravel()
        inverse = np.divide(1.0, weights, out=np.zeros_like(weights), where=weights > 0)
        transition = _scale_rows(adjacency, inverse)
        symmetric = sqrt_degree = None
        asymmetry = adjacency - adjacency.T
        if asymmetry.nnz == 0 or abs(asymmetry).max() <= 1e-12 * abs(adjacency).max():
            sqrt_degree = np.sqrt(weights)
            half = np.sqrt(inverse)
            symmetric = _scale_rows(adjacency, half)
            symmetric.data *= half[symmetric.indices]
        bipartite = None
        if symmetric is not None and split is not None and symmetric[:split, :split].nnz == 0 and symmetric[split:, split:].nnz == 0:
            block = symmetric[:split, split:].tocsr()
            bipartite = (block, block.T.tocsr())
        return cls(transition, transition.T.tocsr(), weights <= 0, np.diff(adjacency.indptr), symmetric, sqrt_degree, bipartite)

    @property
    def size(self) -> int:
        return self.transition.shape[0]


def _distribution(seeds, xp: ModuleType = np):
    """The seeds scaled to a distribution (each column, for a batch of seed vectors)."""
    seeds = xp.asarray(seeds, dtype=xp.float64)
    total = seeds.sum(axis=0)
    if not (total > 0).all():
        raise ValueError("seed scores must have positive mass")
    return seeds / total


def ppr_power(walk: Walk, seeds, alpha: float = 0.15, tol: float = 1e-8, max_iter: int = 100, xp: ModuleType = np) -> tuple[np.ndarray, int]:
    """PPR by power iteration, ``p <- alpha s + (1 - alpha) (P^T p + dangling mass * s)``, from ``p = s``.

    ``seeds`` is one seed vector, or a batch of them as the columns of an ``(nodes, queries)`` array
    (one sparse product a step for the whole batch). Stops after ``max_iter`` iterations (SPRIG runs a
    fixed 5) or once the L1 change (the largest of the batch's) is below ``tol``; returns the scores,
    each column a distribution, and the iterations run.
    """
    s = _distribution(seeds, xp)
    dangling = xp.flatnonzero(xp.asarray(walk.dangling))  # an index array sums faster than a mask
    restart = alpha * s
    p = s.copy()
    for iteration in range(1, max_iter + 1):
        updated = restart + (1 - alpha) * (walk.flow @ p + p[dangling].sum(axis=0) * s)
        change = float(xp.abs(updated - p).sum(axis=0).max())
        p = updated
        if change < tol:
            return p, iteration
    return p, max_iter


def ppr_cg(walk: Walk, seeds, alpha: float = 0.15, rtol: float = 1e-6, max_iter: int = 1000) -> tuple[np.ndarray, int]:
    """PPR on an undirected graph by conjugate gradients; the same fixpoint as :func:`ppr_power`.

    With ``A`` symmetric, ``q = alpha (I - (1 - alpha) A D^-1)^-1 s`` becomes ``q = D^1/2 y`` with
    ``(I - c S) y = alpha D^-1/2 s``, ``c = 1 - alpha``, ``S = D^-1/2 A D^-1/2``: symmetric, with
    eigenvalues in ``[alpha, 2 - alpha]``, so CG needs a fraction of power iteration's products. On
    a bipartite graph (``S = [[0, B], [B^T, 0]]``) the first side's block is solved alone,
    ``(I - c^2 B B^T) y_1 = b_1 + c B b_2`` (eigenvalues in ``[1 - c^2, 1]``: about half the
    iterations, on shorter vectors), then ``y_2 = b_2 + c B^T y_1``. An isolated node keeps
    ``alpha`` times its seed; returning dangling mass to the seeds only rescales ``q``, so
    ``p = q / sum(q)``. Stops at relative residual ``rtol`` of the system solved; returns scores
    and iterations.
    """
    from scipy.sparse.linalg import LinearOperator, cg  # 80 ms of scipy.linalg: imported by the walks that solve

    if walk.symmetric is None or walk.sqrt_degree is None:
        raise ValueError("ppr_cg needs an undirected (symmetric) graph; use ppr_power")
    s = _distribution(seeds)
    connected = walk.sqrt_degree > 0
    inverse = np.divide(1.0, walk.sqrt_degree, out=np.zeros_like(s), where=connected)
    b, decay = alpha * inverse * s, 1 - alpha
    iterations = 0

    def count(_) -> None:
        nonlocal iterations
        iterations += 1

    if walk.bipartite is not None:
        block, transposed = walk.bipartite
        m = block.shape[0]
        system = LinearOperator((m, m), matvec=lambda y: y - decay**2 * (block @ (transposed @ y)), dtype=np.float64)
        first, _ = cg(system, b[:m] + decay * (block @ b[m:]), rtol=rtol, maxiter=max_iter, callback=count)
        y = np.concatenate([first, b[m:] + decay * (transposed @ first)])
    else:
        symmetric = walk.symmetric
        system = LinearOperator(symmetric.shape, matvec=lambda y: y - decay * (symmetric @ y), dtype=np.float64)
        y, _ = cg(system, b, rtol=rtol, maxiter=max_iter, callback=count)
    q = np.where(connected, walk.sqrt_degree * y, alpha * s)
    return q / q.sum(), iterations


def ppr_push(walk: Walk, seeds, alpha: float = 0.15, epsilon: float = 1e-6, max_rounds: int = 10_000) -> np.ndarray:
    """PPR by push (Andersen, Chung and Lang 2006), every over-threshold node at once per round.

    A node pushes while its residual exceeds ``epsilon`` times its edge count: it keeps ``alpha``
    of the residual and passes the rest along its out-edges (back to the seeds from a dangling
    node). Work follows the seeds' neighbourhood instead of the whole graph; each node's score is
    within ``epsilon`` per edge of the power-iteration fixpoint. Synchronous rounds make each round
    one sparse product, which is what keeps it fast in numpy.
    """
    s = _distribution(seeds)
    threshold = epsilon * np.maximum(walk.out_edges, 1)
    p = np.zeros_like(s)
    residual = s.copy()
    for _ in range(max_rounds):
        frontier = np.flatnonzero(residual > threshold)
        if len(frontier) == 0:
            break
        mass = residual[frontier]
        residual[frontier] = 0.0
        p[frontier] += alpha * mass
        passed = (1 - alpha) * mass
        residual += walk.transition[frontier].T @ passed
        stranded = passed[walk.dangling[frontier]].sum()
        if stranded:
            residual += stranded * s
    return p


def gcs(adjacency: sp.spmatrix, seeds, alpha: float = 0.5, tol: float = 1e-6, max_iter: int = 1000, xp: ModuleType = np) -> tuple[np.ndarray, int]:
    """Graph Cohesive Smoothing (GraphER, Algorithm 1): p <- alpha s + (1 - alpha) W p with W row-normalised,
    until the L1 change is below ``tol``; returns max(p, s) and the iterations.

    Row normalisation makes a node's new score the weighted mean of its neighbours' (a hub cannot
    accumulate score the way PPR lets it), and the final max keeps every node at least at its seed score.
    """
    s = xp.asarray(seeds, dtype=xp.float64)
    degrees = xp.asarray(adjacency.sum(axis=1)).ravel()
    inverse = xp.where(degrees > 0, 1.0 / xp.where(degrees > 0, degrees, 1.0), 0.0)
    average = _scale_rows(adjacency, inverse) if xp is np else adjacency.multiply(inverse[:, None]).tocsr()
    p = s.copy()
    for iteration in range(1, max_iter + 1):
        updated = alpha * s + (1 - alpha) * (average @ p)
        change = float(xp.abs(updated - p).sum())
        p = updated
        if change < tol:
            return xp.maximum(p, s), iteration
    return xp.maximum(p, s), max_iter


def _scale_rows(matrix: sp.spmatrix, factors: np.ndarray) -> sp.csr_matrix:
    """``diag(factors) @ matrix`` by scaling a CSR copy's data in place (a sparse product costs 5x more)."""
    scaled = sp.csr_matrix(matrix, dtype=np.float64, copy=True)
    scaled.data *= np.repeat(factors, np.diff(scaled.indptr))
    return scaled
