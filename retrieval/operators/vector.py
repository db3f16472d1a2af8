"""The operators every method starts from: vector search over one index (``O_vs``) and the fusions that
combine rankings. Each searches a batch of queries in one matrix product or index search; a run's
per-query latency is a batch of one, what a user would wait."""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from graphlake.retrieval.core import MAX_CANDIDATES, MAX_INPUTS, Candidates, Count, ExactBelow, Input, MethodError, Op, Weight, from_dict, min_max, ranked, register, run_inputs_batch
from graphlake.retrieval.index.corpus_indexes import CorpusIndexes


FILTER_EXACT_BELOW = 2_000  # an approximate index scores exactly the nodes a filter allows when fewer pass it
DENSE_GATHER_BELOW = 0.25  # a filter allowing less than this share of the nodes: multiply only their rows


def exact_dense(queries: list[str], indexes: CorpusIndexes, k: int) -> list[Candidates]:
    """Inner product of each unit query vector with every node vector the request's filter allows (all
    without one), the batch in one matrix product: only the allowed rows' where a filter allows few."""
    matrix, allowed = indexes.dense, indexes.allowed
    vectors = np.stack([indexes.encode_dense(q) for q in queries], axis=1) if queries else np.zeros((matrix.shape[1], 0), np.float32)
    if allowed is None:
        rows, scores = np.arange(len(matrix)), matrix @ vectors
    elif allowed.fraction < DENSE_GATHER_BELOW:
        rows, scores = allowed.rows, matrix[allowed.rows] @ vectors
    else:
        rows, scores = allowed.rows, (matrix @ vectors)[allowed.rows]
    return [ranked(rows, np.ascontiguousarray(column), k) for column in scores.T]


class TopK(Op):
    """O_vs over one index: the top ``k`` nodes by its score, among the nodes a request's filter allows."""

    FILTER: ClassVar[Literal["index"]] = "index"
    k: Count = 100


@register
class BM25(TopK):
    """O_vs over the BM25 index (Lucene formula); documents that share no term are not returned."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"bm25"})
    op: Literal["bm25"]

    def run_batch(self, queries: list[str], indexes: CorpusIndexes) -> list[Candidates]:
        allowed = indexes.allowed
        scores, rows = indexes.bm25.search(queries, self.k, None if allowed is None else allowed.mask)
        return [Candidates(r[s > 0].astype(np.int64), s[s > 0]) for s, r in zip(scores, rows, strict=True)]


@register
class Dense(TopK):
    """O_vs, exact: inner product of the unit query vector with every node vector (their cosine:
    the vectors are unit length), one matrix-vector product per query."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense"})
    op: Literal["dense"]

    def run_batch(self, queries: list[str], indexes: CorpusIndexes) -> list[Candidates]:
        return exact_dense(queries, indexes, self.k)


@register
class DenseHNSW(TopK):
    """O_vs, approximate: faiss HNSW over the same vectors (inner product)."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense", "dense_hnsw"})
    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k", "ef_search", "filter_exact_below"})
    op: Literal["dense_hnsw"]
    ef_search: Count = 128
    filter_exact_below: ExactBelow = FILTER_EXACT_BELOW

    def run_batch(self, queries: list[str], indexes: CorpusIndexes) -> list[Candidates]:
        import faiss  # loaded with the index already; the search depth per call, so threads share the index

        index, allowed = indexes.dense_hnsw, indexes.allowed
        if allowed is not None and len(allowed.rows) < self.filter_exact_below:
            indexes.note(f"{self.op}: the {len(allowed.rows):,} nodes the filter allows were scored exactly (fewer than filter_exact_below)")
            return exact_dense(queries, indexes, self.k)
        depth = max(self.ef_search, self.k)
        selector = bitmap = None
        if allowed is not None:  # the walk visits every node and keeps the allowed: deeper as fewer are, so as many are found
            bitmap = np.packbits(allowed.mask, bitorder="little")
            selector = faiss.IDSelectorBitmap(len(allowed.mask), faiss.swig_ptr(bitmap))
            depth = min(math.ceil(depth / max(allowed.fraction, 1e-9)), MAX_CANDIDATES)
        params = faiss.SearchParametersHNSW(efSearch=min(depth, max(index.ntotal, 1)), sel=selector)  # no deeper than the corpus
        scores, rows = index.search(np.stack([indexes.encode_dense(q) for q in queries]), min(self.k, max(index.ntotal, 1)), params=params)
        del bitmap  # faiss read it through a raw pointer: it lived until here
        return [Candidates(r[r >= 0].astype(np.int64), s[r >= 0]) for s, r in zip(scores, rows, strict=True)]


@register
class Splade(TopK):
    """O_vs over learned sparse vectors: sparse dot product."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"splade"})
    op: Literal["splade"]

    def run_batch(self, queries: list[str], indexes: CorpusIndexes) -> list[Candidates]:
        weights = sp.vstack([indexes.encode_splade(q) for q in queries], format="csr")
        scores = np.asarray((indexes.splade @ weights.T).todense())
        allowed = indexes.allowed
        found = []
        for column in scores.T:
            rows = np.flatnonzero((column > 0) if allowed is None else (column > 0) & allowed.mask)
            found.append(ranked(rows, column[rows], self.k))
        return found


class Fusion(Op):
    """Combines its inputs' rankings, each with a weight (1 each when unset)."""

    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k", "weights"})
    inputs: list[Input] = Field(min_length=1, max_length=MAX_INPUTS)
    weights: Annotated[list[Weight], Field(max_length=MAX_INPUTS)] | None = None
    k: Count = 100

    def input_weights(self) -> list[float]:
        if self.weights is None:
            return [1.0] * len(self.inputs)
        if len(self.weights) != len(self.inputs):
            raise MethodError(f"{self.op}: {len(self.weights)} weights for {len(self.inputs)} inputs")
        return self.weights


@register
class RRF(Fusion):
    """Reciprocal rank fusion: sum of weight / (constant + rank) over the inputs (Cormack et al., 2009)."""

    op: Literal["rrf"]
    constant: float = Field(60.0, ge=0)

    def run_batch(self, queries: list[str], indexes: CorpusIndexes) -> list[Candidates]:
        return [self.fuse(inputs) for inputs in run_inputs_batch(self, queries, indexes)]

    def fuse(self, inputs: list[Candidates]) -> Candidates:
        fused: dict[int, float] = {}
        for weight, candidates in zip(self.input_weights(), inputs, strict=True):
            for rank, row in enumerate(candidates.rows.tolist(), start=1):
                fused[row] = fused.get(row, 0.0) + weight / (self.constant + rank)
        return from_dict(fused, self.k)


@register
class WeightedSum(Fusion):
    """Weighted sum of the inputs' scores, each min-max normalised per query unless ``normalise`` says
    otherwise for that input (GraphER mixes raw cosine with normalised BM25); missing = 0."""

    op: Literal["weighted_sum"]
    normalise: list[bool] | None = None

    def run_batch(self, queries: list[str], indexes: CorpusIndexes) -> list[Candidates]:
        normalise = self.normalise if self.normalise is not None else [True] * len(self.inputs)
        if len(normalise) != len(self.inputs):
            raise MethodError(f"weighted_sum: {len(normalise)} normalise flags for {len(self.inputs)} inputs")
        return [self.fuse(inputs, normalise) for inputs in run_inputs_batch(self, queries, indexes)]

    def fuse(self, inputs: list[Candidates], normalise: list[bool]) -> Candidates:
        fused: dict[int, float] = {}
        for weight, scale, candidates in zip(self.input_weights(), normalise, inputs, strict=True):
            if len(candidates.scores) == 0:
                continue
            values = min_max(candidates.scores) if scale else candidates.scores
            for row, value in zip(candidates.rows.tolist(), values.tolist(), strict=True):
                fused[row] = fused.get(row, 0.0) + weight * value
        return from_dict(fused, self.k)
