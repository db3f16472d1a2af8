"""Edits, additions and removals of documents reach every derived table and every method: a corpus
built from the demo's files gets 3 documents edited, 2 added and 2 removed, and is reindexed.

The build leaves out what is trained lake-wide (the cross-encoder and GRASP's reranker) and the
methods that read it, as ``graphlake demo`` does: they are not the corpus's derived data, and
training them would only make the test slower."""

from __future__ import annotations

import io
import json
import shutil

import yaml
from dagster import AssetKey, AssetRecordsFilter, AssetSelection, DagsterEventType, DagsterInstance, RunsFilter
from rich.console import Console

from graphlake.api import GraphLake
from graphlake.assets.ingest.raw_corpus import RAW_TABLES
from graphlake.kernels.text import encoders
from graphlake.pipelines.definitions import build_definitions, default_selection
from graphlake.pipelines.runner import materialize_corpus
from graphlake.retrieval.core import method_asset_names, needs, uses_llm
from graphlake.retrieval.index.tables import retrieval_texts
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.corpora import DEMO_CONFIG, DEMO_PATH, CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage

CORPUS = "edited"
LAKE_WIDE = {"reranker", "grasp_reranker"}
NEW = {
    "n01": ("Zebrafinch Reef", "The zebrafinch reef was charted by volunteer kayakers in 2019 using handheld sonar."),
    "n02": ("Quillwort Ponds", "Quillwort ponds above the cape hold an isolated population of freshwater sponges."),
}


def built_methods(home) -> tuple[list[str], AssetSelection]:
    """The declared methods that read nothing trained lake-wide, and the corpus's selection without
    the others and the lake-wide training."""
    methods = load_methods(home)
    left_out = [n for n, m in methods.items() if uses_llm(m) or LAKE_WIDE & {index.partition("/")[0] for index in needs(m)}]
    skipped = AssetSelection.assets(*LAKE_WIDE, *(asset for name in left_out for asset in method_asset_names(name)))
    return [name for name in methods if name not in left_out], default_selection(home) - skipped


def rows_naming(home, nodes: set[str], docs: set[str]) -> dict[str, int]:
    """Per table of the corpus, the rows that name one of ``nodes`` or ``docs`` in any column that holds such ids."""
    found = {}
    node_list = ", ".join(f"'{n}'" for n in nodes) or "NULL"
    doc_list = ", ".join(f"'{d}'" for d in docs) or "NULL"
    with Catalog(home).reader() as con:
        for table in ("nodes", "edges", "mentions", "triples", "vectors", "runs", "documents", "qrels"):
            columns = {row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()}
            conditions = [f"{c} IN ({node_list})" for c in ("node_id", "src", "dst") if c in columns]
            conditions += [f"doc_id IN ({doc_list})" for c in ("doc_id",) if c in columns]
            found[table] = con.execute(f"SELECT count(*) FROM {table} WHERE corpus = '{CORPUS}' AND ({' OR '.join(conditions)})").fetchone()[0]
    return found


def last_changes(home, asset: str) -> dict[str, int]:
    with DagsterInstance.get() as instance:
        [record] = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[CORPUS]), limit=1, ascending=False).records
    metadata = record.asset_materialization.metadata
    return {change: metadata[f"rows_{change}"].value for change in ("added", "changed", "removed")}


def test_edited_added_and_removed_documents_reach_every_table_and_method(demo_copy, tmp_path, monkeypatch):
    home = demo_copy
    (home / "methods.yaml").unlink()  # the default methods: a newcomer's lake (every variant is checked on the demo)
    source = tmp_path / "edited"
    shutil.copytree(DEMO_PATH, source)
    CorpusRegistry(home).add(CorpusSpec(name=CORPUS, format="demo", path=str(source)))
    methods, selection = built_methods(home)
    config = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    config["ops"] = {op: settings for op, settings in config["ops"].items() if op not in LAKE_WIDE}
    materialize_corpus(home, CORPUS, selection, Console(file=io.StringIO()), config, incremental=True)
    ran_before = steps_of_last_run()

    docs = [json.loads(line) for line in (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    gold = {doc for line in (source / "queries.jsonl").read_text(encoding="utf-8").splitlines() for doc in json.loads(line).get("qrels", {})}
    removed = [d for d in docs if d["id"] not in gold][:2]
    edited = [d for d in docs if d not in removed][:3]
    old_text = {d["id"]: d["text"] for d in edited + removed}
    lake = LakeStorage(home)
    before_nodes = lake.read("nodes", {"corpus": CORPUS})
    removed_nodes = {n for n, d in zip(before_nodes.column("node_id").to_pylist(), before_nodes.column("doc_id").to_pylist(), strict=True) if d in {r["id"] for r in removed}}
    assert removed_nodes and all(rows_naming(home, removed_nodes, {r["id"] for r in removed})[t] for t in ("nodes", "vectors", "documents"))
    for i, doc in enumerate(edited):
        doc["text"] = f"Rewritten in 2026: the marram{i} dunes shelter nesting terns, counted by the wardens every spring."
    kept = [d for d in docs if d not in removed] + [{"id": i, "title": t, "text": x} for i, (t, x) in NEW.items()]
    (source / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in kept), encoding="utf-8")

    encoded: list[str] = []
    real = encoders.encode_dense

    def spy(texts, *args, **kwargs):  # the real encoder, with a record of what it was given
        encoded.extend(texts)
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(encoders, "encode_dense", spy)
    shown = io.StringIO()
    materialize_corpus(home, CORPUS, selection, Console(file=shown, width=200), config, incremental=True)  # the reindex
    assert steps_of_last_run() == ran_before  # the files changed: everything downstream of them runs again
    said = {line.split(": ", 2)[1]: line.split(": ", 2)[2] for line in shown.getvalue().splitlines() if line.startswith(f"{CORPUS}: ") and line.count(": ") >= 2}
    nodes_changed = last_changes(home, "nodes")
    assert said["documents"] == "2 added, 3 changed, 2 removed"  # the reindex's closing summary
    assert said["nodes"] == f"{nodes_changed['added']} added, {nodes_changed['changed']} changed, {nodes_changed['removed']} removed"
    assert "by dense_vectors" in said["nodes through a model"] and "hybrid_graph_index" in said["indexes"]
    assert said[f"methods re-run ({len(methods)})"] == ", ".join(sorted(methods))

    # no table of the corpus names a removed document or its nodes
    assert rows_naming(home, removed_nodes, {r["id"] for r in removed}) == dict.fromkeys(("nodes", "edges", "mentions", "triples", "vectors", "runs", "documents", "qrels"), 0)
    # only the new or changed nodes' texts were encoded
    nodes, documents = lake.read("nodes", {"corpus": CORPUS}), lake.read("documents", {"corpus": CORPUS})
    changed_docs = {d["id"] for d in edited} | set(NEW)
    texts = dict(zip(nodes.column("node_id").to_pylist(), retrieval_texts(nodes, documents), strict=True))
    doc_of = dict(zip(nodes.column("node_id").to_pylist(), nodes.column("doc_id").to_pylist(), strict=True))
    node_texts = set(texts.values())
    assert {t for t in encoded if t in node_texts} == {t for n, t in texts.items() if doc_of[n] in changed_docs}
    # the metadata counts what changed
    assert last_changes(home, "documents") == {"added": 2, "changed": 3, "removed": 2}
    assert last_changes(home, "nodes")["removed"] >= 2 and last_changes(home, "nodes")["added"] >= 2
    # every method: removed documents are never returned; an edited one is found by its new words, not its old ones
    for method in methods:
        for doc in removed:
            hits = GraphLake(home).search(CORPUS, method, doc["text"], 10).hits
            assert not {h.node_id for h in hits} & removed_nodes, (method, doc["id"])
        hits = GraphLake(home).search(CORPUS, method, old_text[edited[0]["id"]], 10).hits
        assert all(h.text != old_text[edited[0]["id"]] for h in hits), method
    for method in ("bm25", "dense", "rrf"):
        for i, doc in enumerate(edited):
            hits = GraphLake(home).search(CORPUS, method, f"marram{i} dunes nesting terns wardens", 3).hits
            assert doc["id"] in {doc_of[h.node_id] for h in hits}, (method, doc["id"])

    # nothing changed: nothing runs; one method switched on: its run, its evaluation and the report, nothing else
    unchanged = io.StringIO()
    last = steps_of_last_run(run_id=True)
    materialize_corpus(home, CORPUS, built_methods(home)[1], Console(file=unchanged), config, incremental=True)
    assert f"{CORPUS}: up to date" in unchanged.getvalue() and steps_of_last_run(run_id=True) == last
    (home / "methods.yaml").write_text("use: [graph]\n")
    materialize_corpus(home, CORPUS, built_methods(home)[1], Console(file=io.StringIO()), config, incremental=True)
    assert steps_of_last_run() == {"run_graph", "evaluate_graph", "report"}

    # a query added, the documents as they were: the ingest step, then only what reads the queries or the gold
    with (source / "queries.jsonl").open("a", encoding="utf-8") as queries:
        queries.write(json.dumps({"id": "q99", "text": "Who counts the nesting terns?", "split": "test", "qrels": {edited[0]["id"]: 1}}) + "\n")
    selection = built_methods(home)[1]
    materialize_corpus(home, CORPUS, selection, Console(file=io.StringIO()), config, incremental=True)
    graph = build_definitions(home).resolve_asset_graph()
    keys = selection.resolve(graph)
    raw = {AssetKey(name) for name in RAW_TABLES}
    expected = raw | {key for key in keys if graph.get(key).parent_keys and _reaches(graph, {AssetKey("queries"), AssetKey("qrels")}, key)}
    assert assets_of_last_run() == expected
    assert AssetKey("nodes") not in expected and AssetKey("dense_vectors") not in expected


def _reaches(graph, sources: set, key) -> bool:
    """Whether ``key`` is downstream of one of ``sources``."""
    todo, seen = list(graph.get(key).parent_keys), set()
    while todo:
        parent = todo.pop()
        if parent in sources:
            return True
        if parent not in seen:
            seen.add(parent)
            todo.extend(graph.get(parent).parent_keys)
    return False


def assets_of_last_run() -> set:
    """The assets the corpus's latest Dagster run materialized."""
    with DagsterInstance.get() as instance:
        [record] = instance.get_run_records(RunsFilter(tags={"graphlake/corpus": CORPUS}), limit=1)
        events = instance.get_records_for_run(record.dagster_run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    return {event.event_log_entry.dagster_event.asset_key for event in events}


def steps_of_last_run(run_id: bool = False):
    """The steps of the corpus's latest Dagster run (or its id)."""
    with DagsterInstance.get() as instance:
        [record] = instance.get_run_records(RunsFilter(tags={"graphlake/corpus": CORPUS}), limit=1)
        if run_id:
            return record.dagster_run.run_id
        return {stat.step_key for stat in instance.get_run_step_stats(record.dagster_run.run_id)}
