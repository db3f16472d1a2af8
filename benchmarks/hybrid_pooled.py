"""Allan-Poe's hybrid graph index on the pooled corpus: every staged passage set of the lake in one index.

The spec's scale set (§3): the passages of every corpus the lake holds (SciFact, HotpotQA, 2Wiki dev
and train, and HotpotQA train when ingested), duplicates by text dropped, their dense and SPLADE
vectors read from the lake, BM25 fitted on the pooled texts; the queries are the evaluated queries of
the pooled sets. Reported:

- the k-NN step: exact against NN-Descent (seconds, recall of the lists; spec G2, T5);
- the ablations sharing that k-NN graph (G4): the code's and the paper's edge layouts, RNG+IP vs
  RNG-only vs IP-only pruning, with and without keyword edges, entry points of the largest or the
  smallest norm; each as a recall@10–QPS curve over the pool L, 1/1/1 and dense only, with
  ``fused_exact`` and faiss HNSW (dense only) beside them (G6), as a table and ``hybrid_pooled.png``;
- separate-then-fuse (``multipath``) at its depths against the walk (G5);
- inserting 20 / 10 / 5 % of the nodes into a build of the rest, against a full build (G7);
- required keywords held by at least 5 % of the nodes: the walk against the filtered exact top 10 (G8);
- bytes per node of each edge kind against faiss HNSW, the BM25 index and the SPLADE matrix, and
  against three separate degree-d graphs (G10).

One thread for everything timed, methods interleaved query by query, the median of three passes.
Run from the repo root: ``.venv/bin/python benchmarks/hybrid_pooled.py`` (GRAPHLAKE_HOME: a lake with
the sets built, as ``benchmarks/hybrid_index.py`` leaves it).
"""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from pathlib import Path

import faiss
import matplotlib
import numpy as np
import scipy.sparse as sp
from hybrid_index import DEPTHS, POOLS, insert_splits, recall, timed, top10
from threadpoolctl import threadpool_limits

from common import EVALUATED, arguments, header, table
from graphlake.kernels.hybrid.batched import DeviceVectors
from graphlake.kernels.hybrid.graph_index import BuildConfig, Searcher, build, exact_knn
from graphlake.kernels.hybrid.nndescent import nn_descent
from graphlake.kernels.hybrid.update import insert, splice
from graphlake.kernels.hybrid.vectors import HybridParams, HybridVectors, Queries
from graphlake.kernels.text import encoders
from graphlake.kernels.text.bm25 import BM25Index
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage, StorageError

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SETS = ("scifact", "hotpotqa", "2wiki-dev", "2wiki-train", "hotpotqa-train")
ABLATIONS = {
    "default (code layout, RNG+IP, keyword edges, largest norms)": {},
    "layout paper": {"layout": "paper"},
    "pruning RNG only": {"pruning": "rng"},
    "pruning IP only": {"pruning": "ip"},
    "no keyword edges": {"keyword_degree": 0},
    "entry smallest norms": {"entry": "smallest_norm"},
}
EF_SEARCH = (16, 32, 64, 128, 256, 512)


def pooled(lake: LakeStorage, sets: list[str], most: int) -> tuple[HybridVectors, Queries, Queries, list[str], BM25Index]:
    """The pooled vectors, the nodes as queries, the evaluated queries (``most`` at most), and which sets went in."""
    dense, sparse, texts, queries, used = [], [], [], [], []
    seen: set[str] = set()
    for corpus in sets:
        try:
            indexes = open_index_set(lake, corpus)
            vectors, splade = indexes.dense, indexes.splade.tocsr()
        except StorageError:
            continue
        keep = [i for i, text in enumerate(indexes.snapshot.texts()) if text not in seen]
        seen.update(indexes.snapshot.texts()[i] for i in keep)
        dense.append(vectors[keep])
        sparse.append(splade[keep])
        texts += [indexes.snapshot.texts()[i] for i in keep]
        if corpus in EVALUATED:
            queries += [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == EVALUATED[corpus]]
        used.append(f"{corpus} ({len(keep):,} new passages)")
    queries = [queries[i] for i in np.sort(np.random.default_rng(0).permutation(len(queries))[:most])]
    bm25 = BM25Index.build(texts)
    width = max(m.shape[1] for m in sparse)
    splade = sp.vstack([sp.csr_matrix(m, shape=(m.shape[0], width)) for m in sparse]).tocsr()
    vectors = HybridVectors.of(np.vstack(dense), splade, bm25.weights())
    nodes = Queries(vectors.dense, vectors.sparse, bm25.token_counts(texts))
    asked = Queries(encoders.encode_dense(queries), sp.csr_matrix(encoders.encode_splade(queries), shape=(len(queries), width)), bm25.token_counts(queries))
    return vectors, nodes, asked, used, bm25


def knn_step(vectors: HybridVectors, nodes: Queries, scales: np.ndarray) -> tuple[tuple, float, list[str]]:
    started = time.perf_counter()
    exact = exact_knn(vectors, nodes, scales, 64, 16)
    exact_seconds = time.perf_counter() - started
    started = time.perf_counter()
    found, _, report = nn_descent(DeviceVectors.of(np, vectors), nodes, scales, 64, 25, 16)
    nnd_seconds = time.perf_counter() - started
    overlap = np.mean([len(set(e.tolist()) & set(f[f >= 0].tolist())) / 64 for e, f in zip(exact[0], found, strict=True)])
    lines = table(f"k-NN graph, K 64, {len(vectors):,} nodes (1 thread)", ["method", "seconds", "recall of the lists vs exact"])
    lines.append(f"| exact (blocked products) | {exact_seconds:.1f} | 1.0000 |")
    lines.append(f"| NN-Descent (16 new + 16 old sampled, {report['iterations']} iterations) | {nnd_seconds:.1f} | {overlap:.4f} |")
    return exact, nnd_seconds, lines


def curves(vectors: HybridVectors, nodes: Queries, queries: Queries, scales: np.ndarray, knn: tuple, ablations: dict = ABLATIONS, name: str = "pooled") -> tuple[list[str], dict, list[str]]:
    """Every ablation's recall–QPS curve at 1/1/1 and dense only, beside fused_exact, multipath and faiss."""
    one = [queries.take([i]) for i in range(len(queries))]
    started = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(vectors.dense.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 200
    hnsw.add(vectors.dense)
    graphs, lines = {}, table("Builds from the same k-NN graph (1 thread)", ["configuration", "prune + layout seconds", "mean keyword edges"])
    lines.append(f"| faiss HNSW (M 32, efC 200, dense only, whole build) | {time.perf_counter() - started:.1f} | — |")
    for ablation, change in ablations.items():
        started = time.perf_counter()
        graphs[ablation] = build(vectors, nodes, BuildConfig(**change), scales, knn)
        lines.append(f"| {ablation} | {time.perf_counter() - started:.1f} | {graphs[ablation].build['keyword_degree_mean']:.2f} |")
    points: dict = {}
    for label, weights in (("1/1/1", (1.0, 1.0, 1.0)), ("dense only", (1.0, 0.0, 0.0))):
        scaled = np.asarray(weights) * scales
        truth = [top10(vectors.fused(q, scaled)[0]) for q in one]
        runs = {}
        for ablation, graph in graphs.items():
            searcher = Searcher(graph, vectors)
            runs |= {(ablation, pool): (lambda i, s=searcher, pool=pool, w=scaled: s.search(one[i], 10, HybridParams(weights=w, pool=pool))[1][0]) for pool in POOLS}
        runs[("fused_exact", 0)] = lambda i, w=scaled: top10(vectors.fused(one[i], w)[0])
        if label == "dense only":

            def faiss_search(i: int, ef: int) -> np.ndarray:
                hnsw.hnsw.efSearch = ef
                return hnsw.search(queries.dense[i : i + 1], 10)[1][0]

            runs |= {("faiss HNSW (M 32, efC 200)", ef): (lambda i, ef=ef: faiss_search(i, ef)) for ef in EF_SEARCH}
        else:
            runs |= {("multipath", depth): (lambda i, d=depth, w=scaled: multipath(vectors, hnsw, one[i], w, d)) for depth in DEPTHS}
        lines += table(f"{name}, {label}: recall@10 against exact fusion, QPS (1 thread)", ["system", "L / efSearch / depth", "recall@10", "QPS"])
        for (system, parameter), (qps, found) in timed(runs, len(one)).items():
            value = float(np.mean([recall(f, t) for f, t in zip(found, truth, strict=True)]))
            points.setdefault(label, {}).setdefault(system, []).append((parameter, value, qps))
            lines.append(f"| {system} | {parameter or '—'} | {value:.4f} | {qps:,.0f} |")
    return lines, points, [f"| {ablation} | {sum(g.edge_bytes().values()) / len(vectors):.0f} |" for ablation, g in graphs.items()]


def multipath(vectors: HybridVectors, hnsw, query: Queries, scaled: np.ndarray, depth: int) -> np.ndarray:
    """Separate-then-fuse: each path's own top ``depth`` (dense: faiss HNSW at efSearch max(128, depth);
    SPLADE and BM25 exact), summed with the weights; a path that missed a node adds 0."""
    hnsw.hnsw.efSearch = max(128, depth)
    fused: dict[int, float] = {}
    values, rows = hnsw.search(query.dense, depth)
    paths = [(rows[0], values[0])]
    for stored, asked in ((vectors.sparse, query.sparse), (vectors.lexical, query.lexical)):
        scores = (stored @ asked.T).toarray().ravel()
        top = np.argpartition(-scores, min(depth, len(scores) - 1))[:depth]
        paths.append((top[scores[top] > 0], scores[top[scores[top] > 0]]))
    for weight, (found, scores) in zip(scaled, paths, strict=True):
        for row, value in zip(found.tolist(), scores.tolist(), strict=True):
            if row >= 0:
                fused[row] = fused.get(row, 0.0) + weight * value
    return np.array(sorted(fused, key=lambda r: (-fused[r], r))[:10])


def inserts(vectors: HybridVectors, nodes: Queries, queries: Queries, scales: np.ndarray, approximate: tuple[str, str, float], full: BuildConfig = BuildConfig(), exact: bool = True) -> list[str]:
    """G7: build (``full``'s k-NN) on 80 / 90 / 95 % of the nodes (seeded), insert the rest, both ways
    ``insert`` finds a new node's candidates: exact (what ``knn: auto`` does below ``EXACT_KNN_UP_TO``;
    left out with ``exact=False``, for sizes where auto never does it) and the candidate k-NN of the new
    rows (what it does past it). Time against a full build and against one with the
    ``approximate`` k-NN (label, ``knn`` setting, its k-NN seconds, plus the same prune and layout);
    recall@10 at L 128 (1/1/1) against exact fusion."""
    n = len(vectors)
    one = [queries.take([i]) for i in range(len(queries))]
    truth = [top10(vectors.fused(q, scales)[0]) for q in one]

    def quality(graph) -> float:
        searcher = Searcher(graph, vectors)
        return float(np.mean([recall(searcher.search(q, 10, HybridParams(weights=scales, pool=128))[1][0], t) for q, t in zip(one, truth, strict=True)]))

    label, setting, knn_seconds = approximate
    started = time.perf_counter()
    whole = build(vectors, nodes, full, scales)
    full_seconds = time.perf_counter() - started
    approximate_build = full_seconds - whole.build["seconds"]["knn"] + knn_seconds
    lines = table(
        f"Inserts against a full build ({n:,} nodes, 1 thread; full build {full_seconds:.1f} s with {whole.build['knn']['method']} k-NN, {approximate_build:.1f} s with {label})",
        ["built on", "inserted", "candidates", "insert seconds", "vs full build", f"vs {label} build", "recall@10 after insert", "full build's"],
    )
    reference = quality(whole)
    for share, first, rest in insert_splits(n):
        base = build(vectors.take(first), nodes.take(first), full, scales)
        for knn, found_by in ((("exact", "exact"),) if exact else ()) + ((setting, "candidate k-NN"),):
            started = time.perf_counter()
            grown = insert(splice(base, first, n), vectors, nodes, rest, BuildConfig(knn=knn))
            seconds = time.perf_counter() - started
            lines.append(f"| {share:.0%} | {len(rest):,} | {found_by} | {seconds:.1f} | {seconds / full_seconds:.3f} | {seconds / approximate_build:.3f} | {quality(grown):.4f} | {reference:.4f} |")
    return lines


def keywords(vectors: HybridVectors, nodes: Queries, queries: Queries, scales: np.ndarray, knn: tuple, name: str = "pooled") -> list[str]:
    """G8 on the pooled set: each query requires its rarest token held by at least 5 % of the nodes
    (queries with none are left out); the walk (forced, whatever the posting size) against the
    keyword-filtered exact top 10, at 1/1/1. The operator's exact fallback scores the holders exactly,
    so its recall is 1 by construction; its QPS is timed beside the walk."""
    n = len(vectors)
    graph = build(vectors, nodes, BuildConfig(), scales, knn)
    searcher = Searcher(graph, vectors)
    frequency = np.diff(vectors.postings.indptr)
    asked, required = [], []
    for i in range(len(queries)):
        tokens = queries.lexical[i].indices
        common = tokens[frequency[tokens] >= 0.05 * n]
        if len(common):
            asked.append(queries.take([i]))
            required.append(np.array([common[np.argmin(frequency[common])]], dtype=np.int32))
    holders = [vectors.containing(r) for r in required]
    truth = []
    for q, rows in zip(asked, holders, strict=True):
        scores = vectors.fused(q, scales, rows)[0]
        truth.append(rows[top10(scores)])
    runs = {f"walk L={pool}": (lambda i, pool=pool: searcher.search(asked[i], 10, HybridParams(weights=scales, pool=pool, required=[required[i]]))[1][0]) for pool in POOLS}
    runs["exact fallback"] = lambda i: holders[i][top10(vectors.fused(asked[i], scales, holders[i])[0])]
    lines = table(
        f"Required keywords, {name}, 1/1/1 ({len(asked)} of {len(queries)} queries hold a token of ≥ 5 % of the nodes; holders per query: median {int(np.median([len(h) for h in holders])):,})",
        ["system", "recall@10 vs filtered exact", "results holding the keyword", "QPS"],
    )
    for name, (qps, found) in timed(runs, len(asked)).items():
        holding = np.mean([np.isin(f, h).mean() if len(f) else 1.0 for f, h in zip(found, holders, strict=True)])
        value = np.mean([recall(f, t) for f, t in zip(found, truth, strict=True)])
        lines.append(f"| {name} | {value:.4f} | {holding:.2%} | {qps:,.0f} |")
    return lines


def summary(points: dict, name: str = "the pooled set") -> list[str]:
    """G6: the QPS at the smallest L reaching recall 0.95, as ratios."""

    def first(curve: list, bar: float = 0.95):
        return next(((p, r, q) for p, r, q in sorted(curve, key=lambda x: x[0]) if r >= bar), None)

    default = next(iter(ABLATIONS))
    three, exact = first(points["1/1/1"][default]), points["1/1/1"]["fused_exact"][0]
    dense, hnsw = first(points["dense only"][default]), first(points["dense only"]["faiss HNSW (M 32, efC 200)"])
    lines = table(f"G6 on {name} (smallest L / efSearch reaching recall@10 0.95)", ["comparison", "ours", "theirs", "QPS ratio"])
    if three:
        lines.append(f"| ap_three vs fused_exact | L {three[0]}: {three[1]:.4f}, {three[2]:,.0f} QPS | {exact[2]:,.0f} QPS | {three[2] / exact[2]:.2f}× |")
    if dense and hnsw:
        lines.append(f"| ap_dense vs faiss HNSW | L {dense[0]}: {dense[1]:.4f}, {dense[2]:,.0f} QPS | efSearch {hnsw[0]}: {hnsw[1]:.4f}, {hnsw[2]:,.0f} QPS | {dense[2] / hnsw[2]:.2f}× |")
    return lines


def plot(points: dict, output: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(13, 5))
    for axis, (label, systems) in zip(axes, points.items(), strict=True):
        for name, curve in systems.items():
            curve = sorted(curve, key=lambda x: x[0])
            style = "s--" if name.startswith("faiss") or name == "multipath" else "*" if name == "fused_exact" else "o-"
            axis.plot([r for _, r, _ in curve], [q for _, _, q in curve], style, label=name.split(" (")[0], markersize=5)
        axis.set(xlabel="recall@10 against exact fusion", ylabel="queries per second (1 thread)", yscale="log", title=f"pooled corpus, {label}")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(output, dpi=110)


def sizes(vectors: HybridVectors, bm25: BM25Index, per_graph: list[str]) -> list[str]:
    n, degree = len(vectors), 32
    hnsw = faiss.IndexHNSWFlat(vectors.dense.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors.dense)
    buffer = faiss.serialize_index(hnsw)
    with tempfile.TemporaryDirectory() as folder:
        bm25.save(Path(folder))
        bm25_bytes = sum(p.stat().st_size for p in Path(folder).iterdir())
    splade = vectors.sparse.tocsc()
    lines = table(f"Index size, bytes per node ({n:,} nodes)", ["what", "bytes per node"])
    lines += per_graph
    lines.append(f"| three separate degree-{degree} graphs (one per path, int32) | {3 * degree * 4} |")
    lines.append(f"| faiss HNSW (M 32, dense only, vectors included) | {buffer.nbytes / n:.0f} |")
    lines.append(f"| BM25 index (bm25s files) | {bm25_bytes / n:.0f} |")
    lines.append(f"| SPLADE matrix (CSC) | {(splade.data.nbytes + splade.indices.nbytes + splade.indptr.nbytes) / n:.0f} |")
    return lines


def main() -> None:
    def extra(parser) -> None:
        parser.add_argument("--sets", default=",".join(SETS), help="the lake's corpora to pool (those missing are skipped)")
        parser.add_argument("--queries", type=int, default=10**9, help="at most this many queries (seeded sample)")

    args = arguments(__doc__.splitlines()[0], "hybrid_pooled.md", extra)
    command = ".venv/bin/python benchmarks/hybrid_pooled.py " + shlex.join(sys.argv[1:])
    lines = header("Allan-Poe's hybrid graph index on the pooled corpus (CPU)", command)
    vectors, nodes, queries, used, bm25 = pooled(LakeStorage(lake_home()), args.sets.split(","), args.queries)
    lines += [f"- sets: {', '.join(used)}; {len(vectors):,} nodes, {len(queries):,} queries (the evaluated splits)", "- threads: 1 for everything timed"]
    scales = vectors.calibration(nodes)
    with threadpool_limits(1):
        knn, nndescent_seconds, knn_lines = knn_step(vectors, nodes, scales)
        curve_lines, points, per_graph = curves(vectors, nodes, queries, scales, knn)
        insert_lines = inserts(vectors, nodes, queries, scales, ("NN-Descent", "nndescent", nndescent_seconds), BuildConfig(knn="exact"))
        keyword_lines = keywords(vectors, nodes, queries, scales, knn)
    lines += knn_lines + curve_lines + summary(points) + insert_lines + keyword_lines + sizes(vectors, bm25, per_graph)
    picture = args.output.with_suffix(".png")
    plot(points, picture)
    lines += ["", f"![recall–QPS curves]({picture.name})"]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    faiss.omp_set_num_threads(1)
    main()
