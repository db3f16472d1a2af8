"""float32 against bfloat16 for the build's encoders on this CPU: what the default precision costs and
what it changes, on a seeded sample of the 10k scale set (``benchmarks/scale.py``'s ``10000``).

Per encoder (MiniLM dense, the bundled SPLADE), in one process, the two precisions interleaved in
halves (float32, bfloat16, bfloat16, float32) so that a drift of the machine falls on both:

- CPU-seconds per passage and the ratio float32 / bfloat16: the decision (issue 87) is float32 as the
  CPU default if it costs at most 1.25×;
- what bfloat16 changes: each passage's cosine to its float32 vector, and the largest change of a
  query-passage score (queries: the sample's titles, encoded in float32), which is the size of a near
  tie that can flip;
- what a batch changes under each precision (a fold encodes new passages in other batches than a
  scratch build): the same passages encoded again in another order, the largest change of a score.

    .venv/bin/python benchmarks/encoder_precision.py [--sample 1000]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from scale import corpus

from common import DATASETS, ROOT, header, table
from graphlake.kernels.text import encoders

RATIO = 1.25  # float32 becomes the CPU default at or below this cost


def cpu(encode, texts: list[str]):
    started = time.process_time()
    out = encode(texts)
    return time.process_time() - started, out


def dense_rows(matrix) -> np.ndarray:
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=1000, help="passages of the 10k scale set (0: all of them)")
    parser.add_argument("--datasets", type=Path, default=DATASETS)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "encoder_precision.md")
    args = parser.parse_args()
    rows = corpus("10000", args.datasets)
    if args.sample:
        rows = [rows[i] for i in np.sort(np.random.default_rng(1).choice(len(rows), min(args.sample, len(rows)), replace=False))]
    texts = [f"{r['title']} {r['text']}".strip() for r in rows]
    titles = [r["title"] for r in rows[:200]]
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    lines = header("Encoder precision on this CPU: float32 against bfloat16", "python benchmarks/encoder_precision.py " + shlex.join(sys.argv[1:]))
    lines += ["", f"{len(texts):,} passages of the 10k scale set (seeded sample); {torch.get_num_threads()} torch threads; bfloat16 native here: {native}."]
    lines += table(
        "Cost and change",
        [
            "encoder",
            "",
            "float32 CPU-s / passage",
            "bfloat16 CPU-s / passage",
            "float32 ×",
            "cosine mean",
            "cosine min",
            "max score change",
            "max score change, another batch order: float32 / bfloat16",
        ],
    )
    decisions = []
    half = len(texts) // 2
    shuffled = np.random.default_rng(2).permutation(len(texts))
    for name, encode in (("MiniLM (dense)", encoders.encode_dense), ("SPLADE", encoders.encode_splade)):
        encode([texts[0]], dtype="float32"), encode([texts[0]], dtype="bfloat16")  # models loaded outside the timing
        seconds = {"float32": 0.0, "bfloat16": 0.0}
        parts: dict[str, list] = {"float32": [], "bfloat16": []}
        for dtype, piece in (("float32", texts[:half]), ("bfloat16", texts[:half]), ("bfloat16", texts[half:]), ("float32", texts[half:])):
            spent, out = cpu(lambda batch, dtype=dtype: encode(batch, dtype=dtype), piece)
            seconds[dtype] += spent
            parts[dtype].append(dense_rows(out))
        full = {dtype: np.concatenate(parts[dtype]) for dtype in parts}
        queries = dense_rows(encode(titles, dtype="float32"))
        cos = (full["float32"] * full["bfloat16"]).sum(1) / np.maximum(np.linalg.norm(full["float32"], axis=1) * np.linalg.norm(full["bfloat16"], axis=1), 1e-12)
        change = np.abs(queries @ (full["bfloat16"] - full["float32"]).T).max()
        reordered = {}
        for dtype in ("float32", "bfloat16"):
            again = np.empty_like(full[dtype])
            again[shuffled] = dense_rows(encode([texts[i] for i in shuffled], dtype=dtype))
            reordered[dtype] = np.abs(queries @ (again - full[dtype]).T).max()
        ratio = seconds["float32"] / seconds["bfloat16"]
        decisions.append((name, ratio))
        lines.append(
            f"| {name} | | {seconds['float32'] / len(texts):.4f} | {seconds['bfloat16'] / len(texts):.4f} | {ratio:.2f} | {cos.mean():.5f} | {cos.min():.5f} | {change:.2e} | {reordered['float32']:.2e} / {reordered['bfloat16']:.2e} |"
        )
    keep = all(ratio <= RATIO for _, ratio in decisions)
    lines += ["", "## Decision", "",
              f"float32 costs {', '.join(f'{ratio:.2f}× ({name})' for name, ratio in decisions)} of bfloat16 here: "
              + ("at most 1.25×: float32 is the CPU default." if keep else "more than 1.25×: bfloat16 stays the CPU default where the CPU does it natively; float32 is an option (`GRAPHLAKE_ENCODER_PRECISION=float32`).")]  # fmt: skip
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
