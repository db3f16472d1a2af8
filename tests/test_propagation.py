"""Propagation kernels against closed-form solutions on small graphs, and GraphER's hub argument."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graphlake.kernels.propagation import gcs, ppr_power, ppr_push


def random_graph(n: int, seed: int, dangling: bool) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, n)) < 0.15) * rng.uniform(0.5, 2.0, (n, n))
    np.fill_diagonal(dense, 0)
    if not dangling:
        for i in np.flatnonzero(dense.sum(axis=1) == 0):
            dense[i, (i + 1) % n] = 1.0
    else:
        dense[0] = 0  # node 0 has no out-edges
    return sp.csr_matrix(dense)


def closed_form_ppr(adjacency: sp.csr_matrix, seeds: np.ndarray, damping: float) -> np.ndarray:
    """Solve p = (1 - d) s + d (W p + (stranded mass) s) exactly with dense linear algebra."""
    a = adjacency.toarray()
    s = seeds / seeds.sum()
    degrees = a.sum(axis=1)
    w = np.divide(a, degrees[:, None], out=np.zeros_like(a), where=degrees[:, None] > 0).T
    w += np.outer(s, degrees == 0)  # stranded mass returns to the seeds
    return np.linalg.solve(np.eye(len(s)) - damping * w, (1 - damping) * s)


@pytest.mark.parametrize("dangling", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_ppr_power_and_push_match_the_closed_form(seed, dangling):
    adjacency = random_graph(40, seed, dangling)
    seeds = np.zeros(40)
    seeds[[3, 7, 11]] = [0.5, 0.3, 0.2]
    exact = closed_form_ppr(adjacency, seeds, 0.85)
    power, iterations = ppr_power(adjacency, seeds, 0.85, tol=1e-12, max_iter=1000)
    assert np.allclose(power, exact, atol=1e-9) and iterations < 1000
    assert power.sum() == pytest.approx(1.0)
    pushed = ppr_push(adjacency, seeds, 0.85, epsilon=1e-6)  # push work grows as 1 / (epsilon (1 - d))
    assert np.abs(pushed - exact).max() < 1e-4


def test_gcs_matches_its_fixpoint_and_never_lowers_a_seed():
    adjacency = random_graph(30, 5, dangling=False)
    adjacency = adjacency + adjacency.T  # an undirected candidate graph, as GraphER builds
    seeds = np.random.default_rng(1).random(30)
    a = adjacency.toarray()
    w = a / a.sum(axis=1, keepdims=True)
    fixpoint = np.linalg.solve(np.eye(30) - 0.5 * w, 0.5 * seeds)
    scores, _ = gcs(adjacency, seeds, alpha=0.5, tol=1e-12)
    assert np.allclose(scores, np.maximum(fixpoint, seeds), atol=1e-9)
    assert np.all(scores >= seeds)


def test_hub_effect_ppr_lifts_an_irrelevant_hub_gcs_does_not():
    # a star: hub 0 linked both ways to leaves 1..6; seeds favour the leaves, the hub's own score is low
    n = 7
    rows = [0] * 6 + list(range(1, 7))
    cols = list(range(1, 7)) + [0] * 6
    adjacency = sp.csr_matrix((np.ones(12), (rows, cols)), shape=(n, n))
    seeds = np.array([0.01, 0.3, 0.25, 0.2, 0.1, 0.08, 0.06])
    ppr, _ = ppr_power(adjacency, seeds, 0.85, tol=1e-12)
    smoothed, _ = gcs(adjacency, seeds, alpha=0.5, tol=1e-12)
    assert int(np.argmax(ppr)) == 0  # PPR ranks the hub first regardless of its relevance
    assert int(np.argmax(smoothed)) == 1  # GCS keeps the most relevant leaf on top
