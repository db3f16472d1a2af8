"""How the hybrid index scores one pair of nodes: the calibrated fused inner product of a node used as
the query (its dense and SPLADE vectors, its BM25 token counts) with a stored node, in exact float64
products, as numba kernels the build, the candidate k-NN, the pruning and the updates share."""

from __future__ import annotations

import numpy as np
from numba import njit

from graphlake.kernels.hybrid.vectors import HybridVectors, Queries


def row_operands(vectors: HybridVectors, nodes: Queries, scales: np.ndarray) -> tuple:
    """What the pruning kernel needs to score any (query node, node) pair, and the vocabulary size."""
    return (
        vectors.dense,
        np.float32(scales[0]),
        vectors.sparse.indptr,
        vectors.sparse.indices,
        vectors.sparse.data,
        np.float32(scales[1]),
        _sorted(nodes.lexical).indptr,
        _sorted(nodes.lexical).indices,
        _sorted(nodes.lexical).data,
        vectors.lexical.indptr,
        vectors.lexical.indices,
        vectors.lexical.data,
        np.float32(scales[2]),
        vectors.lexical.shape[1],
    )


def _sorted(matrix):
    if not matrix.has_sorted_indices:
        matrix.sort_indices()
    return matrix


@njit(cache=True)
def sparse_dot(a_idx, a_val, b_idx, b_val) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(a_idx) and j < len(b_idx):
        if a_idx[i] == b_idx[j]:
            total += np.float64(a_val[i]) * b_val[j]  # exact products: the batched path's float64 pair scores
            i += 1
            j += 1
        elif a_idx[i] < b_idx[j]:
            i += 1
        else:
            j += 1
    return total


@njit(cache=True, fastmath=True)
def dot64(a, b) -> float:
    """A dense dot product of exact float64 products (float32 inputs), summed in SIMD lanes."""
    total = 0.0
    for t in range(len(a)):
        total += np.float64(a[t]) * b[t]
    return total


@njit(cache=True)
def row_norms(ptr, val):
    """The Euclidean norm of each CSR row, for the pruning's Cauchy–Schwarz bound."""
    out = np.zeros(len(ptr) - 1)
    for i in range(len(out)):
        for j in range(ptr[i], ptr[i + 1]):
            out[i] += np.float64(val[j]) * val[j]
    return np.sqrt(out)


@njit(cache=True)
def pair_inner_product(w, v, dense, scale_d, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f) -> float:
    """Calibrated fused score of node ``v`` for node ``w`` used as the query."""
    return pair_sparse(w, v, scale_d * dot64(dense[w], dense[v]), s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f)


@njit(cache=True)
def pair_sparse(w, v, total, s_ptr, s_idx, s_val, scale_s, c_ptr, c_idx, c_val, b_ptr, b_idx, b_val, scale_f) -> float:
    """``total`` (the pair's dense part) plus its SPLADE and BM25 parts."""
    total += scale_s * sparse_dot(s_idx[s_ptr[w] : s_ptr[w + 1]], s_val[s_ptr[w] : s_ptr[w + 1]], s_idx[s_ptr[v] : s_ptr[v + 1]], s_val[s_ptr[v] : s_ptr[v + 1]])
    total += scale_f * sparse_dot(c_idx[c_ptr[w] : c_ptr[w + 1]], c_val[c_ptr[w] : c_ptr[w + 1]], b_idx[b_ptr[v] : b_ptr[v + 1]], b_val[b_ptr[v] : b_ptr[v + 1]])
    return total
