"""What a hostile or careless client sends, against a real ``graphlake serve`` on the shared demo lake
(and the Python API beside it): every case one row of a table, its status and the one-line error it
must get. Nothing may cost the server more than a bounded request, answer 500, or come back in
another shape than ``{"error": "..."}``. Then every default method from 8 threads at once, filtered
and not: no error, and the rankings a single thread gets."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from graphlake.api import RequestError, open_lake
from graphlake.api.budget import MB, SQL_START_MB, MemoryBudget, OverBudget
from graphlake.retrieval.methods import load_methods
from served import KEY, REQUEST_MB

AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
SLED = {"corpus": "demo", "query": "sled", "k": 3}

# label: (path, body: a JSON value, or the raw text sent), expected status, what the one-line error says
CASES: dict[str, tuple[str, object, int, str]] = {
    # 1. every request bounded: a pool, a depth, a list of keywords, the body itself
    "a pool of 10^9 candidates": ("/search", {**SLED, "method": "ap_three", "candidates": 10**9}, 422, "candidates: Input should be less than or equal to 10000"),
    "a pool of 10^18 candidates": ("/search", {**SLED, "method": "ap_three", "candidates": 10**18}, 422, "candidates: Input should be less than or equal to 10000"),
    "400,000 keywords": ("/search", {**SLED, "method": "ap_three", "keywords": ["sled"] * 400_000}, 422, "keywords: List should have at most 32 items"),
    "a 5 MB body": ("/search", {**SLED, "method": "bm25", "query": "x" * 5_000_000}, 413, "body: over 4 MiB"),
    "a 1 MB keyword": ("/search", {**SLED, "method": "ap_three", "keywords": ["x" * 1_000_000]}, 422, "keywords.0: String should have at most 100 characters"),
    "a reranker 10^6 deep": ("/search", {**SLED, "method": "re2", "depth": 10**6}, 422, "depth: Input should be less than or equal to 1000"),
    "a budget of 10^6 model calls": ("/search", {**SLED, "method": "gar", "budget": 10**6}, 422, "budget: Input should be less than or equal to 1000"),
    "k of 10^9": ("/search", {**SLED, "method": "bm25", "k": 10**9}, 422, "k: Input should be less than or equal to 1000"),
    # 6. numbers are finite
    "rrf weights [NaN, 1]": ("/search", '{"corpus": "demo", "method": "rrf", "query": "sled", "weights": [NaN, 1]}', 422, "weights.0: Input should be a finite number"),
    "an infinite path weight": (
        "/search",
        '{"corpus": "demo", "method": "ap_three", "query": "sled", "weights": {"dense": Infinity, "sparse": 1, "lexical": 1}}',
        422,
        "weights.dense: Input should be a finite number",
    ),
    "a kg_weight of 1e300": ("/search", {**SLED, "method": "ap_three", "kg_weight": 1e300}, 422, "kg_weight: Input should be less than or equal to 1000000"),
    # 7. values a kernel cannot take
    "ef_search 2^31": ("/search", {**SLED, "method": "dense_hnsw", "ef_search": 2**31}, 422, "ef_search: Input should be less than or equal to 10000"),
    "a NUL byte in corpus": ("/search", {**SLED, "corpus": "de\x00mo", "method": "bm25"}, 422, "is not a corpus name"),
    "a NUL byte in method": ("/search", {**SLED, "method": "bm\x0025"}, 422, "is not a method name"),
    # 8. one error shape, strict types
    "malformed JSON": ("/search", '{"corpus": "demo",', 422, "body: not JSON (Expecting property name"),
    "JSON nested 100,000 deep": ("/search", '{"corpus": "demo", "method": "bm25", "query": "sled", "k": ' + "[" * 100_000 + "]" * 100_000 + "}", 400, "body: JSON nested too deeply to read"),
    "a body that is a list": ("/search", [1, 2], 422, "body: Input should be a valid dictionary"),
    'k as "5"': ("/search", {**SLED, "method": "bm25", "k": "5"}, 422, "k: Input should be a valid integer"),
    "k as true": ("/search", {**SLED, "method": "bm25", "k": True}, 422, "k: Input should be a valid integer"),
    "k as 2.5": ("/search", {**SLED, "method": "bm25", "k": 2.5}, 422, "k: Input should be a valid integer"),
    'candidates as "64"': ("/search", {**SLED, "method": "ap_three", "candidates": "64"}, 422, "candidates: Input should be a valid integer"),
    "queries as one string": ("/search/batch", {"corpus": "demo", "method": "bm25", "queries": "abc"}, 422, "queries: Input should be a valid list"),
    "a query that is a number": ("/search", {**SLED, "method": "bm25", "query": 5}, 422, "query: Input should be a valid string"),
    "an unknown path": ("/nowhere", {}, 404, "Not Found"),
    # 9. the second tester's 500s: filters a kernel could not take, fields named like arguments, half characters
    "a filter integer of 2^62": ("/search", {**SLED, "method": "bm25", "filter": {"field": "year", "gt": 2**62}}, 422, "filter.gt: a whole number within ±2^53"),
    "a text filter integer past 2^53": ("/search", {**SLED, "method": "bm25", "filter": "year > 9007199254740993"}, 422, "year gt: a whole number within ±2^53"),
    "a negative one": ("/search", {**SLED, "method": "bm25", "filter": {"field": "year", "lt": -(2**53) - 1}}, 422, "filter.lt: a whole number within ±2^53"),
    "one in an in list": ("/search", {**SLED, "method": "bm25", "filter": "year in [2015, 99999999999999999999]"}, 422, "year in.1: a whole number within ±2^53"),
    "a bad escape in a text filter": ("/search", {**SLED, "method": "bm25", "filter": 'title = "\\x"'}, 422, "a bad escape or a control character in a string"),
    "half a \\u escape": ("/search", {**SLED, "method": "bm25", "filter": 'title = "\\u12"'}, 422, "a bad escape or a control character in a string"),
    "a TAB in a quoted value": ("/search", {**SLED, "method": "bm25", "filter": 'title = "a\tb"'}, 422, "a bad escape or a control character in a string"),
    "a NUL in a quoted value": ("/search", {**SLED, "method": "bm25", "filter": 'title = "a\u0000b"'}, 422, "a bad escape or a control character in a string"),
    "101 conditions joined by and": ("/search", {**SLED, "method": "bm25", "filter": " and ".join(["year > 1"] * 101)}, 422, "at most 100 parts joined by one 'and'"),
    "101 conditions joined by or": ("/search", {**SLED, "method": "bm25", "filter": " or ".join(["year > 1"] * 101)}, 422, "at most 100 parts joined by one 'or'"),
    "120,000 JSON conditions": ("/search", {**SLED, "method": "bm25", "filter": {"and": [{"field": "year", "gt": 1}] * 120_000}}, 422, "filter.and: at most 100 parts, got 120,000"),
    "a lone surrogate in a filter": ("/search", '{"corpus": "demo", "method": "bm25", "query": "sled", "filter": {"field": "title", "eq": "\\ud800"}}', 422, "not valid Unicode"),
    **{
        f"a lone surrogate in a {method} batch": ("/search/batch", f'{{"corpus": "demo", "method": "{method}", "queries": ["sled", "\\ud800"]}}', 422, "not valid Unicode")
        for method in ("dense", "splade", "rrf", "bm25")
    },
    "a body field named queries": ("/search", {**SLED, "method": "bm25", "queries": ["sled"]}, 422, "queries cannot be set per query"),
    "a body field named self": ("/search", {**SLED, "method": "bm25", "self": 1}, 422, "self cannot be set per query"),
    "a batch field named query": ("/search/batch", {"corpus": "demo", "method": "bm25", "queries": ["sled"], "query": "x"}, 422, "query cannot be set per query"),
    "200,000 unknown fields": ("/search", {**SLED, "method": "bm25", **{f"f{i}": 1 for i in range(200_000)}}, 422, "and 199,995 more cannot be set per query"),
    "filter_exact_below of 10^12": ("/search", {**SLED, "method": "dense_hnsw", "filter_exact_below": 10**12}, 422, "filter_exact_below: Input should be less than or equal to 10000000"),
    "weights for 10,000 inputs": ("/search", {**SLED, "method": "rrf", "weights": [1] * 10_000}, 422, "weights: List should have at most 64 items"),
    # 10. a request's memory, estimated from its shape before any work
    "256 of the longest queries through SPLADE at k 1,000": (
        "/search/batch",
        {"corpus": "demo", "method": "splade", "queries": ["sled " * 400] * 256, "k": 1000},
        422,
        f"this search would hold about 249 MB, over the {REQUEST_MB} MB one request may (GRAPHLAKE_SERVE_REQUEST_MB)",
    ),
}


def send(url: str, path: str, body: object) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(url + path, content=content.encode(), headers=AUTH, timeout=120)


def test_every_hostile_request_gets_its_one_line_4xx(served):
    failed = {}
    for label, (path, body, status, said) in CASES.items():
        answer = send(served.url, path, body)
        shape = answer.headers.get("content-type", "").startswith("application/json") and list(answer.json()) == ["error"]
        error = answer.json()["error"] if shape else answer.text[:200]
        if answer.status_code != status or not shape or said not in error or "\n" in error or len(error) > 300:
            failed[label] = f"{answer.status_code} {error[:150]}"
    assert not failed, "\n".join(f"{label}: {said}" for label, said in failed.items())

    # a body over the limit without a Content-Length (chunked) is refused as soon as it passes it
    chunks = (b" " * 65536 for _ in range(200))  # 13 MB of whitespace, never read whole
    chunked = httpx.post(f"{served.url}/search", content=chunks, headers=AUTH, timeout=120)
    assert chunked.status_code == 413 and chunked.json() == {"error": "body: over 4 MiB"}, chunked.text[:200]
    assert "Traceback" not in served.log.read_text(errors="replace")


def test_the_memory_budget_queues_a_search_then_refuses_it():
    """What the server's searches hold together: one that does not fit waits for another to give its share
    back, up to the wait, then is refused as busy (503); one over a request's share is refused at once (422)."""
    budget = MemoryBudget(capacity=100, per_request=80, wait=0.2)
    budget.take(60)
    with pytest.raises(OverBudget) as busy:
        budget.take(50)
    assert busy.value.busy and "at its memory budget" in str(busy.value)
    budget.wait = 10.0
    threading.Timer(0.2, budget.give_back, [60]).start()
    budget.take(50)  # admitted once the first gave its share back
    assert budget.held == 50
    with pytest.raises(OverBudget) as never:
        budget.take(90)
    assert not never.value.busy and "over the 0 MB one request may" in str(never.value)
    budget.give_back(50)
    budget.resident("fresh:notes", 40)  # a fresh segment kept between searches: they fit in what is left
    budget.resident("fresh:notes", 45)  # it grew: counted once, at its size now
    assert budget.held == 45
    budget.wait = 0.1
    with pytest.raises(OverBudget, match="at its memory budget"):
        budget.take(60)
    budget.resident("fresh:notes", 0)  # folded
    budget.take(60)
    budget.give_back(60)
    # an SQL statement's share: one request's, less what pending writes keep when the budget has no more
    sql = MemoryBudget(capacity=384 * MB, per_request=384 * MB, wait=0.1)  # the defaults
    sql.resident("fresh:notes", 1 * MB)  # one upserted document: its share could never be free whole
    with sql.statement() as megabytes:
        assert megabytes == (383 - SQL_START_MB) // 2 and sql.held == 384 * MB
    sql.resident("fresh:notes", 300 * MB)
    with pytest.raises(OverBudget, match="less the 300 MB the pending writes keep") as none, sql.statement():
        pass
    assert not none.value.busy


def raw(url: str, request: bytes) -> tuple[int, dict | str]:
    """What the server answers to ``request`` sent as it is (asking it to close the connection after), on a socket of its own."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        try:
            connection.sendall(request.replace(b"\r\n", b"\r\nConnection: close\r\n", 1))
        except (BrokenPipeError, ConnectionResetError):  # refused before it was all sent: the answer is waiting
            pass
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body[:200].decode(errors="replace")


AUTHORIZATION = f"Authorization: Bearer {KEY}\r\n".encode()


def posted(body: bytes, path: bytes = b"/search") -> bytes:
    """A search (or a post to ``path``) whose body is ``body`` as it is, with its key and its length."""
    return b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + AUTHORIZATION + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


HTTP_CASES: dict[str, tuple[bytes, int, str]] = {  # label: the raw request, its status, what its error says
    "Content-Length: -1": (b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}", 400, "not an HTTP request this server reads"),
    "a 23-digit Content-Length": (b"POST /search HTTP/1.1\r\nHost: x\r\n" + AUTHORIZATION + b"Content-Length: 12345678901234567890123\r\n\r\n{}", 413, "body: over 4 MiB"),
    "Content-Length beside chunked": (b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", 400, "Content-Length beside Transfer-Encoding"),
    "a garbage request line": (b"\x01\x02 garbage\r\n\r\n", 400, "not an HTTP request this server reads"),
    "method FOO": (b"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "not an HTTP request this server reads"),
    "a PUT where POST is": (b"PUT /search HTTP/1.1\r\nHost: x\r\n" + AUTHORIZATION + b"Content-Length: 0\r\n\r\n", 405, "PUT /search: this path takes POST"),
    "a 1 MB URL": (b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431, "request line and headers: over 64 KiB"),
    "a 16 MB header": (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (16 << 20) + b"\r\n\r\n", 431, "request line and headers: over 64 KiB"),
    "200 headers": (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(200)) + b"\r\n", 431, "headers: at most 100, got 202"),
    "a body that is not UTF-8": (posted(b'"\xff\xfe"'), 400, "body: not UTF-8"),
    "a body in UTF-16": (posted('{"corpus": "demo", "method": "bm25", "query": "sled"}'.encode("utf-16")), 400, "body: not UTF-8"),  # json.loads took it
    "an upsert in UTF-16": (posted('{"documents": [{"id": "a", "text": "b"}]}'.encode("utf-16"), b"/corpora/notes/documents"), 400, "body: not UTF-8"),
    "two Content-Lengths": (b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}", 400, "Content-Length: two headers that differ"),
    "Transfer-Encoding gzip": (b"POST /search HTTP/1.1\r\nHost: x\r\n" + AUTHORIZATION + b"Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 501, "only chunked is read"),
    "no Host": (b"GET /health HTTP/1.1\r\n\r\n", 400, "Host: one header in an HTTP/1.1 request, got 0"),
    "two Hosts": (b"GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, "Host: one header in an HTTP/1.1 request, got 2"),
    "a 5,000-digit number": (posted(b'{"k": ' + b"9" * 5000 + b"}"), 400, "body: a number of more than 4,300 digits"),
    "a trailing slash": (b"GET /corpora/ HTTP/1.1\r\nHost: x\r\n" + AUTHORIZATION + b"\r\n", 404, "Not Found"),
    "Authorization without Bearer": (b"GET /corpora HTTP/1.1\r\nHost: x\r\nAuthorization: " + KEY.encode() + b"\r\n\r\n", 401, "Authorization: expected 'Bearer <key>'"),
    "the key in the URL": (b"GET /corpora?api_key=" + KEY.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n", 401, "missing or wrong API key"),
}


def test_the_http_layer_refuses_in_the_api_shape_and_never_logs_a_key(served):
    """What never reaches the app as a request (a malformed head, one over the limits) and what the key check
    meets: each one line of JSON, with its status; then the forms of the key that are taken."""
    failed = {}
    for label, (request, status, said) in HTTP_CASES.items():
        got, body = raw(served.url, request)
        error = body.get("error", "") if isinstance(body, dict) and list(body) == ["error"] else f"not the API's shape: {body!r}"
        if got != status or said not in error:
            failed[label] = f"{got} {error[:150]}"
    assert not failed, "\n".join(f"{label}: {said}" for label, said in failed.items())
    head, _ = raw(served.url, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head == 200
    for header in (f"Authorization: bearer {KEY}", f"Authorization: BEARER  {KEY} ", f"X-API-Key:   {KEY}  "):
        assert raw(served.url, f"GET /corpora HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\n".encode())[0] == 200, header
    assert KEY not in served.log.read_text(errors="replace")  # not even the URL that carried it
    assert "Traceback" not in served.log.read_text(errors="replace")


def test_a_reranking_method_without_a_trained_cross_encoder_answers_its_first_stage(served):
    """The shared demo lake trained none (conftest's ``demo_reranked`` trains one on a copy)."""
    for method, first_stage in (("re2", "vector"), ("fastinsight", "dense")):
        answered = send(served.url, "/search", {**SLED, "method": method})
        assert answered.status_code == 200, answered.text[:300]
        expected = send(served.url, "/search", {**SLED, "method": first_stage}).json()["hits"]
        assert [h["node_id"] for h in answered.json()["hits"]] == [h["node_id"] for h in expected]
        assert any(note.startswith("no trained cross-encoder: the lake has not trained one yet") for note in answered.json()["notes"]), answered.json()["notes"]


def test_the_python_api_refuses_every_bad_argument_before_any_work(demo_lake):
    lake = open_lake(demo_lake.home)
    calls = {
        "k: an integer, got 1.5": lambda: lake.search("demo", "bm25", "sled", k=1.5),
        "k: an integer, got True": lambda: lake.search("demo", "bm25", "sled", k=True),
        "query: a string, got NoneType": lambda: lake.search("demo", "bm25", None),
        "corpus: a name, got NoneType": lambda: lake.search(None, "bm25", "sled"),
        "is not a corpus name": lambda: lake.search("de\x00mo", "bm25", "sled"),
        "method: a name, got int": lambda: lake.search("demo", 7, "sled"),
        "queries: a list of strings, got str": lambda: lake.search_batch("demo", "bm25", "abc"),
        "query 1: a string, got bytes": lambda: lake.search_batch("demo", "bm25", ["sled", b"sled"]),
        "statement: SQL text, got NoneType": lambda: lake.sql(None),
        "limit: a whole number of rows": lambda: lake.sql("SELECT 1", limit=0),
        "weights.0: Input should be a finite number": lambda: lake.search("demo", "rrf", "sled", weights=[float("nan"), 1.0]),
        "candidates: Input should be a valid integer": lambda: lake.search("demo", "ap_three", "sled", candidates="64"),
        "self cannot be set per query": lambda: lake.search("demo", "bm25", "sled", self=1),
        "queries cannot be set per query": lambda: lake.search("demo", "bm25", "sled", queries=["sled"]),
        "query 1: not valid Unicode (a lone surrogate at character 2)": lambda: lake.search_batch("demo", "dense", ["sled", "a\ud800"]),
        "year gt: a whole number within ±2^53": lambda: lake.search("demo", "bm25", "sled", filter="year > 9007199254740993"),
        "at most 100 parts joined by one 'and'": lambda: lake.search("demo", "bm25", "sled", filter=" and ".join(["year > 1"] * 101)),
        "statement: not valid Unicode (a lone surrogate at character 9)": lambda: lake.sql("SELECT '\udc80'"),
    }
    for said, call in calls.items():
        with pytest.raises(RequestError) as refused:
            call()
        assert said in str(refused.value), (said, str(refused.value))


def test_every_default_method_from_8_threads_ranks_as_one_thread_does(served, demo_lake, tmp_path: Path):
    """The server's and the Python API's: the same rankings under 8 concurrent clients, no error."""
    methods = [*load_methods(tmp_path)]  # the packaged defaults (the shared lake switches on more)
    # each query with its filter (none, and two that split the corpus), so that concurrent requests also
    # share the filter cache and every filtered index path
    queries = {"Which vessel carried the sled?": None, "camera on the sea floor": "year > 2015", "who designed the BenthoCam": "year <= 2015"}
    asks = [(method, query) for method in methods for query in queries]

    def over_http(ask: tuple[str, str]) -> tuple[int, list[tuple[str, float]]]:
        method, query = ask
        answered = send(served.url, "/search", {"corpus": "demo", "method": method, "query": query, "k": 5, "filter": queries[query]})
        return answered.status_code, [(h["node_id"], round(h["score"], 4)) for h in answered.json().get("hits", [])] if answered.status_code == 200 else answered.text

    alone = [over_http(ask) for ask in asks]
    assert all(status == 200 for status, _ in alone), [a for a in alone if a[0] != 200][:3]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(over_http, asks * 3))
    assert together == alone * 3

    lake = open_lake(demo_lake.home)
    in_process = lambda ask: [(h.node_id, round(h.score, 4)) for h in lake.search("demo", ask[0], ask[1], k=5, filter=queries[ask[1]]).hits]  # noqa: E731
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(in_process, asks * 2)) == [hits for _, hits in alone] * 2
