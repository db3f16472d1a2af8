"""Allan-Poe's hybrid graph index (§4, Algorithms 1 and 2), CPU path: one fixed-degree proximity graph
over the fused vectors (``kernels/hybrid/vectors.py``) that serves any path weights at query time.

Build: the k-NN graph under the calibrated fused inner product (exact, blocked, up to ``EXACT_KNN_UP_TO``
nodes; above, per-path candidates re-scored, ``kernels/hybrid/candidates.py``; NN-Descent with
``knn="nndescent"``, ``kernels/hybrid/nndescent.py``), then per node the
rank-based RNG detour counts (CAGRA) and the IP pruning of Algorithm 1, recycling pruned neighbours
that carry a keyword no kept neighbour shares (§3.3) as keyword edges, then the edge layout: d/2
pruned + d/2 reverse (the authors' code, the default: on SciFact it has the higher recall for every
weighting, single paths included) or d/4 pruned + d/4 reverse + d/2 single-path neighbours (the
paper's, §4.1 Step 2, ``layout="paper"``). Entry points are the nodes with the largest fused
self inner product (the paper; the code takes the smallest, ``entry="smallest_norm"``). The k-NN and
pruning steps also run as batched array code on numpy or cupy (``device``; ``kernels/hybrid/batched.py``).

Search: best-first over the semantic edges with a candidate pool of ``L`` (Algorithm 2), deterministic
(ties go to the lower row); with a KG query (``KGQuery``), also from the nodes holding the query's
entities, along logical edges, and with the KG reward (``kernels/hybrid/kg.py``). Mark-deleted nodes, and with required
keywords the nodes lacking one, are walked through but never returned: the top ``k`` of the others
seen are kept apart from the pool (which makes the paper's twin pool unnecessary).
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import njit

from graphlake.kernels.hybrid import batched
from graphlake.kernels.hybrid.candidates import candidate_knn
from graphlake.kernels.hybrid.kg import KnowledgeGraph
from graphlake.kernels.hybrid.nndescent import nn_descent
from graphlake.kernels.hybrid.pairs import dot64, pair_sparse, row_norms, row_operands, sparse_dot
from graphlake.kernels.hybrid.vectors import HybridParams, HybridVectors, KGQuery, Queries
from graphlake.kernels.results import Ranking, filled
from graphlake.kernels.text.triples import HUB_NODES

MAX_THREADS = 8  # a batch's queries walked at once
_WALKERS: list[ThreadPoolExecutor] = []  # one pool for every search of the process (a server's requests share it)
_STARTING = threading.Lock()


def _walkers() -> ThreadPoolExecutor:
    """The process's pool of walking threads, started with the first batch that needs it: the walk
    releases the interpreter's lock (numba, ``nogil``), so a batch's queries run at once."""
    if not _WALKERS:
        with _STARTING:
            if not _WALKERS:
                _WALKERS.append(ThreadPoolExecutor(min(os.cpu_count() or 1, MAX_THREADS), thread_name_prefix="graphlake-walk"))
    return _WALKERS[0]


FILES = ("semantic.npy", "keyword.npy", "entry.npy", "deleted.npy")
MAX_BLOCK_BYTES = 256 * 2**20  # the exact k-NN's (3, block, N) float32 score block
EXACT_KNN_UP_TO = 10_000  # knn: auto takes the exact k-NN up to this many nodes (~30 s), candidates above
RECALL_SAMPLE = 200  # nodes whose approximate k-NN lists are checked against the exact ones at build time


@dataclass(frozen=True)
class BuildConfig:
    knn_k: int = 64
    degree: int = 32
    keyword_degree: int = 8
    layout: str = "code"  # code: d/2 pruned + d/2 reverse; paper: d/4 pruned + d/4 reverse + d/2 single-path
    entry: str = "largest_norm"  # or smallest_norm (the authors' code)
    entry_points: int = 32
    device: str = "cpu"  # cpu: the numba kernels; numpy or cuda: the batched array code (kernels/hybrid/batched.py)
    knn: str = "auto"  # exact, candidates (kernels/hybrid/candidates.py), nndescent (kernels/hybrid/nndescent.py), or auto
    nndescent_iterations: int = 25
    nndescent_samples: int = 16  # new and old neighbours sampled per node, each with as many reverse ones: 64 joined
    seed: int = 0
    pruning: str = "rng_ip"  # rng_ip (Algorithm 1), or the §5.6 ablations rng (detour order only) and ip (IP rule only)

    def knn_method(self, n: int) -> str:
        """How a corpus of ``n`` nodes gets its k-NN lists: ``auto`` is exact up to ``EXACT_KNN_UP_TO`` nodes,
        candidates above; on a CUDA device always exact (one matrix product a block: 26 s for 100k on an H100)."""
        if self.knn not in ("auto", "exact", "candidates", "nndescent"):
            raise ValueError(f"knn must be auto, exact, candidates or nndescent, not {self.knn!r}")
        if self.knn == "auto":
            return "exact" if n <= EXACT_KNN_UP_TO or self.device == "cuda" else "candidates"
        return self.knn

    def exact_knn(self, n: int) -> bool:
        """Whether a corpus of ``n`` nodes gets exact k-NN lists; inserts follow the same rule."""
        return self.knn_method(n) == "exact"

    def pruning_steps(self) -> tuple[bool, bool]:
        """Whether the detour (RNG) order and the IP rule run."""
        if self.pruning not in ("rng_ip", "rng", "ip"):
            raise ValueError(f"pruning must be rng_ip, rng or ip, not {self.pruning!r}")
        return self.pruning != "ip", self.pruning != "rng"


@dataclass
class HybridGraph:
    """The index arrays: ``semantic (N, d)`` and ``keyword (N, kd)`` int32 (−1 pads), entry rows, the
    per-path calibration, the mark-deleted bitmap, what the build measured, and the knowledge graph
    the search can walk and reward along (``kernels/hybrid/kg.py``; ``None`` when built without one)."""

    semantic: np.ndarray
    keyword: np.ndarray
    entry: np.ndarray
    scales: np.ndarray
    deleted: np.ndarray
    build: dict = field(default_factory=dict)
    kg: KnowledgeGraph | None = None

    def save(self, folder: Path) -> None:
        for name, array in zip(FILES, (self.semantic, self.keyword, self.entry, self.deleted), strict=True):
            np.save(folder / name, array)
        if self.kg is not None:
            self.kg.save(folder)
        (folder / "calibration.json").write_text(json.dumps(dict(zip(("dense", "sparse", "lexical"), self.scales.tolist(), strict=True))), encoding="utf-8")
        (folder / "build.json").write_text(json.dumps(self.build, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> HybridGraph:
        semantic, keyword, entry, deleted = (np.load(folder / name) for name in FILES)
        scales = np.array(list(json.loads((folder / "calibration.json").read_text(encoding="utf-8")).values()), dtype=np.float64)
        return cls(semantic, keyword, entry, scales, deleted, json.loads((folder / "build.json").read_text(encoding="utf-8")), KnowledgeGraph.load(folder))

    def edge_bytes(self) -> dict[str, int]:
        logical = {"logical": self.kg.edge_bytes()} if self.kg is not None else {}
        return {"semantic": int(self.semantic.nbytes), "keyword": int(self.keyword.nbytes), **logical}


def build(vectors: HybridVectors, nodes: Queries, config: BuildConfig, scales: np.ndarray | None = None, knn: tuple | None = None) -> HybridGraph:
    """The index over ``vectors``, whose rows used as queries are ``nodes``; ``scales`` default to the
    calibration; ``knn`` reuses the ``(ids, sims, single)`` lists of an earlier build with the same
    ``knn_k`` and scales (the ablations share one k-NN graph)."""
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    scales = vectors.calibration(nodes) if scales is None else np.asarray(scales, dtype=np.float64)
    seconds["calibrate"] = time.perf_counter() - started
    n = len(vectors)
    degree = min(config.degree, max(n - 1, 0))
    knn_k, single_k = min(config.knn_k, max(n - 1, 0)), max(1, config.degree // 2)
    device = None if config.device == "cpu" else batched.DeviceVectors.of(batched.array_module(config.device), vectors)
    started = time.perf_counter()
    measured: dict = {}
    method = "given" if knn is not None else config.knn_method(n)
    if knn is not None:
        knn_ids, knn_sims, single = knn
    elif method in ("candidates", "nndescent"):
        if method == "candidates":
            knn_ids, knn_sims, measured = candidate_knn(vectors, nodes, scales, knn_k, row_operands(vectors, nodes, scales))
        else:
            arrays = device if device is not None else batched.DeviceVectors.of(np, vectors)
            knn_ids, knn_sims, measured = nn_descent(arrays, nodes, scales, knn_k, config.nndescent_iterations, config.nndescent_samples, config.seed)
        single = np.full((3, n, single_k), -1, np.int32)  # no per-path lists: the paper layout fills its share from the others
        measured["knn_recall"] = knn_recall(vectors, nodes, scales, knn_ids, config.seed)
    elif device is None:
        knn_ids, knn_sims, single = exact_knn(vectors, nodes, scales, knn_k, single_k)
    else:
        knn_ids, knn_sims, single = batched.exact_knn(device, nodes, scales, knn_k, single_k)
    seconds["knn"] = time.perf_counter() - started
    started = time.perf_counter()
    self_ip = self_inner_products(vectors, nodes, scales)
    if device is None:
        pruned, kept, keyword = prune_candidates(knn_ids, knn_sims, self_ip, degree, config.keyword_degree, *row_operands(vectors, nodes, scales), *config.pruning_steps())
    else:
        pruned, kept, keyword = batched.prune(device, nodes.lexical, scales, knn_ids, knn_sims, self_ip, degree, config.keyword_degree, *config.pruning_steps())
    seconds["prune"] = time.perf_counter() - started
    started = time.perf_counter()
    rev_indptr, rev_ids = reverse_neighbours(pruned, kept, knn_ids, knn_sims)
    semantic = _layout(pruned, kept, rev_indptr, rev_ids, single, knn_ids, degree, config.layout == "code")
    entry = entry_points(self_ip, np.ones(n, dtype=bool), config)
    seconds["layout"] = time.perf_counter() - started
    graph = HybridGraph(semantic, keyword, entry, scales, np.zeros(n, dtype=bool))
    graph.build = {
        "nodes": n,
        "config": config.__dict__,
        "seconds": {step: round(value, 3) for step, value in seconds.items()},
        "bytes": graph.edge_bytes(),
        "keyword_degree_mean": float((keyword >= 0).sum(axis=1).mean()) if n else 0.0,
        "knn": {"method": method, **measured},
    }
    return graph


def knn_recall(vectors: HybridVectors, nodes: Queries, scales: np.ndarray, knn_ids: np.ndarray, seed: int) -> float:
    """Recall of approximate k-NN lists against the exact ones, on ``RECALL_SAMPLE`` seeded nodes."""
    n, k = knn_ids.shape
    rows = np.sort(np.random.default_rng(seed).choice(n, min(RECALL_SAMPLE, n), replace=False))
    scores = np.tensordot(scales.astype(np.float32), vectors.path_scores(nodes.take(rows)), axes=1)
    scores[np.arange(len(rows)), rows] = -np.inf
    _, exact = batched.top_rows(np, scores, k)
    return round(float(np.mean([len(set(e.tolist()) & set(a[a >= 0].tolist())) / k for e, a in zip(exact, knn_ids[rows], strict=True)])), 4)


def entry_points(self_ip: np.ndarray, live: np.ndarray, config: BuildConfig) -> np.ndarray:
    """The ``entry_points`` live rows of largest (or smallest) fused self inner product."""
    rows = np.flatnonzero(live)
    order = np.argsort(-self_ip[rows] if config.entry == "largest_norm" else self_ip[rows], kind="stable")
    return rows[order[: config.entry_points]].astype(np.int32)


def exact_knn(vectors: HybridVectors, nodes: Queries, scales: np.ndarray, k: int, single: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every node's ``k`` best other nodes by calibrated fused score (ids, scores; best first, ties by
    row), and its ``single`` best by each path alone, ``(3, N, single)`` (−1 where a path scores 0)."""
    n = len(vectors)
    ids, sims = np.full((n, k), -1, np.int32), np.zeros((n, k), np.float32)
    paths = np.full((3, n, single), -1, np.int32)
    for start in range(0, n, block := _block_rows(n)):
        rows = np.arange(start, min(n, start + block))
        scores = vectors.path_scores(nodes.take(rows))
        scores[:, np.arange(len(rows)), rows] = -np.inf
        sims[rows], ids[rows] = batched.top_rows(np, np.tensordot(scales.astype(np.float32), scores, axes=1), k)
        for path in range(3):
            values, best = batched.top_rows(np, scores[path], min(single, max(n - 1, 0)))
            paths[path, rows, : best.shape[1]] = np.where(values > 0, best, -1)
    return ids, sims, paths


def exact_neighbours(vectors: HybridVectors, nodes: Queries, scales: np.ndarray, k: int, rows: np.ndarray, excluded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best other nodes of each of ``rows`` by calibrated fused score, none of the ``excluded``
    (a boolean mask): ids (−1 past the last candidate) and scores, best first, ties by row."""
    n = len(vectors)
    ids, sims = np.full((len(rows), k), -1, np.int32), np.full((len(rows), k), -np.inf, np.float32)
    for start in range(0, len(rows), block := _block_rows(n)):
        chunk = rows[start : start + block]
        scores = vectors.fused(nodes.take(chunk), scales)
        scores[:, excluded] = -np.inf
        scores[np.arange(len(chunk)), chunk] = -np.inf
        top, best = batched.top_rows(np, scores, k)
        ids[start : start + len(chunk)] = np.where(np.isfinite(top), best, -1)
        sims[start : start + len(chunk)] = top
    return ids, sims


def _block_rows(n: int) -> int:
    """Query rows per block so that a ``(3, block, n)`` float32 score block stays under ``MAX_BLOCK_BYTES``."""
    return max(1, min(1024, MAX_BLOCK_BYTES // max(1, 12 * n)))


def self_inner_products(vectors: HybridVectors, nodes: Queries, scales: np.ndarray) -> np.ndarray:
    """Each node's calibrated fused score against itself, ``IP(v, v)`` of the pruning rule."""
    dense = np.einsum("ij,ij->i", nodes.dense, vectors.dense)
    sparse = np.asarray(nodes.sparse.multiply(vectors.sparse).sum(axis=1)).ravel()
    lexical = np.asarray(nodes.lexical.multiply(vectors.lexical).sum(axis=1)).ravel()
    return (scales[0] * dense + scales[1] * sparse + scales[2] * lexical).astype(np.float32)


@njit(cache=True)
def _keyword_flag(a, v, kept, n_kept, b_ptr, b_idx, mark, ones) -> bool:
    """§3.3: ``v`` shares with ``a`` a keyword set that no kept neighbour holds entirely (``ones``: as
    long as the longest token list)."""
    tokens = b_idx[b_ptr[v] : b_ptr[v + 1]]
    shared = np.array([t for t in tokens if mark[t]], dtype=b_idx.dtype)  # mark holds K(a)
    if len(shared) == 0:
        return False
    for i in range(n_kept):
        w = kept[i]
        if sparse_dot(shared, ones, b_idx[b_ptr[w] : b_ptr[w + 1]], ones) == len(shared):  # K(a) ∩ K(v) ⊆ K(w)
            return False
    return True


@njit(cache=True)
def prune_candidates(knn_ids, knn_sims, self_ip, degree, keyword_degree, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f, vocab, rng=True, ip=True):
    """Algorithm 1 lines 5–15 for every node."""
    targets = np.arange(len(knn_ids))
    return prune_rows(targets, knn_ids, knn_sims, self_ip, degree, keyword_degree, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f, vocab, rng, ip)


@njit(cache=True)
def prune_rows(targets, knn_ids, knn_sims, self_ip, degree, keyword_degree, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f, vocab, rng=True, ip=True):
    """Algorithm 1 lines 5–15 for the ``targets`` rows: detour counts, then IP pruning with keyword
    recycling. Lists may end in −1 (an inserted node's shorter list); rows not targeted stay empty.
    The §5.6 ablations: ``rng=False`` walks the list in distance order, ``ip=False`` keeps the first ``degree``."""
    n, k = knn_ids.shape
    pruned = np.full((n, max(degree, 1)), -1, np.int32)
    kept_n = np.zeros(n, np.int32)
    keyword = np.full((n, keyword_degree), -1, np.int32)
    position = np.full(n, -1, np.int32)
    mark = np.zeros(vocab, np.bool_)
    ones = np.ones(max(1, int(np.max(np.diff(b_ptr))) if len(b_ptr) > 1 else 1))
    s_norm, c_norm, b_norm = row_norms(s_ptr, s_val), row_norms(c_ptr, c_val), row_norms(b_ptr, b_val)
    for a in targets:
        neighbours = knn_ids[a]
        for r in range(k):
            if neighbours[r] >= 0:
                position[neighbours[r]] = r
        detours = np.zeros(k, np.int64)
        for i in range(k):  # a -> x -> y is a detour when y is in x's list and closer to x than to a
            x = neighbours[i]
            if x < 0:
                continue
            for j in range(k):
                y = knn_ids[x, j]
                if y >= 0 and y != a:
                    r = position[y]
                    if r > i and knn_sims[x, j] > knn_sims[a, r]:
                        detours[r] += 1
        for r in range(k):
            if neighbours[r] >= 0:
                position[neighbours[r]] = -1
        order = np.argsort(detours, kind="mergesort") if rng else np.arange(k)  # stable: ties keep the distance rank
        for j in range(b_ptr[a], b_ptr[a + 1]):
            mark[b_idx[j]] = True
        n_kept, n_keyword = 0, 0
        for r in order:
            v = neighbours[r]
            if v < 0:
                continue
            keep = n_kept < degree
            if keep and ip:
                for i in range(n_kept):
                    w = pruned[a, i]
                    part = scale_d * dot64(dense[w], dense[v])
                    bound = part + scale_s * s_norm[w] * s_norm[v] + scale_f * c_norm[w] * b_norm[v]  # Cauchy–Schwarz
                    if bound + 1e-9 * (1.0 + abs(bound)) < self_ip[v]:
                        continue  # the exact score cannot reach IP(v, v): skip the sparse merges
                    if pair_sparse(w, v, part, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f) >= self_ip[v]:
                        keep = False
                        break
            if keep:
                pruned[a, n_kept] = v
                n_kept += 1
            elif n_keyword < keyword_degree and _keyword_flag(a, v, pruned[a], n_kept, b_ptr, b_idx, mark, ones):
                keyword[a, n_keyword] = v
                n_keyword += 1
        for j in range(b_ptr[a], b_ptr[a + 1]):
            mark[b_idx[j]] = False
        kept_n[a] = n_kept
    return pruned, kept_n, keyword


def reverse_neighbours(pruned: np.ndarray, kept: np.ndarray, knn_ids: np.ndarray, knn_sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the nodes that kept each node, best (their score for it) first, ties by row."""
    n = len(pruned)
    src = np.repeat(np.arange(n, dtype=np.int32), kept)
    dst = np.concatenate([pruned[a, : kept[a]] for a in range(n)]) if n else np.zeros(0, np.int32)
    positions = np.argmax(knn_ids[src] == dst[:, None], axis=1) if len(src) else np.zeros(0, np.int64)
    weight = knn_sims[src, positions]
    order = np.lexsort((src, -weight, dst))
    indptr = np.zeros(n + 1, np.int64)
    np.add.at(indptr, dst + 1, 1)
    return np.cumsum(indptr), src[order]


@njit(cache=True)
def _take(out, count, limit, candidates, seen, a):
    """Append up to ``limit`` new candidates (not ``a``, not seen, not −1) to ``out``; the new count."""
    added = 0
    for c in candidates:
        if count >= len(out) or added >= limit:
            break
        if c >= 0 and c != a and seen[c] != a:
            seen[c] = a
            out[count] = c
            count += 1
            added += 1
    return count


@njit(cache=True)
def _layout(pruned, kept, rev_indptr, rev_ids, single, knn_ids, degree, code_layout):
    """The fixed-degree edge lists (§4.1 Step 2) of every node."""
    semantic = np.full((len(pruned), degree), -1, np.int32)
    layout_rows(semantic, np.arange(len(pruned)), pruned, kept, rev_indptr, rev_ids, single, knn_ids, degree, code_layout)
    return semantic


@njit(cache=True)
def layout_rows(semantic, targets, pruned, kept, rev_indptr, rev_ids, single, knn_ids, degree, code_layout):
    """The ``targets`` rows' edge lists, written into ``semantic``; a list that runs short is filled
    from the rest of its lists."""
    seen = np.full(len(semantic), -1, np.int64)
    big = 1 << 30
    for a in targets:
        out = semantic[a]
        mine, reverse = pruned[a, : kept[a]], rev_ids[rev_indptr[a] : rev_indptr[a + 1]]
        share = degree // 2 if code_layout else degree // 4
        count = _take(out, 0, share, mine, seen, a)
        count = _take(out, count, share, reverse, seen, a)
        if not code_layout:  # d/2 single-path neighbours, dense -> sparse -> lexical in turn
            target = count + degree - 2 * share
            for r in range(single.shape[2]):
                for path in range(3):
                    if count < target:
                        count = _take(out, count, 1, single[path, a, r : r + 1], seen, a)
        count = _take(out, count, big, mine, seen, a)
        count = _take(out, count, big, reverse, seen, a)
        count = _take(out, count, big, knn_ids[a], seen, a)
        for path in range(3):
            count = _take(out, count, big, single[path, a], seen, a)


@njit(cache=True, fastmath=True)
def _dot(a, b) -> float:
    """A float32 dot product the compiler may reorder into SIMD lanes (the search's hot loop)."""
    total = np.float32(0.0)
    for t in range(len(a)):
        total += a[t] * b[t]
    return total


@njit(cache=True)
def _score(i, q_dense, q_sparse, q_lexical, use, dense, s_ptr, s_idx, s_val, b_ptr, b_idx, b_val) -> float:
    total = 0.0
    if use[0]:
        total += _dot(dense[i], q_dense)
    if use[1]:
        for j in range(s_ptr[i], s_ptr[i + 1]):
            total += s_val[j] * q_sparse[s_idx[j]]
    if use[2]:
        for j in range(b_ptr[i], b_ptr[i + 1]):
            total += b_val[j] * q_lexical[b_idx[j]]
    return total


@njit(cache=True)
def _better(score, row, other_score, other_row) -> bool:
    return score > other_score or (score == other_score and row < other_row)


@njit(cache=True)
def _insert(ids, scores, explored, size, row, score) -> int:
    """Insert into a best-first array of fixed capacity (explored flags move with their entries); the new size."""
    capacity = len(ids)
    if size == capacity and not _better(score, row, scores[size - 1], ids[size - 1]):
        return size
    position = min(size, capacity - 1)
    while position > 0 and _better(score, row, scores[position - 1], ids[position - 1]):
        if position < capacity:
            ids[position], scores[position], explored[position] = ids[position - 1], scores[position - 1], explored[position - 1]
        position -= 1
    ids[position], scores[position], explored[position] = row, score, False
    return min(size + 1, capacity)


@njit(cache=True)
def _holds(i, required, b_ptr, b_idx, every) -> bool:
    """Node ``i``'s tokens contain every (``every``) or any required token; both lists sorted."""
    tokens = b_idx[b_ptr[i] : b_ptr[i + 1]]
    found, j = 0, 0
    for t in required:
        while j < len(tokens) and tokens[j] < t:
            j += 1
        if j < len(tokens) and tokens[j] == t:
            found += 1
            if not every:
                return True
        elif every:
            return False
    return found == len(required) if every else False


@njit(cache=True)
def _node_hop(v, ne_ptr, ne_idx, ent_hop) -> int:
    """The least hop of node ``v``'s entities, −1 when none was reached."""
    best = -1
    for j in range(ne_ptr[v], ne_ptr[v + 1]):
        h = ent_hop[ne_idx[j]]
        if h >= 0 and (best < 0 or h < best):
            best = h
    return best


@njit(cache=True)
def _reward(v, kg, ent_hop, kg_weight) -> float:
    """§4.2.3's KG reward of node ``v``: ``kg_weight / max(hop, 1)`` within the hop limit, else 0."""
    if len(ent_hop) == 0:
        return 0.0
    h = _node_hop(v, kg[0], kg[1], ent_hop)
    return kg_weight / max(h, 1) if h >= 0 else 0.0


@njit(cache=True)
def _holders_of(entities, en_ptr, en_idx):
    """The nodes holding any of ``entities``, one after the other (repeats kept; the walk skips them)."""
    total = 0
    for e in entities:
        total += en_ptr[e + 1] - en_ptr[e]
    out = np.empty(total, np.int32)
    count = 0
    for e in entities:
        for r in range(en_ptr[e], en_ptr[e + 1]):
            out[count] = en_idx[r]
            count += 1
    return out


@njit(cache=True)
def _logical(u, kg, ent_hop, kg_hops):
    """The nodes ``u``'s logical edges reach (§3.4), from its entities within ``kg_hops − 1`` hops only;
    a hub (held by more than ``HUB_NODES`` nodes) opens none and is reached by none, as in the
    ``logical_edges`` asset."""
    ne_ptr, ne_idx, en_ptr, en_idx, ee_ptr, ee_idx = kg
    targets = [np.int64(x) for x in range(0)]
    for j in range(ne_ptr[u], ne_ptr[u + 1]):
        e = ne_idx[j]
        if 0 <= ent_hop[e] < kg_hops and en_ptr[e + 1] - en_ptr[e] <= HUB_NODES:
            for i in range(ee_ptr[e], ee_ptr[e + 1]):
                t = ee_idx[i]
                if en_ptr[t + 1] - en_ptr[t] <= HUB_NODES:
                    targets.append(np.int64(t))
    return _holders_of(np.array(targets, dtype=np.int64), en_ptr, en_idx)


@njit(cache=True)
def _holding_seeds(kg, ent_hop):
    """The nodes holding a query entity (hop 0)."""
    return _holders_of(np.flatnonzero(ent_hop == 0), kg[2], kg[3])


@njit(cache=True)
def _opened(u, part, entry, semantic, keyword, constrained, required, b_ptr, b_idx, logical, kg, ent_hop, kg_hops):
    """The nodes ``u`` opens in ``part`` of its expansion (none: an empty array). From the start
    (``u`` −1): the entry points, then the nodes holding a query entity; from a node: its semantic edges,
    its keyword edges where it holds a required token, and its ``logical`` edges within ``kg_hops − 1``
    hops of a query entity."""
    if u < 0:
        if part == 0:
            return entry
        if part == 1 and len(ent_hop) > 0:
            return _holding_seeds(kg, ent_hop)
    elif part == 0:
        return semantic[u]
    elif part == 1:
        if constrained and _holds(u, required, b_ptr, b_idx, False):
            return keyword[u]
    elif logical and 0 <= _node_hop(u, kg[0], kg[1], ent_hop) < kg_hops:
        return _logical(u, kg, ent_hop, kg_hops)
    return entry[:0]


@njit(cache=True, nogil=True)
def _search(
    q_dense,
    q_sparse,
    q_lexical,
    use,
    dense,
    s_ptr,
    s_idx,
    s_val,
    b_ptr,
    b_idx,
    b_val,
    semantic,
    keyword,
    entry,
    deleted,
    required,
    allowed,
    pool_size,
    k,
    visited,
    stamp,
    kg,
    ent_hop,
    kg_weight,
    kg_hops,
    kg_edges,
):
    """Algorithm 2: best-first over the semantic edges with a pool of ``pool_size``; the top ``k`` live
    nodes seen. With ``required`` keyword tokens, only nodes holding all of them are returned, and a node
    holding any of them also opens its keyword edges (§4.2.2's dynamic keyword-edge loading). With an
    ``allowed`` mask (a metadata filter; empty: every node), only allowed nodes are returned, while the
    walk goes through every node, so that the graph stays connected however few are allowed. With the
    query's entity hops (``ent_hop``, empty without a KG query; ``kg`` the node→entity, entity→node and
    entity-graph CSR arrays), every node scores its KG reward, the nodes holding a query entity join the
    entry points, and a node within ``kg_hops − 1`` hops opens its logical edges (``kg_edges``)."""
    constrained = len(required) > 0
    filtered = len(allowed) > 0
    use_kg = len(ent_hop) > 0
    pool_ids = np.full(pool_size, -1, np.int64)
    pool_scores = np.full(pool_size, -np.inf)
    explored = np.zeros(pool_size, np.bool_)
    best_ids = np.full(k, -1, np.int64)
    best_scores = np.full(k, -np.inf)
    best_flags = np.zeros(k, np.bool_)
    size, found = 0, 0
    u = -1
    while True:
        for part in range(3):
            edges = _opened(u, part, entry, semantic, keyword, constrained, required, b_ptr, b_idx, use_kg and kg_edges, kg, ent_hop, kg_hops)
            for v in edges:
                if v < 0 or visited[v] == stamp:
                    continue
                visited[v] = stamp
                s = _score(v, q_dense, q_sparse, q_lexical, use, dense, s_ptr, s_idx, s_val, b_ptr, b_idx, b_val)
                if use_kg:
                    s += _reward(v, kg, ent_hop, kg_weight)
                size = _insert(pool_ids, pool_scores, explored, size, v, s)
                if not deleted[v] and (not filtered or allowed[v]) and (not constrained or _holds(v, required, b_ptr, b_idx, True)):
                    found = _insert(best_ids, best_scores, best_flags, found, v, s)
        u = -1
        for i in range(size):
            if not explored[i]:
                explored[i] = True
                u = pool_ids[i]
                break
        if u < 0:
            break
    return best_ids[:found], best_scores[:found]


class Searcher:
    """Searches one index with one set of vectors; keeps the visited stamps between queries, one array per
    thread, so that a batch's queries walk on a thread each (the walk releases the GIL) without sharing them."""

    device = "cpu"

    def __init__(self, graph: HybridGraph, vectors: HybridVectors, fallback: str | None = None) -> None:
        """``fallback``: why it walks here though a CUDA device was chosen (said in every search's notes)."""
        self.graph, self.vectors, self.fallback = graph, vectors, fallback
        self._thread = threading.local()  # visited (a stamp per row) and the last stamp used, per thread
        kg = graph.kg
        matrices = (kg.node_entities, kg.holders, kg.undirected) if kg is not None else (sp.csr_matrix((0, 0)),) * 3
        self.kg_arrays = tuple(a for m in matrices for a in (m.indptr.astype(np.int64), m.indices.astype(np.int32)))

    def search(self, queries: Queries, k: int, params: HybridParams = HybridParams()) -> Ranking:
        """A ``Ranking`` in the kernels' vocabulary (``kernels/results.py``): per query the top ``k``
        live rows by ``Σ weights[p]·sim_p`` plus its KG reward, of those holding its required tokens and
        allowed by the batch's filter (``params``)."""
        n = len(queries)
        required, kg = params.per_query(n)
        if any(item is not None for item in kg) and self.graph.kg is None:
            raise ValueError("this hybrid graph was built without a knowledge graph (kg: none)")
        scores, rows = filled(n, k)
        k = max(1, min(k, len(self.vectors)))
        pool_size = max(k, min(params.pool, len(self.vectors)))
        weights, allowed = np.asarray(params.weights, dtype=np.float64), params.mask

        def one(i: int) -> None:
            found, values = self._walk(queries.take([i]), weights, pool_size, k, required[i], kg[i], allowed)
            rows[i, : len(found)], scores[i, : len(found)] = found, values

        if n < 2 or min(os.cpu_count() or 1, MAX_THREADS) < 2:
            for i in range(n):
                one(i)
        else:
            list(_walkers().map(one, range(n)))
        return Ranking(scores, rows)

    def _walk(self, query: Queries, weights: np.ndarray, pool_size: int, k: int, required: np.ndarray | None, kg: KGQuery | None, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """One query's walk: its found rows and scores, best first."""
        vectors = self.vectors
        use = weights != 0
        q_dense = (weights[0] * query.dense[0]).astype(np.float32)
        q_sparse = _scatter(query.sparse, weights[1], vectors.sparse.shape[1])
        q_lexical = _scatter(query.lexical, weights[2], vectors.lexical.shape[1])
        visited, stamp = self._stamped()
        return _search(
            q_dense,
            q_sparse,
            q_lexical,
            use,
            vectors.dense,
            vectors.sparse.indptr,
            vectors.sparse.indices,
            vectors.sparse.data,
            vectors.lexical.indptr,
            vectors.lexical.indices,
            vectors.lexical.data,
            self.graph.semantic,
            self.graph.keyword,
            self.graph.entry,
            self.graph.deleted,
            np.sort(np.asarray(required if required is not None else [], dtype=np.int32)),
            np.zeros(0, np.bool_) if allowed is None else allowed,
            pool_size,
            k,
            visited,
            stamp,
            self.kg_arrays,
            np.zeros(0, np.int32) if kg is None else kg.entity_hops.astype(np.int32),
            0.0 if kg is None else float(kg.weight),
            3 if kg is None else int(kg.hops),
            kg is not None and kg.edges,
        )

    def _stamped(self) -> tuple[np.ndarray, int]:
        """This thread's visited array and a stamp no earlier search of it used."""
        local = self._thread
        if getattr(local, "visited", None) is None or len(local.visited) != len(self.vectors):
            local.visited, local.stamp = np.zeros(len(self.vectors), np.int64), 0
        local.stamp += 1
        return local.visited, local.stamp


def _scatter(row, weight: float, width: int) -> np.ndarray:
    """A one-row sparse query as a dense array, times its weight (empty when the weight is 0: the path
    is then never read, and a vocabulary-wide allocation per query is a measurable share of a search)."""
    if not weight:
        return np.zeros(0, np.float32)
    dense = np.zeros(width, np.float32)
    dense[row.indices] = weight * row.data
    return dense
