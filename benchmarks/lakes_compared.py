"""Two lakes that differ in one model, compared method by method on the same evaluated queries: the
primary metric of each, and the paired difference (second minus first) with a 95 % bootstrap interval.

Used for the second encoder (a lake built with MiniLM, and a copy switched to all-mpnet-base-v2 in its
models.yaml, which re-encodes what the dense model reaches and nothing else) and for the dense encoder
the lake tunes (a copy switched to ``tune: all-MiniLM-L6-v2``). Both lakes are built by
``benchmarks/learned_fusion.py`` (``--dense``) or ``graphlake eval``; this script only reads their
per-query metrics. ``--cpu-sample N`` also measures each lake's dense model's CPU-seconds per passage
(user + system, this process) on N passages of each set, encoded as the build encodes them.

    .venv/bin/python benchmarks/lakes_compared.py --lakes NAME=LAKE,NAME=LAKE --title "..." --output benchmarks/results/X.md \\
        [--sets scifact,hotpotqa,2wiki-dev] [--methods bm25,dense,...] [--cpu-sample 200]
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np
from learned_fusion import CORPORA, PRIMARY, per_query

from common import arguments, header, table
from graphlake.kernels.eval.metrics import paired_bootstrap
from graphlake.warehouse.storage import LakeStorage

DEFAULT_METHODS = "bm25,dense,dense_hnsw,splade,rrf,graph_dense,graph_rrf,grapher_gcs,ap_three,grasp_fused,graphlake_ltr"


def compared(first: LakeStorage, second: LakeStorage, corpus: str, method: str) -> dict | None:
    """Both lakes' mean primary metric for ``method`` on the queries both evaluated, and the paired difference."""
    split, metric = CORPORA[corpus][2], PRIMARY[corpus]
    if not all(lake.has("query_metrics", {"corpus": corpus, "method": method}) for lake in (first, second)):
        return None  # a method one lake did not evaluate
    a, b = (per_query(lake, corpus, method, split, metric) for lake in (first, second))
    shared = sorted(set(a) & set(b))
    if not shared:
        return None
    found = paired_bootstrap([a[q] for q in shared], [b[q] for q in shared])
    return {"queries": len(shared), "first": float(np.mean([a[q] for q in shared])), "second": float(np.mean([b[q] for q in shared])), **found}


def tuning_said(lake: LakeStorage, corpus: str) -> str | None:
    """The lake's tuning decision for the corpus, as its build said it (None where it tuned nothing)."""
    import json

    from graphlake.warehouse.corpora import TUNED_ARTIFACT, TUNING_DECISION

    if lake.artifact_written_at(TUNED_ARTIFACT, {"corpus": corpus}) is None:
        return None
    return json.loads((lake.artifact(TUNED_ARTIFACT, {"corpus": corpus}) / TUNING_DECISION).read_text(encoding="utf-8"))["said"]


def cpu_per_passage(lake: LakeStorage, corpus: str, count: int) -> float:
    """CPU-seconds (user + system) per passage for the corpus's dense model, on ``count`` of its passages
    (a seeded sample), encoded for the build (torch, its default batch)."""
    from graphlake.retrieval.index.encoders import encode_dense
    from graphlake.retrieval.index.tables import retrieval_texts
    from graphlake.warehouse.corpora import corpus_model

    texts = retrieval_texts(lake.read("nodes", {"corpus": corpus}), lake.read("documents", {"corpus": corpus}))
    sample = [texts[i] for i in np.random.default_rng(0).choice(len(texts), min(count, len(texts)), replace=False)]
    spec = corpus_model(lake, corpus, "dense")
    encode_dense(spec, sample[:8])  # loads the model outside the measure
    before = resource.getrusage(resource.RUSAGE_SELF)
    encode_dense(spec, sample)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / len(sample)


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--lakes", required=True, help="NAME=LAKE,NAME=LAKE: the first is the baseline")
        parser.add_argument("--title", required=True)
        parser.add_argument("--sets", default="scifact,hotpotqa,2wiki-dev")
        parser.add_argument("--methods", default=DEFAULT_METHODS)
        parser.add_argument("--cpu-sample", type=int, default=0)

    args = arguments(__doc__, "lakes_compared.md", options)
    (name_a, path_a), (name_b, path_b) = (item.split("=", 1) for item in args.lakes.split(","))
    first, second = LakeStorage(Path(path_a)), LakeStorage(Path(path_b))
    sets, methods = args.sets.split(","), args.methods.split(",")
    lines = header(args.title, f".venv/bin/python benchmarks/lakes_compared.py --lakes {name_a}=LAKE,{name_b}=LAKE --sets {args.sets} --methods {args.methods}")
    lines += [
        f"- lakes: {name_a} (baseline) and {name_b}, the same corpora, queries and methods; every learned part trained in each lake on its own vectors",
        "- Δ: paired difference of the per-query primary metric, second minus first, 95 % bootstrap interval (10,000 resamples, seed 0)",
    ]
    rows, verdicts = [], []
    for corpus in sets:
        found = {m: r for m in methods if (r := compared(first, second, corpus, m)) is not None}
        for method, r in found.items():
            rows.append(f"| {corpus} | {PRIMARY[corpus]} | {method} | {r['queries']} | {r['first']:.4f} | {r['second']:.4f} | {r['difference']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}] |")
        if found:
            best_a = max(found, key=lambda m: found[m]["first"])
            best_b = max(found, key=lambda m: found[m]["second"])
            wins = [m for m, r in found.items() if r["low"] > 0]
            losses = [m for m, r in found.items() if r["high"] < 0]
            verdicts.append(
                f"- {corpus}: best with {name_a} {best_a} {found[best_a]['first']:.4f}, with {name_b} {best_b} {found[best_b]['second']:.4f} "
                f"({found[best_b]['second'] - found[best_a]['first']:+.4f}); {name_b} better beyond the interval for {', '.join(wins) or 'no method'}, "
                f"worse for {', '.join(losses) or 'no method'}"
            )
    lines += table("Per method (primary metric)", ["set", "metric", "method", "queries", name_a, name_b, f"Δ {name_b} − {name_a} [95% CI]"])
    lines += rows
    lines += ["", "## In short", "", *verdicts]
    tunings = [f"- {corpus}: {tuning_said(second, corpus)}" for corpus in sets if tuning_said(second, corpus)]
    lines += ["", f"## What {name_b}'s lake decided when it tuned its dense encoder", "", *tunings] if tunings else []
    if args.cpu_sample:
        lines += table(f"Dense encoding cost: CPU-seconds per passage ({args.cpu_sample} passages a set, torch, this machine)", ["set", name_a, name_b, "ratio"])
        for corpus in sets:
            started = time.perf_counter()
            a, b = cpu_per_passage(first, corpus, args.cpu_sample), cpu_per_passage(second, corpus, args.cpu_sample)
            lines.append(f"| {corpus} | {a:.4f} | {b:.4f} | {b / a:.1f}× |")
            print(f"{corpus}: encoding cost measured in {time.perf_counter() - started:.0f} s", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(args.output.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
