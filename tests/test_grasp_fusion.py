"""GRASP Stage 2 (spec G3, G4's grid): the fusion formulas against hand-computed values, the bucket
edges, the opt-out to the partner, and the vectorised grid search against brute force with ``fuse``."""

import itertools

import numpy as np
import pytest

from graphlake.kernels.plan.fusion import (
    BUCKET_WEIGHTS,
    DYNAMIC_CONSTANTS,
    RISK_MULTIPLIERS,
    STATIC_CONSTANTS,
    STATIC_WEIGHTS,
    ValidationQuery,
    bucket,
    cell_name,
    fuse,
    graph_weight,
    search_grid,
)
from graphlake.kernels.plan.plans import RISK_LEVELS

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`

GRAPH = np.array([7, 3, 9])
PARTNER = np.array([3, 5, 7, 1])


def test_static_rrf_equals_hand_computed_scores():
    scores, rows = fuse(GRAPH, PARTNER, 0.3, 0.7, 2)
    expected = {
        7: 0.3 / 3 + 0.7 / 5,
        3: 0.3 / 4 + 0.7 / 3,
        9: 0.3 / 5,
        5: 0.7 / 4,
        1: 0.7 / 6,
    }
    assert rows.tolist() == sorted(expected, key=lambda r: (-expected[r], r))
    assert scores == pytest.approx([expected[r] for r in rows.tolist()], abs=1e-15)


def test_dynamic_rrf_weight_is_bucket_times_risk():
    w_bucket, m_risk = (2.0, 0.8, 0.2, 0.05, 0.05), (0.5, 0.5, 1.25, 1.0)
    w = graph_weight(True, 37, "normal", w_bucket, m_risk)
    assert w == 0.8 * 1.25
    scores, rows = fuse(GRAPH, PARTNER, w, 1.0, 300)
    assert dict(zip(rows.tolist(), scores.tolist(), strict=True)) == pytest.approx({7: w / 301 + 1 / 303, 3: w / 302 + 1 / 301, 9: w / 303, 5: 1 / 302, 1: 1 / 304})


@pytest.mark.parametrize(
    ("n_cand", "expected"),
    [(0, None), (1, 0), (10, 0), (11, 1), (50, 1), (51, 2), (100, 2), (101, 3), (500, 3), (501, 4), (10**6, 4)],
)
def test_bucket_edges(n_cand, expected):
    assert bucket(n_cand) == expected


def test_an_empty_or_invalid_plan_gets_no_graph_weight():
    w_bucket, m_risk = (1, 1, 1, 1, 1), (1, 1, 1, 1)
    assert graph_weight(True, 0, "aggressive", w_bucket, m_risk) == 0
    assert graph_weight(False, 40, "aggressive", w_bucket, m_risk) == 0
    assert cell_name(False, 40, "normal") == "invalid"
    assert cell_name(True, 0, "weak") == "0|weak"
    assert cell_name(True, 501, "weak") == "5|weak"


@pytest.mark.parametrize(("graph_weight_", "partner_weight"), [(0.0, 1.0), (0.0, 0.5)])
def test_zero_graph_weight_returns_the_partner_ranking_exactly(graph_weight_, partner_weight):
    rows = fuse(GRAPH, PARTNER, graph_weight_, partner_weight, 60).rows
    assert rows.tolist() == PARTNER.tolist()


def test_full_graph_weight_in_static_rrf_returns_the_graph_ranking():
    rows = fuse(GRAPH, PARTNER, 1.0, 0.0, 5).rows
    assert rows.tolist() == GRAPH.tolist()


def _random_queries(count: int, seed: int) -> list[ValidationQuery]:
    rng = np.random.default_rng(seed)
    queries = []
    for _ in range(count):
        graph = rng.choice(60, size=rng.integers(0, 15), replace=False)
        partner = rng.choice(60, size=20, replace=False)
        gold = frozenset(rng.choice(60, size=rng.integers(1, 3), replace=False).tolist())
        valid = rng.random() > 0.1
        n_cand = int(rng.choice([0, 3, 10, 11, 40, 51, 99, 101, 400, 501, 900])) if len(graph) else 0
        queries.append(ValidationQuery(graph, partner, gold, valid, n_cand, RISK_LEVELS[rng.integers(4)]))
    return queries


def _hit(query: ValidationQuery, w_graph: float, w_partner: float, constant: float) -> bool:
    rows = fuse(query.graph, query.partner, w_graph, w_partner, constant).rows
    return bool(len(rows)) and int(rows[0]) in query.gold


def test_the_grid_search_scores_every_setting_as_fuse_would():
    queries = _random_queries(60, seed=3)
    choice = search_grid(queries)
    assert choice.settings == {"static": 189, "dynamic": 1_290_240}
    for i, weight in enumerate(STATIC_WEIGHTS):
        for j, constant in enumerate(STATIC_CONSTANTS):
            assert choice.static_hits[i, j] == sum(_hit(q, weight, 1.0 - weight, constant) for q in queries)
    for setting in choice.dynamic_top[:3]:  # the winners, recomputed through fuse()
        hits = sum(_hit(q, graph_weight(q.valid, q.n_cand, q.risk_level, setting["w_bucket"], setting["m_risk"]), 1.0, setting["constant"]) for q in queries)
        assert hits == setting["hits"]
    rng = np.random.default_rng(0)
    best = choice.dynamic["hits"]
    for _ in range(40):  # no random setting beats the winner
        w_bucket = [float(rng.choice(options)) for options in BUCKET_WEIGHTS]
        m_risk = [float(rng.choice(options)) for options in RISK_MULTIPLIERS]
        constant = float(rng.choice(DYNAMIC_CONSTANTS))
        assert sum(_hit(q, graph_weight(q.valid, q.n_cand, q.risk_level, w_bucket, m_risk), 1.0, constant) for q in queries) <= best
    partner_hits = sum(_hit(q, 0.0, 1.0, 60) for q in queries)
    assert max(choice.static["hits"], choice.dynamic["hits"]) >= partner_hits
    assert sum(choice.cells.values()) == len(queries)


def test_grid_ties_go_to_the_earlier_setting():
    # the graph branch is empty everywhere: every setting scores the partner's Hit@1
    queries = [ValidationQuery(np.zeros(0, np.int64), np.array([1, 2]), frozenset({1}), True, 0, "normal")] * 3
    choice = search_grid(queries)
    assert choice.static == {"weight": 0.0, "constant": 1, "hits": 3}
    assert choice.dynamic["constant"] == 5 and choice.dynamic["w_bucket"] == [c[0] for c in BUCKET_WEIGHTS]
    assert choice.mode == "static"
    assert list(itertools.chain(choice.cells)) == ["0|normal"]
