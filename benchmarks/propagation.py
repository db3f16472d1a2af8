"""Propagation latency: our PPR and GCS kernels against networkx, igraph (PRPACK) and dense numpy, in one run.

Why: SPRIG's ``ppr`` operator runs Personalized PageRank over the corpus-wide entity-passage graph
on every query, and GraphER's ``graph_rerank`` smooths 200 candidates by Graph Cohesive Smoothing;
the issue asks for PPR p50 <= 5 ms per query (>= 20x networkx at equal top-10) and GCS <= 2 ms
median. This measures exactly what a query pays for, on the lake's own graph and seeds.

The graph is loaded as the retrieval operator loads it (the ``cooccurrence`` index's ``graph()``) and each
query's seeds are the ones ``graph_rrf`` builds (RRF of BM25 + dense, then query entities); GCS
runs on ``grapher_base``'s 200 candidates and their ``conceptual`` candidate graph. Seeds and
candidates need retrieval (BM25, dense encoding, spaCy), so they are computed once and cached under
/tmp (delete the file to recompute); the timed part is the propagation alone. Every method sees the
same seeds, calls are interleaved query by query (after a warm-up of each), one thread (OMP/BLAS
pools pinned to 1), time.perf_counter.

Tolerances: ``ppr_cg`` (conjugate gradients, the entity graph being undirected) stops at a
relative residual of ``--tol``; our ``ppr_power`` stops when the L1 change of the score vector is below ``--tol``;
networkx stops when it is below N x tol, so it is given ``--tol / N`` (same rule, same damping:
networkx's alpha 0.85 is 1 - our restart 0.15). PRPACK solves to its own fixed 1e-10 and serves
as the exact reference. Dangling nodes send their mass back to the seeds in all three.

Run from the repo root: ``.venv/bin/python benchmarks/propagation.py --home PATH --corpus hotpotqa``
(needs ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import os

# One thread everywhere, set before numpy/igraph load their thread pools: PRPACK is OpenMP-parallel
# and on a shared 2-core machine its threads wait on each other (~650 ms a call instead of ~7 ms).
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_pool] = "1"

import argparse
import gc
import hashlib
import platform
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import igraph
import networkx as nx
import numpy as np
import scipy.sparse as sp

from common import machine
from graphlake.kernels.graph.entity_graph import EntityGraph
from graphlake.kernels.graph.propagation import Walk, gcs, ppr_cg, ppr_power, ppr_push
from graphlake.retrieval.core import run_inputs_batch
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.operators.propagation import candidate_graph
from graphlake.warehouse.storage import LakeStorage

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "propagation.md"
RESTART, GCS_ALPHA, TOP = 0.15, 0.5, 10
Solver = Callable[[np.ndarray], tuple[object, int | None]]  # seeds -> (scores as returned, iterations if known)


def prepare(home: Path, corpus: str, cache: Path) -> tuple[LakeIndexSet, EntityGraph, sp.csr_matrix, list[np.ndarray], list[np.ndarray]]:
    """The graph, graph_rrf's seeds (one sparse row per query with any seed) and grapher_base's candidates."""
    lake = LakeStorage(home)
    indexes = open_index_set(lake, corpus)
    graph = indexes.cooccurrence.graph()
    if cache.exists():
        print(f"seeds and candidates from {cache}")
        saved = np.load(cache)
        if saved["size"] == graph.walk.size:
            seeds = sp.csr_matrix((saved["data"], saved["indices"], saved["indptr"]), shape=(len(saved["indptr"]) - 1, graph.walk.size))
            return indexes, graph, seeds, np.split(saved["rows"], saved["splits"]), np.split(saved["scores"], saved["splits"])
    methods = load_methods(home)
    texts = lake.read("queries", {"corpus": corpus}).column("text").to_pylist()
    started, seeds, rows, scores = time.perf_counter(), [], [], []
    for i, text in enumerate(texts):
        ppr = methods["graph_rrf"]
        request = new_request(indexes, [text])
        vector = ppr.seeds(text, run_inputs_batch(ppr, request, indexes)[0], request, indexes)
        if vector.any():
            seeds.append(sp.csr_matrix(vector))
            candidates = methods["grapher_base"].run(text, indexes)
            rows.append(candidates.rows)
            scores.append(np.asarray(candidates.scores, dtype=np.float64))
        if (i + 1) % 100 == 0:
            print(f"  seeds and candidates: {i + 1}/{len(texts)} queries, {time.perf_counter() - started:.0f} s", flush=True)
    matrix = sp.vstack(seeds).tocsr()
    splits = np.cumsum([len(r) for r in rows])[:-1]
    print(f"  cached in {cache}")
    np.savez(cache, size=graph.walk.size, data=matrix.data, indices=matrix.indices, indptr=matrix.indptr,
             rows=np.concatenate(rows), scores=np.concatenate(scores), splits=splits)  # fmt: skip
    return indexes, graph, matrix, rows, scores


def ppr_references(walk: Walk) -> tuple[nx.DiGraph, igraph.Graph]:
    """networkx and igraph graphs of the same walk: P's rows are out-weights, which both re-normalise to P."""
    coo = walk.transition.tocoo()
    nx_graph = nx.DiGraph()
    nx_graph.add_nodes_from(range(walk.size))  # isolated rows too, in row order
    nx_graph.add_weighted_edges_from(zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist(), strict=True))
    ig_graph = igraph.Graph(n=walk.size, edges=np.column_stack([coo.row, coo.col]).tolist(), directed=True)
    ig_graph.es["weight"] = coo.data.tolist()
    return nx_graph, ig_graph


def networkx_ppr(graph: nx.DiGraph, seeds: np.ndarray, tol: float) -> dict[int, float]:
    personalization = {int(row): float(seeds[row]) for row in np.flatnonzero(seeds)}
    return nx.pagerank(graph, alpha=1 - RESTART, personalization=personalization, tol=tol, max_iter=1000,
                       weight="weight", dangling=personalization)  # fmt: skip


def gcs_dense(adjacency: np.ndarray, seeds: np.ndarray, alpha: float, tol: float) -> np.ndarray:
    """The reference: GraphER's Algorithm 1 on a dense row-normalised W, same loop and stopping rule as ``gcs``."""
    degrees = adjacency.sum(axis=1, keepdims=True)
    average = np.divide(adjacency, degrees, out=np.zeros_like(adjacency), where=degrees > 0)
    p = seeds.copy()
    for _ in range(1000):
        updated = alpha * seeds + (1 - alpha) * (average @ p)
        change = np.abs(updated - p).sum()
        p = updated
        if change < tol:
            break
    return np.maximum(p, seeds)


def gcs_solve(adjacency: np.ndarray, seeds: np.ndarray, alpha: float) -> np.ndarray:
    """The fixpoint in closed form: p = alpha (I - (1 - alpha) W)^-1 s."""
    degrees = adjacency.sum(axis=1, keepdims=True)
    average = np.divide(adjacency, degrees, out=np.zeros_like(adjacency), where=degrees > 0)
    p = np.linalg.solve(np.eye(len(seeds)) - (1 - alpha) * average, alpha * seeds)
    return np.maximum(p, seeds)


def timed(solve: Callable, *args) -> tuple[float, float, object]:
    """Wall and CPU (this thread's) milliseconds of one call, and its result. The garbage collector is
    off during the call, as in timeit: a full collection walks networkx's graph (~100 ms) and would
    land on whichever call allocates at the wrong moment. CPU time leaves out time spent descheduled."""
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.thread_time()
        result = solve(*args)
        return 1000 * (time.perf_counter() - wall), 1000 * (time.thread_time() - cpu), result
    finally:
        gc.enable()


def top_passages(scores: np.ndarray, n_passages: int) -> frozenset[int]:
    return frozenset(np.argsort(-scores[:n_passages], kind="stable")[:TOP].tolist())


@dataclass
class Timings:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    def cells(self) -> str:
        """p50 | p95 | mean wall ms | p50 CPU ms."""
        wall = np.asarray(self.wall)
        return f"{np.median(wall):.3f} | {np.percentile(wall, 95):.3f} | {wall.mean():.3f} | {np.median(self.cpu):.3f}"

    @property
    def p50(self) -> float:
        return float(np.median(self.wall))


def gpu_solvers(walk: Walk, tol: float) -> dict[str, Solver]:
    """Our kernels on cupy, when it imports (the kernels take ``xp``); none otherwise."""
    try:
        import cupy as cp
        import cupyx.scipy.sparse as csp
    except ImportError:
        return {}
    device = Walk(csp.csr_matrix(walk.transition), csp.csr_matrix(walk.flow), cp.asarray(walk.dangling), walk.out_edges)

    def solve(seeds: np.ndarray, max_iter: int, tol: float) -> tuple[np.ndarray, int]:
        scores, iterations = ppr_power(device, cp.asarray(seeds), RESTART, tol=tol, max_iter=max_iter, xp=cp)
        return cp.asnumpy(scores), iterations  # the copy back also synchronises

    return {
        f"ours, ppr_power to tol {tol:g}, cupy": lambda s: solve(s, 1000, tol),
        "ours, SPRIG default: 5 iterations, cupy": lambda s: solve(s, 5, 0.0),
    }


@dataclass
class PprRow:
    timings: Timings = field(default_factory=Timings)
    iterations: list[int] = field(default_factory=list)
    l1: list[float] = field(default_factory=list)  # sum |scores - PRPACK's|
    same_prpack: list[bool] = field(default_factory=list)  # identical top-10 set
    overlap_nx: list[float] = field(default_factory=list)  # |top-10 & networkx's| / 10
    same_nx: list[bool] = field(default_factory=list)


def bench_ppr(args: argparse.Namespace, walk: Walk, n_passages: int, seeds: list[np.ndarray]) -> tuple[dict[str, PprRow], str]:
    """Every PPR solver on every query's seeds, interleaved; returns the rows and networkx's row name."""
    nx_graph, ig_graph = ppr_references(walk)
    nx_tol = args.tol / walk.size

    def power(tol: float, max_iter: int) -> Solver:
        return lambda s: ppr_power(walk, s, RESTART, tol=tol, max_iter=max_iter)

    solvers: dict[str, Solver] = {f"ours, ppr_cg to relative residual {rtol:g}": (lambda s, rtol=rtol: ppr_cg(walk, s, RESTART, rtol=rtol)) for rtol in (args.tol, 1e-4)}
    solvers.update({f"ours, ppr_power to tol {tol:g}": power(tol, 1000) for tol in [args.tol, *args.sweep]})
    solvers[f"ours, ppr_push epsilon {args.epsilon:g}"] = lambda s: (ppr_push(walk, s, RESTART, epsilon=args.epsilon), None)
    solvers["ours, SPRIG default: ppr_power, 5 iterations"] = power(0.0, 5)
    solvers.update(gpu_solvers(walk, args.tol))
    solvers["igraph PRPACK"] = lambda s: (
        ig_graph.personalized_pagerank(damping=1 - RESTART, reset=s, weights="weight", directed=True, implementation="prpack"),
        None,
    )
    networkx = f"networkx pagerank, tol {nx_tol:.3g} (= {args.tol:g} / N)"
    solvers[networkx] = lambda s: (networkx_ppr(nx_graph, s, nx_tol), None)

    rows = {name: PprRow() for name in solvers}
    for solve in solvers.values():
        solve(seeds[0])  # warm-up
    started = time.perf_counter()
    for q, s in enumerate(seeds):
        scores = {}
        for name, solve in solvers.items():
            if name == networkx and q >= args.nx_queries:
                continue
            for _ in range(1 if name == networkx else args.repeats):
                wall, cpu, (result, iterations) = timed(solve, s)
                rows[name].timings.add(wall, cpu)
            if iterations is not None:
                rows[name].iterations.append(iterations)
            scores[name] = np.fromiter(result.values(), float, walk.size) if isinstance(result, dict) else np.asarray(result)
        exact = scores["igraph PRPACK"]
        exact_top = top_passages(exact, n_passages)
        nx_top = top_passages(scores[networkx], n_passages) if networkx in scores else None
        for name, result in scores.items():
            row, top = rows[name], top_passages(result, n_passages)
            row.l1.append(float(np.abs(result - exact).sum()))
            row.same_prpack.append(top == exact_top)
            if nx_top is not None:
                row.overlap_nx.append(len(top & nx_top) / TOP)
                row.same_nx.append(top == nx_top)
        if (q + 1) % 100 == 0:
            print(f"  PPR: {q + 1}/{len(seeds)} queries, {time.perf_counter() - started:.0f} s", flush=True)
    return rows, networkx


CANDIDATE_GRAPH, OURS_GCS, DENSE_LOOP, DENSE_SOLVE = (
    "candidate_graph (conceptual, spacy)",
    "ours, gcs (scipy CSR)",
    "dense numpy, same loop",
    "dense numpy, np.linalg.solve",
)


def bench_gcs(args: argparse.Namespace, indexes: LakeIndexSet, cand_rows: list[np.ndarray], cand_scores: list[np.ndarray]) -> dict:
    """Candidate-graph construction, our GCS and the dense references, per query; max abs differences to ours."""
    candidate_graph(indexes, cand_rows[0], "conceptual", "spacy")  # loads the mention matrix once
    times = {name: Timings() for name in (CANDIDATE_GRAPH, OURS_GCS, DENSE_LOOP, DENSE_SOLVE)}
    diffs: dict[str, float] = {DENSE_LOOP: 0.0, DENSE_SOLVE: 0.0}
    iterations, edges = [], []
    for rows, base in zip(cand_rows, cand_scores, strict=True):
        for _ in range(args.repeats):
            wall, cpu, adjacency = timed(candidate_graph, indexes, rows, "conceptual", "spacy")
            times[CANDIDATE_GRAPH].add(wall, cpu)
            dense = adjacency.toarray()
            wall, cpu, (ours, its) = timed(gcs, adjacency, base, GCS_ALPHA, args.gcs_tol)
            times[OURS_GCS].add(wall, cpu)
            for name, solve, solve_args in [
                (DENSE_LOOP, gcs_dense, (dense, base, GCS_ALPHA, args.gcs_tol)),
                (DENSE_SOLVE, gcs_solve, (dense, base, GCS_ALPHA)),
            ]:
                wall, cpu, result = timed(solve, *solve_args)
                times[name].add(wall, cpu)
                diffs[name] = max(diffs[name], float(np.abs(result - ours).max()))
        iterations.append(its)
        edges.append(adjacency.nnz)
    return {"times": times, "diffs": diffs, "iterations": iterations, "edges": edges, "candidates": len(cand_rows[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="the lake (GRAPHLAKE_HOME)")
    parser.add_argument("--corpus", default="hotpotqa")
    parser.add_argument("--tol", type=float, default=1e-6, help="L1 change at which ppr_power stops (networkx gets tol / N)")
    parser.add_argument("--sweep", type=lambda text: [float(t) for t in text.split(",") if t], default=[1e-3, 1e-4, 1e-8], help="more tolerances for ppr_power alone")
    parser.add_argument("--epsilon", type=float, default=1e-6, help="ppr_push residual threshold per edge")
    parser.add_argument("--gcs-tol", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per query for every method but networkx")
    parser.add_argument("--nx-queries", type=int, default=100, help="networkx runs once on the first N queries")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()

    digest = hashlib.sha1(str(args.home.resolve()).encode()).hexdigest()[:8]
    cache = Path("/tmp") / f"graphlake-propagation-{args.corpus}-{digest}.npz"
    indexes, graph, seed_matrix, cand_rows, cand_scores = prepare(args.home, args.corpus, cache)
    walk = graph.walk
    seeds = [seed_matrix[i].toarray().ravel() for i in range(seed_matrix.shape[0])]
    size = {"nodes": walk.size, "passages": graph.n_passages, "entities": walk.size - graph.n_passages,
            "edges": walk.transition.nnz // 2, "isolated": int(walk.dangling.sum())}  # fmt: skip
    print(f"{args.corpus}: {size}; {len(seeds)} queries with seeds")

    load = [os.getloadavg()[0]]
    ppr, networkx = bench_ppr(args, walk, graph.n_passages, seeds)
    for name, row in ppr.items():
        print(f"{name}: {row.timings.cells()} (p50 | p95 | mean | p50 CPU ms); top-10 = PRPACK {np.mean(row.same_prpack):.3f}")
    smoothing = bench_gcs(args, indexes, cand_rows, cand_scores)
    for name, timings in smoothing["times"].items():
        print(f"{name}: {timings.cells()}")
    load.append(os.getloadavg()[0])
    write_report(args, size, len(seeds), ppr, networkx, smoothing, load)
    print(f"wrote {args.output}")


def write_report(args: argparse.Namespace, size: dict, n_queries: int, ppr: dict[str, PprRow], networkx: str, smoothing: dict, load: list[float]) -> None:
    def rel(path: Path | str) -> str:
        return os.path.relpath(os.path.abspath(path), ROOT)  # not resolved: keep the venv's python link

    options = ["--home", str(args.home), "--corpus", args.corpus, "--tol", f"{args.tol:g}", "--sweep", ",".join(f"{t:g}" for t in args.sweep),
               "--epsilon", f"{args.epsilon:g}", "--gcs-tol", f"{args.gcs_tol:g}", "--repeats", str(args.repeats),
               "--nx-queries", str(args.nx_queries), "--output", rel(args.output)]  # fmt: skip
    command = shlex.join([rel(sys.executable), rel(__file__), *options])
    libs = ", ".join(f"{name} {version(name)}" for name in ("graphlake", "numpy", "scipy", "networkx", "igraph"))
    gpu = "cupy" if any("cupy" in name for name in ppr) else "none (cupy does not import): CPU only"
    power = next(iter(ppr))
    ours, nx_p50, ig_p50 = ppr[power].timings.p50, ppr[networkx].timings.p50, ppr["igraph PRPACK"].timings.p50
    n_nx = len(ppr[networkx].same_nx)
    ppr_table = [
        (
            "| method | p50 ms | p95 ms | mean ms | p50 CPU ms | speed-up vs networkx (p50) | speed-up vs igraph (p50) "
            "| iterations (median) | mean L1 to PRPACK | overlap@10 with networkx | identical top-10 with networkx "
            "| identical top-10 with PRPACK | calls timed |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in ppr.items():
        p50 = row.timings.p50
        its = f"{np.median(row.iterations):.0f}" if row.iterations else ""
        ppr_table.append(
            f"| {name} | {row.timings.cells()} | {nx_p50 / p50:.1f}x | {ig_p50 / p50:.2f}x | {its} | {np.mean(row.l1):.1e} "
            f"| {np.mean(row.overlap_nx):.3f} | {np.mean(row.same_nx):.3f} | {np.mean(row.same_prpack):.3f} | {len(row.timings.wall)} |"
        )
    times, diffs = smoothing["times"], smoothing["diffs"]
    gcs_table = ["| step | p50 ms | p95 ms | mean ms | p50 CPU ms | max abs diff to ours |", "|---|---:|---:|---:|---:|---:|"]
    for name, timings in times.items():
        diff = f"{diffs[name]:.1e}" if name in diffs else ""
        gcs_table.append(f"| {name} | {timings.cells()} | {diff} |")
    gcs_p50 = times[OURS_GCS].p50
    with_graph = float(np.median(np.add(times[OURS_GCS].wall, times[CANDIDATE_GRAPH].wall)))
    verdict = {True: "pass", False: "FAIL"}
    lines = [
        f"# Propagation kernels on {args.corpus}: PPR and GCS",
        "",
        f"- date (UTC): {datetime.now(UTC):%Y-%m-%d %H:%M}",
        f"- machine: {machine()}; GPU: {gpu}",
        (
            f"- shared machine: 1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end, so wall "
            "times carry queueing noise; p50 CPU = this thread's CPU time, which leaves it out. One thread: OMP/BLAS pools pinned to 1"
        ),
        f"- python {platform.python_version()}; {libs}",
        f"- command (repo root, `pip install -e '.[bench]'`): `{command}`",
        (
            f"- entity graph (the `cooccurrence` index's `graph()`, cooccurrence edges walked both ways): {size['nodes']:,} nodes "
            f"= {size['passages']:,} passages + {size['entities']:,} entities, {size['edges']:,} undirected edges "
            f"({2 * size['edges']:,} nonzeros in P), {size['isolated']:,} nodes without edges"
        ),
        (f"- queries: {n_queries}, those of the corpus whose `graph_rrf` seeds are not all zero; seeds = `methods['graph_rrf'].seeds(text, inputs, request, indexes)`, computed before timing"),
        "",
        "## Personalized PageRank on the entity graph, per query",
        "",
        (
            "Restart 0.15 (networkx/igraph damping 0.85); a node without edges sends its mass back to the seeds in all. "
            "`ppr_power` stops when the L1 change is below tol; networkx when it is below N x its tol, so its tol is ours / N "
            "(the same rule; it starts from the uniform vector, ours from the seeds). PRPACK solves exactly (its fixed 1e-10) "
            "and is the reference for L1 and the top-10 columns. "
            f"Every method but networkx is timed {args.repeats}x per query on all {n_queries} queries, interleaved query by "
            f"query after one warm-up call each; networkx once per query on the first {n_nx} queries only (each call also "
            "rebuilds a scipy matrix from the DiGraph: part of what a networkx user pays). Top-10 = the 10 highest-scoring "
            f"passage rows (graph rows < {size['passages']:,}); the networkx columns are over its {n_nx} queries."
        ),
        "",
        *ppr_table,
        "",
        "## Graph Cohesive Smoothing over the candidates, per query",
        "",
        (
            f"`grapher_base` candidates ({smoothing['candidates']} per query) and their `conceptual` candidate graph "
            f"(median {np.median(smoothing['edges']):.0f} nonzeros), built per query by `candidate_graph` (timed "
            f"alone in its row); `gcs(adjacency, base scores, alpha={GCS_ALPHA}, tol={args.gcs_tol:g})` (median "
            f"{np.median(smoothing['iterations']):.0f}, max {max(smoothing['iterations'])} iterations) against a dense numpy W "
            "row-normalised inside the timed call like ours, with the same loop and stopping rule, and against the closed form "
            f"p = alpha (I - (1 - alpha) W)^-1 s; {args.repeats}x per query, {len(smoothing['iterations'])} queries."
        ),
        "",
        *gcs_table,
        "",
        "## Acceptance",
        "",
        f"- PPR p50 <= 5 ms ({power}): {ours:.3f} ms: **{verdict[ours <= 5]}**",
        (
            f"- PPR >= 20x faster than networkx at equal top-10: {nx_p50 / ours:.1f}x at p50: **{verdict[nx_p50 / ours >= 20]}** "
            f"(identical top-10 with networkx on {np.mean(ppr[power].same_nx):.3f} of its {n_nx} queries)"
        ),
        (f"- GCS over {smoothing['candidates']} candidates, median <= 2 ms: {gcs_p50:.3f} ms: **{verdict[gcs_p50 <= 2]}** (with the candidate graph built: {with_graph:.3f} ms)"),
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
