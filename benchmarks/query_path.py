"""The query path against an earlier revision, side by side in one run on one built lake: per method,
a warm API search's latency one query at a time (p50, p95), and ``search_batch`` of a batch against the
same queries searched one by one (wall seconds, and CPU seconds of the process); and a fresh
``graphlake query`` per default method on the demo lake, through the console script as a user runs it:
the modules it imports and its CPU seconds (the median of ``--repeat`` processes).

Each revision runs in a process of its own (``--before`` through a git worktree, the working tree
as installed), one after the other per set, on the same queries (a seeded sample of the evaluated
split). The lakes are read only; build them first (``benchmarks/learned_fusion.py`` builds HotpotQA
and SciFact with graphlake_ltr trained; ``graphlake demo`` the demo, which ``--sets demo:test`` reads).

    .venv/bin/python benchmarks/query_path.py --before REV --lake LAKE --demo DEMO_LAKE [--sets hotpotqa:dev,scifact:test] \\
        [--queries 100] [--methods ...] [--repeat 5] [--output benchmarks/results/query_path.md]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from common import ROOT, child_usage, machine, revision_on_path, revisions_options

DEFAULT_METHODS = "bm25,dense,dense_hnsw,splade,rrf,graph_rrf,grapher_gcs,ap_three,grasp_graph,grasp_fused,graphlake_ltr"
CHILD = """
import json, resource, sys, time
import numpy as np
from graphlake.api.lake import GraphLake
from graphlake.retrieval.queries import select_queries
from graphlake.warehouse.storage import LakeStorage

home, corpus, split, count, methods = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
texts = select_queries(LakeStorage(home).read("queries", {"corpus": corpus}), split, count).column("text").to_pylist()
lake = GraphLake(home)

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

found = {}
for method in methods:
    lake.warm(corpus, method)
    lake.search(corpus, method, texts[0], 10)
    latencies = []
    started_cpu = cpu()
    for text in texts:
        started = time.perf_counter()
        lake.search(corpus, method, text, 10)
        latencies.append((time.perf_counter() - started) * 1000)
    singles_cpu = cpu() - started_cpu
    started, started_cpu = time.perf_counter(), cpu()
    lake.search_batch(corpus, method, texts, 10)
    batch_wall, batch_cpu = time.perf_counter() - started, cpu() - started_cpu
    found[method] = {"p50": float(np.percentile(latencies, 50)), "p95": float(np.percentile(latencies, 95)), "singles_s": sum(latencies) / 1000,
                     "singles_cpu": singles_cpu, "batch_s": batch_wall, "batch_cpu": batch_cpu}
print(json.dumps({"queries": len(texts), "methods": found}))
"""


FRESH = """
import atexit, json, sys

atexit.register(lambda: print(json.dumps({"modules": len(sys.modules), "graphlake": sum(m.startswith("graphlake.") for m in sys.modules)})))
sys.argv = ["graphlake", "query", "--corpus", "demo", "--method", sys.argv[1], "--json", "Which vessel carried the sled?"]
try:
    from graphlake.cli.main import main
except ImportError:  # a revision whose console script was the application itself
    from graphlake.cli import app as main
try:
    main()
except SystemExit as end:
    assert not end.code, end.code
"""
FRESH_METHODS = ("bm25", "dense", "rrf", "graph_rrf", "grapher_gcs", "ap_three", "grasp_fused", "graphlake_ltr")


def fresh(demo: Path, method: str, repeat: int, path: Path | None) -> dict:
    """A fresh ``graphlake query`` of ``method`` on the demo lake, ``repeat`` times: the median CPU and wall
    seconds of the process, and what it imported."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(demo), "DAGSTER_HOME": str(demo / "dagster")}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    runs = [child_usage([sys.executable, "-c", FRESH, method], env) for _ in range(repeat)]
    imported = json.loads(runs[-1][3].splitlines()[-1])
    return {"cpu": statistics.median(r[1] for r in runs), "wall": statistics.median(r[0] for r in runs), **imported}


def measure(lake: Path, corpus: str, split: str, count: int, methods: str, path: Path | None) -> dict:
    """One revision's numbers on one set, in a process of its own (``path``: a PYTHONPATH shim, None: the working tree)."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(lake), "DAGSTER_HOME": str(lake / "dagster")}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    done = subprocess.run([sys.executable, "-c", CHILD, str(lake), corpus, split, str(count), methods], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{corpus}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--lake", type=Path, required=True)
        parser.add_argument("--demo", type=Path, required=True, help="a built demo lake, for the fresh queries")
        parser.add_argument("--sets", default="hotpotqa:dev,scifact:test")
        parser.add_argument("--queries", type=int, default=100)
        parser.add_argument("--methods", default=DEFAULT_METHODS)
        parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "query_path.md")

    args = revisions_options(__doc__, extra)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    lines = [
        "# The query path: this revision against an earlier one, warm API searches",
        "",
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}",
        f"- command: `.venv/bin/python benchmarks/query_path.py {shlex.join(sys.argv[1:])}`",
        f"- before: `{args.before}`; after: the working tree at `{head}`; each in a process of its own, before then after, per set",
        "- latency: `GraphLake.search` of one query (k 10), warm, wall milliseconds; batch: `search_batch` of all the queries against them searched one by one (wall seconds; CPU seconds of the process in brackets)",
        "",
        "| set | method | p50 ms before | p50 ms after | p95 ms before | p95 ms after | one by one s after | batch s after | batch / one by one |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    slowest_inputs = []
    with revision_on_path(args.before) as before_path:
        for item in args.sets.split(","):
            corpus, split = item.split(":")
            before = measure(args.lake, corpus, split, args.queries, args.methods, before_path)
            after = measure(args.lake, corpus, split, args.queries, args.methods, None)
            for method, b in before["methods"].items():
                a = after["methods"][method]
                lines.append(
                    f"| {corpus} ({after['queries']} queries) | {method} | {b['p50']:.1f} | {a['p50']:.1f} | {b['p95']:.1f} | {a['p95']:.1f} | "
                    f"{a['singles_s']:.2f} ({a['singles_cpu']:.2f}) | {a['batch_s']:.2f} ({a['batch_cpu']:.2f}) | {a['batch_s'] / a['singles_s']:.2f} |"
                )
            if "graphlake_ltr" in after["methods"]:
                inputs = {m: v for m, v in after["methods"].items() if m not in ("graphlake_ltr", "dense_hnsw", "rrf")}
                worst = max(inputs, key=lambda m: inputs[m]["p50"])
                ltr = after["methods"]["graphlake_ltr"]
                slowest_inputs.append(
                    f"- {corpus}: graphlake_ltr p50 {ltr['p50']:.1f} ms, p95 {ltr['p95']:.1f} ms; its slowest input by p50 is {worst} "
                    f"({inputs[worst]['p50']:.1f} ms, p95 {inputs[worst]['p95']:.1f} ms): p50 ratio {ltr['p50'] / inputs[worst]['p50']:.2f}, "
                    f"p95 ratio {ltr['p95'] / inputs[worst]['p95']:.2f} (goal ≤ 2 and ≤ 5)"
                )
        fresh_lines = [
            "",
            "## A fresh `graphlake query` on the demo lake",
            "",
            f"- one process per query, {args.repeat} of each (median): CPU seconds (user + system) and wall seconds of the process, and the modules it imported (all / graphlake's)",
            "- goals (issue 73): ap_three ≤ 1.5 CPU-s, graphlake_ltr ≤ 3 CPU-s",
            "",
            "| method | CPU s before | CPU s after | wall s before | wall s after | modules before | modules after | graphlake before | graphlake after |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for method in FRESH_METHODS:
            b, a = fresh(args.demo, method, args.repeat, before_path), fresh(args.demo, method, args.repeat, None)
            fresh_lines.append(f"| {method} | {b['cpu']:.2f} | {a['cpu']:.2f} | {b['wall']:.2f} | {a['wall']:.2f} | {b['modules']} | {a['modules']} | {b['graphlake']} | {a['graphlake']} |")
    lines += ["", "## graphlake_ltr against the slowest of its inputs (after)", "", *slowest_inputs, *fresh_lines, ""]
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
