"""NN-Descent (Dong et al., WWW 2011) under the calibrated fused score: Allan-Poe's Step 1 for corpora
too large for the exact k-NN (§4.1), written once against an array module (numpy here, cupy on a GPU).

Every node starts from ``k`` random neighbours. Each iteration samples, per node, up to ``samples`` of
its neighbours not yet joined ("new") and up to ``samples`` already joined ("old"), adds as many
reverse neighbours of each kind, and runs the local join in blocks of nodes: every new candidate
against every other candidate of the same node, both ways, as batched products (dense) and
block-diagonal sparse products (SPLADE; BM25 token counts against BM25 weights). A proposal enters a
list when it beats the list's worst entry. It stops after ``iterations`` or when fewer than ``delta``
of the list entries changed in an iteration.

pynndescent was considered first: it takes a numba metric over CSR rows, but it evaluates each pair
once and updates both lists with that one value, while the fused score is not symmetric (the query
side of BM25 is a token count, the stored side a BM25 weight), so it could not give these lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphlake.kernels.hybrid.batched import BLOCK_BYTES, DeviceVectors, QueryBatch, Rows, host, order_keys, pair_part, score
from graphlake.kernels.hybrid.vectors import Queries


def nn_descent(vectors: DeviceVectors, nodes: Queries, scales: np.ndarray, k: int, iterations: int, samples: int, seed: int = 0, delta: float = 0.001) -> tuple[np.ndarray, np.ndarray, dict]:
    """Every node's ``k`` best other nodes found by NN-Descent (ids, float32 scores, best first, ties by
    row, −1 pads while a list is short), and what the iterations did."""
    xp, n = vectors.xp, len(vectors)
    rng = np.random.default_rng(seed)
    counts = Rows.of(xp, nodes.lexical)
    ids = xp.asarray(_random_lists(rng, n, k))
    sims = _scores(vectors, nodes, scales, ids)
    ids, sims = _sorted(xp, ids, sims, n)
    fresh = ids >= 0
    changes = []
    for _ in range(iterations):
        new, old, joined = _sample(xp, rng, ids, fresh, samples)
        fresh &= ~joined
        changed = 0
        a, c = new.shape[1], new.shape[1] + old.shape[1]
        block = max(1, BLOCK_BYTES // (8 * ((a + c) * vectors.dense.shape[1] + 6 * a * c)))
        for start in range(0, n, block):
            stop = min(n, start + block)
            proposals = _local_join(vectors, counts, scales, new[start:stop], xp.concatenate([new[start:stop], old[start:stop]], axis=1))
            ids, sims, fresh, accepted = _merge_proposals(xp, ids, sims, fresh, *proposals, n)
            changed += accepted
        changes.append(changed)
        if changed < delta * n * k:
            break
    return host(ids).astype(np.int32), host(sims), {"iterations": len(changes), "changes": changes}


def _random_lists(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """``k`` distinct random other rows per row (all others when fewer)."""
    if n - 1 <= k:
        every = np.tile(np.arange(n), (n, 1))
        others = every[~np.eye(n, dtype=bool)].reshape(n, max(n - 1, 0))
        return np.pad(others, ((0, 0), (0, k - others.shape[1])), constant_values=-1)
    picked = rng.integers(0, n - 1, size=(n, k))
    picked += picked >= np.arange(n)[:, None]  # skip the row itself
    for _ in range(8):  # redraw duplicates within a row
        unique = _dedupe(np, picked)
        if (unique >= 0).all():
            break
        redraw = rng.integers(0, n - 1, size=picked.shape)
        redraw += redraw >= np.arange(n)[:, None]
        picked = np.where(unique >= 0, picked, redraw)
    return _dedupe(np, picked).astype(np.int64)


def _scores(vectors: DeviceVectors, nodes: Queries, scales: np.ndarray, lists: Any) -> Any:
    """The calibrated fused score of each listed row for its list's node used as the query."""
    xp, n = vectors.xp, len(vectors)
    out = xp.full(lists.shape, -xp.inf, xp.float32)
    block = max(1, BLOCK_BYTES // max(1, 4 * lists.shape[1] * vectors.dense.shape[1]))
    for start in range(0, n, block):
        stop = min(n, start + block)
        batch = QueryBatch.of(xp, nodes.take(np.arange(start, stop)), scales)
        out[start:stop] = score(vectors, batch, xp.arange(stop - start), lists[start:stop])
    return out


def _sorted(xp: Any, ids: Any, sims: Any, n: int) -> tuple[Any, Any]:
    order = xp.argsort(order_keys(xp, sims, ids, n), axis=1)
    return xp.take_along_axis(ids, order, axis=1), xp.take_along_axis(sims, order, axis=1)


def _pick(xp: Any, rng: np.random.Generator, mask: Any, limit: int) -> Any:
    """Per row, the columns of up to ``limit`` randomly chosen True entries (−1 pads), ``(rows, limit)``."""
    noise = xp.asarray(rng.random(mask.shape, dtype=np.float32))
    keys = xp.where(mask, noise, 2.0)
    take = min(limit, mask.shape[1])
    columns = xp.argsort(keys, axis=1)[:, :take]
    return xp.where(xp.take_along_axis(mask, columns, axis=1), columns, -1)


def _sample(xp: Any, rng: np.random.Generator, ids: Any, fresh: Any, samples: int) -> tuple[Any, Any, Any]:
    """Per node, the new and the old candidates of the local join: sampled forward neighbours, then as
    many sampled reverse ones (rows, −1 pads); and where the sampled new forward ones sit in the lists."""
    n = len(ids)
    out = []
    joined = xp.zeros(ids.shape, bool)
    for mask in (fresh, (ids >= 0) & ~fresh):
        columns = _pick(xp, rng, mask, samples)
        forward = xp.where(columns >= 0, xp.take_along_axis(ids, xp.maximum(columns, 0), axis=1), -1)
        if not out:
            line, slot = xp.nonzero(columns >= 0)
            joined[line, columns[line, slot]] = True
        owner, target = xp.nonzero(forward >= 0)
        heads = forward[owner, target]  # the reverse edge heads -> owner
        noise = xp.asarray(rng.integers(0, 2**20, len(heads)))
        order = xp.argsort(heads * 2**20 + noise)  # by head, in random order within a head
        heads, tails = heads[order], owner[order]
        starts = xp.searchsorted(heads, xp.arange(n))
        rank = xp.arange(len(heads)) - starts[heads] if len(heads) else xp.zeros(0, xp.int64)
        keep = rank < samples
        reverse = xp.full((n, samples), -1, xp.int64)
        reverse[heads[keep], rank[keep]] = tails[keep]
        out.append(_dedupe(xp, xp.concatenate([forward, reverse], axis=1)))
    return out[0], out[1], joined


def _dedupe(xp: Any, rows: Any) -> Any:
    """Each row's repeated ids set to −1 (first kept)."""
    order = xp.argsort(rows, axis=1)
    ordered = xp.take_along_axis(rows, order, axis=1)
    repeat = xp.zeros(rows.shape, bool)
    repeat[:, 1:] = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    first = xp.ones(rows.shape, bool)
    first[xp.arange(len(rows))[:, None], order] = ~repeat
    return xp.where(first, rows, -1)


def _local_join(vectors: DeviceVectors, counts: Rows, scales: np.ndarray, new: Any, every: Any) -> tuple[Any, Any, Any]:
    """Per node of the block, each new candidate p against each candidate q (new or old), both ways:
    proposals (target, candidate, score) for p to take q and for q to take p."""
    xp = vectors.xp
    a = new.shape[1]
    safe_new, safe_every = xp.maximum(new, 0), xp.maximum(every, 0)
    dense = xp.matmul(vectors.dense[safe_new].astype(xp.float64), vectors.dense[safe_every].astype(xp.float64).transpose(0, 2, 1))
    shared = float(np.float32(scales[0])) * dense + float(np.float32(scales[1])) * pair_part(xp, vectors.sparse, vectors.sparse, new, a, every)
    lexical = float(np.float32(scales[2]))
    forward = shared + lexical * pair_part(xp, counts, vectors.lexical, new, a, every)  # p asks, q answers
    backward = shared + lexical * pair_part(xp, vectors.lexical, counts, new, a, every)  # q asks (its counts), p answers
    valid = (new[:, :, None] >= 0) & (every[:, None, :] >= 0) & (new[:, :, None] != every[:, None, :])
    p = xp.broadcast_to(new[:, :, None], valid.shape)[valid]
    q = xp.broadcast_to(every[:, None, :], valid.shape)[valid]
    targets = xp.concatenate([p, q])
    candidates = xp.concatenate([q, p])
    values = xp.concatenate([forward[valid], backward[valid]]).astype(xp.float32)
    return targets, candidates, values


def _merge_proposals(xp: Any, ids: Any, sims: Any, fresh: Any, targets: Any, candidates: Any, values: Any, n: int) -> tuple[Any, Any, Any, int]:
    """The lists with the proposals that beat their target's worst entry merged in (new entries flagged
    fresh, a pair already listed kept as it was); how many entries changed."""
    k = ids.shape[1]
    worst = sims[targets, k - 1]
    better = (values > worst) | ((values == worst) & ((candidates < ids[targets, k - 1]) | (ids[targets, k - 1] < 0)))
    targets, candidates, values = targets[better], candidates[better], values[better]
    if len(targets) == 0:
        return ids, sims, fresh, 0
    touched = xp.unique(targets)
    local = xp.searchsorted(touched, targets)
    rows = xp.concatenate([xp.repeat(xp.arange(len(touched)), k), local])
    cols = xp.concatenate([ids[touched].ravel(), candidates])
    vals = xp.concatenate([sims[touched].ravel(), values])
    new_flag = xp.concatenate([fresh[touched].ravel(), xp.ones(len(candidates), bool)])
    listed = xp.concatenate([xp.ones(len(touched) * k, bool), xp.zeros(len(candidates), bool)])
    keep = cols >= 0
    rows, cols, vals, new_flag, listed = rows[keep], cols[keep], vals[keep], new_flag[keep], listed[keep]
    pair = (rows * (n + 1) + cols) * 2 + (~listed)  # a listed pair sorts before its proposals
    order = xp.argsort(pair)
    pair, rows, cols, vals, new_flag, listed = pair[order] // 2, rows[order], cols[order], vals[order], new_flag[order], listed[order]
    first = xp.ones(len(pair), bool)
    first[1:] = pair[1:] != pair[:-1]
    rows, cols, vals, new_flag, listed = rows[first], cols[first], vals[first], new_flag[first], listed[first]
    order = xp.argsort(order_keys(xp, vals, cols, n))
    order = order[xp.argsort(rows[order], kind="stable")]
    rows, cols, vals, new_flag, listed = rows[order], cols[order], vals[order], new_flag[order], listed[order]
    starts = xp.searchsorted(rows, xp.arange(len(touched)))
    rank = xp.arange(len(rows)) - starts[rows]
    top = rank < k
    out_ids = xp.full((len(touched), k), -1, ids.dtype)
    out_sims = xp.full((len(touched), k), -xp.inf, sims.dtype)
    out_fresh = xp.zeros((len(touched), k), bool)
    out_ids[rows[top], rank[top]] = cols[top]
    out_sims[rows[top], rank[top]] = vals[top]
    out_fresh[rows[top], rank[top]] = new_flag[top]
    ids[touched], sims[touched], fresh[touched] = out_ids, out_sims, out_fresh
    return ids, sims, fresh, int((top & ~listed).sum())
