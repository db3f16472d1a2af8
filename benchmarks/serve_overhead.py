"""What one HTTP search costs the server beyond the search, before and after a change, side by side.

One ``graphlake serve`` process per revision on one copy of the lake: each of ``--before``'s and the
working tree's. Their windows alternate (A, B, B, A, ...) so that the machine's load falls on both
alike; each window is ``--clients`` threads sending the same plain ``POST /search`` for ``--seconds``,
nothing hostile and no reindex. Per window: requests/s, p50 and the server's CPU-ms per request
(user + system, its children included), the last being the figure a shared machine does not move.

    GRAPHLAKE_HOME=<demo lake> .venv/bin/python benchmarks/serve_overhead.py --before REV[,REV...] --corpus demo \
        --methods bm25,dense --clients 8 --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import psutil

from common import ROOT, header, revision_on_path, table
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage

FIRST_PORT = 8771  # one server per revision, on consecutive ports


def start(copy: Path, port: int, pythonpath: str) -> subprocess.Popen:
    env = {**os.environ, "GRAPHLAKE_HOME": str(copy), "DAGSTER_HOME": str(copy / "dagster"), "PYTHONPATH": pythonpath}
    env.pop("GRAPHLAKE_API_KEY", None)
    server = subprocess.Popen([str(Path(sys.executable).parent / "graphlake"), "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(480):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.25)
    raise SystemExit(f"the server on port {port} did not start")


def cpu_seconds(pid: int) -> float:
    process = psutil.Process(pid)
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def window(port: int, pid: int, corpus: str, method: str, queries: list[str], seconds: float, clients: int) -> dict:
    """One side's window: requests, their latencies, the server's CPU-seconds over it."""
    latencies: list[float] = []
    failed = [0]
    done = threading.Event()

    def client(offset: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as session:
            turn = offset
            while not done.is_set():
                body = {"corpus": corpus, "method": method, "query": queries[turn % len(queries)], "k": 10}
                started = time.perf_counter()
                status = session.post("/search", json=body).status_code
                latencies.append((time.perf_counter() - started) * 1000)
                failed[0] += status != 200
                turn += 1

    threads = [threading.Thread(target=client, args=(i * 7,)) for i in range(clients)]
    cpu = cpu_seconds(pid)
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    done.set()
    for thread in threads:
        thread.join()
    spent = cpu_seconds(pid) - cpu
    return {"requests": len(latencies), "failed": failed[0], "p50": statistics.median(latencies), "cpu_ms": 1000 * spent / max(1, len(latencies))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revisions (comma-separated) measured beside the working tree")
    parser.add_argument("--corpus", default="demo")
    parser.add_argument("--methods", default="bm25,dense")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "serve_overhead.md")
    options = parser.parse_args()
    home, methods, sides = lake_home(), options.methods.split(","), [*options.before.split(","), "working tree"]
    queries = [q["text"] for q in LakeStorage(home).read("queries", {"corpus": options.corpus}).to_pylist()][:50] or ["a query"]
    measured: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        copy = Path(scratch) / "lake"
        shutil.copytree(home, copy, symlinks=True, ignore=shutil.ignore_patterns("locks"))
        from graphlake.warehouse.catalog import Catalog

        Catalog(copy).refresh()
        paths = [str(stack.enter_context(revision_on_path(revision))) for revision in sides[:-1]] + [""]
        servers = {side: (start(copy, FIRST_PORT + i, path), FIRST_PORT + i) for i, (side, path) in enumerate(zip(sides, paths, strict=True))}
        try:
            for _, port in servers.values():
                for method in methods:  # warm: the first search loads the method's indexes
                    httpx.post(f"http://127.0.0.1:{port}/search", json={"corpus": options.corpus, "method": method, "query": queries[0]}, timeout=600)
            for round_ in range(options.rounds):
                for method in methods:
                    for side in sides if round_ % 2 == 0 else sides[::-1]:
                        server, port = servers[side]
                        got = window(port, server.pid, options.corpus, method, queries, options.seconds, options.clients)
                        measured.setdefault((method, side), []).append(got)
                        print(method, side, json.dumps({k: round(v, 2) for k, v in got.items()}), file=sys.stderr, flush=True)
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(timeout=30)
    command = f"python benchmarks/serve_overhead.py --before {options.before} --corpus {options.corpus} --methods {options.methods} --clients {options.clients} --seconds {options.seconds:g} --rounds {options.rounds}"
    lines = [*header(f"One HTTP search's cost to the server: {options.before} against the working tree", command)]
    lines += [
        "",
        f"Windows of {options.seconds:g} s alternate between the servers (the order reversed each round), {options.rounds} per server and method; medians over the windows. No hostile requests, no reindex.",
    ]
    lines += table("", ["method", "server", "requests/s", "p50 ms", "server CPU-ms / request", "CPU / working tree's", "failed"])[2:]
    for method in methods:
        cpu = {side: statistics.median(r["cpu_ms"] for r in measured[(method, side)]) for side in sides}
        for side in sides:
            runs = measured[(method, side)]
            rate = statistics.median(r["requests"] / options.seconds for r in runs)
            p50 = statistics.median(r["p50"] for r in runs)
            lines.append(f"| {method} | {side} | {rate:.1f} | {p50:.1f} | {cpu[side]:.2f} | {cpu[side] / cpu['working tree']:.2f} | {sum(r['failed'] for r in runs)} |")
    options.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
