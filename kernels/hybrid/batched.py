"""Allan-Poe's hybrid graph index written once against an array module ``xp`` (numpy or cupy): the GPU
path of §4.1, and its test on CPU. Exact k-NN in blocks, Algorithm 1's pruning vectorised over a block
of nodes, and Algorithm 2 batched the CAGRA way: every query of a batch advances in lock-step, each
expanding its best unexplored pool entry per iteration (``width`` of them to trade recall for fewer
iterations).

Given the same k-NN lists the pruning returns the numba build's arrays exactly (pair scores are exact
float64 products in both), and with ``width=1`` the batched search expands the nodes the numba search
expands, in the same order: after each expansion the pool is the top ``L`` of the old pool and the new
neighbours, whatever the order of insertion. Results can differ only where float32 scores summed in
another order tie differently.

Sparse rows are scored by gathering each candidate's non-zeros, looking the query's scattered dense
row up at their indices and summing per candidate (a segmented sum by ``bincount``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.hybrid.vectors import HybridVectors, Queries

VISITED_BYTES = 2 * 2**30  # the batched search's per-query visited bitmaps, together
BLOCK_BYTES = 512 * 2**20  # a block's largest score or pair array


def array_module(device: str) -> Any:
    """numpy for ``cpu``/``numpy``, cupy for ``cuda`` (the ``gpu`` extra)."""
    if device == "cuda":
        import cupy

        return cupy
    if device in ("cpu", "numpy"):
        return np
    raise ValueError(f"device must be cpu, numpy or cuda, not {device!r}")


def _sparse(xp: Any) -> Any:
    if xp is np:
        return sp
    import cupyx.scipy.sparse

    return cupyx.scipy.sparse


def host(array: Any) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


@dataclass(frozen=True)
class Rows:
    """A CSR matrix as device arrays."""

    indptr: Any
    indices: Any
    data: Any
    width: int

    @classmethod
    def of(cls, xp: Any, matrix: sp.csr_matrix) -> Rows:
        matrix = sp.csr_matrix(matrix, dtype=np.float32)
        matrix.sort_indices()
        return cls(xp.asarray(matrix.indptr.astype(np.int64)), xp.asarray(matrix.indices.astype(np.int64)), xp.asarray(matrix.data), matrix.shape[1])

    def matrix(self, xp: Any, rows: int) -> Any:
        return _sparse(xp).csr_matrix((self.data, self.indices.astype(xp.int32), self.indptr.astype(xp.int32)), shape=(rows, self.width))

    def scatter(self, xp: Any, weight: float) -> Any:
        """The rows as a dense ``(rows, width)`` float32 array times ``weight``."""
        rows = len(self.indptr) - 1
        out = xp.zeros((rows, self.width), xp.float32)
        owner, _ = _segments(xp, xp.diff(self.indptr))
        out[owner, self.indices] = self.data * xp.float32(weight)
        return out


@dataclass(frozen=True)
class DeviceVectors:
    """The stored vectors on the device: dense ``(N, m)`` (float16 if asked), SPLADE and BM25 weights."""

    xp: Any
    dense: Any
    sparse: Rows
    lexical: Rows

    @classmethod
    def of(cls, xp: Any, vectors: HybridVectors, half: bool = False) -> DeviceVectors:
        dense = vectors.dense.astype(np.float16) if half else vectors.dense
        return cls(xp, xp.asarray(dense), Rows.of(xp, vectors.sparse), Rows.of(xp, vectors.lexical))

    def __len__(self) -> int:
        return len(self.dense)


@dataclass(frozen=True)
class QueryBatch:
    """Queries on the device, each path multiplied by its calibrated weight and scattered to a dense
    row; ``None`` for a path weighted 0."""

    dense: Any
    sparse: Any
    lexical: Any

    @classmethod
    def of(cls, xp: Any, queries: Queries, weights: np.ndarray) -> QueryBatch:
        dense = xp.asarray(queries.dense, dtype=xp.float32) * xp.float32(weights[0]) if weights[0] else None
        sparse = Rows.of(xp, queries.sparse).scatter(xp, weights[1]) if weights[1] else None
        lexical = Rows.of(xp, queries.lexical).scatter(xp, weights[2]) if weights[2] else None
        return cls(dense, sparse, lexical)

    def __len__(self) -> int:
        return len(next(part for part in (self.dense, self.sparse, self.lexical) if part is not None))

    def take(self, start: int, stop: int) -> QueryBatch:
        return QueryBatch(*(None if part is None else part[start:stop] for part in (self.dense, self.sparse, self.lexical)))


def _segments(xp: Any, counts: Any) -> tuple[Any, Any]:
    """For ``sum(counts)`` slots laid out segment after segment: each slot's segment and its offset in it."""
    counts = counts.astype(xp.int64)
    ends = xp.cumsum(counts)
    total = int(ends[-1]) if len(counts) else 0
    slots = xp.arange(total)
    segment = xp.searchsorted(ends, slots, side="right")
    return segment, slots - (ends[segment] - counts[segment])


def _gather_rows(xp: Any, rows: Rows, picked: Any) -> tuple[Any, Any, Any]:
    """The non-zeros of rows ``picked`` (−1: none): for each, the position in ``picked``, the column, the value."""
    valid = picked >= 0
    safe = xp.where(valid, picked, 0)
    starts = rows.indptr[safe]
    counts = xp.where(valid, rows.indptr[safe + 1] - starts, 0)
    owner, offset = _segments(xp, counts)
    position = starts[owner] + offset
    return owner, rows.indices[position], rows.data[position]


def score(vectors: DeviceVectors, batch: QueryBatch, queries: Any, candidates: Any) -> Any:
    """``(R, C)`` float32 fused scores of ``candidates`` (rows, −1 for none: −inf) for batch rows ``queries``."""
    xp = vectors.xp
    valid = candidates >= 0
    safe = xp.where(valid, candidates, 0)
    total = xp.zeros(candidates.shape, xp.float32)
    if batch.dense is not None:
        gathered = vectors.dense[safe].astype(xp.float32, copy=False)
        total += xp.matmul(gathered, batch.dense[queries][:, :, None])[:, :, 0]
    width = candidates.shape[1]
    for rows, scattered in ((vectors.sparse, batch.sparse), (vectors.lexical, batch.lexical)):
        if scattered is None:
            continue
        owner, columns, values = _gather_rows(xp, rows, candidates.ravel())
        products = values * scattered[queries[owner // width], columns]
        total += xp.bincount(owner, weights=products, minlength=candidates.size).reshape(candidates.shape).astype(xp.float32)
    return xp.where(valid, total + xp.float32(0), -xp.inf)  # + 0 makes −0 a 0, so it ties with 0 by row


def order_keys(xp: Any, scores: Any, rows: Any, padding: int) -> Any:
    """int64 keys whose ascending order is best score first, ties by lower row (rows < 0 sort last as ``padding``)."""
    bits = scores.astype(xp.float32).view(xp.int32)
    monotone = xp.where(bits >= 0, bits, bits ^ xp.int32(0x7FFFFFFF)).astype(xp.int64)
    return ((-monotone) << 32) + xp.where(rows >= 0, rows, padding).astype(xp.int64)


def best_of(xp: Any, keys: Any, k: int) -> Any:
    """Per row, the columns of the ``k`` smallest keys, smallest first."""
    if keys.shape[1] > k:
        part = xp.argpartition(keys, k - 1, axis=1)[:, :k]
    else:
        part = xp.broadcast_to(xp.arange(keys.shape[1]), keys.shape)
    order = xp.argsort(xp.take_along_axis(keys, part, axis=1), axis=1)
    return xp.take_along_axis(part, order, axis=1)


def top_rows(xp: Any, scores: Any, k: int) -> tuple[Any, Any]:
    """Per row, ``(scores, columns)`` of its ``k`` best columns (ties: lower column first)."""
    if k <= 0:
        return xp.zeros((len(scores), 0), scores.dtype), xp.zeros((len(scores), 0), xp.int64)
    columns = xp.broadcast_to(xp.arange(scores.shape[1]), scores.shape)
    best = best_of(xp, order_keys(xp, scores, columns, scores.shape[1]), k)
    return xp.take_along_axis(scores, best, axis=1), best


def path_scores(vectors: DeviceVectors, batch: QueryBatch) -> list[Any]:
    """Exact ``(B, N)`` float32 scores of each weighted path (``None`` for a path weighted 0)."""
    xp, n = vectors.xp, len(vectors)
    out = [xp.matmul(batch.dense, vectors.dense.astype(xp.float32, copy=False).T) if batch.dense is not None else None]
    for rows, scattered in ((vectors.sparse, batch.sparse), (vectors.lexical, batch.lexical)):
        out.append(None if scattered is None else (rows.matrix(xp, n) @ scattered.T).T)
    return out


def exact_top(vectors: DeviceVectors, batch: QueryBatch, k: int) -> tuple[Any, Any]:
    """Brute-force fused top ``k`` of every query: ``fused_exact`` on the device."""
    return top_rows(vectors.xp, sum(part for part in path_scores(vectors, batch) if part is not None), k)


def exact_knn(vectors: DeviceVectors, nodes: Queries, scales: np.ndarray, k: int, single: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``hybrid_graph.exact_knn`` on the device: every node's ``k`` best other nodes by calibrated fused
    score (float32, summed as there), and its ``single`` best by each path alone (−1 where a path scores 0)."""
    xp, n = vectors.xp, len(vectors)
    ids, sims = np.full((n, k), -1, np.int32), np.zeros((n, k), np.float32)
    paths = np.full((3, n, single), -1, np.int32)
    block = max(1, min(4096, BLOCK_BYTES // max(1, 16 * n)))
    s = scales.astype(np.float32)
    for start in range(0, n, block):
        stop = min(n, start + block)
        rows = xp.arange(start, stop)
        parts = path_scores(vectors, QueryBatch.of(xp, nodes.take(np.arange(start, stop)), np.ones(3)))
        for part in parts:
            part[xp.arange(stop - start), rows] = -xp.inf
        fused = xp.float32(s[0]) * parts[0] + xp.float32(s[1]) * parts[1] + xp.float32(s[2]) * parts[2]
        values, top = top_rows(xp, fused, k)
        ids[start:stop], sims[start:stop] = host(top), host(values)
        for p, part in enumerate(parts):
            values, best = top_rows(xp, part, min(single, max(n - 1, 0)))
            paths[p, start:stop, : best.shape[1]] = host(xp.where(values > 0, best, -1))
    return ids, sims, paths


def _shifted(xp: Any, parts: tuple[Any, Any, Any], rows: int, width: int, k: int, dtype: Any) -> Any:
    """Gathered non-zeros as a CSR matrix of ``rows`` lines whose columns are shifted by ``width`` per node
    (every ``k`` lines), so a product of two such matrices pairs lines of the same node only."""
    owner, columns, values = parts
    indptr = xp.concatenate([xp.zeros(1, xp.int64), xp.cumsum(xp.bincount(owner, minlength=rows))])
    shifted = (columns + (owner // k) * width).astype(xp.int32)
    return _sparse(xp).csr_matrix((values.astype(dtype), shifted, indptr.astype(xp.int32)), shape=(rows, (rows // k) * width))


def _gram(xp: Any, left: Any, right: Any, k: int, dtype: Any, c: int | None = None) -> Any:
    """``(A, k, c)``: every line of ``left`` · every line of ``right`` within each node's lines (``k`` on
    the left, ``c`` on the right, ``k`` unless given)."""
    c = k if c is None else c
    product = (left @ right.T).tocoo()
    out = xp.zeros((left.shape[0] // k, k, c), dtype)
    out[product.row // k, product.row % k, product.col % c] = product.data
    return out


def pair_part(xp: Any, left: Rows, right: Rows, neighbours: Any, k: int, others: Any = None) -> Any:
    """One sparse path's float64 scores of each node's neighbours used as queries (``left``) on each other
    (``right``), ``(A, k, k)``; or on each node's ``others`` (``(A, c)``) instead, ``(A, k, c)``."""
    if left.width != right.width:
        raise ValueError(f"query and stored vocabularies differ: {left.width} and {right.width} columns")
    others = neighbours if others is None else others
    width = others.shape[1]
    operands = [_shifted(xp, _gather_rows(xp, rows, lines.ravel()), lines.size, rows.width, lines.shape[1], xp.float64) for rows, lines in ((left, neighbours), (right, others))]
    return _gram(xp, *operands, k, xp.float64, width)


def prune(
    vectors: DeviceVectors,
    counts: sp.csr_matrix,
    scales: np.ndarray,
    knn_ids: np.ndarray,
    knn_sims: np.ndarray,
    self_ip: np.ndarray,
    degree: int,
    keyword_degree: int,
    rng: bool = True,
    ip: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``hybrid_graph.prune_candidates`` vectorised over blocks of nodes: detour counts, the IP walk over the
    nodes' pair scores, keyword recycling; ``counts`` are the nodes' token counts (the lexical query side).
    ``rng``/``ip`` off: the §5.6 ablations, as there."""
    xp, (n, k) = vectors.xp, knn_ids.shape
    pruned = np.full((n, max(degree, 1)), -1, np.int32)
    kept = np.zeros(n, np.int32)
    keyword = np.full((n, keyword_degree), -1, np.int32)
    if n == 0 or k == 0:
        return pruned, kept, keyword
    ids, sims, own = xp.asarray(knn_ids.astype(np.int64)), xp.asarray(knn_sims), xp.asarray(self_ip).astype(xp.float64)
    query_counts = Rows.of(xp, counts)
    binary = Rows(vectors.lexical.indptr, vectors.lexical.indices, xp.ones_like(vectors.lexical.data), vectors.lexical.width)
    widest = max(vectors.sparse.width, vectors.lexical.width, 1)
    block = max(1, min(n, BLOCK_BYTES // (8 * k * max(k * 3, vectors.dense.shape[1])), (2**31 - 1) // widest))
    scale = [float(np.float32(value)) for value in scales]  # the numba kernel's float32 scales
    for start in range(0, n, block):
        stop = min(n, start + block)
        nodes = xp.arange(start, stop)
        neighbours = ids[start:stop]
        order = _detour_order(xp, ids, sims, neighbours, nodes, n) if rng else xp.broadcast_to(xp.arange(k), neighbours.shape)
        dense = vectors.dense[neighbours].astype(xp.float64)
        pair = xp.matmul(dense, dense.transpose(0, 2, 1)) * scale[0]
        pair += scale[1] * pair_part(xp, vectors.sparse, vectors.sparse, neighbours, k)
        pair += scale[2] * pair_part(xp, query_counts, vectors.lexical, neighbours, k)
        shared = _shared_keywords(xp, binary, neighbours, nodes, k)
        result = _walk(xp, neighbours, order, pair if ip else xp.full_like(pair, -xp.inf), own, shared, degree, keyword_degree)
        pruned[start:stop], kept[start:stop], keyword[start:stop] = (host(part) for part in result)
    return pruned, kept, keyword


def _detour_order(xp: Any, ids: Any, sims: Any, neighbours: Any, nodes: Any, n: int) -> Any:
    """Per node, its neighbours' ranks by detour count (CAGRA's rank-based RNG), ties by distance rank."""
    blocks, k = neighbours.shape
    local = xp.arange(blocks)[:, None]
    keys = (local * n + neighbours).ravel()
    sorted_at = xp.argsort(keys)
    sorted_keys = keys[sorted_at]
    second = ids[neighbours]  # y in x's list, x the i-th neighbour of a
    asked = (local[:, :, None] * n + second).ravel()
    at = xp.minimum(xp.searchsorted(sorted_keys, asked), keys.size - 1)
    found = (sorted_keys[at] == asked) & (second.ravel() >= 0)
    rank = (sorted_at[at] % k).reshape(second.shape)
    earlier = xp.arange(k)[None, :, None]
    closer = sims[neighbours] > xp.take_along_axis(sims[nodes], rank.reshape(blocks, -1), axis=1).reshape(second.shape)
    detour = found.reshape(second.shape) & (rank > earlier) & closer
    slot = (local[:, :, None] * k + rank)[detour]
    detours = xp.bincount(slot, minlength=blocks * k).reshape(blocks, k)
    return xp.argsort(detours * k + xp.arange(k), axis=1)


def _shared_keywords(xp: Any, binary: Rows, neighbours: Any, nodes: Any, k: int) -> Any:
    """``(A, k, k)`` counts ``|K(a) ∩ K(v) ∩ K(w)|`` over each node a's neighbours v, w (the diagonal: ``|K(a) ∩ K(v)|``)."""
    owner, columns, _ = _gather_rows(xp, binary, neighbours.ravel())
    mine_owner, mine_columns, _ = _gather_rows(xp, binary, nodes)
    mine = mine_owner * binary.width + mine_columns  # sorted: nodes ascend, columns ascend within a row
    asked = (owner // k) * binary.width + columns
    at = xp.minimum(xp.searchsorted(mine, asked), max(mine.size - 1, 0))
    inside = (mine[at] == asked) if mine.size else xp.zeros(asked.shape, bool)
    restricted = _shifted(xp, (owner[inside], columns[inside], xp.ones(int(inside.sum()), xp.float32)), neighbours.size, binary.width, k, xp.float32)
    return _gram(xp, restricted, restricted, k, xp.float32).astype(xp.int32)


def _walk(xp: Any, neighbours: Any, order: Any, pair: Any, own: Any, shared: Any, degree: int, keyword_degree: int) -> tuple[Any, Any, Any]:
    """Algorithm 1's IP walk for a block of nodes in lock-step: a neighbour is kept unless a kept one
    scores it at least its own score; one not kept that shares a keyword set no kept one covers is recycled."""
    blocks, k = neighbours.shape
    every = xp.arange(blocks)
    pruned = xp.full((blocks, max(degree, 1)), -1, xp.int32)
    keyword = xp.full((blocks, max(keyword_degree, 1)), -1, xp.int32)
    kept = xp.zeros((blocks, k), bool)
    n_kept = xp.zeros(blocks, xp.int64)
    n_keyword = xp.zeros(blocks, xp.int64)
    diagonal = xp.diagonal(shared, axis1=1, axis2=2)
    for step in range(k):
        j = order[:, step]
        v = neighbours[every, j]
        blocked = (kept & (pair[every, :, j] >= own[v][:, None])).any(axis=1)
        keep = (n_kept < degree) & ~blocked
        shares = diagonal[every, j]
        covered = (kept & (shared[every, j, :] == shares[:, None])).any(axis=1)
        recycle = ~keep & (n_keyword < keyword_degree) & (shares > 0) & ~covered
        pruned[every[keep], n_kept[keep]] = v[keep].astype(xp.int32)
        kept[every[keep], j[keep]] = True
        n_kept += keep
        keyword[every[recycle], n_keyword[recycle]] = v[recycle].astype(xp.int32)
        n_keyword += recycle
    return pruned, n_kept.astype(xp.int32), keyword[:, :keyword_degree]


@dataclass(frozen=True)
class DeviceGraph:
    """The index's search arrays on the device."""

    semantic: Any
    entry: Any
    deleted: Any

    @classmethod
    def of(cls, xp: Any, semantic: np.ndarray, entry: np.ndarray, deleted: np.ndarray) -> DeviceGraph:
        return cls(xp.asarray(semantic.astype(np.int64)), xp.asarray(entry.astype(np.int64)), xp.asarray(deleted))


def search(vectors: DeviceVectors, graph: DeviceGraph, batch: QueryBatch, pool: int, k: int, width: int = 1) -> tuple[Any, Any]:
    """``(scores, rows)``, each ``(len(batch), k)``: every query's top ``k`` live rows, best first, a short
    list filled with −inf and −1 (``kernels/results.py``); in chunks whose visited bitmaps fit ``VISITED_BYTES``."""
    xp = vectors.xp
    chunk = max(1, VISITED_BYTES // max(1, len(vectors)))
    parts = [_search(vectors, graph, batch.take(start, start + chunk), max(min(pool, len(vectors)), k), k, width) for start in range(0, len(batch), chunk)]
    return xp.concatenate([scores for scores, _ in parts]), xp.concatenate([rows for _, rows in parts])


def _search(vectors: DeviceVectors, graph: DeviceGraph, batch: QueryBatch, pool: int, k: int, width: int) -> tuple[Any, Any]:
    xp, n, b = vectors.xp, len(vectors), len(batch)
    every = xp.arange(b)
    visited = xp.zeros((b, n), bool)
    pool_rows = xp.full((b, pool), -1, xp.int64)
    pool_scores = xp.full((b, pool), -xp.inf, xp.float32)
    explored = xp.ones((b, pool), bool)  # padding counts as explored: never expanded
    best_rows = xp.full((b, k), -1, xp.int64)
    best_scores = xp.full((b, k), -xp.inf, xp.float32)
    candidates = xp.broadcast_to(graph.entry, (b, len(graph.entry)))
    candidates = xp.where(_first_seen(xp, candidates), candidates, -1)
    queries = every
    while True:
        line, column = xp.nonzero(candidates >= 0)
        visited[queries[line], candidates[line, column]] = True
        scores = score(vectors, batch, queries, candidates)
        merged = _merge(xp, (pool_rows[queries], pool_scores[queries], explored[queries]), candidates, scores, pool, n)
        pool_rows[queries], pool_scores[queries], explored[queries] = merged
        live = xp.where((candidates >= 0) & ~graph.deleted[xp.where(candidates >= 0, candidates, 0)], candidates, -1)
        best = _merge(xp, (best_rows[queries], best_scores[queries], xp.zeros((len(queries), k), bool)), live, scores, k, n)
        best_rows[queries], best_scores[queries] = best[0], best[1]  # _merge's (rows, scores, flags)
        open_ = ~explored
        queries = xp.nonzero(open_.any(axis=1))[0]
        if len(queries) == 0:
            break
        open_ = open_[queries]
        chosen = open_ & (xp.cumsum(open_, axis=1) <= width)
        explored[queries] |= chosen
        columns = xp.arange(pool)
        picked = xp.argsort(xp.where(chosen, columns, pool + columns), axis=1)[:, :width]
        expanded = xp.where(xp.take_along_axis(chosen, picked, axis=1), xp.take_along_axis(pool_rows[queries], picked, axis=1), -1)
        neighbours = xp.where(expanded[:, :, None] >= 0, graph.semantic[xp.where(expanded >= 0, expanded, 0)], -1).reshape(len(queries), -1)
        fresh = (neighbours >= 0) & ~visited[queries[:, None], xp.where(neighbours >= 0, neighbours, 0)]
        candidates = xp.where(fresh & _first_seen(xp, neighbours), neighbours, -1)
    return best_scores, best_rows


def _first_seen(xp: Any, rows: Any) -> Any:
    """True at the first occurrence of each row id within each line (duplicates from several expanded nodes)."""
    if rows.shape[1] < 2:
        return xp.ones(rows.shape, bool)
    order = xp.argsort(rows * rows.shape[1] + xp.arange(rows.shape[1]), axis=1)
    ordered = xp.take_along_axis(rows, order, axis=1)
    repeat = xp.concatenate([xp.zeros((rows.shape[0], 1), bool), ordered[:, 1:] == ordered[:, :-1]], axis=1)
    first = xp.ones(rows.shape, bool)
    first[xp.arange(rows.shape[0])[:, None], order] = ~repeat
    return first


def _merge(xp: Any, kept: tuple[Any, Any, Any], rows: Any, scores: Any, size: int, n: int) -> tuple[Any, Any, Any]:
    """The best ``size`` of a best-first list and new candidates (−1: none), flags carried, new ones unset."""
    all_rows = xp.concatenate([kept[0], rows], axis=1)
    all_scores = xp.concatenate([kept[1], xp.where(rows >= 0, scores, -xp.inf).astype(xp.float32)], axis=1)
    flags = xp.concatenate([kept[2], rows < 0], axis=1)
    top = best_of(xp, order_keys(xp, all_scores, all_rows, n), size)
    return tuple(xp.take_along_axis(part, top, axis=1) for part in (all_rows, all_scores, flags))
