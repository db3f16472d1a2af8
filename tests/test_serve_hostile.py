"""What a hostile or careless client sends, against a real ``graphlake serve`` on the shared demo lake
(and the Python API beside it): every case one row of a table, its status and the one-line error it
must get. Nothing may cost the server more than a bounded request, answer 500, or come back in
another shape than ``{"error": "..."}``. Then every default method from 8 threads at once, filtered
and not: no error, and the rankings a single thread gets."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from served import KEY

from graphlake.api import RequestError, open_lake
from graphlake.retrieval.methods import load_methods

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
    "JSON nested 100,000 deep": ("/search", '{"corpus": "demo", "method": "bm25", "query": "sled", "k": ' + "[" * 100_000 + "]" * 100_000 + "}", 400, "body: not JSON that can be read"),
    "a body that is a list": ("/search", [1, 2], 422, "body: Input should be a valid dictionary"),
    'k as "5"': ("/search", {**SLED, "method": "bm25", "k": "5"}, 422, "k: Input should be a valid integer"),
    "k as true": ("/search", {**SLED, "method": "bm25", "k": True}, 422, "k: Input should be a valid integer"),
    "k as 2.5": ("/search", {**SLED, "method": "bm25", "k": 2.5}, 422, "k: Input should be a valid integer"),
    'candidates as "64"': ("/search", {**SLED, "method": "ap_three", "candidates": "64"}, 422, "candidates: Input should be a valid integer"),
    "queries as one string": ("/search/batch", {"corpus": "demo", "method": "bm25", "queries": "abc"}, 422, "queries: Input should be a valid list"),
    "a query that is a number": ("/search", {**SLED, "method": "bm25", "query": 5}, 422, "query: Input should be a valid string"),
    "an unknown path": ("/nowhere", {}, 404, "Not Found"),
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
        if answer.status_code != status or not shape or said not in error or "\n" in error:
            failed[label] = f"{answer.status_code} {error[:150]}"
    assert not failed, "\n".join(f"{label}: {said}" for label, said in failed.items())

    # a body over the limit without a Content-Length (chunked) is refused as soon as it passes it
    chunks = (b" " * 65536 for _ in range(200))  # 13 MB of whitespace, never read whole
    chunked = httpx.post(f"{served.url}/search", content=chunks, headers=AUTH, timeout=120)
    assert chunked.status_code == 413 and chunked.json() == {"error": "body: over 4 MiB"}, chunked.text[:200]
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
