"""What the API costs, and a server under load while a corpus is reindexed; all in one run, as ratios.

1. Per method, the p50 per-query latency of the method run in process on warm indexes (as a stored
   run's ``latency_ms`` is taken) and of a warm ``GraphLake.search``, query by query, interleaved.
2. ``search_batch`` of the queries against as many single ``search`` calls: wall and CPU seconds.
3. A ``graphlake serve`` process on a copy of the lake, ``--clients`` threads on each method in turn for
   ``--seconds``, one request in ten hostile (an unbounded pool, a 20 MB body, NaN weights, ...), while a
   side corpus in the copy is edited and reindexed in each window: requests, errors, p50 / p95 latency,
   requests per second, and the server's peak resident memory against its idle size.

    GRAPHLAKE_HOME=<lake with the corpus built> .venv/bin/python benchmarks/serve.py --corpus scifact \
        --methods dense,ap_three,bm25,rrf [--queries 100] [--seconds 60] [--clients 4]

``--side before --revision REV`` / ``--side after`` run part 3 alone, the server on ``REV``'s code or on
the working tree's, into ``results/serve_load.md`` (the load acceptance of issue 57):

    GRAPHLAKE_HOME=<demo lake> .venv/bin/python benchmarks/serve.py --corpus demo --clients 8 --seconds 60 \
        --methods bm25,dense,dense_hnsw,splade,rrf,graph_rrf,grapher_gcs,ap_three,grasp_fused,graphlake_ltr --side after
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from dagster import AssetSelection
from rich.console import Console

from common import ROOT, header, revision_on_path, table
from graphlake.api import GraphLake
from graphlake.pipelines.runner import materialize_corpus
from graphlake.retrieval.learned_kinds import INDEX_KINDS, open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage

SIDE = "side"  # the corpus the load test reindexes


def in_process(home: Path, corpus: str, methods: list[str], queries: list[str]) -> list[str]:
    """Part 1: p50 of the method run in process (run_method, as runs record it) against warm API search."""
    rows = []
    api, declared = GraphLake(home), load_methods(home)
    for name in methods:
        indexes, method = open_index_set(LakeStorage(home), corpus), declared[name]
        method.run("warm up", indexes)  # as run_method does before its timed loop
        api.warm(corpus, name)
        own, served = [], []
        for text in queries:
            started = time.perf_counter()
            method.run(text, indexes)
            own.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            api.search(corpus, name, text, 10)
            served.append((time.perf_counter() - started) * 1000)
        p50, base = statistics.median(served), statistics.median(own)
        rows.append(f"| {name} | {len(queries)} | {base:.2f} | {p50:.2f} | {p50 / base:.2f} |")
    return rows


def batches(home: Path, corpus: str, methods: list[str], queries: list[str]) -> list[str]:
    """Part 2: one search_batch of the queries against as many single searches (warm, same queries)."""
    api, rows = GraphLake(home), []
    for name in methods:
        api.warm(corpus, name)
        api.search_batch(corpus, name, queries[:2], 10)
        wall, cpu = time.perf_counter(), time.process_time()
        singles = [api.search(corpus, name, text, 10) for text in queries]
        single_wall, single_cpu = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        batched = api.search_batch(corpus, name, queries, 10)
        batch_wall, batch_cpu = time.perf_counter() - wall, time.process_time() - cpu
        same = sum([h.node_id for h in a.hits] == [h.node_id for h in b.hits] for a, b in zip(singles, batched, strict=True))
        rows.append(
            f"| {name} | {len(queries)} | {single_wall:.2f} | {batch_wall:.2f} | {single_wall / batch_wall:.1f} | {single_cpu:.2f} | {batch_cpu:.2f} | {single_cpu / batch_cpu:.1f} | {same}/{len(queries)} |"
        )
    return rows


def side_texts(version: int) -> list[dict]:
    return [{"id": f"s{i}", "title": f"Harbour log {i}", "text": f"Entry {i} (edition {version}): the tide gauge read {i % 7} metres; boats {i % 5} went out."} for i in range(300)]


# What a hostile or careless client sends, one in every HOSTILE_EVERY requests of each client: the server
# must refuse each in one 4xx line without a cost beyond a bounded request (the body, as sent; None: JSON of
# the method's request with these fields). A pool of 3*10^7 candidates is a 0.5 GB allocation where unbounded.
HOSTILE_EVERY = 10
HOSTILE: list[tuple[str, dict | str]] = [
    ("candidates 3e7", {"method": "ap_three", "candidates": 30_000_000}),
    ("400,000 keywords", {"method": "ap_three", "keywords": ["sled"] * 400_000}),
    ("a 20 MB body", {"query": "x" * 20_000_000}),
    ("NaN weights", '{"corpus": "demo", "method": "rrf", "query": "sled", "weights": [NaN, 1]}'),
    ("ef_search 2^31", {"method": "dense_hnsw", "ef_search": 2**31}),
    ("k as a string", {"k": "5"}),
    ("JSON 50,000 deep", '{"corpus": "demo", "query": "sled", "k": ' + "[" * 50_000 + "]" * 50_000 + "}"),
    ("a NUL in corpus", {"corpus": "de\x00mo"}),
]


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def _hostile_body(corpus: str, method: str, query: str, turn: int) -> tuple[str, bytes]:
    label, body = HOSTILE[turn % len(HOSTILE)]
    if isinstance(body, str):
        return label, body.replace('"demo"', json.dumps(corpus)).encode()
    return label, json.dumps({"corpus": corpus, "method": method, "query": query, "k": 10, **body}).encode()


def load(home: Path, corpus: str, methods: list[str], queries: list[str], seconds: float, clients: int, pythonpath: str = "") -> tuple[list[str], dict]:
    """Part 3: a server on a copy of the lake, ``clients`` threads on one method at a time for ``seconds``
    each (one request in HOSTILE_EVERY hostile), while the side corpus is reindexed once in each window;
    the server's resident memory sampled every 0.1 s against its size idle after warming every method."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "lake"
        shutil.copytree(home, copy, symlinks=True, ignore=shutil.ignore_patterns("locks"))
        from graphlake.warehouse.catalog import Catalog

        Catalog(copy).refresh()
        source = Path(scratch) / "side.jsonl"
        source.write_text("".join(json.dumps(d) + "\n" for d in side_texts(0)))
        CorpusRegistry(copy).add(CorpusSpec(name=SIDE, format="jsonl", path=str(source)))
        selection = AssetSelection.assets(*INDEX_KINDS.index_assets({"bm25", "dense"})).upstream().required_multi_asset_neighbors()
        materialize_corpus(copy, SIDE, selection, Console(file=io.StringIO()))
        port = 8765
        env = {"GRAPHLAKE_HOME": str(copy), "DAGSTER_HOME": str(copy / "dagster"), "PATH": str(Path(sys.executable).parent), "PYTHONPATH": pythonpath}
        server = subprocess.Popen([str(Path(sys.executable).parent / "graphlake"), "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        rows, summary = [], {"methods": {}}
        try:
            for _ in range(240):
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            for method in methods:  # warm every method (and the side corpus) before measuring the idle size
                httpx.post(f"{url}/search", json={"corpus": corpus, "method": method, "query": queries[0]}, timeout=600)
            httpx.post(f"{url}/search", json={"corpus": SIDE, "method": "bm25", "query": queries[0]}, timeout=600)
            time.sleep(2)
            idle = _rss_mb(server.pid)
            summary["idle_mb"] = round(idle, 1)
            for version, method in enumerate(methods, start=1):
                results, peak = _window(url, server.pid, corpus, method, queries, seconds, clients, source, copy, selection, version)
                normal = [(status, ms) for status, ms, hostile in results if not hostile]
                hostile = [status for status, _, hostile in results if hostile]
                errors = sum(status != 200 for status, _ in normal) + sum(status >= 500 or status < 0 for status in hostile)
                latencies = [ms for status, ms in normal if status == 200] or [0.0]
                rows.append(
                    f"| {method} | {clients} | {len(normal)} | {len(hostile)} | {errors} | {len(normal) / seconds:.1f} | {statistics.median(latencies):.0f} | "
                    f"{statistics.quantiles(latencies, n=20)[18] if len(latencies) > 1 else latencies[0]:.0f} | {peak:.0f} | {peak / idle:.2f} |"
                )
                summary["methods"][method] = {"requests": len(normal), "hostile": len(hostile), "errors": errors, "peak_mb": round(peak, 1), "peak_over_idle": round(peak / idle, 3)}
                print(rows[-1], file=sys.stderr, flush=True)
                if server.poll() is not None:
                    raise SystemExit(f"the server died during {method} (exit status {server.returncode})")
            summary["memory_rows"], summary["memory"] = memory(url, server.pid, corpus, methods, queries, idle)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return rows, summary


LONG_CHARS, BATCH, BIG_K, CONCURRENT = 2_000, 256, 1_000, 8  # the memory scenarios' batch: the API's bounds
HEAVY_STATEMENTS, HEAVY_SQL = 4, "SELECT count(DISTINCT range::VARCHAR || 'x') FROM range(20000000)"  # a hash table past any statement's share


def long_queries(texts: list[str], count: int, seed: int) -> list[str]:
    """``count`` distinct queries of LONG_CHARS characters, words of ``texts`` shuffled by ``seed``."""
    import random

    words = " ".join(texts).split() or ["sled"]
    rng, found = random.Random(seed), []
    while len(found) < count:
        query = ""
        while len(query) < LONG_CHARS:
            query += rng.choice(words) + " "
        found.append(query[:LONG_CHARS].strip())
    return found


def _children_mb(pid: int) -> float:
    """The resident size (MiB) of ``pid``'s children now (the server's SQL processes)."""
    found = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            found += child.memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            pass
    return found


def _peak_since_reset(pid: int, reset: bool) -> float:
    """The resident peak (MiB) since the last reset; ``reset``: start a new one (``/proc/PID/clear_refs``)."""
    if reset:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return 0.0
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def memory(url: str, pid: int, corpus: str, methods: list[str], texts: list[str], idle: float) -> tuple[list[str], dict]:
    """The memory scenarios: per method one batch of BATCH long queries at k BIG_K; CONCURRENT such batches
    at once of rrf and of ap_three at candidates 10,000; HEAVY_STATEMENTS SQL statements far past their
    share at once beside CONCURRENT rrf batches; a 16 MB header. Each: the resident peak of the server
    and its SQL processes together (theirs sampled every 0.05 s) against the server's idle, and how its
    requests were answered (status: count)."""
    headers = {"Content-Type": "application/json"}

    def batch(method: str, seed: int, **extra) -> int:
        body = {"corpus": corpus, "method": method, "queries": long_queries(texts, BATCH, seed), "k": BIG_K, **extra}
        try:
            with httpx.stream("POST", f"{url}/search/batch", json=body, headers=headers, timeout=1800) as answer:
                for _ in answer.iter_bytes():
                    pass
                return answer.status_code
        except httpx.HTTPError:
            return -1

    def statement(_: int) -> int:
        try:
            return httpx.post(f"{url}/sql", json={"statement": HEAVY_SQL}, headers=headers, timeout=600).status_code
        except httpx.HTTPError:
            return -1

    def scenario(label: str, run) -> None:
        _peak_since_reset(pid, reset=True)
        started, done, children = time.perf_counter(), threading.Event(), [0.0]

        def watch() -> None:  # the SQL processes' memory: outside the server's own peak
            while not done.wait(0.05):
                children[0] = max(children[0], _children_mb(pid) + _rss_mb(pid))

        watcher = threading.Thread(target=watch)
        watcher.start()
        statuses = run()
        done.set()
        watcher.join()
        peak = max(_peak_since_reset(pid, reset=False), _rss_mb(pid), children[0])
        counted = {str(code): statuses.count(code) for code in sorted(set(statuses))}
        rows.append(f"| {label} | {len(statuses)} | {', '.join(f'{c}: {n}' for c, n in counted.items())} | {time.perf_counter() - started:.1f} | {peak:.0f} | {peak / idle:.2f} | {_rss_mb(pid):.0f} |")
        summary[label] = {"statuses": counted, "peak_mb": round(peak, 1), "peak_over_idle": round(peak / idle, 3)}
        print(rows[-1], file=sys.stderr, flush=True)

    rows: list[str] = []
    summary: dict = {}
    for method in methods:
        scenario(f"{method}: {BATCH} queries of {LONG_CHARS} characters, k {BIG_K}", lambda method=method: [batch(method, 0)])
    for method, extra in (("rrf", {}), ("ap_three", {"candidates": 10_000})):
        with ThreadPoolExecutor(CONCURRENT) as pool:
            label = f"{method}{' candidates 10,000' if extra else ''}: {CONCURRENT} such batches at once"
            scenario(label, lambda method=method, extra=extra: list(pool.map(lambda seed: batch(method, seed, **extra), range(1, CONCURRENT + 1))))

    with ThreadPoolExecutor(CONCURRENT + HEAVY_STATEMENTS) as pool:
        label = f"SQL: {HEAVY_STATEMENTS} statements far past their share at once, beside {CONCURRENT} rrf batches"
        scenario(label, lambda: list(pool.map(lambda seed: statement(seed) if seed < HEAVY_STATEMENTS else batch("rrf", seed), range(HEAVY_STATEMENTS + CONCURRENT))))

    def header() -> list[int]:
        try:
            return [httpx.get(f"{url}/health", headers={"X-Big": "a" * (16 << 20)}, timeout=120).status_code]
        except httpx.HTTPError:
            return [-1]

    scenario("a 16 MB header", header)
    return rows, summary


def _window(url: str, pid: int, corpus: str, method: str, queries: list[str], seconds: float, clients: int, source: Path, copy: Path, selection, version: int):
    """One method's window: its clients, one reindex of the side corpus, the memory sampler; the
    (status, ms, hostile) of every request (status -1: no answer) and the peak resident MiB."""
    results: list[tuple[int, float, bool]] = []
    stop = threading.Event()
    peak = [0.0]

    def client(offset: int) -> None:
        with httpx.Client(timeout=600) as session:
            turn = offset
            while not stop.is_set():
                query = queries[turn % len(queries)]
                hostile = turn % HOSTILE_EVERY == HOSTILE_EVERY - 1
                if hostile:  # each client starts at another kind, so that every kind is sent early
                    _, body = _hostile_body(corpus, method, query, turn // HOSTILE_EVERY + offset)
                else:
                    body = json.dumps({"corpus": corpus, "method": method, "query": query, "k": 10}).encode()
                started = time.perf_counter()
                try:
                    status = session.post(f"{url}/search", content=body, headers={"Content-Type": "application/json"}).status_code
                except httpx.HTTPError:
                    status = -1
                results.append((status, (time.perf_counter() - started) * 1000, hostile))
                turn += 1

    def sample() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], _rss_mb(pid))
            except (FileNotFoundError, StopIteration):
                return
            time.sleep(0.1)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)] + [threading.Thread(target=sample)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds / 3)
    source.write_text("".join(json.dumps(d) + "\n" for d in side_texts(version)))
    materialize_corpus(copy, SIDE, selection, Console(file=io.StringIO()))
    time.sleep(max(0.0, seconds - (time.perf_counter() - began)))
    stop.set()
    for thread in threads:
        thread.join()
    return results, peak[0]


def load_only(options, home: Path, methods: list[str], texts: list[str]) -> None:
    """``--side before|after``: part 3 alone, the server running ``--revision`` (before) or the working
    tree (after), each side kept in serve_load.json; serve_load.md shows both."""
    out = ROOT / "benchmarks" / "results" / "serve_load.json"
    stored = json.loads(out.read_text()) if out.exists() else {}
    command = f"python benchmarks/serve.py --corpus {options.corpus} --methods {options.methods} --seconds {options.seconds:g} --clients {options.clients} --side {options.side}"
    if options.side == "before":
        with revision_on_path(options.revision) as shim:
            rows, summary = load(home, options.corpus, methods, texts, options.seconds, options.clients, str(shim))
        command += f" --revision {options.revision}"
    else:
        rows, summary = load(home, options.corpus, methods, texts, options.seconds, options.clients)
    stored[options.side] = {"header": header("", command)[2:5], "rows": rows, "summary": summary, "revision": options.revision if options.side == "before" else "working tree"}
    out.write_text(json.dumps(stored, indent=1) + "\n")
    lines = [f"# A server under load and hostile input, while corpus {SIDE!r} is reindexed", ""]
    lines += [
        f"Each method in turn for {options.seconds:g} s: {options.clients} clients, one request in {HOSTILE_EVERY} hostile "
        f"({'; '.join(label for label, _ in HOSTILE)}), and one committed reindex of {SIDE!r} in each window. "
        "errors: a normal request not answered 200, or a hostile one answered 5xx or not at all. Memory: the server's "
        "resident size sampled every 0.1 s, against its size idle after warming every method.",
    ]
    for side in ("before", "after"):
        if side in stored:
            part = stored[side]
            lines += ["", f"## {side} ({part['revision']}; idle {part['summary']['idle_mb']:.0f} MiB)", "", *part["header"]]
            lines += table("", ["method", "clients", "requests", "hostile", "errors", "requests/s", "p50 ms", "p95 ms", "peak MiB", "peak / idle"])[2:]
            lines += part["rows"]
            if "memory_rows" in part["summary"]:
                lines += ["", f"### memory ({side}): batches at the API's bounds, one after another, then at once", ""]
                lines += table("", ["scenario", "requests", "statuses", "s", "peak MiB", "peak / idle", "after MiB"])[2:]
                lines += part["summary"]["memory_rows"]
    if {"before", "after"} <= set(stored):
        ratios = [
            f"| {method} | {stored['before']['summary']['methods'][method]['requests']} | {after['requests']} | {after['requests'] / max(1, stored['before']['summary']['methods'][method]['requests']):.2f} |"
            for method, after in stored["after"]["summary"]["methods"].items()
            if method in stored["before"]["summary"]["methods"]
        ]
        lines += ["", "## throughput, after against before (requests answered in the same windows)", ""]
        lines += table("", ["method", "before", "after", "after / before"])[2:] + ratios
    (ROOT / "benchmarks" / "results" / "serve_load.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="scifact")
    parser.add_argument("--methods", default="dense,ap_three,bm25,rrf")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--side", choices=["before", "after"], help="part 3 alone, for serve_load.md: the server of --revision, or of the working tree")
    parser.add_argument("--revision", default="HEAD", help="with --side before: the git revision the server runs")
    options = parser.parse_args()
    home, methods = lake_home(), options.methods.split(",")
    texts = [q["text"] for q in LakeStorage(home).read("queries", {"corpus": options.corpus}).to_pylist() if q["split"] == "test"][: options.queries]
    if options.side:
        return load_only(options, home, methods, texts)
    lines = [
        *header(
            "Retrieval for applications: the API and `graphlake serve`",
            f"python benchmarks/serve.py --corpus {options.corpus} --methods {options.methods} --queries {options.queries} --seconds {options.seconds:g} --clients {options.clients}",
        )
    ]
    lines += table(f"1. Warm API search against the method run in process ({options.corpus}, test queries)", ["method", "queries", "in-process p50 ms", "API search p50 ms", "API / in-process"])
    lines += in_process(home, options.corpus, methods, texts)
    lines += table(
        f"2. One search_batch of {len(texts)} queries against {len(texts)} single searches",
        ["method", "queries", "single s", "batch s", "speed-up", "single CPU-s", "batch CPU-s", "CPU speed-up", "same top-10"],
    )
    lines += batches(home, options.corpus, methods, texts)
    rows, summary = load(home, options.corpus, methods, texts, options.seconds, options.clients)
    lines += table(
        f"3. A server under load while corpus {SIDE!r} is reindexed, one request in {HOSTILE_EVERY} hostile",
        ["method", "clients", "requests", "hostile", "errors", "requests/s", "p50 ms", "p95 ms", "peak MiB", "peak / idle"],
    )
    lines += rows
    text = "\n".join(lines) + "\n"
    print(text)
    print(json.dumps(summary))
    (ROOT / "benchmarks" / "results" / "serve.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
