"""The hybrid build's k-NN lists without comparing every pair: candidates from one index per path,
re-scored with the fused metric.

Exact k-NN costs ``N²`` fused products (about 40 minutes for 100k nodes on one core) and NN-Descent's
many small joins are slower still on a CPU. A node's fused neighbours are, nearly always, among the
best neighbours of at least one path, and every path has a cheap index of its own:

- dense: faiss HNSW under inner product, its ``DENSE`` best;
- SPLADE and BM25: impact-ordered posting lists cut to the ``POSTINGS`` heaviest nodes per term (static
  index pruning), walked term at a time for the node's ``TERMS`` heaviest terms, their ``SPARSE`` best.

The union is re-scored exactly with the calibrated fused inner product and its best ``k`` kept, ties
by row as the exact lists are; then one round of NN-Descent's idea, a neighbour's neighbour is likely
a neighbour: each list is joined with the lists of its ``REFINE`` best and re-scored (recall 0.946 →
0.989 on 2,265 real nodes). Cost is ``N · (DENSE + 2·SPARSE + (REFINE + 1)·k)`` fused products plus the
per-path searches: near-linear in ``N``. faiss builds its HNSW graph on several threads, so the lists can
differ between runs in the last places; the build records their recall against exact lists on a
seeded sample (``graph.knn_recall``).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from numba import get_num_threads, njit, prange

from graphlake.kernels.hybrid.pairs import pair_inner_product
from graphlake.kernels.hybrid.vectors import HybridVectors, Queries

# Widths chosen on the 94,874-node windows corpus (benchmarks/results/hybrid_scale.md): the union of
# the paths' candidates held 0.84 of the exact neighbours at 96 / 64 / 24 / 512 (recall 0.922 after
# the refine round), 0.96 at these (recall 0.978), for about twice the k-NN seconds.
DENSE = 192  # dense candidates per node
SPARSE = 128  # candidates per node from each sparse path
TERMS = 32  # a node's heaviest terms walked per sparse path
POSTINGS = 1024  # nodes kept per term, the heaviest
REFINE = 8  # best neighbours whose lists each list is joined with
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 128


def candidate_knn(
    vectors: HybridVectors,
    nodes: Queries,
    scales: np.ndarray,
    k: int,
    operands: tuple,
    rows: np.ndarray | None = None,
    excluded: np.ndarray | None = None,
    lists: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Each node's ``k`` best other nodes among its candidates (ids, float32 fused scores, best first,
    ties by row, −1 pads a short list), and the seconds of each stage. ``operands``: the pruning's
    ``row_operands`` (how any pair is scored).

    An insert asks for its new ``rows`` only: their candidates are every node but the ``excluded``
    (a boolean mask), the dense ones exact (a batch against every node costs a share of the whole
    build, where an HNSW graph costs the whole corpus), and the refine round joins the other nodes'
    ``lists`` (their graph edges, ``(N, width)``) with the new rows' own first lists."""
    n = len(vectors)
    selves = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    seconds = {}
    started = time.perf_counter()
    found = [dense_candidates(vectors.dense, DENSE, None if rows is None else selves)]
    seconds["dense"] = time.perf_counter() - started
    for name, queries, stored in (("sparse", nodes.sparse, vectors.sparse), ("lexical", nodes.lexical, vectors.lexical)):
        started = time.perf_counter()
        found.append(sparse_candidates(queries if rows is None else queries[selves], stored, SPARSE, selves))
        seconds[name] = time.perf_counter() - started
    started = time.perf_counter()
    ids, _ = rescore(_allowed(np.concatenate(found, axis=1), excluded), selves, k, *operands[:-1])
    seconds["rescore"] = time.perf_counter() - started
    started = time.perf_counter()
    table = ids if rows is None else _with_rows(lists, selves, ids)
    joined = np.where(ids[:, :REFINE, None] >= 0, table[np.maximum(ids[:, :REFINE], 0)], -1).reshape(len(ids), -1)
    ids, sims = rescore(_allowed(np.concatenate([ids, joined], axis=1), excluded), selves, k, *operands[:-1])
    seconds["refine"] = time.perf_counter() - started
    return ids, sims, {"seconds": {key: round(value, 3) for key, value in seconds.items()}}


def _allowed(candidates: np.ndarray, excluded: np.ndarray | None) -> np.ndarray:
    """``candidates`` with the ``excluded`` nodes blanked (−1)."""
    if excluded is None:
        return candidates
    return np.where((candidates >= 0) & ~excluded[np.maximum(candidates, 0)], candidates, -1).astype(np.int32)


def _with_rows(lists: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The other nodes' ``lists`` with ``rows``' own first lists written in (cut to the same width)."""
    table = lists.astype(np.int32, copy=True)
    width = min(table.shape[1], ids.shape[1])
    table[rows] = -1
    table[rows, :width] = ids[:, :width]
    return table


def dense_candidates(dense: np.ndarray, count: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Each row's (or each of ``rows``') ``count`` best other rows by inner product (−1 pads): from a
    faiss HNSW graph over every row, or exactly for ``rows`` against every row. faiss is imported here:
    the batched (cupy) build never comes this way, and a GPU machine need not have faiss."""
    import faiss

    n = len(dense)
    stored = np.ascontiguousarray(dense, dtype=np.float32)
    if rows is not None:
        _, found = faiss.knn(np.ascontiguousarray(stored[rows]), stored, min(count + 1, n), faiss.METRIC_INNER_PRODUCT)
        return _without_self(found.astype(np.int32), count, rows)
    index = faiss.IndexHNSWFlat(dense.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.add(stored)
    index.hnsw.efSearch = max(HNSW_EF_SEARCH, count + 1)
    _, found = index.search(stored, min(count + 1, n))
    return _without_self(found.astype(np.int32), count, np.arange(n))


def sparse_candidates(queries: sp.csr_matrix, stored: sp.csr_matrix, count: int, selves: np.ndarray) -> np.ndarray:
    """Each query row's ``count`` best stored rows through pruned posting lists (−1 pads); query ``i``
    is stored row ``selves[i]``, never its own candidate."""
    postings = pruned_postings(stored, POSTINGS)
    bound = np.zeros(stored.shape[1], np.float32)  # the heaviest weight of each term: what a term can add at most
    has = np.diff(postings.indptr) > 0
    bound[has] = postings.data[postings.indptr[:-1][has]]
    return _walk(
        queries.indptr,
        queries.indices,
        queries.data.astype(np.float32),
        postings.indptr,
        postings.indices,
        postings.data,
        bound,
        len(stored.indptr) - 1,
        count,
        TERMS,
        get_num_threads(),
        np.asarray(selves, dtype=np.int64),
    )


def pruned_postings(stored: sp.csr_matrix, keep: int) -> sp.csc_matrix:
    """The stored weights by term, each term's list cut to its ``keep`` heaviest rows, heaviest first."""
    postings = sp.csc_matrix(stored, dtype=np.float32)
    indptr, indices, data = _cut(postings.indptr, postings.indices, postings.data, keep)
    return sp.csc_matrix((data, indices, indptr), shape=stored.shape)


@njit(cache=True)
def _cut(indptr, indices, data, keep):
    counts = np.minimum(np.diff(indptr), keep)
    out_ptr = np.zeros(len(indptr), np.int64)
    out_ptr[1:] = np.cumsum(counts)
    out_idx = np.empty(out_ptr[-1], indices.dtype)
    out_val = np.empty(out_ptr[-1], np.float32)
    for t in range(len(indptr) - 1):
        a, b = indptr[t], indptr[t + 1]
        order = np.argsort(-data[a:b], kind="mergesort")[: counts[t]]
        out_idx[out_ptr[t] : out_ptr[t + 1]] = indices[a:b][order]
        out_val[out_ptr[t] : out_ptr[t + 1]] = data[a:b][order]
    return out_ptr, out_idx, out_val


@njit(cache=True, parallel=True)
def _walk(q_ptr, q_idx, q_val, p_ptr, p_idx, p_val, bound, n, count, terms, threads, selves):
    """Term-at-a-time accumulation over the ``terms`` heaviest terms of each query row (by weight times
    the term's heaviest posting), one score array per thread; each row's ``count`` best, ties by row."""
    rows = len(q_ptr) - 1
    out = np.full((rows, count), -1, np.int32)
    step = (rows + threads - 1) // threads
    for chunk in prange(threads):
        scores = np.zeros(n, np.float32)
        touched = np.empty(n, np.int64)
        for i in range(chunk * step, min(rows, (chunk + 1) * step)):
            a, b = q_ptr[i], q_ptr[i + 1]
            reach = q_val[a:b] * bound[q_idx[a:b]]
            heaviest = np.argsort(-reach, kind="mergesort")[:terms]
            m = 0
            for j in heaviest:
                t, w = q_idx[a + j], q_val[a + j]
                for p in range(p_ptr[t], p_ptr[t + 1]):
                    row = p_idx[p]
                    if scores[row] == 0.0:
                        touched[m] = row
                        m += 1
                    scores[row] += w * p_val[p]
            found = touched[:m]
            values = np.empty(m, np.float32)
            for r in range(m):
                values[r] = -scores[found[r]] if found[r] != selves[i] else np.inf
                scores[found[r]] = 0.0
            if m > 0:
                order = np.argsort(values, kind="mergesort")  # stable: equal scores keep first-touched order
                taken = 0
                for r in order:
                    if taken == count or values[r] == np.inf:
                        break
                    out[i, taken] = found[r]
                    taken += 1
    return out


def _without_self(found: np.ndarray, count: int, selves: np.ndarray) -> np.ndarray:
    """Drop each row's own id (``selves[i]``) and faiss's −1 pads from its list, keeping ``count``."""
    out = np.full((len(found), count), -1, np.int32)
    for i, row in enumerate(found):
        kept = row[(row != selves[i]) & (row >= 0)][:count]
        out[i, : len(kept)] = kept
    return out


@njit(cache=True, parallel=True)
def rescore(candidates, selves, k, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f):
    """Each row's distinct candidates scored with the calibrated fused inner product against node
    ``selves[w]``; its ``k`` best (best first, ties by lower row), −1 and −inf past the last."""
    n = len(candidates)
    ids = np.full((n, k), -1, np.int32)
    sims = np.full((n, k), -np.inf, np.float32)
    for w in prange(n):
        row = selves[w]
        pool = np.unique(candidates[w])
        pool = pool[(pool >= 0) & (pool != row)]
        scores = np.empty(len(pool))
        for j in range(len(pool)):
            scores[j] = -pair_inner_product(row, pool[j], dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f)
        order = np.argsort(scores, kind="mergesort")[:k]  # pool is sorted, so ties go to the lower row
        for j in range(len(order)):
            ids[w, j] = pool[order[j]]
            sims[w, j] = -scores[order[j]]
    return ids, sims
