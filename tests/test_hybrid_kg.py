"""Allan-Poe's knowledge-graph part (spec G9): the KG the index keeps is the one ``logical_edges``
builds, hops are BFS hops, the walk ranks fused score + reward like the exact scorer, and a query
without entities, or a zero weight, leaves the ranking untouched."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse.csgraph import shortest_path
from typer.testing import CliRunner

from conftest import noisy_queries, synthetic, walk_one
from graphlake.cli import app
from graphlake.kernels.hybrid.graph_index import BuildConfig, HybridGraph, Searcher, build
from graphlake.kernels.hybrid.kg import KnowledgeGraph, reward
from graphlake.kernels.hybrid.vectors import KGQuery
from graphlake.kernels.text.entities import spacy_entities, title_aliases
from graphlake.kernels.text.triples import HUB_NODES, evidence_triples, logical_edges
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods, parse_methods
from graphlake.retrieval.training.hybrid_weights import KG_GRID
from graphlake.warehouse.storage import LakeStorage

N = 600


def random_triples(seed: int, n_nodes: int, n_entities: int, count: int) -> list[tuple[int, str, str, str]]:
    rng = np.random.default_rng(seed)
    names = [f"The Entity {i}" if i % 7 == 0 else f"entity  {i}" for i in range(n_entities)]  # articles and spaces normalise away
    relations = ["born in", "Born  in", "directed", "part of"]
    return [(int(rng.integers(n_nodes)), names[rng.integers(n_entities)], relations[rng.integers(4)], names[rng.integers(n_entities)]) for _ in range(count)]


@pytest.fixture(scope="module")
def indexed():
    vectors, nodes = synthetic(N, seed=4)
    graph = build(vectors, nodes, BuildConfig())
    graph.kg = KnowledgeGraph.from_triples("test", random_triples(1, N, 250, 900), N)
    return vectors, nodes, graph


def implied_pairs(kg: KnowledgeGraph) -> dict[tuple[int, int], int]:
    """Node X -> node Y for each relation s -> t with s held by X, t held by Y and not by X, counted per
    relation; neither end a hub (held by more than ``HUB_NODES`` nodes)."""
    held = kg.node_entities
    holders = np.diff(kg.holders.indptr)
    pairs: dict[tuple[int, int], int] = {}
    for x in range(held.shape[0]):
        mine = set(held.indices[held.indptr[x] : held.indptr[x + 1]].tolist())
        for s, t in zip(kg.source.tolist(), kg.target.tolist(), strict=True):
            if s in mine and t not in mine and max(holders[s], holders[t]) <= HUB_NODES:
                for y in kg.holders[t].indices.tolist():
                    pairs[(x, y)] = pairs.get((x, y), 0) + 1
    return pairs


def test_the_index_holds_the_knowledge_graph_logical_edges_are_built_from(tmp_path):
    rows = random_triples(2, 80, 40, 150)
    rows += [(node, "harbour", "near", f"pier {node}") for node in range(HUB_NODES + 1)]  # a hub: it links nothing
    kg = KnowledgeGraph.from_triples("test", rows, 80)
    asset = {(int(src), int(dst)): weight for src, dst, weight in logical_edges((str(r), s, rel, o) for r, s, rel, o in rows)}
    assert implied_pairs(kg) == asset and len(asset) > 50
    assert np.diff(kg.holders.indptr)[kg.entities.index("harbour")] == HUB_NODES + 1
    kg.save(tmp_path)
    again = KnowledgeGraph.load(tmp_path)
    assert again.entities == kg.entities and (again.holders != kg.holders).nnz == 0
    assert implied_pairs(again) == asset
    assert KnowledgeGraph.load(tmp_path / "missing") is None


def test_hops_are_breadth_first_hops_on_the_undirected_relation_graph(indexed):
    kg = indexed[2].kg
    distances = shortest_path(kg.undirected.astype(np.float64), unweighted=True, directed=False)
    rng = np.random.default_rng(0)
    for _ in range(50):
        seeds = rng.choice(len(kg.entities), int(rng.integers(1, 4)), replace=False)
        limit = int(rng.integers(0, 4))
        expected = distances[seeds].min(axis=0)
        expected = np.where(expected <= limit, expected, -1).astype(np.int32)
        hops = kg.hops(seeds, limit)
        np.testing.assert_array_equal(hops, expected)
        node_hops = kg.node_hops(hops)
        for node in rng.choice(N, 20, replace=False):
            mine = hops[kg.node_entities[node].indices]
            mine = mine[mine >= 0]
            assert node_hops[node] == (mine.min() if len(mine) else -1)


def test_the_walk_ranks_fused_score_plus_reward_as_the_exact_scorer_does(indexed):
    vectors, nodes, graph = indexed
    kg, searcher = graph.kg, Searcher(graph, vectors)
    queries = noisy_queries(nodes, 40, seed=5)
    weights = graph.scales.copy()
    rng = np.random.default_rng(1)
    recall = []
    for i in range(len(queries)):
        query = queries.take([i])
        hops = kg.hops(rng.choice(len(kg.entities), 2, replace=False), 3)
        fused = vectors.fused(query, weights)[0]
        exact = fused + reward(kg.node_hops(hops), 0.5)
        rows, scores = walk_one(searcher, query, weights, 128, 10, kg=KGQuery(hops, 0.5))
        np.testing.assert_allclose(scores, exact[rows], rtol=1e-5, atol=1e-5)
        recall.append(len(set(rows.tolist()) & set(np.argsort(-exact, kind="stable")[:10].tolist())) / 10)
        # weight 0: the walk still enters and follows the KG, yet every score is the fused score
        rows, scores = walk_one(searcher, query, weights, 128, 10, kg=KGQuery(hops, 0.0))
        np.testing.assert_allclose(scores, fused[rows], rtol=1e-5, atol=1e-5)
        # no entity reached at all: the same ranking as without the KG
        none = walk_one(searcher, query, weights, 128, 10, kg=KGQuery(np.full(len(kg.entities), -1, np.int32), 0.5))
        plain = walk_one(searcher, query, weights, 128, 10)
        assert none[0].tolist() == plain[0].tolist()
    assert np.mean(recall) >= 0.95


def test_a_graph_without_a_knowledge_graph_refuses_a_kg_query(indexed):
    vectors, nodes, graph = indexed
    bare = HybridGraph(graph.semantic, graph.keyword, graph.entry, graph.scales, graph.deleted)
    with pytest.raises(ValueError, match="kg: none"):
        walk_one(Searcher(bare, vectors), nodes.take([0]), graph.scales, 32, 10, kg=KGQuery(np.zeros(1, np.int32), 0.5))


def test_evidence_triples_land_on_the_nodes_their_ends_name():
    titles = {"n1": "Polish Wedding", "n2": "Theresa Connelly", "n3": "Theresa Connelly", "n4": "Paris (band)", "n5": "Unrelated"}
    evidences = [["Polish Wedding", "director", "Theresa Connelly"], ["Theresa Connelly", "date of birth", "1950"], ["paris", "genre", "rock"], ["bad"]]
    rows = evidence_triples(evidences, titles)
    assert rows == sorted(
        [
            ("n1", "Polish Wedding", "director", "Theresa Connelly"),
            ("n2", "Polish Wedding", "director", "Theresa Connelly"),
            ("n3", "Polish Wedding", "director", "Theresa Connelly"),
            ("n2", "Theresa Connelly", "date of birth", "1950"),
            ("n3", "Theresa Connelly", "date of birth", "1950"),
            ("n4", "paris", "genre", "rock"),  # the short form of the only title it abbreviates
        ]
    )


def test_kg_methods_on_the_lake(demo_copy):
    for select in ("key:triples_evidence", "key:hybrid_graph_index or key:hybrid_weights"):
        result = CliRunner().invoke(app, ["materialize", "--corpus", "demo", "--select", select], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    lake = LakeStorage(demo_copy)
    assert lake.read("triples", {"corpus": "demo", "extractor": "evidence"}).num_rows == 0  # the demo's questions carry no evidences
    indexes = open_index_set(lake, "demo")
    kg = indexes.hybrid_graph.graph.kg
    spacy = lake.read("triples", {"corpus": "demo", "extractor": "spacy"})
    assert kg.extractor == "spacy" and len(kg.source) > 0
    rows = indexes.snapshot.node_rows(spacy.column("node_id").to_pylist(), "triples")
    asset = logical_edges(zip(map(str, rows.tolist()), *(spacy.column(c).to_pylist() for c in ("subject", "relation", "object")), strict=True))
    assert implied_pairs(kg) == {(int(s), int(d)): w for s, d, w in asset}
    methods = load_methods(demo_copy)
    zero = parse_methods({"z": {"op": "hybrid_graph", "kg": True, "kg_weight": 0}, "f": {"op": "fused_exact"}})
    aliases = title_aliases(indexes.snapshot.titles().values())
    texts = [q["text"] for q in lake.read("queries", {"corpus": "demo"}).to_pylist()]
    named, changed = 0, 0
    for text, mentions in zip(texts, spacy_entities(texts), strict=True):
        found, plain = methods["ap_three_kg"].run(text, indexes), methods["ap_three"].run(text, indexes)
        if len(kg.match([name for name, _ in mentions], aliases)) == 0:  # names nothing of the KG: ap_three's ranking, exactly
            assert found.rows.tolist() == plain.rows.tolist() and found.scores.tolist() == plain.scores.tolist()
        else:
            named += 1
            changed += found.rows.tolist() != plain.rows.tolist()
        exact = zero["f"].run(text, indexes)
        fused = dict(zip(exact.rows.tolist(), exact.scores.tolist(), strict=True))
        walked = zero["z"].run(text, indexes)  # kg_weight 0: no reward leaks into any score
        np.testing.assert_allclose(walked.scores, [fused[r] for r in walked.rows.tolist()], rtol=1e-5, atol=1e-5)
        assert len(set(walked.rows[:10].tolist()) & set(exact.rows[:10].tolist())) >= 9
    assert named > 0 and changed > 0
    tuned = indexes.hybrid_weights
    assert tuned.kg in KG_GRID and set(tuned.report["kg"]["ndcg@10"]) == {str(w) for w in KG_GRID}
