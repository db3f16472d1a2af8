"""Allan-Poe's hybrid graph index on a GPU: the batched array code (``kernels/hybrid/batched.py``) on
cupy, checked against its numba twin and timed against brute force on the same device.

A GPU machine has no lake, so:

* ``export`` (beside the lake) writes, per set, the hybrid vectors, the nodes' token counts, the
  evaluated queries on the three paths (encoded once), the exact k-NN lists and the numba-built index;
* ``evaluate`` (on the GPU machine) runs, per set,
  - correctness (G11 on real data): the cupy k-NN lists, the cupy pruning of the exported lists and
    the whole cupy build against the numba ones; the cupy batched search against the numba search
    (share of identical top-10 lists, largest score difference); recall lost to float16 dense storage;
  - build time: the cupy build against the numba build on the same machine;
  - throughput at batch 1, 100 and 10,000 with recall@10 against exact fusion: ``ap_dense`` (1/0/0)
    and ``ap_three`` (1/1/1) over the pool L and the expansion width, against brute-force scoring on the
    device (``fused_exact``) and, for 1/1/1, three brute-force paths fused at depth 100 (the
    separate-then-fuse design of ThreeRouteGPU);
  - the fused single-kernel search (``kernels/hybrid/cuda_search.py``): its top-10 lists against the numba
    searcher's on the same float16-rounded vectors (each weighting, and one required keyword per query); its
    QPS at each batch and pool L beside the lock-step search and brute force; per L, the nodes it scores per
    query and the bandwidth floor that implies, with the numba searcher's QPS on one CPU thread;
  - the same on a synthetic corpus of ``--synthetic`` nodes made from the set's nodes (spec §3);
  - ``--parts configs``: recall of builds with other parameters on synthetic corpora of 20,000 and
    ``--synthetic`` nodes.

cuVS CAGRA is not compared: its wheels (``libcuvs``, ``libraft``, ``rmm``) are far larger than what a
device call can carry here; the results file says so.

    .venv/bin/python benchmarks/gpu_hybrid_index.py export --folder gpu/hybrid        # GRAPHLAKE_HOME=<lake>
    python benchmarks/gpu_hybrid_index.py evaluate --folder gpu/hybrid --output <results.md>
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp

from common import EVALUATED, export_and_run, header, table
from graphlake.kernels.hybrid import batched
from graphlake.kernels.hybrid.cuda_search import CudaSearcher
from graphlake.kernels.hybrid.graph_index import BuildConfig, HybridGraph, Searcher, build, prune_candidates, self_inner_products
from graphlake.kernels.hybrid.pairs import row_operands
from graphlake.kernels.hybrid.vectors import HybridParams, HybridVectors, Queries
from graphlake.kernels.results import unfilled

SETS = ("scifact",)
KNN_K, SINGLE = 64, 16
POOLS = (32, 64, 128, 256)
WIDTHS = (1, 4)
BATCHES = (1, 100, 10_000)
SINGLE_QUERIES = 10  # batch 1: this many queries, one after another
DEPTH = 100
WEIGHTINGS = {"ap_dense 1/0/0": (1.0, 0.0, 0.0), "ap_three 1/1/1": (1.0, 1.0, 1.0)}
EXACT_BYTES = 2**28  # brute force in chunks of queries whose (chunk, N) scores stay under this


def export(folder: Path) -> None:
    from hybrid_index import encoded

    from graphlake.kernels.hybrid.graph_index import exact_knn
    from graphlake.retrieval.index.derived import hybrid_vectors
    from graphlake.retrieval.learned_kinds import open_index_set
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import LakeStorage

    lake = LakeStorage(lake_home())
    for corpus in SETS:
        split = EVALUATED[corpus]
        indexes = open_index_set(lake, corpus)
        vectors = hybrid_vectors(indexes)
        counts = indexes.bm25.token_counts(indexes.snapshot.texts())
        texts = [q["text"] for q in lake.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split]
        queries, _ = encoded(indexes, texts)
        nodes = Queries(vectors.dense, vectors.sparse, counts)
        graph = build(vectors, nodes, BuildConfig())
        knn_ids, knn_sims, _ = exact_knn(vectors, nodes, graph.scales, KNN_K, SINGLE)
        out = folder / corpus
        (out / "graph").mkdir(parents=True, exist_ok=True)
        graph.save(out / "graph")
        np.savez(out / "arrays.npz", dense=vectors.dense, query_dense=queries.dense, knn_ids=knn_ids, knn_sims=knn_sims)
        for name, matrix in {"sparse": vectors.sparse, "lexical": vectors.lexical, "counts": counts, "query_sparse": queries.sparse, "query_lexical": queries.lexical}.items():
            sp.save_npz(out / f"{name}.npz", sp.csr_matrix(matrix))
        (out / "meta.json").write_text(json.dumps({"corpus": corpus, "split": split, "queries": len(texts)}))
        print(f"{corpus}: {len(vectors)} nodes, {len(texts)} queries, numba build {graph.build['seconds']}", flush=True)


class Set:
    """One exported set, loaded."""

    def __init__(self, folder: Path) -> None:
        arrays = np.load(folder / "arrays.npz")
        load = lambda name: sp.load_npz(folder / f"{name}.npz").tocsr()  # noqa: E731
        self.name = json.loads((folder / "meta.json").read_text())["corpus"]
        self.vectors = HybridVectors.of(arrays["dense"], load("sparse"), load("lexical"))
        self.nodes = Queries(self.vectors.dense, self.vectors.sparse, load("counts"))
        self.queries = Queries(arrays["query_dense"], load("query_sparse"), load("query_lexical"))
        self.knn_ids, self.knn_sims = arrays["knn_ids"], arrays["knn_sims"]
        self.graph = HybridGraph.load(folder / "graph")


def synthetic(data: Set, n: int, seed: int = 0) -> tuple[HybridVectors, Queries]:
    """Spec §3's synthetic corpus: each node copies a random real node, its dense vector with Gaussian
    noise of norm about 0.3 (σ = 0.3/√m per dimension) renormalised, each sparse non-zero kept with
    probability 0.8 and scaled by lognormal(0, 0.2); token counts keep the BM25 weights' kept tokens."""
    rng = np.random.default_rng(seed)
    source = rng.integers(0, len(data.vectors), n)
    dense = data.vectors.dense[source] + rng.normal(0, 0.3 / np.sqrt(data.vectors.dense.shape[1]), size=(n, data.vectors.dense.shape[1])).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)

    def thin(matrix: sp.csr_matrix, keep: np.ndarray, scale: bool) -> sp.csr_matrix:
        rows = matrix[source].tocoo()
        data_ = rows.data * (rng.lognormal(0, 0.2, rows.nnz).astype(np.float32) if scale else 1)
        return sp.csr_matrix((data_[keep], (rows.row[keep], rows.col[keep])), shape=(n, matrix.shape[1]))

    splade = thin(data.vectors.sparse, rng.random(data.vectors.sparse[source].nnz) < 0.8, True)
    counts = _on_weights(data.nodes.lexical, data.vectors.lexical)
    keep = rng.random(data.vectors.lexical[source].nnz) < 0.8
    vectors = HybridVectors.of(dense, splade, thin(data.vectors.lexical, keep, True))
    return vectors, Queries(vectors.dense, vectors.sparse, thin(counts, keep, False))


def _on_weights(counts: sp.csr_matrix, weights: sp.csr_matrix) -> sp.csr_matrix:
    """The token counts on the BM25 weights' non-zeros (1 where a weight has no count: the index and a
    recount of the texts differ in a few hundred tokens in 500k), so one thinning mask fits both."""
    rows, columns = weights.nonzero()
    found = np.asarray(counts[rows, columns]).ravel()
    return sp.csr_matrix((np.maximum(found, 1), (rows, columns)), shape=weights.shape)


def synchronize() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def exact(vectors: batched.DeviceVectors, batch: batched.QueryBatch, k: int) -> np.ndarray:
    """Brute-force fused top ``k`` on the device, in chunks of queries."""
    chunk = max(1, EXACT_BYTES // (4 * len(vectors)))
    return np.vstack([batched.host(batched.exact_top(vectors, batch.take(s, s + chunk), k)[1]) for s in range(0, len(batch), chunk)])


def three_routes(vectors: batched.DeviceVectors, batch: batched.QueryBatch, k: int) -> np.ndarray:
    """Each path's exact top ``DEPTH`` on the device, their weighted scores summed over the union: separate-then-fuse."""
    xp = vectors.xp
    chunk = max(1, EXACT_BYTES // (4 * len(vectors)))
    out = []
    for start in range(0, len(batch), chunk):
        part = batch.take(start, start + chunk)
        fused = None
        for scores in batched.path_scores(vectors, part):
            if scores is None:
                continue
            values, rows = batched.top_rows(xp, scores, DEPTH)
            fused = xp.zeros(scores.shape, xp.float32) if fused is None else fused
            fused[xp.arange(len(rows))[:, None], rows] += xp.where(values > 0, values, 0)
        out.append(batched.host(batched.top_rows(xp, fused, k)[1]))
    return np.vstack(out)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[f >= 0].tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth, strict=True)]))


def timed(run, passes: int = 3) -> tuple[float, object]:
    """Median seconds over ``passes`` after one warm-up, and the last result."""
    result = run()
    synchronize()
    seconds = []
    for _ in range(passes):
        started = time.perf_counter()
        result = run()
        synchronize()
        seconds.append(time.perf_counter() - started)
    return float(np.median(seconds)), result


def correctness(data: Set) -> list[str]:
    import cupy

    vectors, nodes, graph = data.vectors, data.nodes, data.graph
    device = batched.DeviceVectors.of(cupy, vectors)
    lines = table(f"{data.name}: the cupy path against the numba path ({len(vectors):,} nodes)", ["check", "result"])
    ids, sims, _ = batched.exact_knn(device, nodes, graph.scales, KNN_K, SINGLE)
    lines.append(f"| exact k-NN lists (K {KNN_K}): rows identical | {np.mean((ids == data.knn_ids).all(axis=1)):.4%}; largest score difference {np.abs(sims - data.knn_sims).max():.2e} |")
    self_ip = self_inner_products(vectors, nodes, graph.scales)
    numba = prune_candidates(data.knn_ids, data.knn_sims, self_ip, 32, 8, *row_operands(vectors, nodes, graph.scales))
    on_gpu = batched.prune(device, nodes.lexical, graph.scales, data.knn_ids, data.knn_sims, self_ip, 32, 8)
    same = [left.tobytes() == right.tobytes() for left, right in zip(numba, on_gpu, strict=True)]
    rows = np.mean((numba[0] == on_gpu[0]).all(axis=1))
    lines.append(f"| pruning of the same lists: pruned / counts / keyword arrays byte-identical | {same[0]} / {same[1]} / {same[2]} (pruned rows identical {rows:.4%}) |")
    whole = build(vectors, nodes, BuildConfig(device="cuda"))
    lines.append(
        "| whole cupy build vs the exported numba build: semantic / keyword / entry identical | "
        + " / ".join(str(getattr(whole, name).tobytes() == getattr(graph, name).tobytes()) for name in ("semantic", "keyword", "entry"))
        + f" (semantic rows identical {np.mean((whole.semantic == graph.semantic).all(axis=1)):.4%}) |"
    )
    index = batched.DeviceGraph.of(cupy, graph.semantic, graph.entry, graph.deleted)
    searcher = Searcher(graph, vectors)
    half = batched.DeviceVectors.of(cupy, vectors, half=True)
    for label, weights in WEIGHTINGS.items():
        scaled = np.asarray(weights) * graph.scales
        batch = batched.QueryBatch.of(cupy, data.queries, scaled)
        scores, found = (batched.host(part) for part in batched.search(device, index, batch, 128, 10))
        expected = [unfilled(s, r)[::-1] for s, r in zip(*searcher.search(data.queries, 10, HybridParams(weights=scaled, pool=128)), strict=True)]
        identical = np.mean([np.array_equal(found[i][found[i] >= 0], rows) for i, (rows, _) in enumerate(expected)])
        gap = max(float(np.abs(scores[i][: len(s)] - s).max()) for i, (_, s) in enumerate(expected))
        lines.append(f"| {label}, L 128: batched cupy search = numba search (top-10 lists identical; largest score difference) | {identical:.2%}; {gap:.1e} |")
        truth = exact(device, batch, 10)
        halved = batched.host(batched.search(half, index, batched.QueryBatch.of(cupy, data.queries, scaled), 128, 10)[1])
        lines.append(f"| {label}, L 128: recall@10 vs exact, float32 → float16 dense | {recall(found, truth):.4f} → {recall(halved, truth):.4f} |")
    lines += kernel_correctness(data, graph)
    return lines


def kernel_correctness(data: Set, graph: HybridGraph) -> list[str]:
    """The fused kernel against the numba searcher over the same float16-rounded dense rows: top-10 lists
    identical, per weighting and with one required keyword (held by at least 5 % of the nodes) per query."""
    halved = HybridVectors(data.vectors.dense.astype(np.float16).astype(np.float32), data.vectors.sparse, data.vectors.lexical)
    searcher, kernel = Searcher(graph, halved), CudaSearcher(graph, data.vectors)
    common = np.flatnonzero(np.diff(data.vectors.postings.indptr) >= len(data.vectors) // 20)
    required = [np.array([common[i % len(common)]]) for i in range(len(data.queries))]
    lines = []
    for label, weights, tokens in [*((label, w, None) for label, w in WEIGHTINGS.items()), ("ap_three 1/1/1, one required keyword", (1.0, 1.0, 1.0), required)]:
        scaled = np.asarray(weights) * graph.scales
        found = kernel.walk(data.queries, scaled, 128, 10, tokens)
        expected = [unfilled(s, r)[::-1] for s, r in zip(*searcher.search(data.queries, 10, HybridParams(weights=scaled, pool=128, required=tokens)), strict=True)]
        identical = np.mean([np.array_equal(found.rows[i, : found.counts[i]], rows) for i, (rows, _) in enumerate(expected)])
        gap = max(float(np.abs(found.scores[i, : len(s)] - s).max(initial=0.0)) for i, (_, s) in enumerate(expected))
        lines.append(f"| {label}, L 128: fused kernel = numba search on float16 dense (top-10 lists identical; largest score difference) | {identical:.2%}; {gap:.1e} |")
    return lines


def build_times(name: str, vectors: HybridVectors, nodes: Queries) -> tuple[list[str], HybridGraph]:
    head = np.arange(min(500, len(vectors)))
    build(vectors.take(head), nodes.take(head), BuildConfig(device="cuda"))  # warm-up: kernels compiled
    started = time.perf_counter()
    graph = build(vectors, nodes, BuildConfig(device="cuda"))
    gpu = time.perf_counter() - started
    lines = table(f"{name}: build, {len(vectors):,} nodes", ["build", "steps", "seconds"])
    lines.append(f"| cupy (exact k-NN, batched pruning; layout with numba on the host) | {steps(graph)} | {gpu:.1f} |")
    if len(vectors) <= 20_000:
        build(vectors.take(head), nodes.take(head), BuildConfig())
        started = time.perf_counter()
        cpu = build(vectors, nodes, BuildConfig())
        lines.append(f"| numba, one CPU thread of this machine | {steps(cpu)} | {time.perf_counter() - started:.1f} |")
    return lines, graph


def steps(graph: HybridGraph) -> str:
    return ", ".join(f"{step} {value:.1f} s" for step, value in graph.build["seconds"].items())


def throughput(name: str, vectors: HybridVectors, queries: Queries, graph: HybridGraph, batches: tuple[int, ...]) -> list[str]:
    import cupy

    device = batched.DeviceVectors.of(cupy, vectors)
    index = batched.DeviceGraph.of(cupy, graph.semantic, graph.entry, graph.deleted)
    kernel, searcher = CudaSearcher(graph, vectors), Searcher(graph, vectors)
    lines = table(f"{name}: queries per second on the GPU and recall@10 against exact fusion", ["weights", "system", "batch", "recall@10", "QPS"])
    for label, weights in WEIGHTINGS.items():
        scaled = np.asarray(weights) * graph.scales
        for size in batches:
            picked = np.arange(SINGLE_QUERIES if size == 1 else size) % len(queries)
            batch = batched.QueryBatch.of(cupy, queries.take(picked), scaled)
            truth = exact(device, batch, 10)
            singles = [batch.take(i, i + 1) for i in range(len(picked))] if size == 1 else [batch]
            runs = {
                f"graph L={pool} width={width}": (lambda pool=pool, width=width, singles=singles: [batched.host(batched.search(device, index, b, pool, 10, width)[1]) for b in singles])
                for pool in (POOLS if size > 1 else POOLS[::2])  # batch 1: launch-bound (measured before), fewer settings
                for width in (WIDTHS if size > 1 else WIDTHS[-1:])
            }
            single_queries = [queries.take(picked[i : i + 1]) for i in range(len(picked))] if size == 1 else [queries.take(picked)]
            runs |= {
                f"fused kernel L={pool}": (lambda pool=pool, single_queries=single_queries: [kernel.search(q, 10, HybridParams(weights=scaled, pool=pool))[1] for q in single_queries])
                for pool in POOLS
            }
            runs["brute force (fused_exact)"] = lambda singles=singles: [exact(device, b, 10) for b in singles]
            if weights == (1.0, 1.0, 1.0):
                runs[f"three brute-force paths, fused at depth {DEPTH}"] = lambda singles=singles: [three_routes(device, b, 10) for b in singles]
            for system, run in runs.items():
                seconds, found = timed(run, passes=1 if size == 1 else 3)
                lines.append(f"| {label} | {system} | {size:,} | {recall(np.vstack(found), truth):.4f} | {len(picked) / seconds:,.0f} |")
            print(f"{name} {label} batch {size} done", flush=True)
        lines += floors(label, vectors, queries, graph, kernel, scaled, searcher)
    return lines


@contextmanager
def numba_threads(count: int) -> Iterator[None]:
    before = numba.get_num_threads()
    numba.set_num_threads(count)
    try:
        yield
    finally:
        numba.set_num_threads(before)


def bandwidth() -> float:
    """The card's memory bandwidth in bytes per second, from its clock and bus width (double data rate)."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return 2 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8


def floors(label: str, vectors: HybridVectors, queries: Queries, graph: HybridGraph, kernel: CudaSearcher, scaled: np.ndarray, searcher: Searcher) -> list[str]:
    """Per pool: the nodes the kernel scores per query and what reading them costs at the card's bandwidth
    (float16 dense row and the CSR entries of the paths weighted, as the kernel reads them), beside the numba
    searcher's QPS on one CPU thread; and brute force's floor (every node's bytes once per batch of 10,000)."""
    picked = np.arange(min(len(queries), 1_000))
    used = np.asarray(scaled) != 0
    per_node = used[0] * 2 * vectors.dense.shape[1] + used[1] * 8 * vectors.sparse.nnz / len(vectors) + used[2] * 8 * vectors.lexical.nnz / len(vectors)
    speed = bandwidth()
    lines = [f"| {label} | bandwidth floors ({speed / 1e12:.2f} TB/s; a node scored reads {per_node:,.0f} B) | | | |"]
    for pool in POOLS:
        scored = float(kernel.walk(queries.take(picked), scaled, pool, 10).scored.mean())
        searcher.search(queries.take([0]), 10, HybridParams(weights=scaled, pool=pool))  # warm-up: compiled
        with numba_threads(1):
            started = time.perf_counter()
            for i in picked[:200]:
                searcher.search(queries.take([i]), 10, HybridParams(weights=scaled, pool=pool))
            cpu = min(200, len(picked)) / (time.perf_counter() - started)
        lines.append(f"| {label} | L={pool}: {scored:,.0f} nodes scored per query; floor {speed / (scored * per_node):,.0f} QPS; numba searcher, one CPU thread: {cpu:,.0f} QPS | | | |")
    whole = used[0] * 4 * vectors.dense.size + used[1] * 8 * vectors.sparse.nnz + used[2] * 8 * vectors.lexical.nnz
    lines.append(f"| {label} | brute force reads {whole / 1e6:,.0f} MB per batch: floor {10_000 * speed / whole:,.0f} QPS at batch 10,000 | | | |")
    return lines


CONFIGURATIONS = ({}, {"layout": "code"}, {"knn_k": 128}, {"degree": 64, "knn_k": 128})


def configurations(data: Set, sizes: tuple[int, ...]) -> list[str]:
    """Recall at L 128 and 512 (width 4, batch of every query) of builds with other parameters, on synthetic corpora of each size."""
    import cupy
    from scipy.sparse.csgraph import breadth_first_order

    lines = table(
        f"synthetic corpora from {data.name}: build parameters against recall@10",
        ["nodes", "parameters", "build s", "reachable from an entry", "1/0/0 L 128", "1/0/0 L 512", "1/1/1 L 128", "1/1/1 L 512"],
    )
    for n in sizes:
        vectors, nodes = synthetic(data, n)
        device = batched.DeviceVectors.of(cupy, vectors)
        for config in CONFIGURATIONS if n == max(sizes) else CONFIGURATIONS[:1]:
            started = time.perf_counter()
            graph = build(vectors, nodes, BuildConfig(device="cuda", **config))
            seconds = time.perf_counter() - started
            edges = graph.semantic >= 0
            adjacency = sp.csr_matrix((np.ones(edges.sum()), (np.repeat(np.arange(n), edges.sum(axis=1)), graph.semantic[edges])), shape=(n, n))
            reachable = len(breadth_first_order(adjacency, int(graph.entry[0]), directed=True, return_predecessors=False)) / n
            index = batched.DeviceGraph.of(cupy, graph.semantic, graph.entry, graph.deleted)
            recalls = []
            for weights in WEIGHTINGS.values():
                batch = batched.QueryBatch.of(cupy, data.queries, np.asarray(weights) * graph.scales)
                truth = exact(device, batch, 10)
                recalls += [recall(batched.host(batched.search(device, index, batch, pool, 10, 4)[1]), truth) for pool in (128, 512)]
            lines.append(f"| {n:,} | {config or 'defaults'} | {seconds:.1f} | {reachable:.4f} | " + " | ".join(f"{r:.3f}" for r in recalls) + " |")
            print(lines[-1], flush=True)
    return lines


def evaluate(folder: Path, output: Path, synthetic_nodes: int, parts: str, batches: tuple[int, ...]) -> None:
    import cupy

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = header(f"Allan-Poe's hybrid graph index on a GPU ({device})", "python benchmarks/gpu_hybrid_index.py evaluate " + " ".join(sys.argv[2:]))
    lines += [
        "- every timing: median of 3 passes after a warm-up (batch 1: one pass over 10 queries, one at a time); query vectors precomputed; the device synchronised before each clock read",
        "- graph search: the batched lock-step search of `kernels/hybrid/batched.py` (each query expands `width` pool entries per step); "
        "the fused kernel of `kernels/hybrid/cuda_search.py` (one block per query, the whole walk in one launch, float16 dense); "
        "brute force: dense matmul and sparse × dense products on the device",
        "- batch 1: each query its own call (the kernel: its own launch), the lock-step search at width 4 and L 32 and 128 only; batch 100 and 10,000: one call",
        "- cuVS CAGRA / faiss-gpu are not compared: their wheels are far larger than a device call can carry here",
    ]
    output.parent.mkdir(parents=True, exist_ok=True)

    def keep(more: list[str]) -> None:  # written after each part: a run cut short keeps what it measured
        lines.extend(more)
        output.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print("\n".join(more), flush=True)

    for sub in sorted(p for p in folder.iterdir() if (p / "meta.json").exists()):
        data = Set(sub)
        for part in parts.split(","):
            if part == "check":
                keep(correctness(data))
            elif part == "real":
                built, graph = build_times(data.name, data.vectors, data.nodes)
                keep(built)
                keep(throughput(data.name, data.vectors, data.queries, graph, batches))
            elif part == "synthetic":
                vectors, nodes = synthetic(data, synthetic_nodes)
                built, graph = build_times(f"synthetic {synthetic_nodes:,} from {data.name}", vectors, nodes)
                keep(built)
                keep(throughput(f"synthetic {synthetic_nodes:,} from {data.name}", vectors, data.queries, graph, batches))
            elif part == "configs":
                keep(configurations(data, (20_000, synthetic_nodes)))


def main() -> None:
    parser, _, run = export_and_run(__doc__, "the sets' vectors, queries and numba index", "hybrid_index_gpu.md", ("evaluate", "check and time the cupy path on the GPU"))
    run.add_argument("--synthetic", type=int, default=100_000, help="nodes of the synthetic corpus")
    run.add_argument("--parts", default="check,real,synthetic", help="which of check, real, synthetic, configs to run")
    run.add_argument("--batches", default=",".join(map(str, BATCHES)), help="batch sizes to time")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder)
    else:
        evaluate(args.folder, args.output, args.synthetic, args.parts, tuple(int(b) for b in args.batches.split(",")))


if __name__ == "__main__":
    main()
