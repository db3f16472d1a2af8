"""The command line end to end, as a user runs it: a real lake, real Dagster runs, real SQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.retrieval.core import uses_llm
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grapher import TunedRankers
from graphlake.retrieval.reports import evaluation_report, random_floor
from graphlake.retrieval.training.reranker import reranker_report
from graphlake.warehouse.storage import LakeStorage


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def sql_json(query: str) -> list[dict]:
    result = invoke("sql", query, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_demo_prints_the_summary_and_fills_the_lake(reads_demo):
    lake = reads_demo.home  # the session's one `graphlake demo` (conftest.py)
    assert "corpus 'demo'" in reads_demo.stdout and "contextual" in reads_demo.stdout
    assert sql_json("select split, count(*) as n from queries where corpus = 'demo' group by all order by 1") == [
        {"split": "test", "n": 23},
        {"split": "train", "n": 11},
    ]
    assert (lake / "catalog.duckdb").is_file() and (lake / "dagster" / "dagster.yaml").is_file()
    # no terminal (a log, CI): a line per materialized asset instead of a progress bar
    materialized = reads_demo.materializations()
    announced = [line.split()[2] for line in reads_demo.stderr.splitlines() if re.match(rf"demo: \d+/{len(materialized)} \S+ \(\d+ s\)$", line)]
    assert sorted(announced) == sorted(materialized)


def test_demo_shows_every_method_working_in_80_columns_grouped_by_paper(reads_demo):
    lines = reads_demo.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in reads_demo.stdout  # nothing cut in an 80-column terminal
    left_out = ["re2", "gar", "fastinsight", "grasp_zs", "grasp", "graphlake_ltr_full"]  # they rerank with the cross-encoder (or read a method that does), which 11 queries cannot teach
    declared = load_methods(reads_demo.home)
    methods = [name for name, method in declared.items() if name not in left_out and not uses_llm(method)]  # grasp_llm needs a server
    rows = [line.split("│")[1].strip() for line in lines if line.count("│") == 6]  # the closing table's rows: papers, then their methods
    papers = ["Baselines", "SPRIG", "GraphER", "FastInsight", "Allan-Poe", "GRASP", "graphlake"]
    assert [row for row in rows if row in papers] == papers
    listed = [row.removesuffix(" (below)") for row in rows if row not in papers]  # in catalogue order, the left-out marked
    assert listed == ["(random)", *(name for name in declared if name in methods or name in left_out)]
    assert [row for row in rows if row.endswith(" (below)")] == [f"{name} (below)" for name in declared if name in left_out]
    assert f"Not run here: {', '.join(left_out)}" in " ".join(reads_demo.stdout.split())
    floor = random_floor(reads_demo.home, "demo", "test")["ndcg@10"]
    for row in evaluation_report(reads_demo.home, "demo", methods, "test", [10]):
        assert row["metrics"]["ndcg@10"] >= max(2 * floor, floor + 0.2), (row["method"], row["metrics"]["ndcg@10"], floor)
    assert reranker_report(LakeStorage(reads_demo.home)) is None  # the demo trains no cross-encoder on its 11 training queries


def test_query_prints_each_hit_on_two_lines_of_80_columns_with_its_whole_node_id(reads_demo):
    env = {**os.environ, "GRAPHLAKE_HOME": str(reads_demo.home), "DAGSTER_HOME": str(reads_demo.home / "dagster"), "COLUMNS": "80"}
    graphlake = str(Path(sys.executable).with_name("graphlake"))
    asked = ["query", "--corpus", "demo", "--method", "bm25", "--top", "5", "Which vessel carried the BenthoCam sled?"]
    shown = subprocess.run([graphlake, *asked], env=env, capture_output=True, text=True, timeout=300)
    hits = json.loads(subprocess.run([graphlake, *asked, "--json"], env=env, capture_output=True, text=True, timeout=300).stdout)["hits"]
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and len(lines) == 1 + 2 * len(hits) == 11 and max(map(len, lines)) <= 80, shown.stdout
    assert [line.split()[2] for line in lines[1::2]] == [hit["node_id"] for hit in hits]  # rank, score, the node id whole


def test_ingest_jsonl_then_query_it_with_sql_and_query_builds_only_when_asked(lake, tmp_path):
    """...and an application's retrievers hand back each document's own metadata as it was written, even
    where its keys are the ones graphlake cites by (start, end, rank, score, source, title)."""
    docs = tmp_path / "docs.jsonl"
    own = [{"start": f"2024-05-1{i}T08:00", "end": None, "rank": "captain", "score": "A+", "source": "crm", "title": "Dr", "tags": ["x", i]} for i in range(3)]
    docs.write_text(
        "".join(json.dumps({"id": f"x{i}", "title": f"T{i}", "text": f"Sentence {i}. Another one.", "metadata": own[i]}) + "\n" for i in range(3)),
        encoding="utf-8",
    )
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"id": "q1", "text": "which?", "split": "test", "qrels": {"x1": 1}}) + "\n", encoding="utf-8")
    result = invoke("ingest", "jsonl", str(docs), "--corpus", "mine", "--queries", str(queries))
    assert result.exit_code == 0, result.output
    assert sql_json("select count(*) as n from documents where corpus = 'mine'") == [{"n": 3}]
    assert sql_json("select query_id, doc_id, split from qrels where corpus = 'mine'") == [{"query_id": "q1", "doc_id": "x1", "split": "test"}]
    listed = invoke("corpora")
    assert "mine" in listed.stdout and "jsonl" in listed.stdout
    # query searches what the lake has built: nothing yet, said in one line with the commands that build it
    unbuilt = invoke("query", "--corpus", "mine", "--method", "bm25", "Another sentence")
    assert unbuilt.exit_code == 1 and "graphlake materialize --corpus mine" in unbuilt.stderr and "--build" in unbuilt.stderr, unbuilt.stderr
    assert "Traceback" not in unbuilt.stderr and unbuilt.stderr.strip().count("\n") == 0 and str(lake) not in unbuilt.stderr  # a server says it too
    built = invoke("query", "--corpus", "mine", "--method", "bm25", "--build", "--json", "Sentence 2")
    assert built.exit_code == 0, built.stderr
    assert json.loads(built.stdout)["hits"][0]["doc_id"] == "x2"
    from llama_index.core.schema import MetadataMode

    from graphlake.api import RequestError, open_lake
    from graphlake.api.llama_index import GraphLakeRetriever

    application = open_lake(lake)
    (document,) = application.as_retriever(corpus="mine", method="bm25", k=1).invoke("Sentence 2")
    (node,) = GraphLakeRetriever(application, "mine", method="bm25", k=1, llm_metadata=("title", "tags")).retrieve("Sentence 2")
    for metadata in (document.metadata, node.node.metadata):
        cited = metadata.pop("graphlake")
        assert metadata == own[2] and cited["doc_id"] == "x2" and cited["title"] == "T2" and cited["source"] == "crm" and cited["rank"] == 1
        assert cited["relevance"] is None  # no evaluated run to fit it on
    with pytest.raises(RequestError, match="'bm25' on 'mine' has no relevance calibration: no stored run of 'bm25' on 'mine' with gold"):
        application.search("mine", "bm25", "Sentence 2", min_relevance=0.5)
    shown, _, text = node.node.get_content(MetadataMode.LLM).partition("\n\n")  # the user's own title, as chosen
    assert sorted(shown.splitlines()) == ["tags: ['x', 2]", "title: Dr"] and text == "Sentence 2. Another one."


def test_bad_input_fails_with_file_and_line_and_writes_nothing(lake, tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_bytes(b'{"id": "a", "title": "A", "text": "fine"}\n{"id": "b", "title": "B", "text": "caf\xe9"}\n')
    result = invoke("ingest", "jsonl", str(docs), "--corpus", "broken")
    assert result.exit_code == 1
    assert f"{docs}:2: not valid UTF-8" in result.stderr
    assert sql_json("select count(*) as n from documents where corpus = 'broken'") == [{"n": 0}]
    assert not list((lake / "tables").glob("*/corpus=broken"))


def test_cli_refuses_unknown_formats_corpora_and_writes(lake, tmp_path):
    assert "unknown format 'csv'" in invoke("ingest", "csv", str(tmp_path), "--corpus", "x").stderr
    assert "corpus 'nope' is not declared" in invoke("materialize", "--corpus", "nope").stderr
    bad_selection = invoke("materialize", "--corpus", "demo", "--select", "nodes,bm25_index")
    assert bad_selection.exit_code == 1 and "invalid asset selection 'nodes,bm25_index'" in bad_selection.stderr
    for statement, kind in (("create table t (x int)", "CREATE"), ("delete from documents", "DELETE"), ("select 1; drop view nodes", "DROP")):
        refused = invoke("sql", statement)
        assert refused.exit_code == 1 and "read-only" in refused.stderr and kind in refused.stderr, refused.stderr
    assert invoke("sql", "select count(*) as n from documents", "--json").exit_code == 0  # reads still pass


def test_materialize_runs_only_the_selection_with_the_given_run_config(demo_copy):
    lake = demo_copy  # a private copy of the session's demo lake
    before = {key: _last_materialization(key) for key in ("documents", "nodes")}
    # nodes, one step upstream of contextual edges; `nodes+` (one step down) would rerun every method's queries
    result = invoke("materialize", "--corpus", "demo", "--select", "+contextual_edges")
    assert result.exit_code == 0, result.output
    assert _last_materialization("documents") == before["documents"]
    assert _last_materialization("nodes") != before["nodes"]
    # the upstream of conceptual edges reaches half of the spaCy entities/mentions multi-asset: it runs whole
    upstream = invoke("materialize", "--corpus", "demo", "--select", "+key:conceptual_edges")
    assert upstream.exit_code == 0, upstream.output
    assert _last_materialization("entities_spacy") == _last_materialization("mentions_spacy") == _last_materialization("conceptual_edges")

    # a run config as in the Dagster launchpad reaches the asset; a bad one is refused before anything runs
    config = lake.parent / "run.yaml"
    config.write_text("ops:\n  graph_rankers:\n    config:\n      networks: []\n", encoding="utf-8")
    result = invoke("materialize", "--corpus", "demo", "--select", "key:graph_rankers", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert TunedRankers.load(LakeStorage(lake).artifact("graph_rankers", {"corpus": "demo"})).models == {}  # the config reached the asset
    config.write_text("ops:\n  graph_rankers:\n    config:\n      trian_networks: false\n", encoding="utf-8")
    before = LakeStorage(lake).artifact("graph_rankers", {"corpus": "demo"})
    refused = invoke("materialize", "--corpus", "demo", "--select", "key:graph_rankers", "--config", str(config))
    flat = "".join(refused.stderr.split())  # the console wraps long lines
    assert refused.exit_code == 1 and "".join(f"{config}: invalid run config".split()) in flat and "trian_networks" in flat
    assert LakeStorage(lake).artifact("graph_rankers", {"corpus": "demo"}) == before  # nothing ran
    config.write_text("- not a mapping\n", encoding="utf-8")
    not_a_mapping = invoke("materialize", "--corpus", "demo", "--config", str(config))
    assert not_a_mapping.exit_code == 1 and "".join(f"{config}: a run config is a mapping".split()) in "".join(not_a_mapping.stderr.split())


def _last_materialization(asset: str) -> str:
    """The Dagster run that last materialized an asset (unchanged data keeps its file, so not its mtime)."""
    with DagsterInstance.get() as instance:
        return instance.get_latest_materialization_event(AssetKey(asset)).run_id
