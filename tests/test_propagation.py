"""Propagation kernels against closed-form solutions on small graphs, and GraphER's hub argument."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graphlake.kernels.graph.propagation import Walk, gcs, ppr_cg, ppr_power, ppr_push
from graphlake.kernels.graph.seeds import entity_seed_weights, mix_seeds, passage_seed_weights

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`


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


def closed_form_ppr(adjacency: sp.csr_matrix, seeds: np.ndarray, alpha: float) -> np.ndarray:
    """Solve p = alpha s + (1 - alpha) (W p + (stranded mass) s) exactly with dense linear algebra."""
    a = adjacency.toarray()
    s = seeds / seeds.sum()
    degrees = a.sum(axis=1)
    w = np.divide(a, degrees[:, None], out=np.zeros_like(a), where=degrees[:, None] > 0).T
    w += np.outer(s, degrees == 0)  # stranded mass returns to the seeds
    return np.linalg.solve(np.eye(len(s)) - (1 - alpha) * w, alpha * s)


@pytest.mark.parametrize("dangling", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_ppr_power_and_push_match_the_closed_form(seed, dangling):
    adjacency = random_graph(40, seed, dangling)
    seeds = np.zeros(40)
    seeds[[3, 7, 11]] = [0.5, 0.3, 0.2]
    exact = closed_form_ppr(adjacency, seeds, 0.15)
    walk = Walk.from_adjacency(adjacency)
    power, iterations = ppr_power(walk, seeds, 0.15, tol=1e-12, max_iter=1000)
    assert np.allclose(power, exact, atol=1e-9) and iterations < 1000
    assert power.sum() == pytest.approx(1.0)
    pushed = ppr_push(walk, seeds, 0.15, epsilon=1e-7)  # push work grows as 1 / (epsilon alpha)
    assert np.abs(pushed - exact).max() < 1e-4
    assert np.abs(ppr_push(walk, seeds, 0.15, epsilon=1e-4) - exact).max() > np.abs(pushed - exact).max()


def test_fixed_iterations_stop_early_as_sprig_runs_them():
    adjacency = random_graph(40, 9, dangling=False)
    seeds = np.zeros(40)
    seeds[5] = 1.0
    walk = Walk.from_adjacency(adjacency)
    five, iterations = ppr_power(walk, seeds, 0.15, tol=0.0, max_iter=5)
    assert iterations == 5 and five.sum() == pytest.approx(1.0)
    assert not np.allclose(five, closed_form_ppr(adjacency, seeds, 0.15), atol=1e-6)


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
    ppr, _ = ppr_power(Walk.from_adjacency(adjacency), seeds, 0.15, tol=1e-12)
    smoothed, _ = gcs(adjacency, seeds, alpha=0.5, tol=1e-12)
    assert int(np.argmax(ppr)) == 0  # PPR ranks the hub first regardless of its relevance
    assert int(np.argmax(smoothed)) == 1  # GCS keeps the most relevant leaf on top


def test_seed_weightings_and_mixing():
    assert passage_seed_weights(np.array([9.0, 5.0, 1.0]), "rank").tolist() == [1.0, 0.5, pytest.approx(1 / 3)]
    softmax = passage_seed_weights(np.array([2.0, 1.0]), "softmax")
    assert softmax[0] == 1.0 and softmax[1] == pytest.approx(np.exp(-1))
    assert np.all(passage_seed_weights(np.array([-0.2, -0.5]), "raw") > 0)
    assert entity_seed_weights(np.array([1, 4]), 0.5).tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="seed weighting"):
        passage_seed_weights(np.array([1.0]), "best")

    entity_rows, entity_weights = np.array([0]), np.array([3.0])
    passage_rows, passage_weights = np.array([2, 3]), np.array([1.0, 0.5])
    mass = mix_seeds(5, entity_rows, entity_weights, passage_rows, passage_weights, "mass")
    assert mass.tolist() == [3.0, 0.0, 1.0, 0.5, 0.0]  # each side's share is its raw mass
    adaptive = mix_seeds(5, entity_rows, entity_weights, passage_rows, passage_weights, "adaptive")
    assert adaptive[0] == pytest.approx(2 / 5)  # lambda = (1 + 1) / (1 + 2 + 2)
    assert adaptive[2:4].sum() == pytest.approx(3 / 5)
    only_passages = mix_seeds(5, np.array([], int), np.array([]), passage_rows, passage_weights, "adaptive")
    assert only_passages.tolist() == [0.0, 0.0, 1.0, 0.5, 0.0]


@pytest.mark.parametrize("isolated", [False, True])
def test_ppr_cg_solves_the_same_fixpoint_on_undirected_graphs(isolated):
    adjacency = random_graph(50, 3, dangling=False)
    adjacency = (adjacency + adjacency.T).tolil()
    if isolated:
        adjacency[4, :] = 0
        adjacency[:, 4] = 0
    adjacency = adjacency.tocsr()
    adjacency.eliminate_zeros()
    seeds = np.zeros(50)
    seeds[[4, 9, 20]] = [0.2, 0.5, 0.3]
    walk = Walk.from_adjacency(adjacency)
    exact = closed_form_ppr(adjacency, seeds, 0.15)
    solved, iterations = ppr_cg(walk, seeds, 0.15, rtol=1e-10)
    assert np.allclose(solved, exact, atol=1e-9) and solved.sum() == pytest.approx(1.0)
    power_iterations = ppr_power(walk, seeds, 0.15, tol=1e-10, max_iter=1000)[1]
    assert iterations < power_iterations  # the reason it exists (4x fewer on the HotpotQA entity graph)
    with pytest.raises(ValueError, match="undirected"):
        ppr_cg(Walk.from_adjacency(random_graph(10, 1, dangling=False)), np.ones(10))


def test_ppr_cg_on_a_bipartite_graph_solves_one_side_alone():
    rng = np.random.default_rng(2)
    block = sp.csr_matrix((rng.random((30, 80)) < 0.08) * rng.uniform(0.5, 2.0, (30, 80)))
    adjacency = sp.bmat([[None, block], [block.T, None]], format="csr")
    walk = Walk.from_adjacency(adjacency, split=30)
    assert walk.bipartite is not None and Walk.from_adjacency(adjacency).bipartite is None
    seeds = np.zeros(110)
    seeds[[2, 40, 70]] = [0.6, 0.3, 0.1]
    solved, iterations = ppr_cg(walk, seeds, 0.15, rtol=1e-12)
    assert np.allclose(solved, closed_form_ppr(adjacency, seeds, 0.15), atol=1e-9)
    full = Walk(walk.transition, walk.flow, walk.dangling, walk.out_edges, walk.symmetric, walk.sqrt_degree)
    assert iterations < ppr_cg(full, seeds, 0.15, rtol=1e-12)[1]
