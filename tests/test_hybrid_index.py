"""Allan-Poe's hybrid graph index: the fused metric against scipy and the single-path operators (G1), the
built graph against a plain-Python Algorithm 1 (G2), the large corpora's candidate k-NN against the
exact lists, and one index serving every weighting with the recall of exact fusion (G3), on synthetic
vectors and on the demo lake."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import synthetic, walk_one, with_near_copies
from graphlake.cli import app
from graphlake.kernels.hybrid.candidates import DENSE, SPARSE, candidate_knn
from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build, exact_knn, prune_candidates, self_inner_products
from graphlake.kernels.hybrid.pairs import pair_inner_product, row_operands
from graphlake.kernels.hybrid.vectors import Queries
from graphlake.retrieval.index.derived import hybrid_vectors
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods, parse_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.warehouse.storage import LakeStorage


def test_the_fused_metric_is_the_weighted_sum_of_the_paths():
    vectors, nodes = synthetic(300)
    scales = vectors.calibration(nodes)
    rng = np.random.default_rng(1)
    reference = [nodes.dense @ vectors.dense.T, (nodes.sparse @ vectors.sparse.T).toarray(), (nodes.lexical @ vectors.lexical.T).toarray()]
    for _ in range(20):  # Theorem 1: any weights are one inner product over the same stored vectors
        weights = rng.uniform(0, 2, size=3)
        expected = sum(w * path for w, path in zip(weights, reference, strict=True))
        np.testing.assert_allclose(vectors.fused(nodes, weights), expected, rtol=1e-5, atol=1e-5)
    operands = row_operands(vectors, nodes, scales)
    fused = sum(s * path for s, path in zip(scales, reference, strict=True))
    pairs = rng.integers(0, 300, size=(10_000, 2))
    kernel = np.array([pair_inner_product(w, v, *operands[:-1]) for w, v in pairs])
    np.testing.assert_allclose(kernel, fused[pairs[:, 0], pairs[:, 1]], rtol=1e-5, atol=1e-6)
    # after calibration a node's nearest other node scores about 1 on every path (the median is exactly 1)
    for path, scale in zip(reference, scales, strict=True):
        np.fill_diagonal(path, -np.inf)
        assert np.median(path.max(axis=1) * scale) == pytest.approx(1.0, rel=0.05)


def algorithm_one(knn_ids, knn_sims, self_ip, ip, tokens, degree, keyword_degree):
    """Algorithm 1 lines 5–15 written plainly: detour counts, the IP walk, keyword recycling (§3.3)."""
    pruned, keyword, excluded = [], [], 0
    for a, neighbours in enumerate(knn_ids.tolist()):
        rank = {y: r for r, y in enumerate(neighbours)}
        detours = [0] * len(neighbours)
        for i, x in enumerate(neighbours):
            for y, sim in zip(knn_ids[x].tolist(), knn_sims[x].tolist(), strict=True):
                if y in rank and rank[y] > i and sim > knn_sims[a, rank[y]]:
                    detours[rank[y]] += 1
        kept, recycled = [], []
        for r in sorted(range(len(neighbours)), key=lambda r: (detours[r], r)):
            v = neighbours[r]
            if len(kept) < degree and all(ip(w, v) < self_ip[v] for w in kept):
                kept.append(v)
                continue
            excluded += len(kept) < degree
            shared = tokens[a] & tokens[v]
            if len(recycled) < keyword_degree and shared and not any(shared <= tokens[w] for w in kept):
                recycled.append(v)
        pruned.append(kept)
        keyword.append(recycled)
    return pruned, keyword, excluded


def test_pruning_and_keyword_edges_follow_algorithm_one():
    vectors, nodes = with_near_copies(*synthetic(150, seed=3), copies=50)
    scales = vectors.calibration(nodes)
    knn_ids, knn_sims, _ = exact_knn(vectors, nodes, scales, 64, 16)
    self_ip = self_inner_products(vectors, nodes, scales)
    operands = row_operands(vectors, nodes, scales)
    pruned, kept, keyword = prune_candidates(knn_ids, knn_sims, self_ip, 32, 8, *operands)
    tokens = [set(vectors.lexical[i].indices.tolist()) for i in range(200)]
    expected_pruned, expected_keyword, excluded = algorithm_one(knn_ids, knn_sims, self_ip, lambda w, v: pair_inner_product(w, v, *operands[:-1]), tokens, 32, 8)
    assert [pruned[a, : kept[a]].tolist() for a in range(200)] == expected_pruned
    assert [[v for v in row if v >= 0] for row in keyword.tolist()] == expected_keyword
    assert sum(map(len, expected_keyword)) > 0 and excluded > 0  # both rules did something here

    graph = build(vectors, nodes, BuildConfig(layout="paper"))
    assert graph.semantic.shape == (200, 32) and (graph.semantic >= 0).all()  # fixed degree
    assert not (graph.semantic == np.arange(200)[:, None]).any()  # no self-loops
    assert all(len(set(row)) == len(row) for row in graph.semantic.tolist())  # no duplicates
    for a in range(200):  # d/4 pruned first, then reverse neighbours, then single-path ones (the paper's layout)
        assert graph.semantic[a, :8].tolist() == pruned[a, :8].tolist()
    assert graph.entry.tolist() == np.argsort(-self_ip, kind="stable")[:32].tolist()
    assert build(vectors, nodes, BuildConfig(layout="code")).semantic[:, :16].tolist() == pruned[:, :16].tolist()


def test_candidate_lists_find_the_exact_neighbours():
    """The k-NN of corpora past the exact threshold: per-path candidates (far fewer than the nodes)
    re-scored with the fused metric give lists of distinct other nodes, best first, each score the
    pair's fused score, and 95 % of the exact lists; a build with them records that recall."""
    vectors, nodes = synthetic(3000, seed=3)
    assert DENSE + 2 * SPARSE < len(vectors) / 6  # candidates, not the corpus
    scales = vectors.calibration(nodes)
    found, sims, _ = candidate_knn(vectors, nodes, scales, 64, row_operands(vectors, nodes, scales))
    exact, _, _ = exact_knn(vectors, nodes, scales, 64, 1)
    recall = np.mean([len(set(e.tolist()) & set(f.tolist())) / 64 for e, f in zip(exact, found, strict=True)])
    assert recall >= 0.95, recall
    rows = np.arange(len(found))[:, None]
    assert (found >= 0).all() and not (found == rows).any() and all(len(set(r.tolist())) == 64 for r in found)
    assert (np.diff(sims, axis=1) <= 0).all()
    fused = np.tensordot(scales.astype(np.float32), vectors.path_scores(nodes), axes=1)
    np.testing.assert_allclose(sims, fused[rows, found], rtol=1e-5, atol=1e-5)
    graph = build(vectors, nodes, BuildConfig(knn="candidates"), scales)
    assert graph.build["knn"]["method"] == "candidates" and graph.build["knn"]["knn_recall"] >= 0.95


@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1), (0.7, 0.3, 0), (0.2, 0.8, 0)])
def test_graph_search_finds_the_exact_fused_top_ten(weights):
    vectors, nodes = synthetic(2000, seed=5)
    graph = build(vectors, nodes, BuildConfig())
    searcher = Searcher(graph, vectors)
    rng = np.random.default_rng(6)
    picked = rng.choice(2000, 100, replace=False)  # queries: noisy copies of nodes
    queries = Queries(nodes.dense[picked] + 0.3 * rng.normal(size=(100, 32)).astype(np.float32), nodes.sparse[picked], nodes.lexical[picked])
    scaled = np.asarray(weights) * graph.scales
    exact = vectors.fused(queries, scaled)
    recall = []
    for i in range(100):
        rows, scores = walk_one(searcher, queries.take([i]), scaled, 128, 10)
        np.testing.assert_allclose(scores, exact[i, rows], rtol=1e-5, atol=1e-6)  # the walk scores what exact fusion does
        recall.append(len(set(rows.tolist()) & set(np.argsort(-exact[i], kind="stable")[:10].tolist())) / 10)
    assert np.mean(recall) >= 0.95, np.mean(recall)
    graph.deleted[np.argsort(-exact[0])[:5]] = True  # mark-deleted: never returned, k still come back
    rows, _ = walk_one(searcher, queries.take([0]), scaled, 16, 10)
    assert len(rows) == 10 and not graph.deleted[rows].any()


def test_required_keywords_hold_in_every_result_and_the_walk_finds_the_filtered_top_ten():
    vectors, nodes = synthetic(2000, seed=20, lexical_density=0.1)
    graph = build(vectors, nodes, BuildConfig())
    searcher = Searcher(graph, vectors)
    frequency = np.diff(vectors.postings.indptr)
    common = np.flatnonzero(frequency >= 100)  # G8: keywords at least 5 % of the nodes hold
    rng = np.random.default_rng(21)
    picked = rng.choice(2000, 80, replace=False)
    queries = Queries(nodes.dense[picked] + 0.3 * rng.normal(size=(80, 32)).astype(np.float32), nodes.sparse[picked], nodes.lexical[picked])
    recall = []
    for i in range(80):
        required = np.sort(rng.choice(common, 1 + i % 2, replace=False))  # one keyword, then two
        holders = vectors.containing(required)
        assert all(set(required) <= set(vectors.lexical[row].indices.tolist()) for row in holders[:5])
        rows, _ = walk_one(searcher, queries.take([i]), graph.scales, 128, 10, required)
        assert np.isin(rows, holders).all() and len(rows) == min(10, len(holders))  # every result holds every keyword
        exact = vectors.fused(queries.take([i]), graph.scales, holders)[0]
        truth = holders[np.lexsort((holders, -exact))[:10]]
        recall.append(len(set(rows.tolist()) & set(truth.tolist())) / len(truth))
    assert np.mean(recall) >= 0.9, np.mean(recall)


def tied(i: int, found, expected, tolerance: float = 1e-5) -> bool:
    """Position ``i`` holds the expected row, or another row of the same score (the order of ties is
    arbitrary) that, if the expected ranking has it at all, it has at that score too."""
    row = found.rows[i]
    if row == expected.rows[i]:
        return True
    where = np.flatnonzero(expected.rows == row)
    same = abs(found.scores[i] - expected.scores[i]) <= tolerance
    return bool(same and (len(where) == 0 or abs(expected.scores[where[0]] - expected.scores[i]) <= tolerance))


def run(method: dict, indexes: LakeIndexSet, query: str):
    methods = parse_methods({"m": method})
    return methods["m"].run(query, indexes)


def test_one_index_serves_every_weighting_on_the_lake(demo_copy):
    result = CliRunner().invoke(app, ["materialize", "--corpus", "demo", "--select", "key:hybrid_graph_index"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    lake = LakeStorage(demo_copy)
    folder = lake.artifact("hybrid_graph", {"corpus": "demo"})
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    indexes = open_index_set(lake, "demo")
    texts = [q["text"] for q in lake.read("queries", {"corpus": "demo"}).to_pylist()][:12]
    methods = load_methods(demo_copy)
    ap = [name for name in methods if name.startswith("ap_")]
    assert {"ap_dense", "ap_sparse", "ap_full", "ap_two", "ap_three"} <= set(ap)
    overlap = []
    for text in texts:
        for name in ap:
            assert len(methods[name].run(text, indexes).rows) > 0, name
        graph, exact = methods["ap_three"].run(text, indexes), methods["fused_three"].run(text, indexes)
        overlap.append(len(set(graph.rows[:10].tolist()) & set(exact.rows[:10].tolist())) / 10)
        # one non-zero weight, raw scale: exactly the single-path operators
        for path, single in (("dense", {"op": "dense"}), ("sparse", {"op": "splade"}), ("lexical", {"op": "bm25"})):
            weights = {p: float(p == path) for p in ("dense", "sparse", "lexical")}
            fused = run({"op": "fused_exact", "weights": weights, "calibrate": False, "k": 20}, indexes, text)
            alone = run({**single, "k": 20}, indexes, text)
            np.testing.assert_allclose(fused.scores, alone.scores, rtol=1e-4, atol=1e-5)
            assert len(fused.rows) == len(alone.rows) and all(tied(i, fused, alone) for i in range(len(alone.rows))), (path, text)
    assert np.mean(overlap) >= 0.95
    vectors = hybrid_vectors(indexes)
    for text in texts[:4]:  # required keywords: the exact fallback is the filtered oracle; the walk keeps only holders
        rarest = vectors.rarest(indexes.bm25.token_counts([text]).indices)
        holders = vectors.containing(np.array([rarest]))
        exact = run({"op": "fused_exact", "keywords": "idf_top1"}, indexes, text)
        fallback = run({"op": "hybrid_graph", "keywords": "idf_top1", "keyword_exact_below": len(holders) + 1}, indexes, text)
        walked = run({"op": "hybrid_graph", "keywords": "idf_top1", "keyword_exact_below": 0}, indexes, text)
        assert exact.rows.tolist() == fallback.rows.tolist() and len(exact.rows) == min(100, len(holders))
        assert np.isin(walked.rows, holders).all() and np.isin(exact.rows, holders).all()
    word = lake.read("nodes", {"corpus": "demo"}).column("text")[0].as_py().split()[0]
    request = new_request(indexes, [texts[0]])
    (listed,) = parse_methods({"m": {"op": "hybrid_graph", "keywords": [word, "zzzyzzy"]}})["m"].run_batch(request, indexes)
    assert len(listed.rows) == 0 and any("zzzyzzy" in note for note in request.notes)  # a word no node holds
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()} == digest  # searching never writes
