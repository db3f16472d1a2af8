"""Writes from the application to a corpus the lake owns: upserted, replaced and deleted through the
Python API, the server and both adapters; searchable by every default method right after they are
acknowledged; folded by a build, after which the corpus ranks exactly as one built from scratch on the
same final documents, and searches across the fold see each document once; a corpus read from its
files refuses writes (kills of servers and folds under a stream of writes: ``test_write_trust.py``).

The lake encodes in float32 here (``GRAPHLAKE_ENCODER_PRECISION``): under bfloat16, this CPU's default,
a passage's vector depends on the batch it was encoded in (up to 5e-4 a coordinate), so the folded
lake, which encodes only the new nodes, and the scratch one differ where two nodes nearly tie."""

from __future__ import annotations

import json
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, build_sensor_context
from typer.testing import CliRunner

from conftest import use_lake
from graphlake.api import GraphLake, RemoteLake, RequestError, UnknownName
from graphlake.cli import app
from graphlake.pipelines.definitions import build_definitions
from graphlake.pipelines.reindex import pending_writes_sensor
from graphlake.retrieval.methods import DEFAULT_METHODS
from graphlake.warehouse.config_files import load_mapping
from graphlake.warehouse.corpora import DEMO_PATH, CorpusRegistry, CorpusSpec
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.write_log import pending_writes
from served import KEY, Server

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
    folded = cli("materialize", "--corpus", "notes")
    assert "folded 1 pending write(s), through number 1" in folded
    assert "0 by dense_vectors" in folded and "0 by splade_vectors" in folded, folded  # the write's kept vectors, not encoded again
    assert pending_writes(home, "notes") == [] and not list((home / "writes" / "notes").iterdir())  # the log trimmed after the commit

    server = Server(home, tmp_path / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        from llama_index.core.schema import TextNode

        from graphlake.api.llama_index import GraphLakeRetriever

        added = remote.upsert("notes", [corpus["d25"]])  # over HTTP
        assert remote.as_retriever(corpus="notes").delete(["d03"])  # LangChain's call, through the server
        GraphLakeRetriever(lake, "notes").add([TextNode(id_="d26", text=corpus["d26"]["text"], metadata={**corpus["d26"]["metadata"], "title": corpus["d26"]["title"]})])
        GraphLakeRetriever(remote, "notes").delete("d05")  # LlamaIndex's calls, in process and through the server
        from langchain_core.documents import Document

        assert lake.as_retriever(corpus="notes").add_documents(
            [Document(page_content=corpus["d28"]["text"], metadata={**corpus["d28"]["metadata"], "title": corpus["d28"]["title"]})], ids=["d28"]
        ) == ["d28"]
        replaced = lake.upsert("notes", [{"id": "d04", "title": "Sea star census", "text": "Divers counted sunflower sea stars on the Aldersey reefs in 2022."}])
        assert added.seq < replaced.seq and [c.pending for c in lake.corpora() if c.name == "notes"] == [6]
        CorpusRegistry(home).add(CorpusSpec(name="files", format="files", path=str(DEMO_PATH)))
        with pytest.raises(RequestError, match="corpus 'files' is read from its files source, which stays its only source: it takes no writes"):
            remote.upsert("files", [corpus["d25"]])
        with pytest.raises(RequestError, match=r"documents\[0\] \(id 'x'\): text: a non-empty string"):
            lake.upsert("notes", [{"id": "x", "text": ""}])
        for method in METHODS:  # each default method finds the new document, never the deleted one, and the replaced one as it is now
            for searcher in (lake, remote):
                found = searcher.search("notes", method, corpus["d25"]["title"], k=3, after_write=replaced.seq).hits
                assert [(h.doc_id, h.fresh) for h in found if h.doc_id == "d25"] == [("d25", True)], (method, type(searcher).__name__)
            assert not {"d03", "d05"} & {h.doc_id for h in lake.search("notes", method, f"{corpus['d03']['title']} {corpus['d05']['title']}", k=30).hits}, method
            assert [h.text for h in lake.search("notes", method, "sunflower sea stars Aldersey", k=5).hits if h.doc_id == "d04"] == [
                "Divers counted sunflower sea stars on the Aldersey reefs in 2022."
            ], method
        from graphlake.api.langchain import GraphLakeRetriever as LangChainRetriever

        shown = LangChainRetriever(lake=remote, corpus="notes", k=2).invoke(corpus["d26"]["title"])
        assert shown[0].id == "d26" and shown[0].metadata["graphlake"]["fresh"] and shown[0].metadata["year"] == corpus["d26"]["metadata"]["year"]
        with pytest.raises(UnknownName, match="after_write: write 99 is not in corpus 'notes'"):
            remote.search("notes", "rrf", "sled", after_write=99)
    finally:
        remote.close()
        server.stop()

    repository = build_definitions(home).get_repository_def()
    with DagsterInstance.ephemeral() as instance:
        context = lambda: build_sensor_context(instance=instance, resources={"lake": LakeResource(home=str(home))}, repository_def=repository)  # noqa: E731
        assert "no corpus the lake owns has writes due" in pending_writes_sensor(context()).skip_message  # 6 writes, the oldest seconds old
        monkeypatch.setenv("GRAPHLAKE_FOLD_WRITES", "6")
        [request] = pending_writes_sensor(context())
        assert request.partition_key == "notes" and request.run_key == f"notes:fold:{replaced.seq}"
    command = [str(Path(sys.executable).with_name("graphlake")), "materialize", "--corpus", "notes"]
    killed = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.Random(3).uniform(1, 6))
    killed.kill()  # a build killed at a random moment: the acknowledged writes stay pending or folded, never lost
    killed.wait()
    seen = [h.doc_id for h in GraphLake(home).search("notes", "rrf", corpus["d25"]["title"], k=30, group_by="document").hits]
    assert seen.count("d25") == 1 and "d03" not in seen and "d26" in seen
    build, late = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), None
    while build.poll() is None:  # searches across the fold: each document once, none lost; a write meanwhile is taken
        for method in ("rrf", "ap_three"):
            seen = [h.doc_id for h in lake.search("notes", method, corpus["d25"]["title"], k=30, group_by="document").hits]
            assert seen.count("d25") == 1 and "d03" not in seen and len(seen) == len(set(seen)), (method, seen)
        late = late or lake.upsert("notes", [corpus["d27"]])
    assert build.returncode == 0, build.stderr.read()[-2000:]
    folded = GraphLake(home)
    hits = folded.search("notes", "ap_three", corpus["d25"]["title"], k=3).hits
    assert hits[0].doc_id == "d25" and not hits[0].fresh
    pending = pending_writes(home, "notes")  # written during the build: folded if before its read of the log, else still pending
    assert pending in ([], [late.seq]) and [(h.doc_id, h.fresh) for h in folded.search("notes", "bm25", corpus["d27"]["title"], k=1).hits] == [("d27", bool(pending))]
    cli("materialize", "--corpus", "notes")

    final = {d: corpus[d] for d in (f"d{i:02d}" for i in range(1, 29)) if d not in ("d03", "d05")}
    final["d28"] = {**final["d28"], "metadata": {**corpus["d28"]["metadata"], "title": corpus["d28"]["title"]}}
    final["d04"] = {"id": "d04", "title": "Sea star census", "text": "Divers counted sunflower sea stars on the Aldersey reefs in 2022."}
    final["d26"] = {**final["d26"], "metadata": {**corpus["d26"]["metadata"], "title": corpus["d26"]["title"]}}  # as the LlamaIndex node carried them
    scratch = use_lake(monkeypatch, tmp_path / "scratch")
    cli("ingest", "api", "--corpus", "notes")
    GraphLake(scratch).upsert("notes", list(final.values())[::-1])  # one write, in another order
    cli("materialize", "--corpus", "notes")
    assert rankings(folded) == rankings(GraphLake(scratch))


def test_a_write_is_in_the_very_next_search_from_another_thread(tmp_path, monkeypatch):
    """200 times each, in process and over HTTP, while two other clients keep writing: a thread writes
    (an upsert, then a delete) and, once it is acknowledged, another thread searches: the upsert is
    found and the delete is not, every time
    (``api/searchers.py`` lists the log at every search; there is no refresh interval to wait out)."""
    home = use_lake(monkeypatch, tmp_path / "lake")
    corpus = documents()
    cli("ingest", "api", "--corpus", "live")
    lake = GraphLake(home)
    lake.upsert("live", [corpus[f"d{i:02d}"] for i in range(1, 7)])
    cli("materialize", "--corpus", "live")
    text = corpus["d02"]["text"]  # words the snapshot's BM25 knows
    server = Server(home, tmp_path / "server.log", KEY)
    writer, searcher = RemoteLake(server.url, api_key=KEY), RemoteLake(server.url, api_key=KEY)
    try:
        for name, writes, searches in (("in process", lake, lake), ("over HTTP", writer, searcher)):
            asked: queue.Queue = queue.Queue()
            seen: list[tuple[str, bool]] = []

            def search() -> None:
                while (item := asked.get()) is not None:
                    op, doc_id = item
                    hits = searches.search("live", "bm25", text, k=50, group_by="document").hits
                    seen.append((op, doc_id in {h.doc_id for h in hits}))
                    asked.task_done()

            thread = threading.Thread(target=search)
            thread.start()
            busy, stop = [], threading.Event()  # two other clients write all along, over HTTP, each on a connection of its own

            def write_on(n: int) -> None:
                other = RemoteLake(server.url, api_key=KEY)
                try:
                    while not stop.wait(0.05):  # the same five documents rewritten: a write's encoding is the segment's, not the test's, cost
                        slot = len(busy) % 5
                        busy.append(other.upsert("live", [{"id": f"other-{name[:2]}-{n}-{slot}", "text": f"Background note {slot} of writer {n}."}]).seq)
                finally:
                    other.close()

            others = [threading.Thread(target=write_on, args=(n,)) for n in range(2)]
            for other in others:
                other.start()
            for i in range(200):
                doc_id = f"live-{name[:2]}-{i}"
                writes.upsert("live", [{"id": doc_id, "title": corpus["d02"]["title"], "text": text}])
                asked.put(("upsert", doc_id))
                asked.join()  # searched before the next write
                writes.delete("live", [doc_id])
                asked.put(("delete", doc_id))
                asked.join()
            asked.put(None)
            thread.join()
            stop.set()
            for other in others:
                other.join()
            assert len(busy) > 20, len(busy)  # the writes did interleave
            assert seen == [("upsert", True), ("delete", False)] * 200, (name, [s for s in seen if s[1] != (s[0] == "upsert")][:5])
    finally:
        writer.close()
        searcher.close()
        server.stop()
