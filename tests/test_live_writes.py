"""Writes from the application to a corpus the lake owns: upserted, replaced and deleted through the
Python API, the server and both adapters; searchable by every default method right after they are
acknowledged; folded by a build, after which the corpus ranks exactly as one built from scratch on the
same final documents; a corpus read from its files refuses writes.

The lake encodes in float32 here (``GRAPHLAKE_ENCODER_PRECISION``): under bfloat16, this CPU's default,
a passage's vector depends on the batch it was encoded in (up to 5e-4 a coordinate), so the folded
lake, which encodes only the new nodes, and the scratch one differ where two nodes nearly tie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import use_lake
from dagster import DagsterInstance, build_sensor_context
from served import KEY, Server
from typer.testing import CliRunner

from graphlake.api import GraphLake, RemoteLake, RequestError
from graphlake.cli import app
from graphlake.pipelines.definitions import build_definitions
from graphlake.pipelines.reindex import pending_writes_sensor
from graphlake.retrieval.methods import DEFAULT_METHODS
from graphlake.warehouse.config_files import load_mapping
from graphlake.warehouse.corpora import DEMO_PATH
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.write_log import pending_writes

METHODS = load_mapping(DEFAULT_METHODS)["use"]
QUERIES = ["Which vessel carried the sled?", "eelgrass transplant survival", "urchin removal and kelp recovery", "Who led the survey?", "rockling recruitment"]


def documents() -> dict[str, dict]:
    rows = [json.loads(line) for line in (DEMO_PATH / "corpus.jsonl").read_text().splitlines()]
    return {row["id"]: {"id": row["id"], "title": row["title"], "text": row["text"], "metadata": row["metadata"]} for row in rows}


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def rankings(lake: GraphLake) -> dict[str, list[list[str]]]:
    return {m: [[h.node_id for h in lake.search("notes", m, q, k=10, group_by="chunk").hits] for q in QUERIES] for m in METHODS}


def test_writes_are_searchable_at_once_and_folded_as_a_scratch_build(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHLAKE_ENCODER_PRECISION", "float32")
    home = use_lake(monkeypatch, tmp_path / "lake")
    corpus = documents()
    cli("ingest", "api", "--corpus", "notes")
    lake = GraphLake(home)
    first = lake.upsert("notes", [corpus[f"d{i:02d}"] for i in range(1, 25)])
    assert (first.seq, first.documents) == (1, 24) and pending_writes(home, "notes") == [1]
    assert "folded 1 pending write(s), through number 1" in cli("materialize", "--corpus", "notes")
    assert pending_writes(home, "notes") == [] and not list((home / "writes" / "notes").iterdir())  # the log trimmed after the commit

    server = Server(home, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        from llama_index.core.schema import TextNode

        from graphlake.api.llama_index import GraphLakeRetriever

        added = remote.upsert("notes", [corpus["d25"]])  # over HTTP
        assert remote.as_retriever(corpus="notes").delete(["d03"])  # LangChain's call, through the server
        GraphLakeRetriever(lake, "notes").add([TextNode(id_="d26", text=corpus["d26"]["text"], metadata={**corpus["d26"]["metadata"], "title": corpus["d26"]["title"]})])
        replaced = lake.upsert("notes", [{"id": "d04", "title": "Sea star census", "text": "Divers counted sunflower sea stars on the Aldersey reefs in 2022."}])
        assert added.seq < replaced.seq and [c.pending for c in lake.corpora() if c.name == "notes"] == [4]
        with pytest.raises(RequestError, match="corpus 'demo' is read from its demo source, which stays its only source: it takes no writes"):
            remote.upsert("demo", [corpus["d25"]])
        with pytest.raises(RequestError, match=r"documents\[0\] \(id 'x'\): text: a non-empty string"):
            lake.upsert("notes", [{"id": "x", "text": ""}])
        for method in METHODS:  # each default method finds the new document, never the deleted one, and the replaced one as it is now
            for searcher in (lake, remote):
                found = searcher.search("notes", method, corpus["d25"]["title"], k=3, after_write=replaced.seq).hits
                assert [(h.doc_id, h.fresh) for h in found if h.doc_id == "d25"] == [("d25", True)], (method, type(searcher).__name__)
            assert "d03" not in {h.doc_id for h in lake.search("notes", method, corpus["d03"]["title"], k=30).hits}, method
            assert [h.text for h in lake.search("notes", method, "sunflower sea stars Aldersey", k=5).hits if h.doc_id == "d04"] == ["Divers counted sunflower sea stars on the Aldersey reefs in 2022."], method
        from graphlake.api.langchain import GraphLakeRetriever as LangChainRetriever

        shown = LangChainRetriever(lake=remote, corpus="notes", k=2).invoke(corpus["d26"]["title"])
        assert shown[0].id == "d26#0" and shown[0].metadata["graphlake"]["fresh"] and shown[0].metadata["year"] == corpus["d26"]["metadata"]["year"]
        with pytest.raises(RequestError, match="after_write: write 99 is not in corpus 'notes'"):
            remote.search("notes", "rrf", "sled", after_write=99)
    finally:
        remote.close()
        server.stop()

    repository = build_definitions(home).get_repository_def()
    with DagsterInstance.ephemeral() as instance:
        context = lambda: build_sensor_context(instance=instance, resources={"lake": LakeResource(home=str(home))}, repository_def=repository)  # noqa: E731
        assert "no corpus the lake owns has writes due" in pending_writes_sensor(context()).skip_message  # 4 writes, the oldest seconds old
        monkeypatch.setenv("GRAPHLAKE_FOLD_WRITES", "4")
        [request] = pending_writes_sensor(context())
        assert request.partition_key == "notes" and request.run_key == f"notes:fold:{replaced.seq}"
    assert "folded 4 pending write(s), through number 5" in cli("materialize", "--corpus", "notes")
    folded = GraphLake(home)
    hits = folded.search("notes", "ap_three", corpus["d25"]["title"], k=3).hits
    assert hits[0].doc_id == "d25" and not any(h.fresh for h in hits) and pending_writes(home, "notes") == []

    final = {d: corpus[d] for d in (f"d{i:02d}" for i in range(1, 27)) if d != "d03"}
    final["d04"] = {"id": "d04", "title": "Sea star census", "text": "Divers counted sunflower sea stars on the Aldersey reefs in 2022."}
    final["d26"] = {**final["d26"], "metadata": {**corpus["d26"]["metadata"], "title": corpus["d26"]["title"]}}  # as the LlamaIndex node carried them
    scratch = use_lake(monkeypatch, tmp_path / "scratch")
    cli("ingest", "api", "--corpus", "notes")
    GraphLake(scratch).upsert("notes", list(final.values())[::-1])  # one write, in another order
    cli("materialize", "--corpus", "notes")
    assert rankings(folded) == rankings(GraphLake(scratch))
