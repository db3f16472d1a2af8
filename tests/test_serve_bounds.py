"""``graphlake serve`` against what a third hostile tester found: a value stored in the lake that a
filter could not read (an integer of 10^30 from a file), an error that dropped the client's keep-alive
connection, ids that differ only in their Unicode form kept as two documents, a schema that did not say
what the server answers, requests that ran on after their client left, and a server SIGTERM did not stop."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import unicodedata
from pathlib import Path

import httpx
import psutil
import pytest
from typer.testing import CliRunner

from conftest import copy_lake, use_lake
from graphlake.api.server import ANSWER_S
from graphlake.cli import app
from served import KEY, Server

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = Path(__file__).with_name("schemathesis.toml")
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
            found = lambda where: [h["doc_id"] for h in client.post("/search", json={"corpus": "notes", "method": "bm25", "query": "coffee", "filter": where}).json()["hits"]]  # noqa: E731
            for where in (f'doc_id = "{decomposed}"', {"field": "doc_id", "in": [decomposed]}, {"field": "doc_id", "prefix": decomposed}):
                assert found(where) == [composed], where  # a filter's id compared composed too
            page = client.post("/corpora/notes/documents/list", json={"after": decomposed}).json()
            assert page["documents"] == [], page  # the cursor is that document, composed: nothing after it
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


def test_schemathesis_finds_nothing_over_every_route_with_the_key_and_without(tiny, tmp_path):
    """The OpenAPI document tells the truth: every status a route answers is listed with its error
    schema, every schema-valid request is taken (or refused for what the schema cannot say: a filter's or
    a statement's names, tests/schemathesis.toml), every invalid one refused, ``Allow`` right. Seeded, on
    one worker (several threads trip a CPython 3.11 bug in ``ast.parse`` that Hypothesis calls)."""
    home = copy_lake(tiny, tmp_path / "fuzzed")  # it writes: corpora declared, documents upserted, corpora dropped
    server = Server(home, tmp_path / "fuzzed.log", KEY, {"GRAPHLAKE_SERVE_DEADLINE_S": "10"})  # every request ends well inside the fuzzer's request timeout
    try:
        for label, auth in (("with the key", ["-H", f"Authorization: Bearer {KEY}"]), ("without the key", [])):
            command = [str(SCHEMATHESIS), "--no-color", "--config-file", str(CONFIG), "run", f"{server.url}/openapi.json", *auth]
            command += ["--checks", "all", "--max-time", "35", "--workers", "1", "--seed", "90"]
            run = subprocess.run(command, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, f"{label}:\n{run.stdout[-8000:]}{run.stderr[-2000:]}"
            assert "API Operations:" in run.stdout and "Tested: 18" in run.stdout, run.stdout[-3000:]
    finally:
        log = server.stop()
    assert "Traceback" not in log, log[-3000:]


def _cpu_seconds(process: psutil.Process) -> float:
    """The CPU seconds of a server and its children (an SQL statement's process) so far."""
    total = 0.0
    for each in (process, *process.children(recursive=True)):
        try:
            times = each.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _idle_within(process: psutil.Process, seconds: float) -> float:
    """The CPU share the server (with its children) uses over the second after ``seconds`` have passed."""
    time.sleep(seconds)
    before = _cpu_seconds(process)
    time.sleep(1.0)
    return _cpu_seconds(process) - before


# about 10 s of graphlake_ltr on the demo lake (warm, 2 cores), 60 s of SQL (its time limit)
LONG_BATCH = [" ".join([f"{word} kelp urchin survey vessel sled transplant rockling eelgrass {i}"] * 6) for i, word in enumerate(["north", "south", "east", "west"] * 64)]
LONG_SQL = "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 10000000000) SELECT count(*) FROM t"


def test_a_request_ends_at_its_deadline_or_when_its_client_leaves(tiny, served, tmp_path):
    server = Server(tiny, tmp_path / "server.log", KEY)
    process = psutil.Process(server.process.pid)
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
            body = {"corpus": "tiny", "method": "bm25", "query": "telescope"}
            late = client.post("/search", json={**body, "timeout_s": 1e-9})
            assert late.status_code == 504 and late.json()["error"].startswith("past its deadline of 1e-09 s: stopped before"), late.text
            more = client.post("/search", json={**body, "timeout_s": 61})
            assert more.status_code == 422 and "timeout_s: at most the server's deadline of 60 s" in more.json()["error"], more.text
            assert client.post("/corpora", json={"name": "late"}).status_code == 200
            for route, asked in (
                ("/embed", {"corpus": "tiny", "texts": ["a telescope"]}),
                ("/warm", {"corpus": "tiny", "method": "bm25"}),
                ("/corpora/late/documents", {"documents": [{"id": "x", "text": "a telescope"}]}),
            ):
                late = client.post(route, json={**asked, "timeout_s": 1e-9})
                assert late.status_code == 504 and late.json()["error"].startswith("past its deadline of 1e-09 s: stopped before"), (route, late.text)
            assert client.post("/corpora/late/ids", json={}).json() == {"ids": []}  # the late write: nothing written
            started = time.monotonic()
            slow = client.post("/sql", json={"statement": LONG_SQL, "timeout_s": 1.5})
            assert slow.status_code == 504 and "past its deadline of 1.5 s" in slow.json()["error"] and time.monotonic() - started < 10, slow.text
        # a client that gives up: its statement's process is killed, the server idles again
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/sql", json={"statement": LONG_SQL}, headers=AUTH, timeout=5)  # past its process start, even on a loaded machine
        assert _idle_within(process, 2.0) < 0.2 and not process.children(recursive=True)
    finally:
        log = server.stop()
    assert "the client disconnected: stopped before" in log, log[-4000:]

    # a batch the client leaves on the shared demo server: the search stops at its next stage
    queries = LONG_BATCH
    demo = psutil.Process(served.process.pid)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served.url}/search/batch", json={"corpus": "demo", "method": "graphlake_ltr", "queries": queries, "k": 100}, headers=AUTH, timeout=1.5)
    assert _idle_within(demo, 2.0) < 0.2
    assert "POST /search/batch: the client disconnected: stopped before" in served.log.read_text(errors="replace")


def test_sigterm_ends_a_server_within_its_grace_whatever_it_runs(demo_lake, tmp_path):
    server = Server(demo_lake.home, tmp_path / "server.log", KEY, {"GRAPHLAKE_SERVE_GRACE_S": "1"})
    answered: list[tuple[int, str]] = []

    def ask(route: str, body: dict) -> None:
        answer = httpx.post(f"{server.url}{route}", json=body, headers=AUTH, timeout=120)
        answered.append((answer.status_code, answer.text))

    running = [
        threading.Thread(target=ask, args=("/search/batch", {"corpus": "demo", "method": "graphlake_ltr", "queries": LONG_BATCH, "k": 100})),
        threading.Thread(target=ask, args=("/sql", {"statement": LONG_SQL})),
    ]
    for thread in running:
        thread.start()
    time.sleep(3)
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=30)
    ended = time.monotonic() - started
    for thread in running:
        thread.join(timeout=30)
    log = server.stop()
    assert ended < 1 + ANSWER_S + 2, (ended, log[-3000:])  # the grace, the stopped search's last stage, the exit
    assert len(answered) == 2 and all(status == 503 and "the server is shutting down: stopped before" in text for status, text in answered), answered  # before: uvicorn's bare 500
    assert "Shutting down" in log and not psutil.pid_exists(server.process.pid), log[-3000:]
    assert not [p for p in psutil.process_iter(["cmdline"]) if "graphlake.warehouse.sql_sandbox" in " ".join(p.info["cmdline"] or []) and str(demo_lake.home) in " ".join(p.info["cmdline"] or [])]


def _slow(url: str, head: bytes, trickle: bytes, every: float = 0.5) -> tuple[float, bytes]:
    """Seconds until the server answered and closed a client that sends ``head`` at once, then
    ``trickle`` a byte at a time, and what it answered."""
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        sock.settimeout(every)
        answer = b""
        for byte in trickle:
            try:
                sock.sendall(bytes([byte]))
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset: the server closed it
                break
            if not chunk:
                break
            answer += chunk
        return time.monotonic() - started, answer


def test_slow_clients_are_cut_off_at_their_timeouts_and_one_address_holds_few_connections(tiny, tmp_path):
    settings = {"GRAPHLAKE_SERVE_HEAD_TIMEOUT_S": "2", "GRAPHLAKE_SERVE_BODY_TIMEOUT_S": "3", "GRAPHLAKE_SERVE_CLIENT_CONNECTIONS": "6"}
    server = Server(tiny, tmp_path / "server.log", KEY, settings)
    try:
        head = b"POST /search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
        took, answer = _slow(server.url, b"POST /search HTTP/1.1\r\n", b"X-Slow: " + b"a" * 40)  # a head a byte every half second
        assert answer.startswith(b"HTTP/1.1 408") and b"the request's head did not arrive within 2 s" in answer and 1.5 < took < 5, (took, answer)
        took, answer = _slow(server.url, head, b"{" + b" " * 60)  # a body a byte every half second
        assert answer.startswith(b"HTTP/1.1 408") and b"the request's body did not arrive within 3 s" in answer and 2.5 < took < 7, (took, answer)
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(6)]  # idle: each holds a place
        try:
            refused = httpx.get(f"{server.url}/health", timeout=5)  # the seventh: answered 429 and closed
            assert refused.status_code == 429 and "6 connections are open from 127.0.0.1 already" in refused.json()["error"], refused.text
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.5)
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200  # the places free again
    finally:
        server.stop()


HEAVY_SQL = "SELECT count(DISTINCT range::VARCHAR || 'x') FROM range(20000000)"  # a hash table far past a statement's share, in 1.5 s


def test_concurrent_sql_statements_share_the_servers_memory_budget(tiny, tmp_path):
    """Four heavy statements at once, on a server whose budget holds two requests: at most two SQL
    processes run, and together they stay within the budget; each answers, or runs out of its share
    (422, in one line), or waited its turn too long (503 with Retry-After)."""
    settings = {"GRAPHLAKE_SERVE_MEMORY_MB": "800", "GRAPHLAKE_SERVE_REQUEST_MB": "400", "GRAPHLAKE_SERVE_QUEUE_S": "20"}
    server = Server(tiny, tmp_path / "server.log", KEY, settings)
    process, peaks, answers = psutil.Process(server.process.pid), [], []
    try:
        asked = [threading.Thread(target=lambda: answers.append(httpx.post(f"{server.url}/sql", json={"statement": HEAVY_SQL}, headers=AUTH, timeout=120))) for _ in range(4)]
        for thread in asked:
            thread.start()
        while any(thread.is_alive() for thread in asked):
            children = process.children(recursive=True)
            resident = 0
            for child in children:
                try:
                    resident += child.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            peaks.append((len(children), resident))
            time.sleep(0.05)
    finally:
        server.stop()
    print(f"SQL processes at once: at most {max(n for n, _ in peaks)}; their resident memory together: at most {max(r for _, r in peaks) / 2**20:.0f} MB")
    assert max(n for n, _ in peaks) <= 2 and max(r for _, r in peaks) <= 800 * 2**20
    assert len(answers) == 4 and {a.status_code for a in answers} <= {200, 422, 503}, [a.text for a in answers]
    assert all("Out of Memory" in a.json()["error"] and "GRAPHLAKE_SERVE_REQUEST_MB" in a.json()["error"] for a in answers if a.status_code == 422), [a.text for a in answers]
    assert all(a.headers.get("retry-after") for a in answers if a.status_code == 503)
