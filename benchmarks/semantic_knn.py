"""The semantic edges' k-NN on the 100k real-text set: exact (every pair's cosine) against the faiss
HNSW graph that ``semantic_edges`` takes above ``EXACT_UP_TO`` nodes, side by side in one process.

Reads the dense vectors of a corpus built by ``benchmarks/scale.py`` (default: the ``windows`` set,
about 95k nodes). Reports wall and CPU seconds of each (every core), and the HNSW lists' recall
against the exact ones over every node, with the seeded-sample estimate the asset records.

Run from the repo root, after ``benchmarks/scale.py --sizes windows --work DIR``::

    GRAPHLAKE_HOME=DIR/lake-windows-... .venv/bin/python benchmarks/semantic_knn.py
"""

from __future__ import annotations

import shlex
import sys
import time

import numpy as np

from common import arguments, header, table
from graphlake.assets.graphs.link_edges import EXACT_UP_TO, nearest_neighbours, neighbour_recall
from graphlake.retrieval.index.derived import hybrid_vectors
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage


def timed(run):
    wall, cpu = time.perf_counter(), time.process_time()
    found = run()
    return found, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--corpus", default="scale-windows")
        parser.add_argument("--k", type=int, default=10, help="neighbours a node (SemanticConfig.k)")

    args = arguments(__doc__.splitlines()[0], "semantic_knn.md", extra)
    command = ".venv/bin/python benchmarks/semantic_knn.py " + shlex.join(sys.argv[1:])
    dense = hybrid_vectors(open_index_set(LakeStorage(lake_home()), args.corpus)).dense
    n = len(dense)
    (exact, _), exact_wall, exact_cpu = timed(lambda: nearest_neighbours(dense, args.k, exact_up_to=n))
    (approximate, _), hnsw_wall, hnsw_cpu = timed(lambda: nearest_neighbours(dense, args.k, exact_up_to=0))
    recall = np.mean([len(set(e) & set(a[a >= 0])) / args.k for e, a in zip(exact.tolist(), approximate, strict=True)])
    lines = header("Semantic edges: exact k-NN against the HNSW graph on the 100k real-text set", command)
    lines += [f"- corpus: `{args.corpus}`, {n:,} nodes, k {args.k}; `semantic_edges` is exact up to {EXACT_UP_TO:,} nodes, HNSW above"]
    lines += table("Side by side, one process, every core", ["k-NN", "", "wall s", "CPU-s", "recall@k against exact"])
    lines.append(f"| exact | | {exact_wall:,.1f} | {exact_cpu:,.1f} | 1.0000 |")
    lines.append(f"| HNSW | | {hnsw_wall:,.1f} | {hnsw_cpu:,.1f} | {recall:.4f} (sampled estimate {neighbour_recall(dense, approximate):.4f}) |")
    lines += ["", f"HNSW costs {hnsw_cpu / exact_cpu:.2f}× the exact k-NN's CPU-seconds here; exact grows as n², HNSW about as n log n."]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
