"""GRanker, STeX, FastInsight's loop and GAR on hand-worked graphs with a transparent scorer.

The scorer's [CLS] vector of a node is its row of a fixed matrix and the head is a dot product, so
every score can be computed by hand; the real cross-encoder is exercised in the reranker tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graphlake.kernels.rerank.adaptive import PairScorer, fastinsight, gar, granker_smooth, stex

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`


def undirected(edges: list[tuple[int, int]], n: int) -> sp.csr_matrix:
    src, dst = zip(*edges, strict=True)
    a = sp.coo_matrix((np.ones(2 * len(edges)), (src + dst, dst + src)), shape=(n, n)).tocsr()
    a.data[:] = 1.0
    return a


def degrees(graph: sp.csr_matrix) -> np.ndarray:
    return np.diff(graph.indptr)


def test_granker_weighs_neighbours_by_reciprocal_corpus_degree():
    # subgraph 0 - 1 - 2 plus an isolated 3; corpus degrees 1, 4, 2, 5
    sub = undirected([(0, 1), (1, 2)], 4)
    h = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [3.0, -1.0]])
    smoothed = granker_smooth(h, sub, np.array([1, 4, 2, 5]), alpha=0.2)
    # W = A D^-1: row 1 gets 1/1 from node 0 and 1/2 from node 2 -> P row 1 = (2/3, 0, 1/3)
    expected = np.array([[0.8, 0.2], [0.2, 0.8 + 0.2 / 3], [0.8, 1.0], [3.0, -1.0]])
    np.testing.assert_allclose(smoothed, expected)
    np.testing.assert_array_equal(granker_smooth(h, sub, np.array([1, 4, 2, 5]), alpha=0.0), h)


def test_stex_scores_rank_proximity_bridging_and_similarity():
    # retrieved 0, 1, 2 (ranks 1, 2, 3); 3 ~ {1, 2, 4}; 5 ~ {0}; 6 ~ {0, 1, 2, 7}; 4 is two hops away
    graph = undirected([(3, 1), (3, 2), (3, 4), (5, 0), (6, 0), (6, 1), (6, 2), (6, 7)], 8)
    vectors = np.zeros((8, 2))
    vectors[3], vectors[5] = [0.5, 0.0], [0.2, 0.0]
    query = np.array([1.0, 0.0])
    retrieved = np.array([0, 1, 2])
    # node 3: rank proximity 1 - (2-1)/(3-1) = 0.5, bridging (2-1)/(3-1) = 0.5; node 5: 1 + no bridging (deg 1);
    # node 6: 1 + (3-1)/(3-1) = 2
    rows, scores = stex(vectors @ query, graph, degrees(graph), retrieved, beta=1.0)
    assert rows.tolist() == [6, 3, 5]
    np.testing.assert_allclose(scores, [2.0, 1.5, 1.2])
    rows, scores = stex(vectors @ query, graph, degrees(graph), retrieved, beta=0.0)
    assert rows.tolist() == [3, 5, 6] and 4 not in rows and 7 not in rows
    single = stex(vectors @ query, graph, degrees(graph), np.array([1]), beta=1.0)
    assert single[0].tolist() == [3, 6]  # R = 1: no rank term; C = 1: no bridging; similarity decides
    np.testing.assert_allclose(single[1], [0.5, 0.0])


@pytest.fixture
def world():
    rng = np.random.default_rng(0)
    n = 60
    vectors = rng.normal(size=(n, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.06]
    graph = undirected(edges, n)
    relevance = rng.normal(size=(n, 4))
    calls: list[np.ndarray] = []

    def features(rows: np.ndarray) -> np.ndarray:
        calls.append(np.asarray(rows))
        return relevance[rows]

    scorer = PairScorer(features, lambda h: h @ np.array([1.0, 0.5, 0.0, 0.0]))
    return vectors, graph, scorer, calls


def test_fastinsight_spends_exactly_the_budget_in_batches(world):
    vectors, graph, scorer, calls = world
    query = vectors[0]
    rows, scores = fastinsight(query, vectors, graph, degrees(graph), scorer, batch=10, budget=45)
    assert len(rows) == len(set(rows.tolist())) == 45
    assert [len(c) for c in calls] == [10, 10, 10, 10, 5]  # each node encoded once, never re-encoded
    assert np.all(np.diff(scores) <= 0)
    first = np.argsort(-(vectors @ query), kind="stable")[:10]
    assert set(first.tolist()) == set(calls[0].tolist())  # line 1: vector top-BATCH
    # the final order is GRanker's over everything retrieved
    sub = graph[rows][:, rows]
    expected = scorer.head(granker_smooth(scorer.features(rows), sub, degrees(graph)[rows], 0.2))
    np.testing.assert_allclose(scores, expected)


def test_fastinsight_takes_each_batch_from_stex_over_the_ranking_granker_left(world):
    # FastInsight keeps its subgraph and links between rounds; each batch must still be what STeX gives afresh
    vectors, graph, scorer, calls = world
    query = vectors[3]
    fastinsight(query, vectors, graph, degrees(graph), scorer, batch=10, budget=50)
    batches = list(calls)
    assert len(batches) == 5
    for k in range(1, len(batches)):
        rows = np.concatenate(batches[:k])
        scores = scorer.head(granker_smooth(scorer.features(rows), graph[rows][:, rows], degrees(graph)[rows], 0.2))
        ranked = rows[np.lexsort((rows, -scores))]
        offered, _ = stex(vectors @ query, graph, degrees(graph), ranked, beta=1.0)
        assert len(offered) >= 10  # the graph does not run dry here, so vector search adds nothing
        assert batches[k].tolist() == offered[:10].tolist()


def test_fastinsight_fills_from_vector_search_when_the_graph_runs_dry():
    vectors = np.eye(5)
    graph = sp.csr_matrix((5, 5))
    scorer = PairScorer(lambda rows: vectors[rows], lambda h: h.sum(axis=1))
    rows, _ = fastinsight(np.array([0.5, 0.4, 0.3, 0.2, 0.1]), vectors, graph, np.zeros(5), scorer, batch=2, budget=4)
    assert sorted(rows.tolist()) == [0, 1, 2, 3]


def test_fastinsight_breaks_similarity_ties_by_row():
    # every node equally similar and no edges: the vector batches are taken in row order, as a stable sort would
    calls: list[list[int]] = []
    vectors = np.ones((7, 2))

    def features(rows):
        calls.append(rows.tolist())
        return np.zeros((len(rows), 1))

    fastinsight(np.array([1.0, 0.0]), vectors, sp.csr_matrix((7, 7)), np.zeros(7), PairScorer(features, lambda h: h[:, 0]), batch=3, budget=7)
    assert calls == [[0, 1, 2], [3, 4, 5], [6]]


def test_fastinsight_never_scores_more_than_the_budget(world):
    vectors, graph, scorer, calls = world
    rows, _ = fastinsight(vectors[0], vectors, graph, degrees(graph), scorer, batch=10, budget=4)
    assert len(rows) == 4 and [len(c) for c in calls] == [4]


def test_gar_alternates_initial_and_frontier_and_backfills():
    # initial ranking 0..5; 0's neighbours are 10, 11; scores = row number, so the frontier is taken by its source's score
    graph = undirected([(0, 10), (0, 11), (1, 12), (5, 13)], 14)
    taken: list[list[int]] = []

    def features(rows):
        taken.append(rows.tolist())
        return rows[:, None].astype(float)

    scorer = PairScorer(features, lambda h: h[:, 0])
    rows, scores = gar(np.arange(6), graph, scorer, batch=2, budget=6)
    assert taken == [[0, 1], [12, 10], [2, 3]]  # frontier: 12 (from 1, score 1) before 10, 11 (from 0, score 0)
    assert rows.tolist() == [12, 10, 3, 2, 1, 0, 4, 5]  # scored by score, then the initial ranking's rest
    assert np.all(np.diff(scores) < 0)
