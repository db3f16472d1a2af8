"""Real Dagster materializations of the asset graph, through the project's own Definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import AssetSelection, DagsterEventType, DagsterInstance, DagsterRunStatus, Definitions

from conftest import materialize_committed
from graphlake.pipelines.definitions import build_definitions
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage

MATERIALIZED, CHECKED = DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION
FOUNDATION = AssetSelection.groups("ingest", "chunking") | AssetSelection.assets("contextual_edges")


def run(home: Path, instance: DagsterInstance, corpus: str, raise_on_error: bool = True, selection: AssetSelection | None = FOUNDATION):
    """Materialize a corpus with the project's Definitions (by default the stages before vectors)."""
    defs = build_definitions(home)
    if not instance.has_dynamic_partition("corpus", corpus):
        instance.add_dynamic_partitions("corpus", [corpus])
    return materialize_committed(
        home,
        [*defs.assets, *defs.asset_checks],
        instance=instance,
        resources=defs.resources,
        partition_key=corpus,
        raise_on_error=raise_on_error,
        selection=selection,
    )


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def small_corpus(folder: Path, texts: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [{"id": f"a{i}", "title": f"Doc {i}", "text": text} for i, text in enumerate(texts)]
    return write_jsonl(folder / "docs.jsonl", docs)


def test_definitions_load_and_group_every_asset_by_stage(tmp_path):
    (tmp_path / "methods.yaml").write_text("use: ['*']\n")  # every packaged method
    defs = build_definitions(tmp_path)
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    groups = {key.to_user_string(): graph.get(key).group_name for key in graph.get_all_asset_keys()}
    methods = ["bm25", "dense", "dense_hnsw", "splade", "rrf", "graph", "graph_hybrid", "graph_dense", "graph_rrf", "rrf_ppr"]
    methods += [f"grapher_{ranker}" for ranker in ("base", "ppr", "gcs", "gat", "mlp")]
    methods += ["vector", "re2", "gar", "fastinsight"]
    methods += [f"ap_{paths}" for paths in ("dense", "sparse", "full", "two", "three", "three_kw", "two_tuned", "three_tuned")]
    methods += [f"ap_{paths}_kg" for paths in ("three", "dense", "sparse", "full")] + ["ap_three_kg_entry", "fused_three", "multipath_three"]
    methods += [f"grasp_{name}" for name in ("graph", "target", "fused", "static", "dynamic", "dense_partner", "zs")] + ["grasp"]
    methods += ["graphlake_ltr", "graphlake_ltr_full"]
    assert groups == {
        "documents": "ingest",
        "queries": "ingest",
        "qrels": "ingest",
        "foreign_keys": "ingest",
        "nodes": "chunking",
        "contextual_edges": "graphs",
        "citation_edges": "graphs",
        "structural_edges": "graphs",
        "semantic_edges": "graphs",
        "cooccurrence_edges": "graphs",
        "conceptual_edges": "graphs",
        "logical_edges": "graphs",
        "triples_spacy": "enrichment",
        "triples_evidence": "enrichment",
        "triples_llm": "llm",
        "entities_llm": "llm",
        "mentions_llm": "llm",
        **{f"{table}_{extractor}": "enrichment" for table in ("entities", "mentions") for extractor in ("spacy", "regex")},
        "dense_vectors": "vectors",
        "splade_vectors": "vectors",
        "bm25_index": "indexes",
        "dense_hnsw_index": "indexes",
        "hybrid_graph_index": "indexes",
        "hybrid_weights": "retrieval",
        "graph_rankers": "retrieval",
        "reranker": "retrieval",
        "skb": "graphs",
        "skb_vectors": "vectors",
        "skb_plans": "retrieval",
        "grasp_fusion": "retrieval",
        "grasp_reranker": "retrieval",
        "learned_fusion": "retrieval",
        **{f"{prefix}_grasp_llm": "llm" for prefix in ("run", "metrics", "query_metrics")},  # the LLM planner needs a server
        **{f"run_{m}": "retrieval" for m in methods},
        **{f"metrics_{m}": "evaluation" for m in methods},
        **{f"query_metrics_{m}": "evaluation" for m in methods},
        "report": "evaluation",
    }


def test_demo_materializes_every_asset_into_consistent_tables(reads_demo):
    home = reads_demo.home  # the session's one `graphlake demo` (conftest.py): one Dagster run
    with DagsterInstance.get() as instance:
        [demo_run] = instance.get_runs()
        logs = {kind: instance.all_logs(demo_run.run_id, of_type=kind) for kind in (MATERIALIZED, CHECKED)}
    assert demo_run.status == DagsterRunStatus.SUCCESS
    materialized = {record.dagster_event.asset_key.to_user_string() for record in logs[MATERIALIZED]}
    graph = build_definitions(home).resolve_asset_graph()
    # all but the LLM assets and what the demo leaves out: the cross-encoder, GRASP's reranker tuned from it, the methods reranking with them
    reranking = ("re2", "gar", "fastinsight", "grasp_zs", "grasp", "graphlake_ltr_full")
    left_out = {f"{prefix}_{method}" for method in reranking for prefix in ("run", "metrics", "query_metrics")} | {"reranker", "grasp_reranker"}
    assert materialized == {key.to_user_string() for key in graph.get_all_asset_keys() if graph.get(key).group_name != "llm"} - left_out
    report = (LakeStorage(home).artifact("report", {"corpus": "demo"}) / "report.md").read_text(encoding="utf-8")
    assert "## split `test`" in report and "| rrf |" in report and "| splade |" in report
    checks = {e.check_name: e.passed for e in (record.dagster_event.event_specific_data for record in logs[CHECKED])}
    assert {"nodes_cover_documents", "contextual_edges_connect", "citation_edges_connect"} <= set(checks)
    assert all(checks.values()), checks
    with Catalog(home).reader() as con:
        counts = dict(con.execute("SELECT 'documents', count(*) FROM documents UNION ALL SELECT 'nodes', count(*) FROM nodes").fetchall())
        assert counts["documents"] == 53
        # every node is the exact slice of its document it claims to be
        mismatched = con.execute("SELECT count(*) FROM nodes n JOIN documents d USING (corpus, doc_id) WHERE substring(d.text, n.start + 1, n.end - n.start) <> n.text").fetchone()[0]
        assert mismatched == 0
        multi = con.execute("SELECT count(*) FROM (SELECT doc_id FROM nodes GROUP BY doc_id HAVING count(*) > 1)").fetchone()[0]
        assert multi > 20  # the demo's 64-token windows split most documents
        # contextual edges: both directions between consecutive chunks, nothing else
        edges = con.execute("SELECT count(*) FROM edges WHERE kind = 'contextual'").fetchone()[0]
        expected = 2 * (counts["nodes"] - counts["documents"])
        assert edges == expected
        bad = con.execute(
            """SELECT count(*) FROM edges e JOIN nodes s ON s.node_id = e.src JOIN nodes t ON t.node_id = e.dst
               WHERE e.kind = 'contextual' AND (s.doc_id <> t.doc_id OR abs(s.chunk_idx - t.chunk_idx) <> 1)"""
        ).fetchone()[0]
        assert bad == 0
        assert con.execute("SELECT count(*) FROM foreign_keys").fetchone()[0] == 6
        orphans = con.execute("SELECT count(*) FROM qrels q ANTI JOIN documents d USING (corpus, doc_id)").fetchone()[0]
        assert orphans == 0


def test_rematerializing_one_corpus_leaves_the_other_untouched(tmp_path):
    CorpusRegistry(tmp_path).add(CorpusSpec(name="small", format="jsonl", path=str(small_corpus(tmp_path / "raw", ["One. Two."]))))
    with DagsterInstance.ephemeral() as instance:
        run(tmp_path, instance, "demo")
        run(tmp_path, instance, "small")
        demo_files = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (tmp_path / "tables").rglob("corpus=demo/**/*.parquet")}
        assert len(demo_files) >= 6
        run(tmp_path, instance, "small")
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in demo_files} == demo_files
    with Catalog(tmp_path).reader() as con:
        assert con.execute("SELECT corpus, count(*) FROM documents GROUP BY ALL ORDER BY 1").fetchall() == [("demo", 53), ("small", 1)]


def test_failed_ingest_keeps_the_previous_good_tables(tmp_path):
    source = small_corpus(tmp_path / "raw", ["First version."])
    CorpusRegistry(tmp_path).add(CorpusSpec(name="small", format="jsonl", path=str(source)))
    with DagsterInstance.ephemeral() as instance:
        run(tmp_path, instance, "small")
        source.write_text(source.read_text() + '{"id": "a9", "title": "broken", "text": \n', encoding="utf-8")
        result = run(tmp_path, instance, "small", raise_on_error=False)
    assert not result.success
    [failure] = result.get_step_failure_events()
    cause = failure.step_failure_data.error
    while cause.cause is not None:
        cause = cause.cause
    assert f"{source}:2: malformed JSON" in cause.message
    lake = LakeStorage(tmp_path)
    assert lake.read("documents", {"corpus": "small"}).column("text").to_pylist() == ["First version."]
    assert lake.read("nodes", {"corpus": "small"}).num_rows == 1


def test_a_run_launched_as_the_ui_does_commits_only_when_every_step_succeeds(tmp_path):
    """Dagster's own ``dagster asset materialize`` on the code location, as the UI, a schedule or the
    sensor launch runs: its multiprocess executor, wrapped to commit, makes one snapshot per
    successful run and none for a failed one."""
    import os
    import subprocess
    import sys

    from graphlake.warehouse.snapshots import Snapshots

    source = small_corpus(tmp_path / "raw", ["First version."])
    CorpusRegistry(tmp_path).add(CorpusSpec(name="small", format="jsonl", path=str(source)))
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:
        instance.add_dynamic_partitions("corpus", ["small"])
    keys = ",".join(key.to_user_string() for key in FOUNDATION.resolve(build_definitions(tmp_path).assets))
    env = {**os.environ, "GRAPHLAKE_HOME": str(tmp_path), "DAGSTER_HOME": str(tmp_path / "dagster")}
    dagster = str(Path(sys.executable).with_name("dagster"))

    def launch() -> int:
        command = [dagster, "asset", "materialize", "-m", "graphlake.pipelines.definitions", "--select", keys, "--partition", "small"]
        return subprocess.run(command, env=env, capture_output=True, text=True, cwd=tmp_path).returncode

    assert launch() == 0
    assert Snapshots(tmp_path).current("small").number == 1
    assert LakeStorage(tmp_path).read("nodes", {"corpus": "small"}).column("text").to_pylist() == ["First version."]
    source.write_text(json.dumps({"id": "a0", "title": "Doc 0", "text": "Second version."}) + '\n{"id": "a9", "title": "broken", "text": \n')
    assert launch() != 0
    assert Snapshots(tmp_path).current("small").number == 1
    with Catalog(tmp_path).reader() as con:
        assert con.execute("SELECT text FROM nodes WHERE corpus = 'small'").fetchall() == [("First version.",)]


@pytest.mark.parametrize("size", [None, 4])
def test_chunking_options_come_from_the_registry(tmp_path, size):
    from graphlake.warehouse.corpora import Chunking

    source = small_corpus(tmp_path / "raw", ["One two three. Four five six. Seven eight nine."])
    chunking = Chunking(size=size, overlap=0) if size else Chunking()
    CorpusRegistry(tmp_path).add(CorpusSpec(name="small", format="jsonl", path=str(source), chunking=chunking))
    with DagsterInstance.ephemeral() as instance:
        run(tmp_path, instance, "small")
    assert LakeStorage(tmp_path).read("nodes", {"corpus": "small"}).num_rows == (1 if size is None else 3)


def test_nodes_check_catches_gaps_wrong_slices_and_uncovered_documents():
    import pyarrow as pa

    from graphlake.assets.chunking.nodes import nodes_cover_documents

    documents = pa.table({"doc_id": ["a", "b", "c"], "text": ["Hello world.", "Second doc.", "Never chunked."]})
    nodes = pa.table(
        {
            "node_id": ["a#0", "b#0", "b#2"],
            "doc_id": ["a", "b", "b"],
            "chunk_idx": [0, 0, 2],
            "text": ["Hello world.", "Second", "doc."],
            "start": [0, 0, 7],
            "end": [12, 5, 11],
        }
    )
    result = nodes_cover_documents(nodes=nodes, documents=documents)
    assert not result.passed
    assert result.metadata["documents_without_nodes"].value == 1
    assert result.metadata["non_contiguous_chunks"].value == 1
    assert result.metadata["wrong_slices"].value == 1
    good = nodes_cover_documents(nodes=nodes.slice(0, 1), documents=documents.slice(0, 1))
    assert good.passed
