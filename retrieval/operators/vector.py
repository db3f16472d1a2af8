"""The operators every method starts from: vector search over one index (``O_vs``) and the fusions that
combine rankings. Each runs one query at a time, so a run's per-query latency is what a user would wait."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from graphlake.retrieval.core import Candidates, Input, MethodError, Op, from_dict, ranked, register, run_inputs
from graphlake.retrieval.index.lake import LakeIndexes


class TopK(Op):
    """O_vs over one index: the top ``k`` nodes by its score."""

    k: int = Field(100, gt=0)


@register
class BM25(TopK):
    """O_vs over the BM25 index (Lucene formula); documents that share no term are not returned."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"bm25"})
    op: Literal["bm25"]

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        scores, rows = indexes.get("bm25").search([query], self.k)
        keep = scores[0] > 0
        return Candidates(rows[0][keep].astype(np.int64), scores[0][keep])


@register
class Dense(TopK):
    """O_vs, exact: inner product of the unit query vector with every node vector (their cosine:
    the vectors are unit length), one matrix-vector product per query."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense"})
    op: Literal["dense"]

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        scores = indexes.get("dense") @ indexes.encode_dense(query)
        return ranked(np.arange(len(scores)), scores, self.k)


@register
class DenseHNSW(TopK):
    """O_vs, approximate: faiss HNSW over the same vectors (inner product)."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense", "dense_hnsw"})
    op: Literal["dense_hnsw"]
    ef_search: int = Field(128, gt=0)

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        index = indexes.get("dense_hnsw")
        index.hnsw.efSearch = max(self.ef_search, self.k)
        scores, rows = index.search(indexes.encode_dense(query)[None, :], self.k)
        keep = rows[0] >= 0
        return Candidates(rows[0][keep].astype(np.int64), scores[0][keep])


@register
class Splade(TopK):
    """O_vs over learned sparse vectors: sparse dot product."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"splade"})
    op: Literal["splade"]

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        scores = np.asarray((indexes.get("splade") @ indexes.encode_splade(query).T).todense()).ravel()
        rows = np.flatnonzero(scores > 0)
        return ranked(rows, scores[rows], self.k)


class Fusion(Op):
    """Combines its inputs' rankings, each with a weight (1 each when unset)."""

    inputs: list[Input] = Field(min_length=1)
    weights: list[float] | None = None
    k: int = Field(100, gt=0)

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

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        fused: dict[int, float] = {}
        for weight, candidates in zip(self.input_weights(), run_inputs(self, query, indexes), strict=True):
            for rank, row in enumerate(candidates.rows.tolist(), start=1):
                fused[row] = fused.get(row, 0.0) + weight / (self.constant + rank)
        return from_dict(fused, self.k)


@register
class WeightedSum(Fusion):
    """Weighted sum of the inputs' scores, each min-max normalised per query unless ``normalise`` says
    otherwise for that input (GraphER mixes raw cosine with normalised BM25); missing = 0."""

    op: Literal["weighted_sum"]
    normalise: list[bool] | None = None

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        fused: dict[int, float] = {}
        normalise = self.normalise if self.normalise is not None else [True] * len(self.inputs)
        if len(normalise) != len(self.inputs):
            raise MethodError(f"weighted_sum: {len(normalise)} normalise flags for {len(self.inputs)} inputs")
        inputs = run_inputs(self, query, indexes)
        for weight, scale, candidates in zip(self.input_weights(), normalise, inputs, strict=True):
            if len(candidates.scores) == 0:
                continue
            low, span = float(candidates.scores.min()), float(np.ptp(candidates.scores))
            for row, score in zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True):
                value = ((score - low) / span if span > 0 else 1.0) if scale else score
                fused[row] = fused.get(row, 0.0) + weight * value
        return from_dict(fused, self.k)
