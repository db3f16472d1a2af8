"""Allan-Poe's gates on the 100k real-text set: the hybrid build without exact k-NN, and G6, G7, G8.

The corpus is ``benchmarks/scale.py``'s ``windows`` set (every pooled passage of the staged sets cut
into two-sentence windows sliding by one, about 95k nodes), built by that script into a lake kept with
``--work``; it replaces the spec's synthetic 100k recipe, whose noisy copies made clusters of
near-duplicates no real corpus has. Its vectors and BM25 index are read from the lake; the queries are
a seeded sample of the evaluated questions of the staged sets (SciFact test, HotpotQA dev, 2Wiki dev),
encoded here.

- build: the default ``BuildConfig`` (``knn: auto``, candidates above ``EXACT_KNN_UP_TO``), on every
  core as ``materialize`` runs it, step by step; the k-NN lists' recall against exact lists on
  ``RECALL_SAMPLE`` seeded nodes;
- G6: recall@10 against exact fusion and QPS over the pool L, at 1/1/1 (against ``fused_exact``) and
  dense only (against faiss HNSW), one thread;
- G7: inserting 20 / 10 / 5 % of the nodes into a build of the rest, against a full build; new nodes
  find their candidates by search, as ``knn: auto`` does at this size (exact candidates: pooled set);
- G8: required keywords held by at least 5 % of the nodes: the walk against the filtered exact top 10.

Run from the repo root, after ``benchmarks/scale.py --sizes windows --work DIR``::

    GRAPHLAKE_HOME=DIR/lake-windows-... .venv/bin/python benchmarks/hybrid_scale.py [--queries 300]
"""

from __future__ import annotations

import shlex
import sys
import time

import faiss
import numpy as np
from hybrid_index import encoded
from hybrid_pooled import ABLATIONS, curves, inserts, keywords, summary
from threadpoolctl import threadpool_limits

from common import EVALUATED, INGEST, arguments, header, table
from graphlake.kernels.hybrid.candidates import candidate_knn
from graphlake.kernels.hybrid.graph_index import RECALL_SAMPLE, BuildConfig, build, knn_recall
from graphlake.kernels.hybrid.pairs import row_operands
from graphlake.kernels.hybrid.vectors import Queries
from graphlake.retrieval.index.derived import hybrid_vectors
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.readers import FORMATS, ReadRequest
from graphlake.warehouse.storage import LakeStorage


def questions(datasets, most: int) -> list[str]:
    """A seeded sample of the evaluated questions of the staged sets."""
    found = []
    for corpus, split in EVALUATED.items():
        fmt, relative = INGEST[corpus]
        queries = FORMATS[fmt](ReadRequest(datasets / relative)).queries
        found += [text for text, on in zip(queries.column("text").to_pylist(), queries.column("split").to_pylist(), strict=True) if on == split]
    return [found[i] for i in np.sort(np.random.default_rng(0).permutation(len(found))[:most])]


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--corpus", default="scale-windows")
        parser.add_argument("--queries", type=int, default=300, help="seeded sample of the evaluated questions")

    args = arguments(__doc__.splitlines()[0], "hybrid_scale.md", extra)
    command = ".venv/bin/python benchmarks/hybrid_scale.py " + shlex.join(sys.argv[1:])
    indexes = open_index_set(LakeStorage(lake_home()), args.corpus)
    vectors = hybrid_vectors(indexes)
    nodes = Queries(vectors.dense, vectors.sparse, indexes.bm25.token_counts(indexes.snapshot.texts()))
    asked, _ = encoded(indexes, questions(args.datasets, args.queries))
    lines = header("Allan-Poe's hybrid graph index on the 100k real-text set (CPU)", command)
    lines += [f"- corpus: `{args.corpus}`, {len(vectors):,} nodes; {len(asked)} queries (SciFact test, HotpotQA dev, 2Wiki dev)"]

    started = time.perf_counter()
    graph = build(vectors, nodes, BuildConfig())
    seconds = time.perf_counter() - started
    scales = graph.scales
    lines += table(f"The default build, every core ({faiss.omp_get_max_threads()} threads)", ["step", "", "seconds"])
    lines += [f"| {step} | | {value:,.1f} |" for step, value in graph.build["seconds"].items()]
    lines += [f"| knn: {stage} | | {value:,.1f} |" for stage, value in graph.build["knn"].get("seconds", {}).items()]
    lines.append(f"| **whole build** ({graph.build['knn']['method']} k-NN) | | **{seconds:,.1f}** |")
    lines.append(f"| k-NN lists' recall against exact, {RECALL_SAMPLE} seeded nodes | | {graph.build['knn'].get('knn_recall', 1.0):.4f} |")

    with threadpool_limits(1):
        faiss.omp_set_num_threads(1)
        started = time.perf_counter()
        knn_ids, knn_sims, _ = candidate_knn(vectors, nodes, scales, 64, row_operands(vectors, nodes, scales))
        knn_seconds = time.perf_counter() - started
        knn = (knn_ids, knn_sims, np.full((3, len(vectors), 16), -1, np.int32))
        lines += [f"- one thread: candidate k-NN {knn_seconds:.1f} s, recall {knn_recall(vectors, nodes, scales, knn_ids, 0):.4f}"]
        default = next(iter(ABLATIONS))
        curve_lines, points, _ = curves(vectors, nodes, asked, scales, knn, {default: {}}, "windows")
        insert_lines = inserts(vectors, nodes, asked, scales, ("candidate k-NN", "candidates", knn_seconds), exact=False)
        keyword_lines = keywords(vectors, nodes, asked, scales, knn, "windows")
    lines += curve_lines + summary(points, "the 100k real-text set") + insert_lines + keyword_lines
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
