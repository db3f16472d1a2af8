"""Score propagation over graphs: Personalized PageRank (power iteration and push) and GraphER's
Graph Cohesive Smoothing.

Graphs are sparse adjacency matrices ``A`` (``A[i, j] > 0``: an edge i -> j). The vector code takes an
array module ``xp`` (numpy, or cupy with a cupyx sparse matrix) so one path serves CPU and GPU.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import scipy.sparse as sp


def _out_degrees(adjacency: sp.spmatrix, xp: ModuleType = np):
    return xp.asarray(adjacency.sum(axis=1)).ravel()


def _distribution(seeds, xp: ModuleType = np):
    seeds = xp.asarray(seeds, dtype=xp.float64)
    total = seeds.sum()
    if total <= 0:
        raise ValueError("seed scores must have positive mass")
    return seeds / total


def ppr_power(
    adjacency: sp.spmatrix,
    seeds,
    damping: float = 0.85,
    tol: float = 1e-8,
    max_iter: int = 100,
    xp: ModuleType = np,
) -> tuple[np.ndarray, int]:
    """PPR by power iteration: p <- (1 - d) s + d (W p + dangling mass · s), W column-normalised.

    Score flows out of a node to its out-neighbours in proportion to edge weight (the random-walk
    reading PPR papers use); mass stranded on nodes without out-edges returns to the seeds, so p stays
    a distribution. Stops when the L1 change is below ``tol``; returns the scores and the iterations.
    """
    s = _distribution(seeds, xp)
    degrees = _out_degrees(adjacency, xp)
    inverse = xp.where(degrees > 0, 1.0 / xp.where(degrees > 0, degrees, 1.0), 0.0)
    flow = adjacency.T.tocsr()
    p = s.copy()
    for iteration in range(1, max_iter + 1):
        spread = flow @ (p * inverse)
        stranded = p[degrees == 0].sum()
        updated = (1 - damping) * s + damping * (spread + stranded * s)
        change = float(xp.abs(updated - p).sum())
        p = updated
        if change < tol:
            return p, iteration
    return p, max_iter


def ppr_push(adjacency: sp.csr_matrix, seeds: np.ndarray, damping: float = 0.85, epsilon: float = 1e-7) -> np.ndarray:
    """PPR by forward push (Andersen, Chung and Lang 2006): touches only the seeds' neighbourhood.

    Pushes while some node's residual exceeds ``epsilon`` times its out-degree (``epsilon`` for nodes
    without out-edges, whose residual returns to the seeds as in :func:`ppr_power`). The result
    differs from the power-iteration fixpoint by at most ``epsilon`` per unit of degree.
    """
    adjacency = sp.csr_matrix(adjacency)
    s = _distribution(seeds)
    degrees = _out_degrees(adjacency)
    p = np.zeros_like(s)
    residual = s.copy()
    queue = [int(i) for i in np.flatnonzero(residual > epsilon * np.maximum(degrees, 1))]
    queued = set(queue)
    seed_nodes = np.flatnonzero(s)
    while queue:
        node = queue.pop()
        queued.discard(node)
        mass = residual[node]
        if mass <= epsilon * max(degrees[node], 1):
            continue
        residual[node] = 0.0
        p[node] += (1 - damping) * mass
        start, end = adjacency.indptr[node], adjacency.indptr[node + 1]
        if degrees[node] > 0:
            targets, shares = adjacency.indices[start:end], adjacency.data[start:end] / degrees[node]
        else:
            targets, shares = seed_nodes, s[seed_nodes]
        np.add.at(residual, targets, damping * mass * shares)
        for target in targets.tolist():
            if target not in queued and residual[target] > epsilon * max(degrees[target], 1):
                queue.append(target)
                queued.add(target)
    return p


def gcs(
    adjacency: sp.spmatrix, seeds, alpha: float = 0.5, tol: float = 1e-6, max_iter: int = 1000, xp: ModuleType = np
) -> tuple[np.ndarray, int]:
    """Graph Cohesive Smoothing (GraphER, Algorithm 1): p <- alpha s + (1 - alpha) W p with W row-normalised,
    until the L1 change is below ``tol``; returns max(p, s) and the iterations.

    Row normalisation makes a node's new score the weighted mean of its neighbours' (a hub cannot
    accumulate score the way PPR lets it), and the final max keeps every node at least at its seed score.
    """
    s = xp.asarray(seeds, dtype=xp.float64)
    degrees = _out_degrees(adjacency, xp)
    inverse = xp.where(degrees > 0, 1.0 / xp.where(degrees > 0, degrees, 1.0), 0.0)
    average = sp.diags(inverse) @ adjacency if xp is np else adjacency.multiply(inverse[:, None]).tocsr()
    p = s.copy()
    for iteration in range(1, max_iter + 1):
        updated = alpha * s + (1 - alpha) * (average @ p)
        change = float(xp.abs(updated - p).sum())
        p = updated
        if change < tol:
            return xp.maximum(p, s), iteration
    return xp.maximum(p, s), max_iter
