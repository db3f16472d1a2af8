"""``graphlake serve`` against what a third hostile tester found: a value stored in the lake that a
filter could not read (an integer of 10^30 from a file), an error that dropped the client's keep-alive
connection, and ids that differ only in their Unicode form kept as two documents."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from conftest import copy_lake, use_lake
from graphlake.cli import app
from served import KEY, Server

HUGE = 10**30  # past int64, and past float64's exact integers: JSON allows it, a file may hold it
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A lake of two documents read from a JSON-lines file, one with ``big`` = 10^30, built for bm25."""
    folder = tmp_path_factory.mktemp("bounds")
    rows = [{"id": "a", "title": "Big", "text": "The big telescope was cleaned on Tuesday.", "big": HUGE}, {"id": "b", "title": "Small", "text": "A small telescope stood in the hall.", "big": 3}]
    (folder / "tiny.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    home = folder / "lake"
    home.mkdir()
    (home / "methods.yaml").write_text("use: [bm25]\n")
    with pytest.MonkeyPatch.context() as patch:
        use_lake(patch, home)
        for args in (["ingest", "jsonl", str(folder / "tiny.jsonl"), "--corpus", "tiny"], ["materialize", "--corpus", "tiny"]):
            result = CliRunner().invoke(app, args, catch_exceptions=False)
            assert result.exit_code == 0, result.output
    return home


def test_no_stored_value_fails_a_filter_and_an_error_leaves_the_connection_usable(tiny, tmp_path):
    server = Server(tiny, tmp_path / "server.log", KEY)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:  # one keep-alive connection
            search = lambda where: client.post("/search", json={"corpus": "tiny", "method": "bm25", "query": "telescope", "filter": where})  # noqa: E731
            assert [h["doc_id"] for h in search("big > 5").json()["hits"]] == ["a"]  # 10^30 compares as the number it is
            assert [h["doc_id"] for h in search("big < 5").json()["hits"]] == ["b"]
            assert sorted(h["doc_id"] for h in search({"field": "big", "gte": -1e308}).json()["hits"]) == ["a", "b"]
            # ids that differ only in their Unicode form are one document: "café" composed (NFC) and decomposed (NFD)
            composed, decomposed = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
            assert composed != decomposed and client.post("/corpora", json={"name": "notes"}).status_code == 200
            for doc_id, text in ((decomposed, "Coffee at the café."), (composed, "Coffee at the café, brewed again.")):
                assert client.post("/corpora/notes/documents", json={"documents": [{"id": doc_id, "text": text}]}).status_code == 200
            assert client.post("/corpora/notes/ids", json={}).json() == {"ids": [composed]}
            [stored] = client.post("/corpora/notes/documents/get", json={"ids": [decomposed]}).json()
            assert (stored["id"], stored["text"]) == (composed, "Coffee at the café, brewed again.")
    finally:
        server.stop()

    # a table damaged under the server: the search that meets it is a 500 in one line, the connection's next request answers
    damaged = copy_lake(tiny, tmp_path / "damaged")
    for path in damaged.glob("tables/documents/**/*.parquet"):
        path.write_bytes(b"garbage")
    server = Server(damaged, tmp_path / "damaged.log", KEY)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
            failed = client.post("/search", json={"corpus": "tiny", "method": "bm25", "query": "telescope"})
            assert failed.status_code == 500 and failed.json() == {"error": "internal error (ArrowInvalid); the server's log has the details"}
            assert client.get("/methods").status_code == 200  # the same connection: before, uvicorn had dropped it (RemoteDisconnected)
    finally:
        log = server.stop()
    assert "ArrowInvalid" in log and "POST /search failed" in log
