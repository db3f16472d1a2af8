"""GraphER's GAT ranker on a synthetic task only message passing can solve, against its MLP ablation.

Each graph has 30 random candidates; one (the anchor) has exactly the query's embedding and the
relevant candidates are the anchor's neighbours. GCS scores are noise. A per-node model sees the
anchor but not who its neighbours are, so it is near random; the GAT can pass "my neighbour matches
the query" along edges.
"""

from __future__ import annotations

import dataclasses
import json
from math import comb

import numpy as np
import pytest
import torch

from graphlake.kernels.graph.grapher_networks import RankingGraph, load_ranker, node_features, save_ranker, score, train_ranker

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`

NODES, DIM, K = 30, 8, 10
SMALL = {"max_epochs": 20, "hidden": 16, "heads": 2, "seed": 0}


def anchor_graph(rng: np.random.Generator) -> RankingGraph:
    nodes = rng.normal(size=(NODES, DIM)).astype(np.float32)
    anchor = rng.integers(NODES)
    adjacency = np.triu(rng.random((NODES, NODES)) < 0.1, 1)
    adjacency |= adjacency.T
    src, dst = np.nonzero(adjacency)
    labels = adjacency[anchor].astype(np.float32)
    return RankingGraph(rng.random(NODES), nodes[anchor].copy(), nodes, src, dst, labels)


def mean_pr_at_k(scores: list[np.ndarray], graphs: list[RankingGraph]) -> float:
    hits = [g.labels[np.argsort(-s, kind="stable")[:K]].sum() == g.labels.sum() for s, g in zip(scores, graphs)]
    return float(np.mean(hits))


@pytest.fixture(scope="module")
def task():
    # The graphs are tiny: extra intra-op threads only add synchronisation, and on a busy shared
    # machine they slow training by orders of magnitude. Scores do not depend on the thread count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    train, validation, test = ([anchor_graph(rng) for _ in range(size)] for size in (200, 40, 40))
    test = [g for g in test if g.labels.sum() > 0]
    gat = train_ranker(train, validation, message_passing=True, learning_rates=(1e-2,), weight_decays=(0.0,), **SMALL)
    mlp = train_ranker(train, validation, message_passing=False, learning_rates=(1e-2, 3e-3), weight_decays=(0.0, 1e-4), **SMALL)
    yield validation, test, gat, mlp
    torch.set_num_threads(threads)


def test_gat_finds_the_anchor_neighbours_and_the_mlp_cannot(task):
    _, test, (gat, gat_report), (mlp, mlp_report) = task
    random_pr = np.mean([comb(K, int(g.labels.sum())) / comb(NODES, int(g.labels.sum())) for g in test])
    gat_pr = mean_pr_at_k([score(gat, g) for g in test], test)
    mlp_pr = mean_pr_at_k([score(mlp, g) for g in test], test)
    print(f"validation PR@{K}: GAT {gat_report.validation_pr_at_k:.3f}, MLP {mlp_report.validation_pr_at_k:.3f}")
    print(f"held-out PR@{K}: GAT {gat_pr:.3f}, MLP {mlp_pr:.3f}, random {random_pr:.3f}")
    assert gat_report.validation_pr_at_k >= 0.8
    assert gat_report.validation_pr_at_k - mlp_report.validation_pr_at_k >= 0.5
    assert gat_pr >= 0.8 and gat_pr >= random_pr + 0.5 and gat_pr - mlp_pr >= 0.5


def test_report_records_the_grid_and_the_choice(task):
    validation, _, (_, gat_report), (_, mlp_report) = task
    assert json.loads(json.dumps(dataclasses.asdict(mlp_report)))["message_passing"] is False
    assert len(mlp_report.grid) == 4 and len(gat_report.grid) == 1
    best = max(mlp_report.grid, key=lambda setting: setting["best_validation_pr_at_k"])
    assert (mlp_report.learning_rate, mlp_report.weight_decay, mlp_report.epochs) == (
        best["learning_rate"],
        best["weight_decay"],
        best["best_epoch"],
    )
    for setting in mlp_report.grid:  # every epoch is evaluated; a setting stops 5 epochs after its best
        curve = setting["validation_curve"]
        assert len(curve) == SMALL["max_epochs"] or len(curve) - setting["best_epoch"] == 5
    # graphs whose anchor has no neighbour have no relevant node and are left out
    assert gat_report.validation_graphs == sum(g.labels.sum() > 0 for g in validation) < len(validation)
    assert gat_report.train_graphs <= 200 and gat_report.seconds > 0


def test_save_and_load_give_identical_scores(task, tmp_path):
    _, test, (gat, _), (mlp, _) = task
    for model in (gat, mlp):
        save_ranker(model, tmp_path / str(model.message_passing))
        loaded = load_ranker(tmp_path / str(model.message_passing))
        assert loaded.config == model.config
        for graph in test[:5]:
            np.testing.assert_array_equal(score(loaded, graph), score(model, graph))


def test_only_the_gat_uses_edges(task):
    _, test, (gat, _), (mlp, _) = task
    graph = test[0]
    edgeless = dataclasses.replace(graph, src=graph.src[:0], dst=graph.dst[:0])
    np.testing.assert_array_equal(score(mlp, edgeless), score(mlp, graph))
    assert not np.allclose(score(gat, edgeless), score(gat, graph), atol=1e-3)


def test_seed_scores_are_standardised_per_graph():
    """Candidates bunched within 0.01 of each other still span several units of input."""
    nodes = np.zeros((4, DIM), dtype=np.float32)
    bunched = RankingGraph(np.array([0.700, 0.703, 0.706, 0.709]), np.zeros(DIM), nodes, np.array([0]), np.array([1]))
    column = node_features(bunched)[:, 0].numpy()
    np.testing.assert_allclose(column, (bunched.seed_scores - 0.7045) / np.std(bunched.seed_scores), rtol=1e-5)
    assert column.mean() == pytest.approx(0, abs=1e-6) and column.std() == pytest.approx(1, rel=1e-5)
    constant = dataclasses.replace(bunched, seed_scores=np.full(4, 0.5))
    assert not node_features(constant)[:, 0].any()
