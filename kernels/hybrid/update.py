"""Allan-Poe's index updates (§4.1 "Updates of the Hybrid Index"): a built graph follows its corpus
without a rebuild.

Inserting: each new node's k-NN list is exact while the build's would be (``BuildConfig.exact_knn``):
blocked products of the new rows against every live row, a share of a full build's k-NN step. Past
that (candidate and NN-Descent builds) it comes from the candidate k-NN of ``candidates.py`` asked for
the new rows only, against every live node (old and new), its refine round joining the old nodes'
graph edges: its cost is the batch's share of a build's. The build's pruning and layout then run on it (a neighbour
already in the graph contributes its edge list, scored, as its list). Each existing node
a new node kept takes it into the tail of its own list; at most a quarter of that list turns over.

Removing: the lake keeps no vectors of a removed node, so it cannot stay in the graph
mark-deleted, walked through but never returned. It is spliced out instead, the way FreshDiskANN
consolidates deletes: a list that pointed at a removed node takes, in its place, the removed node's
neighbours it lacks. ``HybridGraph.deleted`` keeps serving mark-deletes over unchanged vectors.

``update`` decides between the two ways: incremental below ``rebuild_share`` of changed nodes, a full
build above it, or when the build configuration changed.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np
from numba import njit

from graphlake.kernels.hybrid.candidates import candidate_knn
from graphlake.kernels.hybrid.graph_index import (
    BuildConfig,
    HybridGraph,
    build,
    entry_points,
    exact_neighbours,
    layout_rows,
    prune_rows,
    reverse_neighbours,
    self_inner_products,
)
from graphlake.kernels.hybrid.pairs import pair_inner_product, row_operands
from graphlake.kernels.hybrid.vectors import HybridVectors, Queries


def splice(graph: HybridGraph, old_to_new: np.ndarray, n_new: int) -> HybridGraph:
    """The graph renumbered onto a changed corpus: old row ``i`` becomes ``old_to_new[i]`` (−1: removed,
    spliced out); new rows get empty lists, for ``insert``."""
    old_to_new = np.asarray(old_to_new, dtype=np.int64)
    semantic = _splice(graph.semantic, old_to_new, n_new)
    keyword = np.full((n_new, graph.keyword.shape[1]), -1, np.int32)
    deleted = np.zeros(n_new, dtype=bool)
    kept = np.flatnonzero(old_to_new >= 0)
    mapped = np.where(graph.keyword[kept] >= 0, old_to_new[np.maximum(graph.keyword[kept], 0)], -1)
    for row, edges in zip(old_to_new[kept], mapped, strict=True):
        live = edges[edges >= 0]
        keyword[row, : len(live)] = live
    deleted[old_to_new[kept]] = graph.deleted[kept]
    entry = old_to_new[graph.entry][old_to_new[graph.entry] >= 0].astype(np.int32)
    return HybridGraph(semantic, keyword, entry, graph.scales, deleted, dict(graph.build))


@njit(cache=True)
def _splice(semantic, old_to_new, n_new):
    """Each surviving list renumbered; the slots of removed neighbours refilled from their own lists."""
    n_old, degree = semantic.shape
    out = np.full((n_new, degree), -1, np.int32)
    seen = np.full(n_new, -1, np.int64)
    for a in range(n_old):
        b = old_to_new[a]
        if b < 0:
            continue
        count = 0
        for v in semantic[a]:
            if v >= 0 and old_to_new[v] >= 0 and old_to_new[v] != b and seen[old_to_new[v]] != b:
                seen[old_to_new[v]] = b
                out[b, count] = old_to_new[v]
                count += 1
        for v in semantic[a]:
            if v < 0 or old_to_new[v] >= 0:
                continue
            for w in semantic[v]:
                if count >= degree:
                    break
                if w >= 0 and old_to_new[w] >= 0 and old_to_new[w] != b and seen[old_to_new[w]] != b:
                    seen[old_to_new[w]] = b
                    out[b, count] = old_to_new[w]
                    count += 1
    return out


def insert(graph: HybridGraph, vectors: HybridVectors, nodes: Queries, rows: np.ndarray, config: BuildConfig) -> HybridGraph:
    """``graph`` (whose ``rows`` have no edges yet) with ``rows`` linked in; ``vectors``/``nodes`` cover every row."""
    rows = np.asarray(rows, dtype=np.int64)
    n, degree = graph.semantic.shape
    k = min(config.knn_k, n - 1)
    if len(rows) == 0 or k <= 0:
        return graph
    new = np.zeros(n, dtype=bool)
    new[rows] = True
    self_ip = self_inner_products(vectors, nodes, graph.scales)
    operands = row_operands(vectors, nodes, graph.scales)
    knn_ids = np.full((n, k), -1, np.int32)
    knn_sims = np.full((n, k), -np.inf, np.float32)
    if config.exact_knn(n):
        knn_ids[rows], knn_sims[rows] = exact_neighbours(vectors, nodes, graph.scales, k, rows, graph.deleted)
    else:
        knn_ids[rows], knn_sims[rows], _ = candidate_knn(vectors, nodes, graph.scales, k, operands, rows, graph.deleted, graph.semantic)
    involved = np.unique(knn_ids[rows])
    involved = involved[(involved >= 0) & ~new[np.maximum(involved, 0)]]
    width = min(k, degree)
    knn_ids[involved, :width] = graph.semantic[involved, :width]  # a neighbour's own list: its edges, scored
    knn_sims[involved, :width] = _edge_scores(involved, graph.semantic[:, :width], *operands[:-1])
    pruned, kept, keyword = prune_rows(rows, knn_ids, knn_sims, self_ip, degree, config.keyword_degree, *operands, *config.pruning_steps())
    kept[~new] = 0
    rev_indptr, rev_ids = reverse_neighbours(pruned, kept, knn_ids, knn_sims)
    semantic = graph.semantic.copy()
    single = np.full((3, n, 1), -1, np.int32)  # the paper layout's single-path share is filled from the lists
    layout_rows(semantic, rows, pruned, kept, rev_indptr, rev_ids, single, knn_ids, degree, config.layout == "code")
    _link_back(semantic, involved, rev_indptr, rev_ids, max(1, degree // 4))
    keywords = graph.keyword.copy()
    keywords[rows] = keyword[rows]
    live = ~graph.deleted
    return HybridGraph(semantic, keywords, entry_points(self_ip, live, config), graph.scales, graph.deleted.copy(), dict(graph.build))


@njit(cache=True)
def _edge_scores(rows, lists, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f):
    """The calibrated fused score of each listed neighbour for its row used as the query (−inf for −1)."""
    out = np.full((len(rows), lists.shape[1]), -np.inf, np.float32)
    for i in range(len(rows)):
        for j in range(lists.shape[1]):
            v = lists[rows[i], j]
            if v >= 0:
                out[i, j] = pair_inner_product(rows[i], v, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f)
    return out


@njit(cache=True)
def _link_back(semantic, involved, rev_indptr, rev_ids, most):
    """Each existing node takes the new nodes that kept it, best first: into empty slots, then over its
    last ``most`` entries (the weakest reverse edges)."""
    degree = semantic.shape[1]
    for u in involved:
        slot = degree - 1
        taken = 0
        for r in rev_ids[rev_indptr[u] : rev_indptr[u + 1]]:
            if taken >= most:
                break
            present = False
            for v in semantic[u]:
                if v == r:
                    present = True
            if present:
                continue
            empty = -1
            for j in range(degree):
                if semantic[u, j] < 0:
                    empty = j
                    break
            if empty >= 0:
                semantic[u, empty] = r
            else:
                semantic[u, slot] = r
                slot -= 1
            taken += 1


def update(
    previous: HybridGraph | None, previous_keys: list[str] | None, keys: list[str], vectors: HybridVectors, nodes: Queries, config: BuildConfig, rebuild_share: float
) -> tuple[HybridGraph, dict]:
    """The index of the corpus whose rows are ``keys`` (node id and content hash): ``previous`` updated
    when it was built with the same configuration and at most ``rebuild_share`` of the nodes changed,
    else a full build. The report says which (``mode``: build, rebuild, incremental, unchanged) and why."""
    started = time.perf_counter()
    reason = _rebuild_reason(previous, previous_keys, config)
    if reason is None:
        index = {key: row for row, key in enumerate(keys)}
        old_to_new = np.array([index.get(key, -1) for key in previous_keys], dtype=np.int64)
        inserted = np.setdiff1d(np.arange(len(keys)), old_to_new[old_to_new >= 0])
        removed = int((old_to_new < 0).sum())
        share = (len(inserted) + removed) / max(1, len(keys))
        if share <= rebuild_share:
            graph = insert(splice(previous, old_to_new, len(keys)), vectors, nodes, inserted, config)
            mode = "incremental" if share else "unchanged"
            seconds = round(time.perf_counter() - started, 3)
            graph.build = {**graph.build, "update": {"mode": mode, "inserted": int(len(inserted)), "removed": removed, "seconds": seconds}}
            return graph, {"mode": mode, "inserted": int(len(inserted)), "removed": removed, "changed_share": round(share, 4), "seconds": seconds}
        reason = f"{share:.1%} of the nodes changed, above rebuild_share {rebuild_share:.0%}"
    graph = build(vectors, nodes, config)
    mode = "build" if previous is None else "rebuild"
    return graph, {"mode": mode, "reason": reason, "seconds": round(time.perf_counter() - started, 3)}


def _rebuild_reason(previous: HybridGraph | None, previous_keys: list[str] | None, config: BuildConfig) -> str | None:
    if previous is None:
        return "no previous index"
    if previous_keys is None:
        return "the previous index records no content hashes"
    settings = {name: value for name, value in asdict(config).items() if name != "device"}
    built = {name: value for name, value in previous.build.get("config", {}).items() if name != "device"}
    if built != settings:
        return "the build configuration changed"
    return None
