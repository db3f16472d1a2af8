"""Query processing time of Re2, GAR and FastInsight with the cross-encoder on a GPU.

On a 2-core CPU the cross-encoder is nearly the whole cost of all three (``benchmarks/fastinsight.py``
times them there); on a GPU it is cheap and the work between its calls (GAR's frontier, FastInsight's
GRanker and STeX) shows. A GPU machine has no lake, so:

* ``export`` (beside the lake) writes one corpus's node texts, dense vectors, corpus graph and the
  seeded query sample of the CPU timings, with each query's dense vector and dense top 100;
* ``time`` (anywhere) runs the project's kernels on them, one query at a time, with the model in
  ``--model`` on the device torch sees, and writes p50/p95/mean per method and the share spent
  outside the cross-encoder. The query's dense encoding and first-stage search are precomputed, so
  they are not in these times (they are in the CPU ones).

    .venv/bin/python benchmarks/gpu_qpt.py export --folder <dir> --corpus 2wiki-dev --split dev   # GRAPHLAKE_HOME=<lake>
    python benchmarks/gpu_qpt.py time --folder <dir> --model <model folder> --output <results.md>
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp
import torch
from common import ROOT, header, timing_sample

from graphlake.kernels.adaptive_rerank import PairScorer, fastinsight, gar
from graphlake.kernels.cross_encoder import CrossEncoder

DEPTH = 100
METHODS = ("re2", "gar", "fastinsight")


def export(folder: Path, corpus: str, split: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    methods, sample, indexes = timing_sample(corpus, split)
    graph, degrees = indexes.corpus_graph(tuple(indexes.corpus_graph_kinds()))
    pq.write_table(
        pa.table({
            "query": sample,
            "vector": [indexes.encode_dense(q).tolist() for q in sample],
            "initial": [methods["vector"].run(q, indexes, methods).rows[:DEPTH].tolist() for q in sample],
        }),
        folder / "queries.parquet",
    )
    pq.write_table(pa.table({"text": indexes.texts()}), folder / "nodes.parquet", compression="zstd")
    np.save(folder / "vectors.npy", np.asarray(indexes.dense(), dtype=np.float32))
    np.save(folder / "degrees.npy", np.asarray(degrees))
    sp.save_npz(folder / "graph.npz", sp.csr_matrix(graph))
    (folder / "meta.json").write_text(json.dumps({"corpus": corpus, "split": split, "queries": len(sample), "graph": list(indexes.corpus_graph_kinds())}))


class Timed:
    """The cross-encoder with a stopwatch: what a method spends inside it."""

    def __init__(self, encoder: CrossEncoder, texts: list[str]) -> None:
        self.encoder, self.texts, self.seconds = encoder, texts, 0.0

    def scorer(self, query: str) -> PairScorer:
        return PairScorer(lambda rows: self._timed(self.encoder.features, query, [self.texts[r] for r in rows]), lambda h: self._timed(self.encoder.head, h))

    def _timed(self, function, *args):
        started = time.perf_counter()
        try:
            return function(*args)
        finally:
            self.seconds += time.perf_counter() - started


def time_methods(args: argparse.Namespace) -> None:
    folder = args.folder
    meta = json.loads((folder / "meta.json").read_text())
    texts = pq.read_table(folder / "nodes.parquet").column("text").to_pylist()
    queries = pq.read_table(folder / "queries.parquet").to_pylist()[: args.limit]
    vectors, degrees, graph = np.load(folder / "vectors.npy"), np.load(folder / "degrees.npy"), sp.load_npz(folder / "graph.npz").tocsr()
    encoder = CrossEncoder.load(args.model)
    timed = Timed(encoder, texts)
    runs = {
        "re2": lambda q: timed.scorer(q["query"]).scores(np.asarray(q["initial"])),
        "gar": lambda q: gar(np.asarray(q["initial"]), graph, timed.scorer(q["query"])),
        "fastinsight": lambda q: fastinsight(np.asarray(q["vector"], dtype=np.float32), vectors, graph, degrees, timed.scorer(q["query"])),
    }
    device = torch.cuda.get_device_name() if encoder.device.type == "cuda" else "CPU"
    lines = header(f"Re2, GAR, FastInsight query processing time on {device}", "python benchmarks/gpu_qpt.py time " + " ".join(sys.argv[2:]))
    lines += [
        f"- {meta['corpus']} {meta['split']}: {len(queries)} seeded queries, one at a time, b_max {DEPTH}, BATCH 10; graph {'+'.join(meta['graph'])}",
        "- the query's dense encoding and first-stage search are precomputed: not in these times",
        "",
        "| method | p50 ms | p95 ms | mean ms | cross-encoder share of mean |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in METHODS:
        runs[name](queries[0])  # warm-up: kernels compiled, memory pools filled
        elapsed, inside = [], 0.0
        for query in queries:
            timed.seconds = 0.0
            started = time.perf_counter()
            runs[name](query)
            elapsed.append((time.perf_counter() - started) * 1000)
            inside += timed.seconds * 1000
        ms = np.array(elapsed)
        lines.append(f"| {name} | {np.percentile(ms, 50):.1f} | {np.percentile(ms, 95):.1f} | {ms.mean():.1f} | {inside / ms.sum():.0%} |")
        print(lines[-1], flush=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    out = commands.add_parser("export", help="one corpus's inputs for the timings, from the lake (GRAPHLAKE_HOME)")
    out.add_argument("--folder", type=Path, required=True)
    out.add_argument("--corpus", default="2wiki-dev")
    out.add_argument("--split", default="dev")
    timing = commands.add_parser("time", help="time the three methods on the device torch sees")
    timing.add_argument("--folder", type=Path, required=True)
    timing.add_argument("--model", type=Path, required=True, help="a cross-encoder folder (the reranker artefact, or a transfer copy with its tokenizer)")
    timing.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_qpt.md")
    timing.add_argument("--limit", type=int, help="time only the first this many queries (a smoke test)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.corpus, args.split)
    else:
        time_methods(args)


if __name__ == "__main__":
    main()
