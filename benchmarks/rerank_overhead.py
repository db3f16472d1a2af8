"""FastInsight's and GAR's own work per query, the cross-encoder left out.

On a GPU the cross-encoder is fast enough that what a budgeted method does between its batches
(choosing the next batch over the corpus graph, GRanker's smoothing) decides which method answers
sooner (benchmarks/results/fastinsight_gpu.md). This script times that work alone: the scorer is
cost-free (a node's [CLS] vector is a fixed random row, the head a fixed linear map), so the
methods make the choices they would make with some model, at no model cost. The methods take turns
on each query. With ``--against REV`` FastInsight from ``kernels/rerank/adaptive.py`` at git
revision REV runs beside the working tree's, in the same turns, so a kernel change is compared side
by side in one run.

    .venv/bin/python benchmarks/rerank_overhead.py --folder <gpu_fastinsight.py export> [--against REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gpu_fastinsight import EvaluatedSet

from common import EVALUATED, ROOT, header, table
from graphlake.kernels.eval.metrics import paired_bootstrap
from graphlake.kernels.rerank.adaptive import PairScorer, fastinsight, gar

KERNEL = "kernels/rerank/adaptive.py"
OLD_KERNEL = "kernels/adaptive_rerank.py"  # where it lived before the kernels were grouped by family


def kernel_at(revision: str):
    """The adaptive_rerank module as it was at ``revision``."""
    shown = subprocess.run(["git", "show", f"{revision}:{KERNEL}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        shown = subprocess.run(["git", "show", f"{revision}:{OLD_KERNEL}"], cwd=ROOT, check=True, capture_output=True, text=True)
    source = shown.stdout
    path = Path(tempfile.mkdtemp()) / "adaptive_rerank_then.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("adaptive_rerank_then", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def free_scorer(n: int, seed: int) -> PairScorer:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    weights = rng.standard_normal(384).astype(np.float32)
    return PairScorer(lambda rows: vectors[rows], lambda h: np.asarray(h, dtype=np.float32) @ weights)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, required=True, help="benchmarks/gpu_fastinsight.py export's folder")
    parser.add_argument("--against", help="a git revision whose FastInsight runs beside this one")
    parser.add_argument("--queries", type=int, default=300, help="queries per set (the first this many)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "rerank_overhead.md")
    args = parser.parse_args()

    runs = {
        "gar": lambda data, q, scorer: gar(np.asarray(q["vector"]), data.graph, scorer),
        "fastinsight": lambda data, q, scorer: fastinsight(q["embedding"], data.vectors, data.graph, data.degrees, scorer),
    }
    if args.against:
        then = kernel_at(args.against)
        runs[f"fastinsight@{args.against}"] = lambda data, q, scorer: then.fastinsight(q["embedding"], data.vectors, data.graph, data.degrees, then.PairScorer(scorer.features, scorer.head))
    names = list(runs)
    lines = header("Budgeted rerankers' own work per query (cost-free cross-encoder)", "python benchmarks/rerank_overhead.py " + " ".join(sys.argv[1:]))
    lines += [
        "- b_max 100, BATCH 10, alpha 0.2, beta 1; one query at a time, the methods taking turns; dense vectors and the corpus graph in memory",
        "- times in ms; the last rows are FastInsight's paired differences (mean, 95% bootstrap interval)",
    ]
    lines += table("Per query", ["set", "method", "p50", "p95", "mean"])
    for corpus in EVALUATED:
        if not (args.folder / corpus).is_dir():
            continue
        data = EvaluatedSet.load(args.folder / corpus, args.queries)
        scorer = free_scorer(len(data.texts), seed=0)
        for q in data.queries:
            q["embedding"] = np.asarray(q["embedding"], dtype=np.float32)
        for name in names:
            runs[name](data, data.queries[0], scorer)  # warm-up
        elapsed: dict[str, list[float]] = {name: [] for name in names}
        for i, q in enumerate(data.queries):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                started = time.perf_counter()
                runs[name](data, q, scorer)
                elapsed[name].append((time.perf_counter() - started) * 1000)
        rows = []
        for name in names:
            ms = np.array(elapsed[name])
            rows.append(f"| {corpus} ({len(ms)} queries) | {name} | {np.percentile(ms, 50):.2f} | {np.percentile(ms, 95):.2f} | {ms.mean():.2f} |")
        for baseline in (name for name in names if name != "fastinsight"):
            c = paired_bootstrap(elapsed[baseline], elapsed["fastinsight"])
            rows.append(f"| {corpus} | fastinsight − {baseline} | | | {c['difference']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] |")
        lines += rows
        print("\n".join(rows), flush=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
