"""Topological Recall (FastInsight Definition 7) on hand-worked graphs, and against a brute force.

The brute force enumerates every hop-shortest path with networkx and sums log-degrees along it,
straight from the definition, for random graphs.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from graphlake.kernels.eval.topological_recall import CorpusGraph, DocumentGraph, miss_topological_recall, topological_recall, topological_values

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`


def graph_of(edges: list[tuple[int, int]], n: int) -> CorpusGraph:
    src, dst = zip(*edges, strict=True)
    return CorpusGraph(sp.coo_matrix((np.ones(len(edges)), (src, dst)), shape=(n, n)))


# 0 - 1 - 2 - 3 - 4, with two leaves 5, 6 on node 1. Degrees: 0:1, 1:4, 2:2, 3:2, 4:1.
CHAIN = graph_of([(0, 1), (1, 2), (2, 3), (3, 4), (1, 5), (1, 6)], 7)


def test_chain_worked_by_hand():
    # oracle 0 retrieved: credit 1. Oracle 3 from 0 via 0, 1, 2: ln 2 + ln 5 + ln 3 = ln 30.
    # Oracle 4 adds node 3 (degree 2): ln 90.
    expected = (1 + 1 / (1 + math.log(30)) + 1 / (1 + math.log(90))) / 3
    assert topological_recall(CHAIN, [0], [0, 3, 4]) == pytest.approx(expected, rel=1e-12)
    assert miss_topological_recall(CHAIN, [0], [0, 3, 4]) == pytest.approx(expected - 1 / 3, rel=1e-12)


def test_nearest_retrieved_node_wins_and_edges_are_undirected():
    # From 4 to oracle 2: nodes 4, 3 -> ln 2 + ln 3 = ln 6; from 0 it would be ln 10. Edges were given one way only.
    assert CHAIN.uncertainty(2, [0, 4]) == pytest.approx(math.log(6))
    assert CHAIN.uncertainty(2, [2, 4]) == 0.0


def test_only_hop_shortest_paths_count():
    # 0 reaches oracle 1 in two hops through hub 2 (degree 20) or in three through 3 and 4 (degree 2 each).
    # The three-hop path is less uncertain (ln 27 < ln 63), but the definition follows the shortest path.
    hub_leaves = [(2, leaf) for leaf in range(5, 23)]
    graph = graph_of([(0, 2), (2, 1), (0, 3), (3, 4), (4, 1), *hub_leaves], 23)
    assert graph.uncertainty(1, [0]) == pytest.approx(math.log(3) + math.log(21))


def test_unreachable_oracle_gets_no_credit_and_full_recall_no_miss_credit():
    graph = graph_of([(0, 1), (2, 3)], 4)
    assert graph.uncertainty(3, [0]) == math.inf
    assert topological_recall(graph, [0], [1, 3]) == pytest.approx(0.5 * (1 / (1 + math.log(2))))
    assert topological_recall(graph, [], [1]) == 0.0
    assert miss_topological_recall(graph, [1, 3], [1, 3]) == 0.0
    with pytest.raises(ValueError, match="oracle"):
        topological_recall(graph, [0], [])


def brute_force_uncertainty(g: nx.Graph, oracle: int, retrieved: list[int]) -> float:
    best = math.inf
    for source in retrieved:
        if not nx.has_path(g, source, oracle):
            continue
        for path in nx.all_shortest_paths(g, source, oracle):
            best = min(best, sum(math.log1p(g.degree(node)) for node in path[:-1]))
    return best


@pytest.mark.parametrize("seed", range(5))
def test_matches_the_definition_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = 60
    g = nx.gnm_random_graph(n, 90, seed=seed)
    graph = CorpusGraph(nx.to_scipy_sparse_array(g, nodelist=range(n)))
    retrieved = rng.choice(n, size=6, replace=False).tolist()
    oracle = rng.choice(n, size=8, replace=False).tolist()
    for node in oracle:
        assert graph.uncertainty(node, retrieved) == pytest.approx(brute_force_uncertainty(g, node, retrieved), rel=1e-12)
    recall = len(set(oracle) & set(retrieved)) / len(oracle)
    tr = topological_recall(graph, retrieved, oracle)
    # Corollary 1: TR = Recall + MissTR, hence TR >= Recall
    assert tr == pytest.approx(recall + miss_topological_recall(graph, retrieved, oracle), rel=1e-12)
    assert tr >= recall


def test_document_level_values_merge_nodes_and_count_gold_outside_the_corpus_as_missed():
    # nodes 0..6 of CHAIN owned by documents: a = {0}, b = {1, 5, 6}, c = {2}, d = {3}, e = {4}
    # merged: a - b - c - d - e, degrees 1, 2, 2, 2, 1
    documents = DocumentGraph.from_nodes(CHAIN.adjacency, ["a", "b", "c", "d", "e", "b", "b"])
    assert documents.graph.size == 5 and documents.position == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}
    gold = {"q": {"a": 1, "d": 2, "zz": 1, "b": 0}}  # "zz" is not in the corpus; "b" is judged not relevant
    values = topological_values({"q": ["a", "b"]}, gold, documents)["q"]
    # d reached from b through b, c: ln 3 + ln 3; a retrieved; zz unreachable
    expected = (1 + 1 / (1 + 2 * math.log(3)) + 0) / 3
    assert values["tr@10"] == pytest.approx(expected) and values["tr@100"] == pytest.approx(expected)
    assert values["misstr@10"] == pytest.approx(expected - 1 / 3)  # Corollary 1: TR = Recall + MissTR
    only_first = topological_values({"q": ["a"]}, gold, documents)["q"]
    assert only_first["tr@10"] == pytest.approx((1 + 1 / (1 + math.log(2) + math.log(3) + math.log(3))) / 3)
