"""The operators every method starts from: vector search over one index (``O_vs``) and the fusions that
combine rankings. Each searches a batch of queries in one matrix product or index search; a run's
per-query latency is a batch of one, what a user would wait."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, PrivateAttr

from graphlake.kernels.fusion import RRF_CONSTANT, reciprocal_rank
from graphlake.kernels.results import SearchParams
from graphlake.kernels.text.vector_search import HNSWParams, exact_dense, exact_sparse, hnsw
from graphlake.retrieval.core import MAX_INPUTS, Candidates, Count, ExactBelow, Input, MethodError, Op, Request, Weight, from_dict, min_max, register, run_inputs_batch, unfill, walk
from graphlake.retrieval.models.index_set import LakeIndexSet

FILTER_EXACT_BELOW = 2_000  # an approximate index scores exactly the nodes a filter allows when fewer pass it


def dense_vectors(request: Request, indexes: LakeIndexSet) -> np.ndarray:
    """The request's queries by the corpus's dense model, one row each."""
    return np.stack([request.dense(q) for q in request.queries]) if request.queries else np.zeros((0, indexes.dense.shape[1]), np.float32)


class TopK(Op):
    """O_vs over one index: the top ``k`` nodes by its score, among the nodes a request's filter allows.

    An exact search whose order is total (``PREFIX``: score, then row) answers a narrower ``k`` with the
    first ``k`` of a wider one; ``share_widest`` gives each the widest any method asks, so that a
    request scores the corpus once for all of them (graphlake_ltr reads dense at k 100 and GraphER's
    input at k 200: at 100k passages each is a 146 MB matrix product)."""

    FILTER: ClassVar[Literal["index"]] = "index"
    PREFIX: ClassVar[bool] = False
    k: Count = 100
    _widest: int | None = PrivateAttr(None)

    def widened(self) -> Op | None:
        return self.model_copy(update={"k": self._widest}) if self._widest is not None and self._widest > self.k else None


def share_widest(methods: Iterable[Op]) -> None:
    """Let every exact search (``TopK.PREFIX``) of these methods run at the widest ``k`` any of them asks
    of the same search: its answer is the same, its first ``k``, and a request that asks several depths
    runs it once."""
    searches: dict[str, list[TopK]] = {}
    for method in methods:
        for op in walk(method):
            if isinstance(op, TopK) and op.PREFIX:
                searches.setdefault(op.model_copy(update={"k": 1}).canonical(), []).append(op)
    for found in searches.values():
        widest = max(op.k for op in found)
        for op in found:
            op._widest = widest


@register
class BM25(TopK):
    """O_vs over the BM25 index (Lucene formula); documents that share no term are not returned."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"bm25"})
    op: Literal["bm25"]

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        return unfill(*indexes.bm25.search(request.queries, self.k, SearchParams(request.allowed)))


@register
class Dense(TopK):
    """O_vs, exact: inner product of the unit query vector with every node vector (their cosine:
    the vectors are unit length), one matrix-vector product per query."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense"})
    PREFIX: ClassVar[bool] = True
    op: Literal["dense"]

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        return unfill(*exact_dense(indexes.dense, dense_vectors(request, indexes), self.k, SearchParams(request.allowed)))


@register
class DenseHNSW(TopK):
    """O_vs, approximate: faiss HNSW over the same vectors (inner product)."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense", "dense_hnsw"})
    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k", "ef_search", "filter_exact_below"})
    op: Literal["dense_hnsw"]
    ef_search: Count = 128
    filter_exact_below: ExactBelow = FILTER_EXACT_BELOW

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        allowed, vectors = request.allowed, dense_vectors(request, indexes)
        if allowed is not None and len(allowed.rows) < self.filter_exact_below:
            request.note(f"{self.op}: the {len(allowed.rows):,} nodes the filter allows were scored exactly (fewer than filter_exact_below)")
            return unfill(*exact_dense(indexes.dense, vectors, self.k, SearchParams(allowed)))
        return unfill(*hnsw(indexes.dense_hnsw, vectors, self.k, HNSWParams(allowed, self.ef_search)))


@register
class Splade(TopK):
    """O_vs over learned sparse vectors: sparse dot product."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"splade"})
    PREFIX: ClassVar[bool] = True
    op: Literal["splade"]

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        weights = sp.vstack([request.splade(q) for q in request.queries], format="csr")
        return unfill(*exact_sparse(indexes.splade, weights, self.k, SearchParams(request.allowed)))


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
    constant: float = Field(RRF_CONSTANT, ge=0)

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        return [self.fuse(inputs) for inputs in run_inputs_batch(self, request, indexes)]

    def fuse(self, inputs: list[Candidates]) -> Candidates:
        scores, rows = reciprocal_rank([candidates.rows for candidates in inputs], self.input_weights(), self.constant)
        return Candidates(scores=scores[: self.k], rows=rows[: self.k])


@register
class WeightedSum(Fusion):
    """Weighted sum of the inputs' scores, each min-max normalised per query unless ``normalise`` says
    otherwise for that input (GraphER mixes raw cosine with normalised BM25); missing = 0."""

    op: Literal["weighted_sum"]
    normalise: list[bool] | None = None

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        normalise = self.normalise if self.normalise is not None else [True] * len(self.inputs)
        if len(normalise) != len(self.inputs):
            raise MethodError(f"weighted_sum: {len(normalise)} normalise flags for {len(self.inputs)} inputs")
        return [self.fuse(inputs, normalise) for inputs in run_inputs_batch(self, request, indexes)]

    def fuse(self, inputs: list[Candidates], normalise: list[bool]) -> Candidates:
        fused: dict[int, float] = {}
        for weight, scale, candidates in zip(self.input_weights(), normalise, inputs, strict=True):
            if len(candidates.scores) == 0:
                continue
            values = min_max(candidates.scores) if scale else candidates.scores
            for row, value in zip(candidates.rows.tolist(), values.tolist(), strict=True):
                fused[row] = fused.get(row, 0.0) + weight * value
        return from_dict(fused, self.k)
