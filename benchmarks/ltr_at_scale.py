"""graphlake_ltr and GRASP at 100k passages, this revision against an earlier one, side by side in one run.

Two parts, each revision in a process of its own (``--before`` through a git worktree, the working tree
as installed), before then after, on the same queries and the same built lakes (read only):

- **At scale** (``--windows``: the lake ``benchmarks/filters.py`` builds, 94,874 two-sentence windows with
  a ``tenant`` per source passage): grasp_fused and graphlake_ltr, unfiltered and filtered at 1 %
  (``tenant < 10``), on real questions (the first ``--queries`` of SciFact test and of HotpotQA dev).
  Single: each query searched alone through the Python API, warm (QPS: queries over their wall
  seconds; p50, p95). Batch: ``search_batch`` of 100 queries at once, against the same 100 one by one.
- **Against the inputs** (``--lake``: a lake with SciFact and HotpotQA built with the default methods,
  as ``benchmarks/relevance.py`` builds them): p50 and p95 of graphlake_ltr, of grasp_fused, and of
  each of graphlake_ltr's inputs searched as a method of its own, on a seeded sample of the evaluated
  split; graphlake_ltr's p50 over its slowest input's.

Goals (issue 76): at 95k both methods at least 25 QPS single; graphlake_ltr's p50 at most 1.5 times
its slowest input's; a batch of 100 at most 0.5 of the 100 searched one by one.

    .venv/bin/python benchmarks/ltr_at_scale.py --before REV --windows WINDOWS_LAKE --lake LAKE [--queries 50] [--sample 100]

Writes ``benchmarks/results/ltr_at_scale.md``. The lakes must carry what both revisions read: build
them with the later one (its ``skb`` asset stores the SKB's adjacency, which the earlier ignores).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, header, revision_on_path, revisions_options

sys.path.insert(0, str(Path(__file__).parent))
from filters import questions  # noqa: E402  (the windows set's real questions, as the filters benchmark asks them)

SCALED = ("grasp_fused", "graphlake_ltr")
INPUTS = ("bm25", "dense", "splade", "ap_three", "graph_rrf", "grapher_gcs", "grasp_fused")  # graphlake_ltr's (grasp_graph, not switched on by default, runs inside grasp_fused)
ONE_PERCENT = {"field": "tenant", "lt": 10}
BATCH = 100
CHILD = """
import json, resource, sys, time
import numpy as np
from graphlake.api.lake import GraphLake

home, corpus, queries, methods, where, batch = sys.argv[1], sys.argv[2], json.loads(open(sys.argv[3]).read()), sys.argv[4].split(","), json.loads(sys.argv[5]), int(sys.argv[6])
lake = GraphLake(home)

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

found = {}
for method in methods:
    lake.warm(corpus, method)
    lake.search(corpus, method, queries[0], 10, where)
    latencies = []
    started_cpu = cpu()
    for text in queries:
        started = time.perf_counter()
        lake.search(corpus, method, text, 10, where)
        latencies.append(time.perf_counter() - started)
    row = {"p50": 1000 * float(np.percentile(latencies, 50)), "p95": 1000 * float(np.percentile(latencies, 95)),
           "qps": len(queries) / sum(latencies), "singles_cpu": cpu() - started_cpu}
    if batch:
        chosen = queries[:batch]
        started, started_cpu = time.perf_counter(), cpu()
        lake.search_batch(corpus, method, chosen, 10, where)
        row |= {"batch_s": time.perf_counter() - started, "batch_cpu": cpu() - started_cpu, "batch_singles_s": sum(latencies[:batch]), "batch_queries": len(chosen)}
    found[method] = row
print(json.dumps(found))
"""


def measure(lake: Path, corpus: str, queries: list[str], methods: tuple[str, ...], where: dict | None, batch: int, path: Path | None) -> dict:
    """One revision's numbers, in a process of its own (``path``: a PYTHONPATH shim, None: the working tree)."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(lake), "DAGSTER_HOME": str(lake / "dagster")}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as listed:
        listed.write(json.dumps(queries))
        listed.flush()
        command = [sys.executable, "-c", CHILD, str(lake), corpus, listed.name, ",".join(methods), json.dumps(where), str(batch)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{corpus}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def sample(lake: Path, corpus: str, split: str, count: int) -> list[str]:
    from graphlake.retrieval.queries import select_queries
    from graphlake.warehouse.storage import LakeStorage

    return select_queries(LakeStorage(lake).read("queries", {"corpus": corpus}), split, count).column("text").to_pylist()


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--windows", type=Path, required=True, help="the lake benchmarks/filters.py built (corpus windows)")
        parser.add_argument("--lake", type=Path, required=True, help="a lake with scifact and hotpotqa built with the default methods")
        parser.add_argument("--sets", default="scifact:test,hotpotqa:dev")
        parser.add_argument("--queries", type=int, default=50, help="of each of SciFact test and HotpotQA dev, for the windows corpus")
        parser.add_argument("--sample", type=int, default=100, help="queries of each evaluated split, against the inputs")
        parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "ltr_at_scale.md")

    args = revisions_options(__doc__, extra)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    command = f".venv/bin/python benchmarks/ltr_at_scale.py {shlex.join(sys.argv[1:])}".replace(str(args.windows), "WINDOWS_LAKE").replace(str(args.lake), "LAKE")
    lines = header("graphlake_ltr and GRASP at 100k passages: this revision against an earlier one", command)
    lines += [
        f"- before: `{args.before}`; after: the working tree at `{head}`; each revision in a process of its own, before then after, per part",
        "",
        "## At scale: the windows corpus (94,874 nodes)",
        "",
        f"- queries: the first {args.queries} of SciFact test and of HotpotQA dev; single: one `GraphLake.search` at a time, warm (k 10);"
        f" batch: one `search_batch` of {BATCH} against the same {BATCH} one by one, in wall seconds and in CPU seconds of the process (a single search runs two threads: on a shared machine CPU is what a query costs)",
        "",
        "| filter | method | QPS single before | QPS single after | p50 ms before | p50 ms after | p95 ms before | p95 ms after | batch / singles before | batch / singles after | CPU-s batch / singles after | batch s after (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    asked = questions(args.queries)
    summary = []
    with revision_on_path(args.before) as before_path:
        for label, where in (("none", None), ("1 %", ONE_PERCENT)):
            before = measure(args.windows, "windows", asked, SCALED, where, BATCH, before_path)
            after = measure(args.windows, "windows", asked, SCALED, where, BATCH, None)
            for method in SCALED:
                b, a = before[method], after[method]
                lines.append(
                    f"| {label} | {method} | {b['qps']:.1f} | {a['qps']:.1f} | {b['p50']:.0f} | {a['p50']:.0f} | {b['p95']:.0f} | {a['p95']:.0f} | "
                    f"{b['batch_s'] / b['batch_singles_s']:.2f} | {a['batch_s'] / a['batch_singles_s']:.2f} | {a['batch_cpu'] / a['singles_cpu']:.2f} | {a['batch_s']:.2f} ({a['batch_cpu']:.2f}) |"
                )
                summary.append((label, method, a))
        lines += [
            "",
            "## Against graphlake_ltr's inputs, each searched as a method of its own",
            "",
            f"- queries: a seeded sample of {args.sample} of the evaluated split (`select_queries`); one `GraphLake.search` at a time, warm (k 10), wall ms",
            "",
            "| set | method | p50 ms before | p50 ms after | p95 ms before | p95 ms after |",
            "|---|---|---:|---:|---:|---:|",
        ]
        ratios = []
        for item in args.sets.split(","):
            corpus, split = item.split(":")
            texts = sample(args.lake, corpus, split, args.sample)
            methods = (*INPUTS, "graphlake_ltr")
            before = measure(args.lake, corpus, texts, methods, None, 0, before_path)
            after = measure(args.lake, corpus, texts, methods, None, 0, None)
            for method in methods:
                b, a = before[method], after[method]
                lines.append(f"| {corpus} ({len(texts)} queries) | {method} | {b['p50']:.1f} | {a['p50']:.1f} | {b['p95']:.1f} | {a['p95']:.1f} |")
            for name, found in (("before", before), ("after", after)):
                worst = max(INPUTS, key=lambda m: found[m]["p50"])
                ltr = found["graphlake_ltr"]
                ratios.append(
                    f"- {corpus}, {name}: graphlake_ltr p50 {ltr['p50']:.1f} ms, p95 {ltr['p95']:.1f} ms; its slowest input by p50 is {worst} "
                    f"({found[worst]['p50']:.1f} ms, p95 {found[worst]['p95']:.1f} ms): p50 ratio {ltr['p50'] / found[worst]['p50']:.2f} (goal ≤ 1.5)"
                )
    lines += ["", "## The goals (after)", ""]
    for label, method, a in summary:
        lines.append(
            f"- windows, filter {label}, {method}: {a['qps']:.1f} QPS single (goal ≥ 25); a batch of {a['batch_queries']} "
            f"{a['batch_s'] / a['batch_singles_s']:.2f} of the same searched one by one in wall seconds (goal ≤ 0.5), {a['batch_cpu'] / a['singles_cpu']:.2f} in CPU seconds"
        )
    lines += ratios
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
