"""Search over the corpus's dense and learned-sparse vectors, in the kernels' vocabulary
(``kernels/results.py``): exact inner products, the batch in one matrix product, and faiss's HNSW.

The vectors are unit length, so a dense inner product is a cosine."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.results import FILL_ROW, FILL_SCORE, Ranking, SearchParams, allowed_scores, filled, top_k

if TYPE_CHECKING:
    import faiss

DENSE_GATHER_BELOW = 0.25  # a filter allowing less than this share of the nodes: multiply only their rows
MAX_DEPTH = 10_000  # the deepest HNSW walk a filter makes (a request's largest pool)


def exact_dense(matrix: np.ndarray, queries: np.ndarray, k: int, params: SearchParams = SearchParams()) -> Ranking:
    """Every allowed node row of ``matrix`` (nodes, dimension) scored by its inner product with each query
    of ``queries`` (queries, dimension), the batch in one product: only the allowed rows' where a filter
    allows few."""
    vectors = np.ascontiguousarray(queries.T) if len(queries) else np.zeros((matrix.shape[1], 0), np.float32)
    allowed = params.allowed
    if allowed is None:
        rows, scores = None, matrix @ vectors
    elif allowed.fraction < DENSE_GATHER_BELOW:
        rows, scores = allowed.rows, matrix[allowed.rows] @ vectors
    else:
        rows, scores = allowed.rows, (matrix @ vectors)[allowed.rows]
    return top_k(scores.T, k, rows)


def exact_sparse(matrix: sp.csc_matrix, queries: sp.csr_matrix, k: int, params: SearchParams = SearchParams()) -> Ranking:
    """Every allowed node row of ``matrix`` (nodes, vocabulary) scored by its sparse inner product with each
    query row; a node sharing no term with a query is no result for it."""
    scores, rows = allowed_scores(np.asarray((matrix @ queries.T).todense()).T, params)
    return top_k(scores, k, rows, positive=True)


@dataclass(frozen=True)
class HNSWParams(SearchParams):
    """faiss HNSW's walk: ``ef_search`` candidates, deeper under a filter (see :func:`hnsw`)."""

    ef_search: int = 128


def hnsw(index: faiss.Index, queries: np.ndarray, k: int, params: HNSWParams = HNSWParams()) -> Ranking:
    """faiss HNSW (inner product) over the dense vectors. A filter's rows are a selector the walk checks:
    it visits every node and keeps the allowed, deeper the fewer there are (``ef_search`` over the allowed
    share), so that as many are found. The walk's depth is a parameter of the call, so threads share the
    index."""
    import faiss  # loaded with the index already

    k_found = min(k, max(index.ntotal, 1))
    depth, selector, bitmap = max(params.ef_search, k), None, None
    if params.allowed is not None:
        bitmap = np.packbits(params.allowed.mask, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(params.allowed.mask), faiss.swig_ptr(bitmap))
        depth = min(math.ceil(depth / max(params.allowed.fraction, 1e-9)), MAX_DEPTH)
    search = faiss.SearchParametersHNSW(efSearch=min(depth, max(index.ntotal, 1)), sel=selector)  # no deeper than the corpus
    scores, rows = index.search(queries, k_found, params=search)
    del bitmap  # faiss read it through a raw pointer: it lived until here
    out_scores, out_rows = filled(len(queries), k)
    found = rows >= 0  # faiss's order kept, ties included (a tie rule to the lower row is open)
    out_scores[:, :k_found], out_rows[:, :k_found] = np.where(found, scores, FILL_SCORE), np.where(found, rows, FILL_ROW)
    return Ranking(out_scores, out_rows)
