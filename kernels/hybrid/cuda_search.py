"""Allan-Poe's hybrid graph search as one CUDA kernel (§4.1, CAGRA's design): a thread block walks one
query at a time, best first over the semantic (and, for a keyword-constrained query, keyword) edges, with
its candidate pool, its top ``k`` and a visited hash in shared memory. Dense rows are read in float16
(float32 with ``half=False``), SPLADE and BM25 rows as CSR; each query's sparse parts are scattered once
into the block's own dense buffer, so a node's sparse score is one gather per stored entry. The whole
walk is one launch for a batch of any size, from 1 to 10,000 queries.

It returns what the numba searcher (``graph.Searcher``) returns on the same vectors: the same rows in the
same order, scores within float tolerance (the sums run in another order). Two properties make that hold
though threads find candidates in any order and the hash is bounded:

* the pool and the top ``k`` are merged as sets under the searcher's total order (higher score, then the
  lower row), so the result of an expansion does not depend on which thread scored what first;
* the visited hash forgets (a node whose probe sequence is full counts as new): a node seen again is
  scored again but never enters the pool or the top ``k`` twice (both are checked for it), and a node
  the pool dropped cannot come back, because the pool's worst score only rises once it is full.

Written for numba's CUDA target; ``NUMBA_ENABLE_CUDASIM=1`` (set before numba is imported) runs it on
the CPU, which is how the tests check it without a GPU. The KG walk of the numba searcher (logical
edges, the KG reward) is not in the kernel: it searches without a KG query.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba import config, cuda, float32, int8, int32, int64

from graphlake.kernels.hybrid.graph_index import HybridGraph, Searcher
from graphlake.kernels.hybrid.vectors import HybridParams, HybridVectors, Queries
from graphlake.kernels.results import FILL_ROW, FILL_SCORE, Ranking, filled

POOL_MAX = 256  # the largest candidate pool (L) a block holds
K_MAX = 128  # the largest k
EDGES_MAX = 64  # the most edges one expansion reads: semantic + keyword degree, or the entry points
DIM_MAX = 1024  # the largest dense dimension (the query's dense part is kept in shared memory)
THREADS_MAX = 256  # threads per block
HASH_SLOTS = 4096  # the visited hash (a power of two)
PROBES = 16  # linear probes before the hash forgets a node
TEAM = 8  # threads that score one candidate together (lanes over dimensions and stored entries)
LANE_SUMS = EDGES_MAX * TEAM  # a literal for the shared array: numba-cuda sizes those by constants only
BLOCKS_PER_SM = 4
# the shared ``state`` slots
SIZE, FOUND, COUNT, NODE, NEXT, OPENS, SCORED = range(7)


@cuda.jit(device=True)
def _first_visit(seen, v) -> bool:
    """Marks ``v`` visited; whether it was not (or the hash forgot: a full probe sequence)."""
    start = (int64(v) * int64(2654435761)) % HASH_SLOTS
    for p in range(PROBES):
        old = cuda.atomic.cas(seen, (start + p) % HASH_SLOTS, int32(-1), int32(v))
        if old == -1:
            return True
        if old == v:
            return False
    return True


@cuda.jit(device=True)
def _holds(i, r_idx, r_start, r_stop, b_ptr, b_idx, every) -> bool:
    """Node ``i``'s BM25 tokens contain every (``every``) or any of the query's required tokens (both sorted)."""
    j, stop, found = b_ptr[i], b_ptr[i + 1], 0
    for r in range(r_start, r_stop):
        t = r_idx[r]
        while j < stop and b_idx[j] < t:
            j += 1
        if j < stop and b_idx[j] == t:
            found += 1
            if not every:
                return True
        elif every:
            return False
    return found == r_stop - r_start if every else False


@cuda.jit(device=True)
def _better(score, row, other_score, other_row) -> bool:
    return score > other_score or (score == other_score and row < other_row)


@cuda.jit(device=True)
def _merge(t, threads, ids, scores, flags, size, capacity, cand_id, cand_sc, ok, count, tmp_id, tmp_sc, tmp_fl):
    """Writes into ``tmp_*`` the best ``capacity`` of the sorted list ``ids[:size]`` and the candidates
    flagged ``ok`` (as unexplored), each at its rank; returns the merged size. Every thread calls it."""
    for i in range(t, size, threads):
        rank = i
        for c in range(count):
            if ok[c] and _better(cand_sc[c], cand_id[c], scores[i], ids[i]):
                rank += 1
        if rank < capacity:
            tmp_id[rank], tmp_sc[rank], tmp_fl[rank] = ids[i], scores[i], flags[i]
    added = 0
    for c in range(count):
        if ok[c]:
            added += 1
    for c in range(t, count, threads):
        if ok[c]:
            rank = 0
            for i in range(size):
                if _better(scores[i], ids[i], cand_sc[c], cand_id[c]):
                    rank += 1
            for o in range(count):
                if ok[o] and _better(cand_sc[o], cand_id[o], cand_sc[c], cand_id[c]):
                    rank += 1
            if rank < capacity:
                tmp_id[rank], tmp_sc[rank], tmp_fl[rank] = cand_id[c], cand_sc[c], 0
    return min(size + added, capacity)


@cuda.jit(device=True)
def _scatter(t, threads, block, q, ptr, idx, val, scratch, clear):
    """Query ``q``'s sparse vector into the block's dense scratch row (``clear``: its entries back to zero)."""
    for j in range(ptr[q] + t, ptr[q + 1], threads):
        scratch[block, idx[j]] = float32(0.0) if clear else val[j]


@cuda.jit(device=True)
def _lane_total(v, lane, q, use, query, dense, s_ptr, s_idx, s_val, b_ptr, b_idx, b_val, sparse_query, lexical_query):
    """One lane's share of node ``v``'s fused score: every ``TEAM``-th entry of each path ``use`` switches on."""
    total = float32(0.0)
    if use[q, 0]:
        for d in range(lane, dense.shape[1], TEAM):
            total += float32(dense[v, d]) * query[d]
    if use[q, 1]:
        for j in range(s_ptr[v] + lane, s_ptr[v + 1], TEAM):
            total += s_val[j] * sparse_query[s_idx[j]]
    if use[q, 2]:
        for j in range(b_ptr[v] + lane, b_ptr[v + 1], TEAM):
            total += b_val[j] * lexical_query[b_idx[j]]
    return total


@cuda.jit(device=True)
def _summed(partial, c):
    """Candidate ``c``'s score: its lanes' totals, added in lane order."""
    score = float32(0.0)
    for lane_total in range(c * TEAM, (c + 1) * TEAM):
        score += partial[lane_total]
    return score


@cuda.jit(device=True)
def _first_of(cand_id, c):
    """Whether candidate ``c`` is no repeat of an earlier one."""
    for o in range(c):
        if cand_id[o] == cand_id[c]:
            return False
    return True


@cuda.jit(device=True)
def _among(ids, size, v):
    for i in range(size):
        if ids[i] == v:
            return True
    return False


@cuda.jit(device=True)
def _begin(t, threads, q, q_dense, query, seen):
    """Query ``q``'s dense vector into shared memory, and no node seen yet."""
    for d in range(t, q_dense.shape[1], threads):
        query[d] = q_dense[q, d]
    for i in range(t, HASH_SLOTS, threads):
        seen[i] = -1


@cuda.jit(device=True)
def _gather(t, threads, state, entry, semantic, keyword, seen, cand_id):
    """The candidates of one expansion, each node once per query: the entry points from the start, else the
    expanded node's semantic edges and, where it opens them, its keyword edges."""
    u, n_sem = state[NODE], semantic.shape[1]
    n_edges = entry.shape[0] if u < 0 else n_sem + (keyword.shape[1] if state[OPENS] else 0)
    for e in range(t, n_edges, threads):
        v = entry[e] if u < 0 else (semantic[u, e] if e < n_sem else keyword[u, e - n_sem])
        if v >= 0 and _first_visit(seen, v):
            cand_id[cuda.atomic.add(state, COUNT, 1)] = v


@cuda.jit(device=True)
def _expand_next(state, kept, pool_id, pool_ex, constrained, r_idx, r_start, r_stop, b_ptr, b_idx):
    """(One thread) the next node to expand, the best unexplored one of the pool (none: the walk ends),
    and whether it opens its keyword edges."""
    i = state[NEXT]
    state[NODE], state[COUNT] = -1, 0
    if i < kept:
        pool_ex[i] = 1
        state[NODE] = pool_id[i]
        state[OPENS] = 1 if constrained and _holds(pool_id[i], r_idx, r_start, r_stop, b_ptr, b_idx, False) else 0


@cuda.jit(device=True)
def _answer(t, threads, q, state, best_id, best_sc, out_ids, out_scores, out_found, out_scored):
    found = state[FOUND]
    for i in range(t, found, threads):
        out_ids[q, i], out_scores[q, i] = best_id[i], best_sc[i]
    if t == 0:
        out_found[q], out_scored[q] = found, state[SCORED]


@cuda.jit
def _walk(
    q_dense, qs_ptr, qs_idx, qs_val, ql_ptr, ql_idx, ql_val, use, r_ptr, r_idx,
    dense, s_ptr, s_idx, s_val, b_ptr, b_idx, b_val, semantic, keyword, entry, deleted,
    pool_size, k, scratch_s, scratch_l, out_ids, out_scores, out_found, out_scored,
):  # fmt: skip
    """One block per query at a time (see the module's docstring); ``out_*`` per query: rows, scores, their
    count, and the nodes scored."""
    pool_id = cuda.shared.array(POOL_MAX, int32)
    pool_sc = cuda.shared.array(POOL_MAX, float32)
    pool_ex = cuda.shared.array(POOL_MAX, int8)
    best_id = cuda.shared.array(K_MAX, int32)
    best_sc = cuda.shared.array(K_MAX, float32)
    best_fl = cuda.shared.array(K_MAX, int8)
    tmp_id = cuda.shared.array(POOL_MAX, int32)
    tmp_sc = cuda.shared.array(POOL_MAX, float32)
    tmp_fl = cuda.shared.array(POOL_MAX, int8)
    cand_id = cuda.shared.array(EDGES_MAX, int32)
    cand_sc = cuda.shared.array(EDGES_MAX, float32)
    in_pool = cuda.shared.array(EDGES_MAX, int8)  # may enter the pool: not in it, not a repeat of an earlier candidate
    in_best = cuda.shared.array(EDGES_MAX, int8)  # may enter the top k: returnable and not in it
    seen = cuda.shared.array(HASH_SLOTS, int32)
    top_id = cuda.shared.array(K_MAX, int32)
    top_sc = cuda.shared.array(K_MAX, float32)
    top_fl = cuda.shared.array(K_MAX, int8)
    partial = cuda.shared.array(LANE_SUMS, float32)  # each candidate's lanes' sums
    query = cuda.shared.array(DIM_MAX, float32)
    state = cuda.shared.array(8, int32)

    t, threads, block = cuda.threadIdx.x, cuda.blockDim.x, cuda.blockIdx.x
    teams = threads // TEAM
    team, lane = t // TEAM, t % TEAM
    for q in range(block, q_dense.shape[0], cuda.gridDim.x):
        _scatter(t, threads, block, q, qs_ptr, qs_idx, qs_val, scratch_s, False)
        _scatter(t, threads, block, q, ql_ptr, ql_idx, ql_val, scratch_l, False)
        _begin(t, threads, q, q_dense, query, seen)
        r_start, r_stop = r_ptr[q], r_ptr[q + 1]
        constrained = r_stop > r_start
        if t == 0:
            state[SIZE], state[FOUND], state[NODE], state[OPENS], state[COUNT], state[SCORED] = 0, 0, -1, 0, 0, 0
        cuda.syncthreads()
        while True:  # one expansion: six barriers, whatever the number of candidates
            _gather(t, threads, state, entry, semantic, keyword, seen, cand_id)
            cuda.syncthreads()
            count, size, found = state[COUNT], state[SIZE], state[FOUND]
            for c in range(team, count, teams):  # each team scores its candidates, its lanes over the entries
                partial[c * TEAM + lane] = _lane_total(cand_id[c], lane, q, use, query, dense, s_ptr, s_idx, s_val, b_ptr, b_idx, b_val, scratch_s[block], scratch_l[block])
            cuda.syncthreads()
            for c in range(t, count, threads):  # each candidate's score, and whether it may enter the pool, the top k
                cand_sc[c] = _summed(partial, c)
                v = cand_id[c]
                fresh = _first_of(cand_id, c)
                listed = fresh and not deleted[v] and (not constrained or _holds(v, r_idx, r_start, r_stop, b_ptr, b_idx, True))
                in_pool[c], in_best[c] = fresh and not _among(pool_id, size, v), listed and not _among(best_id, found, v)
            if t == 0:
                state[NEXT] = POOL_MAX
            cuda.syncthreads()
            kept = _merge(t, threads, pool_id, pool_sc, pool_ex, size, pool_size, cand_id, cand_sc, in_pool, count, tmp_id, tmp_sc, tmp_fl)
            live = _merge(t, threads, best_id, best_sc, best_fl, found, k, cand_id, cand_sc, in_best, count, top_id, top_sc, top_fl)
            cuda.syncthreads()
            for i in range(t, kept, threads):
                pool_id[i], pool_sc[i], pool_ex[i] = tmp_id[i], tmp_sc[i], tmp_fl[i]
                if tmp_fl[i] == 0:  # the next node to expand: the best unexplored one
                    cuda.atomic.min(state, NEXT, int32(i))
            for i in range(t, live, threads):
                best_id[i], best_sc[i] = top_id[i], top_sc[i]
            if t == 0:
                state[SIZE], state[FOUND], state[SCORED] = kept, live, state[SCORED] + count
            cuda.syncthreads()
            if t == 0:
                _expand_next(state, kept, pool_id, pool_ex, constrained, r_idx, r_start, r_stop, b_ptr, b_idx)
            cuda.syncthreads()
            if state[NODE] < 0:
                break
        _answer(t, threads, q, state, best_id, best_sc, out_ids, out_scores, out_found, out_scored)
        _scatter(t, threads, block, q, qs_ptr, qs_idx, qs_val, scratch_s, True)  # the block's buffers back to zeros for its next query
        _scatter(t, threads, block, q, ql_ptr, ql_idx, ql_val, scratch_l, True)
        cuda.syncthreads()


class Found(NamedTuple):
    """A batch's results: ``(b, k)`` rows (−1 past each query's count) and scores, the counts, and how many
    nodes each query scored (what it read: the bandwidth floor's measure)."""

    rows: np.ndarray
    scores: np.ndarray
    counts: np.ndarray
    scored: np.ndarray


class CudaSearcher:
    """One hybrid graph and its vectors on the device, searched by the kernel a batch at a time."""

    def __init__(self, graph: HybridGraph, vectors: HybridVectors, half: bool = True, threads: int = 128) -> None:
        if not cuda.is_available():
            raise RuntimeError("no CUDA device here; NUMBA_ENABLE_CUDASIM=1 (set before numba is imported) runs the kernel on the CPU")
        if graph.semantic.shape[1] + graph.keyword.shape[1] > EDGES_MAX or len(graph.entry) > EDGES_MAX:
            raise ValueError(f"the kernel reads at most {EDGES_MAX} edges per expansion (semantic + keyword degree, entry points)")
        if vectors.dense.shape[1] > DIM_MAX or not TEAM <= threads <= THREADS_MAX or threads % TEAM:
            raise ValueError(f"dense dimension at most {DIM_MAX}; threads a multiple of {TEAM} up to {THREADS_MAX}")
        self.threads, self.half = threads, half
        self.widths = (vectors.sparse.shape[1], vectors.lexical.shape[1])
        self.dense = cuda.to_device(np.ascontiguousarray(vectors.dense, dtype=np.float16 if half else np.float32))
        self.sparse = _csr_to_device(vectors.sparse)
        self.lexical = _csr_to_device(vectors.lexical)
        self.semantic = cuda.to_device(np.ascontiguousarray(graph.semantic, dtype=np.int32))
        self.keyword = cuda.to_device(np.ascontiguousarray(graph.keyword, dtype=np.int32))
        self.entry = cuda.to_device(np.ascontiguousarray(graph.entry, dtype=np.int32))
        self.deleted = cuda.to_device(np.asarray(graph.deleted, dtype=np.uint8))
        self.blocks = BLOCKS_PER_SM * _multiprocessors()

    def search(self, queries: Queries, k: int, params: HybridParams = HybridParams()) -> Ranking:
        """A ``Ranking`` in the kernels' vocabulary (``kernels/results.py``): see :meth:`walk`. The
        kernel takes no filter and no KG part (``DeviceSearcher`` walks those on the CPU)."""
        if params.allowed is not None or any(item is not None for item in params.kg or ()):
            raise ValueError("the CUDA kernel searches neither a filter nor a KG part: DeviceSearcher walks those on the CPU")
        found = self.walk(queries, params.weights, params.pool, k, params.required)
        return Ranking.of(np.where(found.rows >= 0, found.scores, FILL_SCORE), np.where(found.rows >= 0, found.rows, FILL_ROW))

    def walk(self, queries: Queries, weights: np.ndarray, pool_size: int, k: int, required: list[np.ndarray | None] | None = None) -> Found:
        """Top ``k`` live rows per query by ``Σ weights[p]·sim_p`` (``weights`` calibrated, ``(3,)`` or one row
        per query); with ``required`` (per query, BM25 token ids or None), only rows holding all of them;
        with the counts and how many nodes each query scored."""
        b = len(queries)
        pool = max(pool_size, k)
        if pool > POOL_MAX or k > K_MAX:
            raise ValueError(f"the kernel's pool holds at most {POOL_MAX} nodes and returns at most {K_MAX}")
        weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), (b, 3))
        q_dense = (weights[:, :1] * queries.dense).astype(np.float32)
        q_sparse, q_lexical = (_weighted(part, weights[:, p]) for p, part in ((1, queries.sparse), (2, queries.lexical)))
        tokens = [np.sort(np.asarray(r if r is not None else (), dtype=np.int32)) for r in (required if required is not None else [()] * b)]
        r_ptr = np.concatenate([[0], np.cumsum([len(r) for r in tokens])]).astype(np.int64)
        r_idx = np.concatenate([*tokens, np.zeros(1, np.int32)])  # one unread entry: never an empty device array
        blocks = max(1, min(b, self.blocks))
        out_ids = cuda.to_device(np.full((b, k), -1, np.int32))
        out_scores = cuda.to_device(np.full((b, k), np.nan, np.float32))
        out_found, out_scored = cuda.to_device(np.zeros(b, np.int32)), cuda.to_device(np.zeros(b, np.int32))
        _walk[blocks, self.threads](
            cuda.to_device(q_dense), *q_sparse, *q_lexical, cuda.to_device((weights != 0).astype(np.int8)),
            cuda.to_device(r_ptr), cuda.to_device(r_idx), self.dense, *self.sparse, *self.lexical,
            self.semantic, self.keyword, self.entry, self.deleted, pool, k,
            cuda.to_device(np.zeros((blocks, self.widths[0]), np.float32)), cuda.to_device(np.zeros((blocks, self.widths[1]), np.float32)),
            out_ids, out_scores, out_found, out_scored,
        )  # fmt: skip
        return Found(out_ids.copy_to_host().astype(np.int64), out_scores.copy_to_host(), out_found.copy_to_host(), out_scored.copy_to_host())


class DeviceSearcher:
    """A hybrid graph index searched on the CUDA device with the CPU searcher's contract (``graph.Searcher``),
    what the index loader picks where a device is: dense rows in float32, so it returns the CPU searcher's
    rows. A query the kernel does not serve (a KG query, a pool above ``POOL_MAX``, ``k`` above ``K_MAX``) is
    searched by the CPU searcher it holds."""

    device = "cuda"
    fallback = None  # it walks on the device it was chosen for

    def __init__(self, graph: HybridGraph, vectors: HybridVectors) -> None:
        self.graph, self.vectors = graph, vectors
        self.kernel, self.cpu = CudaSearcher(graph, vectors, half=False), Searcher(graph, vectors)

    def search(self, queries: Queries, k: int, params: HybridParams = HybridParams()) -> Ranking:
        """A ``Ranking`` as ``graph.Searcher.search`` returns it; a filtered batch walks on the CPU, as
        the kernel takes no mask, and so does a query with a KG part."""
        n = len(queries)
        required, kg = params.per_query(n)
        if max(params.pool, k) > POOL_MAX or k > K_MAX or params.allowed is not None:
            return self.cpu.search(queries, k, params)
        scores, rows = filled(n, k)
        for on_device, searcher in ((True, self.kernel), (False, self.cpu)):
            picked = np.array([i for i in range(n) if (kg[i] is None) == on_device], dtype=np.int64)
            if not len(picked):
                continue
            part = replace(params, required=[required[i] for i in picked], kg=None if on_device else [kg[i] for i in picked])
            scores[picked], rows[picked] = searcher.search(queries.take(picked), k, part)
        return Ranking(scores, rows)


def cuda_present() -> bool:
    """Whether numba sees a CUDA device (or runs its simulator): where the hybrid graph loads its kernel."""
    return cuda.is_available()


def _weighted(rows: sp.csr_matrix, weights: np.ndarray) -> tuple:
    """The CSR arrays of ``rows`` each times its weight, float32 (as the numba searcher scatters them), on the device."""
    rows = sp.csr_matrix(rows)
    return _csr_to_device(sp.csr_matrix((np.repeat(weights, np.diff(rows.indptr)) * rows.data, rows.indices, rows.indptr), shape=rows.shape))


def _csr_to_device(matrix: sp.csr_matrix) -> tuple:
    return tuple(cuda.to_device(a) for a in (matrix.indptr.astype(np.int64), matrix.indices.astype(np.int32), matrix.data.astype(np.float32)))


def _multiprocessors() -> int:
    """The device's streaming multiprocessors (2 on the simulator, which runs blocks one after another)."""
    if config.ENABLE_CUDASIM:
        return 2
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
