"""What cutting cross-encoder batches by pair length saves on this CPU (CrossEncoder._batches).

For each evaluated set and a seeded sample of its queries, the dense top 100 is scored as the
budgeted rerankers score it (ten calls of ten pairs, here consecutive tens of a seeded shuffle) and
as Re2 does (one call of 100), once with batches that only end at the batch size (one padded
batch per call of ten: the GPU rule, and the CPU rule before this change) and once for each length
ratio at which a CPU batch also ends. The variants take turns on each query. Weights do not change
the cost, so the packaged MiniLM with a fresh head is used.

    .venv/bin/python benchmarks/cross_encoder_batching.py --folder <gpu_fastinsight.py export>
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gpu_fastinsight import EvaluatedSet

from common import EVALUATED, ROOT, header, table
from graphlake.kernels.eval.metrics import paired_bootstrap
from graphlake.kernels.rerank import cross_encoder

RATIOS = (math.inf, 1.5, 1.25, 1.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, required=True, help="benchmarks/gpu_fastinsight.py export's folder")
    parser.add_argument("--queries", type=int, default=6, help="seeded queries per set")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "cross_encoder_batching.md")
    args = parser.parse_args()
    encoder = cross_encoder.CrossEncoder.initial()
    if encoder.device.type != "cpu":
        sys.exit("this measures the CPU rule; run it where torch sees no GPU")
    lines = header("Cross-encoder batches cut by pair length, on this CPU", "python benchmarks/cross_encoder_batching.py " + " ".join(sys.argv[1:]))
    lines += [
        f"- {torch.get_num_threads()} torch threads; max {encoder.max_tokens} tokens per pair; ms per query for 100 pairs (the dense top 100)",
        "- ratio inf: batches end only at the batch size (32); otherwise a batch also ends before a pair over ratio x its first pair's length",
        f"- the project's rule: ratio {cross_encoder.CPU_LENGTH_RATIO}; last rows: its paired difference to ratio inf (mean, 95% bootstrap interval)",
    ]
    lines += table("Per query", ["set", "calls", *(f"ratio {r}" for r in RATIOS), "padding at ratio inf"])
    chosen = RATIOS.index(cross_encoder.CPU_LENGTH_RATIO)
    for corpus in EVALUATED:
        if not (args.folder / corpus).is_dir():
            continue
        data = EvaluatedSet.load(args.folder / corpus)
        rng = np.random.default_rng(0)
        sample = [data.queries[i] for i in rng.choice(len(data.queries), args.queries, replace=False)]
        encoder.features(sample[0]["query"], data.texts[:10])  # warm-up
        for calls in (10, 1):
            elapsed = {r: [] for r in RATIOS}
            real = padded = 0
            for i, q in enumerate(sample):
                rows = rng.permutation(np.asarray(q["vector"][:100]))
                groups = [[data.texts[r] for r in part] for part in np.array_split(rows, calls)]
                for ratio in RATIOS[i % len(RATIOS) :] + RATIOS[: i % len(RATIOS)]:
                    cross_encoder.CPU_LENGTH_RATIO = ratio
                    started = time.perf_counter()
                    for texts in groups:
                        encoder.features(q["query"], texts)
                    elapsed[ratio].append((time.perf_counter() - started) * 1000)
                for texts in groups:
                    lengths = encoder._encode(q["query"], texts)["attention_mask"].sum(dim=1).numpy()
                    real += lengths.sum()
                    padded += sum(len(b) * b.max() for b in np.array_split(np.sort(lengths), range(32, len(lengths), 32)))
            shape = f"{calls} x {100 // calls}"
            lines.append(f"| {corpus} | {shape} | " + " | ".join(f"{np.mean(elapsed[r]):.0f}" for r in RATIOS) + f" | {1 - real / padded:.0%} |")
            c = paired_bootstrap(elapsed[math.inf], elapsed[RATIOS[chosen]])
            lines.append(f"| {corpus} | {shape}: ratio {RATIOS[chosen]} − inf | {c['difference']:+.0f} [{c['low']:+.0f}, {c['high']:+.0f}] ms | | | | |")
            print("\n".join(lines[-2:]), flush=True)
        cross_encoder.CPU_LENGTH_RATIO = RATIOS[chosen]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
