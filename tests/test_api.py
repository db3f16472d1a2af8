"""The API over HTTP, as an application meets it: a real ``graphlake serve`` process on 127.0.0.1 and a
real HTTP client. It answers as the stored runs do, guards itself with the API key, refuses what is
out of bounds in one line, and follows a reindex committed while it serves, every response's hits
from the snapshot it names."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from dagster import AssetSelection
from rich.console import Console

from graphlake.pipelines.runner import materialize_corpus
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage
from served import KEY, Server

METHODS = ("bm25", "dense", "rrf", "ap_three", "graph_rrf", "grasp_fused")  # batched paths; SPRIG's entity graph and GRASP's SKB, loaded by views


def test_the_server_answers_as_the_stored_runs_and_guards_itself(served, demo_lake):
    auth = {"Authorization": f"Bearer {KEY}"}
    post = lambda path, body, headers=auth: httpx.post(served.url + path, json=body, headers=headers, timeout=300)  # noqa: E731
    assert httpx.get(f"{served.url}/health").json()["status"] == "ok"  # open, for a load balancer
    assert post("/search", {"corpus": "demo", "method": "bm25", "query": "sled"}, {}).status_code == 401
    wrong = post("/search", {"corpus": "demo", "method": "bm25", "query": "sled"}, {"X-API-Key": "not-it"})
    assert wrong.status_code == 401 and "API key" in wrong.json()["error"]
    assert "swagger" in httpx.get(f"{served.url}/docs", headers=auth).text.lower()

    [demo] = httpx.get(f"{served.url}/corpora", headers=auth).json()
    assert demo["name"] == "demo" and demo["snapshot"] >= 1 and demo["nodes"] > 0
    methods = {m["name"]: m for m in httpx.get(f"{served.url}/methods", headers=auth).json()}
    assert "weights" in methods["ap_three"]["query_time"] and methods["bm25"]["switched_on"]

    # the same hits as the runs the demo stored for its test queries, one by one and in one batch (as nodes: the runs rank nodes)
    lake = LakeStorage(demo_lake.home)
    queries = {q["query_id"]: q["text"] for q in lake.read("queries", {"corpus": "demo"}).to_pylist() if q["split"] == "test"}
    for method in METHODS:
        stored: dict[str, list[tuple[str, float]]] = {}
        for row in sorted(lake.read("runs", {"corpus": "demo", "method": method}).to_pylist(), key=lambda r: r["rank"]):
            stored.setdefault(row["query_id"], []).append((row["node_id"], row["score"]))
        batch = post("/search/batch", {"corpus": "demo", "method": method, "queries": list(queries.values()), "k": 10, "group_by": "chunk"})
        assert batch.status_code == 200, batch.text
        for (query_id, text), answered in zip(queries.items(), batch.json(), strict=True):
            single = post("/search", {"corpus": "demo", "method": method, "query": text, "k": 10, "group_by": "chunk"}).json()
            expected = stored[query_id][:10]
            for result in (single, answered):
                assert result["snapshot"] == demo["snapshot"]
                assert [h["node_id"] for h in result["hits"]] == [n for n, _ in expected], (method, query_id)
                assert [h["score"] for h in result["hits"]] == pytest.approx([s for _, s in expected], rel=1e-3, abs=1e-4)

    # any path weights at query time; what a method does not take, and every limit, in one line
    dense_only = post("/search", {"corpus": "demo", "method": "ap_three", "query": "BenthoCam sled", "weights": {"dense": 1, "sparse": 0, "lexical": 0}})
    assert dense_only.status_code == 200 and dense_only.json()["hits"]
    refusals = {
        "foo cannot be set per query": {"corpus": "demo", "method": "ap_three", "query": "sled", "foo": 1},
        "candidates": {"corpus": "demo", "method": "ap_three", "query": "sled", "candidates": -1},
        "query: String should have at most 2000 characters": {"corpus": "demo", "method": "bm25", "query": "x" * 2001},
        "k: Input should be greater than or equal to 1": {"corpus": "demo", "method": "bm25", "query": "sled", "k": 0},
    }
    for expected_error, body in refusals.items():
        refused = post("/search", body)
        assert refused.status_code == 422 and expected_error in refused.json()["error"] and "\n" not in refused.json()["error"], refused.text
    too_many = post("/search/batch", {"corpus": "demo", "method": "bm25", "queries": ["sled"] * 257})
    assert too_many.status_code == 422 and "queries" in too_many.json()["error"]
    unknown = post("/search", {"corpus": "dmeo", "method": "bm25", "query": "sled"})
    assert unknown.status_code == 404 and "demo" in unknown.json()["error"]
    misspelt = post("/search", {"corpus": "demo", "method": "bm52", "query": "sled"})
    assert misspelt.status_code == 404 and "bm25" in misspelt.json()["error"]

    # the CLI asks the running server (and sends the key from the environment)
    env = {**os.environ, "GRAPHLAKE_API_KEY": KEY, "GRAPHLAKE_HOME": str(demo_lake.home)}
    command = [shutil.which("graphlake") or str(Path(sys.executable).parent / "graphlake"), "query", "--corpus", "demo", "--method", "rrf", "--server", served.url, "--json", "--top", "3", "sled"]
    asked = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert asked.returncode == 0, asked.stderr
    direct = post("/search", {"corpus": "demo", "method": "rrf", "query": "sled", "k": 3}).json()
    assert [h["node_id"] for h in json.loads(asked.stdout)["hits"]] == [h["node_id"] for h in direct["hits"]]
    assert KEY not in served.log.read_text(errors="replace")  # never logged


TINY = {f"t{i}": f"Harbour note {i}: the tide gauge was read at dawn and the boats went out." for i in range(8)}


def test_a_remote_lake_answers_the_local_calls(served, demo_lake):
    """``RemoteLake`` has ``GraphLake``'s calls, answering alike: corpora, methods, warm, SQL (its rows
    as an Arrow stream, cut with the same warning) and the same errors; the OpenAPI schema lists the
    methods' query-time parameters with their types."""
    import warnings

    from graphlake.api import GraphLake, RemoteLake, RequestError, RowsCut, UnknownName

    local, remote = GraphLake(demo_lake.home), RemoteLake(served.url, api_key=KEY)
    assert remote.corpora() == local.corpora() and remote.methods() == local.methods()
    spec = httpx.get(f"{served.url}/openapi.json", headers={"X-API-Key": KEY}).json()  # each method's query-time parameters, typed
    weights = spec["components"]["schemas"]["SearchRequest"]["properties"]["weights"]
    assert {part.get("type") for part in weights["anyOf"]} >= {"array", "object"} and {"rrf", "ap_three"} <= set(weights["description"].replace(",", "").split())
    remote.warm("demo", "ap_three")
    with pytest.raises(UnknownName, match="unknown method 'ap_thre'"):
        remote.warm("demo", "ap_thre")
    statement = "select doc_id, title from documents where corpus = 'demo' order by doc_id"
    assert remote.sql(statement).equals(local.sql(statement))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert remote.sql(statement, limit=2).num_rows == 2
    assert [w.category for w in said] == [RowsCut]
    with pytest.raises(RequestError, match="read-only|not allowed|cannot"):
        remote.sql("drop table documents")
    remote.close()


def test_a_reindex_committed_while_serving_is_picked_up_and_no_response_mixes_snapshots(lake, tmp_path):
    """Requests stream while a reindex commits: each response's hits are nodes of the snapshot it
    names, and once the new snapshot is committed the answers come from it, without a restart."""
    source = tmp_path / "tiny.jsonl"
    source.write_text("".join(json.dumps({"id": i, "title": "", "text": t}) + "\n" for i, t in TINY.items()))
    CorpusRegistry(lake).add(CorpusSpec(name="tiny", format="jsonl", path=str(source)))
    selection = AssetSelection.assets(*INDEX_KINDS.index_assets({"bm25"})).upstream().required_multi_asset_neighbors()
    materialize_corpus(lake, "tiny", selection, Console(file=io.StringIO()))
    nodes = {LakeStorage(lake).snapshot("tiny").number: set(LakeStorage(lake).read("nodes", {"corpus": "tiny"}).column("node_id").to_pylist())}
    server = Server(lake, tmp_path / "server.log")
    answers: list[tuple[int, int, list[str]]] = []
    stop = threading.Event()

    def stream() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                answer = client.post(f"{server.url}/search", json={"corpus": "tiny", "method": "bm25", "query": "zebra lighthouse tide", "k": 5})
                body = answer.json()
                answers.append((answer.status_code, body.get("snapshot", -1), [h["node_id"] for h in body.get("hits", [])]))

    streaming = threading.Thread(target=stream)
    try:
        streaming.start()
        time.sleep(1)
        source.write_text(source.read_text() + json.dumps({"id": "z1", "title": "Zebra", "text": "A zebra lighthouse stands at the tide line."}) + "\n")
        materialize_corpus(lake, "tiny", selection, Console(file=io.StringIO()))  # the reindex, committed as one snapshot
        after = LakeStorage(lake).snapshot("tiny").number
        nodes[after] = set(LakeStorage(lake).read("nodes", {"corpus": "tiny"}).column("node_id").to_pylist())
        deadline = time.monotonic() + 60
        while not any(snapshot == after for _, snapshot, _ in answers[-5:]) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        stop.set()
        streaming.join()
        server.stop()
    assert answers and all(status == 200 for status, _, _ in answers), answers[:3]
    seen = [snapshot for _, snapshot, _ in answers]
    assert seen == sorted(seen) and set(seen) == set(nodes), (sorted(set(seen)), sorted(nodes))  # both versions served, in order
    for _, snapshot, hits in answers:
        assert set(hits) <= nodes[snapshot], (snapshot, hits)
    assert any(hits and hits[0].startswith("z1") for _, snapshot, hits in answers if snapshot == after)  # the new document, found
