"""Inserts and deletes of the hybrid graph index (G7): nodes inserted into a graph built on part of a
corpus are found as a full build finds them; removed nodes are spliced out and never returned;
mark-deleted nodes are never returned and k results still come back."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import noisy_queries, synthetic, walk_one
from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build
from graphlake.kernels.hybrid.update import insert, splice, update
from graphlake.kernels.hybrid.vectors import HybridVectors, Queries

N = 2000


def recall(graph, vectors: HybridVectors, queries: Queries, pool: int, live: np.ndarray | None = None) -> float:
    scaled = graph.scales
    exact = vectors.fused(queries, scaled)
    if live is not None:
        exact[:, ~live] = -np.inf
    searcher = Searcher(graph, vectors)
    found = [walk_one(searcher, queries.take([i]), scaled, pool, 10)[0] for i in range(len(queries))]
    truth = np.argsort(-exact, axis=1, kind="stable")[:, :10]
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / 10 for f, t in zip(found, truth, strict=True)]))


@pytest.mark.parametrize("share, knn", [(0.8, "auto"), (0.9, "auto"), (0.8, "candidates")])
def test_inserted_nodes_are_found_as_a_full_build_finds_them(share, knn):
    """``auto`` takes the new rows' exact k-NN (a corpus this small); ``candidates`` takes the
    candidate k-NN of the new rows that corpora past ``EXACT_KNN_UP_TO`` nodes take. Mark-deleted
    nodes are never a new node's neighbour."""
    vectors, nodes = synthetic(N, seed=11)
    order = np.random.default_rng(12).permutation(N)
    first, rest = np.sort(order[: int(share * N)]), np.sort(order[int(share * N) :])
    full = build(vectors, nodes, BuildConfig())
    base = build(vectors.take(first), nodes.take(first), BuildConfig(), scales=full.scales)
    old_to_new = first  # the part's row i is the corpus's row first[i]
    spliced = splice(base, old_to_new, N)
    deleted = first[:: len(first) // 20]
    spliced.deleted[deleted] = True
    grown = insert(spliced, vectors, nodes, rest, BuildConfig(knn=knn))
    assert not np.isin(grown.semantic[rest], deleted).any()
    grown.deleted[deleted] = False  # the recall below is against a full build over every node
    assert grown.semantic.shape == (N, 32) and not (grown.semantic == np.arange(N)[:, None]).any()
    assert all(len(set(r[r >= 0].tolist())) == (r >= 0).sum() for r in grown.semantic)  # no duplicate edges
    linked = np.zeros(N, dtype=bool)
    linked[grown.semantic[grown.semantic >= 0]] = True
    assert linked[rest].mean() >= 0.99  # new nodes are pointed at, not only pointing
    queries = noisy_queries(nodes, 150, seed=13)
    after, reference = recall(grown, vectors, queries, 128), recall(full, vectors, queries, 128)
    assert after >= 0.95 and after >= reference - 0.01, (after, reference)


def test_removed_nodes_are_spliced_out_and_mark_deleted_ones_never_returned():
    vectors, nodes = synthetic(N, seed=14)
    graph = build(vectors, nodes, BuildConfig())
    removed = np.random.default_rng(15).choice(N, N // 10, replace=False)
    survivors = np.setdiff1d(np.arange(N), removed)
    old_to_new = np.full(N, -1)
    old_to_new[survivors] = np.arange(len(survivors))
    spliced = splice(graph, old_to_new, len(survivors))
    assert spliced.semantic.max() < len(survivors) and (spliced.semantic >= 0).sum(axis=1).min() >= 16
    left = vectors.take(survivors)
    queries = noisy_queries(nodes, 150, seed=16)
    assert recall(spliced, left, queries, 128) >= 0.95

    graph.deleted[removed] = True  # the same nodes mark-deleted instead: walked through, never returned
    searcher = Searcher(graph, vectors)
    for pool in (16, 128):
        for i in range(len(queries)):
            rows, _ = walk_one(searcher, queries.take([i]), graph.scales, pool, 10)
            assert len(rows) == 10 and not graph.deleted[rows].any()
    assert recall(graph, vectors, queries, 128, live=~graph.deleted) >= 0.95


def test_update_chooses_incremental_below_the_rebuild_share():
    vectors, nodes = synthetic(N, seed=17)
    keys = [f"n{i}\th{i}" for i in range(N)]
    graph, report = update(None, None, keys, vectors, nodes, BuildConfig(), 0.2)
    assert report["mode"] == "build"
    same, report = update(graph, keys, keys, vectors, nodes, BuildConfig(), 0.2)
    assert report["mode"] == "unchanged" and np.array_equal(same.semantic, graph.semantic)
    edited = keys[:]
    for i in range(0, 100, 2):  # 50 edited (new hash), 50 removed: 150 of 1,950 rows changed
        edited[i] = f"n{i}\tedited"
    rows = [i for i in range(N) if i % 2 == 0 or i >= 100]
    kept, kept_nodes = vectors.take(np.array(rows)), nodes.take(np.array(rows))
    updated, report = update(graph, keys, [edited[i] for i in rows], kept, kept_nodes, BuildConfig(), 0.2)
    assert report == {**report, "mode": "incremental", "inserted": 50, "removed": 100}
    assert recall(updated, kept, noisy_queries(kept_nodes, 100, seed=18), 128) >= 0.95
    _, report = update(graph, keys, [edited[i] for i in rows], kept, kept_nodes, BuildConfig(), 0.05)
    assert report["mode"] == "rebuild" and "rebuild_share" in report["reason"]
    _, report = update(graph, keys, keys, vectors, nodes, BuildConfig(degree=16), 0.2)
    assert report["mode"] == "rebuild" and "configuration" in report["reason"]


def test_a_changed_corpus_updates_its_index_incrementally(lake, tmp_path):
    import json

    from dagster import AssetKey, DagsterInstance
    from typer.testing import CliRunner

    from graphlake.cli import app
    from graphlake.retrieval.learned_kinds import open_index_set
    from graphlake.retrieval.methods import load_methods
    from graphlake.warehouse.storage import LakeStorage

    words = "whale kelp reef tide coral otter heron delta glacier canyon meadow lichen fjord dune basalt quartz monsoon tundra estuary lagoon".split()
    rng = np.random.default_rng(19)
    texts = {f"d{i}": " ".join(rng.choice(words, 8)) + f" item{i}" for i in range(120)}
    path = tmp_path / "docs.jsonl"

    def materialize(docs: dict[str, str]) -> dict:
        path.write_text("".join(json.dumps({"id": k, "title": "", "text": v}) + "\n" for k, v in docs.items()), encoding="utf-8")
        invoke = lambda *args: CliRunner().invoke(app, list(args), catch_exceptions=False)  # noqa: E731
        assert invoke("ingest", "jsonl", str(path), "--corpus", "mine").exit_code == 0
        result = invoke("materialize", "--corpus", "mine", "--select", "+key:hybrid_graph_index")
        assert result.exit_code == 0, result.stderr
        with DagsterInstance.get() as instance:
            event = instance.get_latest_materialization_event(AssetKey("hybrid_graph_index"))
        return {key: value.value for key, value in event.asset_materialization.metadata.items()}

    assert materialize(texts)["mode"] == "build"
    changed = {k: v for k, v in texts.items() if k not in {f"d{i}" for i in range(5)}}  # five removed
    for i in range(5, 10):  # five edited: a new text, words no other document has
        changed[f"d{i}"] = f"volcano sunrise item{i} edited"
    report = materialize(changed)
    assert (report["mode"], report["inserted"], report["removed"]) == ("incremental", 5, 10), report

    lake_ = LakeStorage(lake)
    indexes, methods = open_index_set(lake_, "mine"), load_methods(lake)
    doc_of = dict(zip(indexes.snapshot.node_ids, indexes.snapshot.doc_ids().tolist(), strict=True))
    gone = {f"d{i}" for i in range(5)}
    for name in ("ap_three", "ap_full", "ap_dense"):
        for i in range(5, 10):
            found = [doc_of[indexes.snapshot.node_ids[row]] for row in methods[name].run(f"volcano sunrise item{i} edited", indexes).rows[:10]]
            assert f"d{i}" in found[:3] and not gone & set(found), (name, i, found)
        for old in list(texts.values())[:10]:  # the removed and the old versions' texts find no removed document
            assert not gone & {doc_of[indexes.snapshot.node_ids[row]] for row in methods[name].run(old, indexes).rows}
