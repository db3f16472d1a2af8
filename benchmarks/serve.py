"""What the API costs, and a server under load while a corpus is reindexed; all in one run, as ratios.

1. Per method, the p50 per-query latency of the method run in process on warm indexes (as a stored
   run's ``latency_ms`` is taken) and of a warm ``GraphLake.search``, query by query, interleaved.
2. ``search_batch`` of the queries against as many single ``search`` calls: wall and CPU seconds.
3. A ``graphlake serve`` process on a copy of the lake, ``--clients`` threads asking it for
   ``--seconds`` (the methods in turn), while a side corpus in the copy is edited and rebuilt twice (two
   committed reindexes): requests, errors, p50 / p95 latency, requests per second, snapshots seen.

    GRAPHLAKE_HOME=<lake with the corpus built> .venv/bin/python benchmarks/serve.py --corpus scifact \
        --methods dense,ap_three,bm25,rrf [--queries 100] [--seconds 60] [--clients 4]
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
from pathlib import Path

import httpx
from common import ROOT, header, table
from dagster import AssetSelection
from rich.console import Console

from graphlake.api import GraphLake
from graphlake.pipelines.runner import materialize_corpus
from graphlake.retrieval.index.kinds import index_assets
from graphlake.retrieval.index.lake import LakeIndexes
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import Lake

SIDE = "side"  # the corpus the load test reindexes


def in_process(home: Path, corpus: str, methods: list[str], queries: list[str]) -> list[str]:
    """Part 1: p50 of the method run in process (run_method, as runs record it) against warm API search."""
    rows = []
    api, declared = GraphLake(home), load_methods(home)
    for name in methods:
        indexes, method = LakeIndexes(Lake(home), corpus), declared[name]
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


def load(home: Path, corpus: str, methods: list[str], queries: list[str], seconds: float, clients: int) -> tuple[list[str], dict]:
    """Part 3: a server on a copy of the lake under ``clients`` threads while the side corpus is reindexed twice."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "lake"
        shutil.copytree(home, copy, symlinks=True, ignore=shutil.ignore_patterns("locks"))
        from graphlake.warehouse.catalog import Catalog

        Catalog(copy).refresh()
        source = Path(scratch) / "side.jsonl"
        source.write_text("".join(json.dumps(d) + "\n" for d in side_texts(0)))
        CorpusRegistry(copy).add(CorpusSpec(name=SIDE, format="jsonl", path=str(source)))
        selection = AssetSelection.assets(*index_assets({"bm25", "dense"})).upstream().required_multi_asset_neighbors()
        materialize_corpus(copy, SIDE, selection, Console(file=io.StringIO()))
        port = 8765
        env = {"GRAPHLAKE_HOME": str(copy), "DAGSTER_HOME": str(copy / "dagster"), "PATH": str(Path(sys.executable).parent)}
        server = subprocess.Popen([str(Path(sys.executable).parent / "graphlake"), "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(240):
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            asks = [(corpus, m) for m in methods] + [(SIDE, "bm25"), (SIDE, "dense")]
            for target, method in asks:  # warm every (corpus, method) before the clock starts
                httpx.post(f"{url}/search", json={"corpus": target, "method": method, "query": queries[0]}, timeout=600)
            results: list[tuple[int, float, str, int]] = []
            stop = threading.Event()

            def client(offset: int) -> None:
                with httpx.Client(timeout=600) as session:
                    turn = offset
                    while not stop.is_set():
                        target, method = asks[turn % len(asks)]
                        started = time.perf_counter()
                        answer = session.post(f"{url}/search", json={"corpus": target, "method": method, "query": queries[turn % len(queries)], "k": 10})
                        elapsed = (time.perf_counter() - started) * 1000
                        results.append((answer.status_code, elapsed, target, answer.json().get("snapshot", -1) if answer.status_code == 200 else -1))
                        turn += 1

            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            began = time.perf_counter()
            for thread in threads:
                thread.start()
            reindexes = []
            for version in (1, 2):  # two reindexes committed while the clients ask
                time.sleep(seconds / 3)
                source.write_text("".join(json.dumps(d) + "\n" for d in side_texts(version)))
                started = time.perf_counter()
                materialize_corpus(copy, SIDE, selection, Console(file=io.StringIO()))
                reindexes.append(time.perf_counter() - started)
            time.sleep(max(0.0, seconds - (time.perf_counter() - began)))
            stop.set()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - began
        finally:
            server.terminate()
            server.wait(timeout=30)
    latencies = [ms for _, ms, _, _ in results]
    errors = sum(status != 200 for status, _, _, _ in results)
    side_snapshots = sorted({snapshot for status, _, target, snapshot in results if target == SIDE and status == 200})
    summary = {"requests": len(results), "errors": errors, "seconds": round(elapsed, 1), "reindex_seconds": [round(s, 1) for s in reindexes]}
    rows = [
        f"| {clients} | {len(results)} | {errors} | {elapsed:.0f} | {len(results) / elapsed:.1f} | {statistics.median(latencies):.1f} | "
        f"{statistics.quantiles(latencies, n=20)[18]:.1f} | {', '.join(f'{s:.0f}' for s in reindexes)} | {', '.join(map(str, side_snapshots))} |"
    ]
    return rows, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="scifact")
    parser.add_argument("--methods", default="dense,ap_three,bm25,rrf")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=4)
    options = parser.parse_args()
    home, methods = lake_home(), options.methods.split(",")
    texts = [q["text"] for q in Lake(home).read("queries", {"corpus": options.corpus}).to_pylist() if q["split"] == "test"][: options.queries]
    lines = [*header("Retrieval for applications: the API and `graphlake serve`", f"python benchmarks/serve.py --corpus {options.corpus} --methods {options.methods} --queries {options.queries} --seconds {options.seconds:g} --clients {options.clients}")]
    lines += table(f"1. Warm API search against the method run in process ({options.corpus}, test queries)", ["method", "queries", "in-process p50 ms", "API search p50 ms", "API / in-process"])
    lines += in_process(home, options.corpus, methods, texts)
    lines += table(f"2. One search_batch of {len(texts)} queries against {len(texts)} single searches", ["method", "queries", "single s", "batch s", "speed-up", "single CPU-s", "batch CPU-s", "CPU speed-up", "same top-10"])
    lines += batches(home, options.corpus, methods, texts)
    rows, summary = load(home, options.corpus, methods, texts, options.seconds, options.clients)
    lines += table(f"3. A server under load while corpus {SIDE!r} is reindexed twice", ["clients", "requests", "errors", "seconds", "requests/s", "p50 ms", "p95 ms", "reindexes (s)", f"{SIDE} snapshots served"])
    lines += rows
    text = "\n".join(lines) + "\n"
    print(text)
    print(json.dumps(summary))
    (ROOT / "benchmarks" / "results" / "serve.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
