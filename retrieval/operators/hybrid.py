"""Allan-Poe's operators (``O_vs`` over the fused vectors): the hybrid graph index searched with any
path weights, the exact fused scorer it is measured against, and the separate-then-fuse baseline.

Weights are per path (``dense``, ``sparse`` = SPLADE, ``lexical`` = BM25) and multiply each path's
calibration (``calibrate: false`` gives raw scales, where BM25 and SPLADE drown the cosine), so 1/1/1
means the three paths count alike: a node's nearest neighbour scores about 1 on each. With no dense
weight, a node no sparse path scores is not returned (as ``splade`` and ``bm25`` return none).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphlake.kernels.hybrid_vectors import Queries
from graphlake.retrieval.indexes import LakeIndexes, hybrid_vectors
from graphlake.retrieval.methods import Candidates, Op, from_dict, ranked, register
from graphlake.retrieval.operators.core import BM25, DenseHNSW, Splade


class PathWeights(BaseModel):
    """How much each path counts, in calibrated units."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dense: float = Field(1.0, ge=0)
    sparse: float = Field(1.0, ge=0)
    lexical: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _some(self) -> PathWeights:
        if not (self.dense or self.sparse or self.lexical):
            raise ValueError("at least one path needs a weight above 0")
        return self

    def vector(self) -> np.ndarray:
        return np.array([self.dense, self.sparse, self.lexical], dtype=np.float64)


class Hybrid(Op):
    """What the fused-vector operators share: weights, calibration, and the query on the three paths."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"hybrid_graph", "dense", "splade", "bm25"})
    weights: PathWeights = PathWeights()
    calibrate: bool = True
    k: int = Field(100, gt=0)

    def scaled(self, indexes: LakeIndexes) -> np.ndarray:
        """The weights times the index's calibration (unless ``calibrate`` is off)."""
        weights = self.weights.vector()
        return weights * indexes.get("hybrid_graph").graph.scales if self.calibrate else weights

    @staticmethod
    def encode(query: str, indexes: LakeIndexes) -> Queries:
        return Queries(indexes.encode_dense(query)[None, :], sp.csr_matrix(indexes.encode_splade(query)), indexes.get("bm25").token_counts([query]))

    def keep(self, rows: np.ndarray, scores: np.ndarray) -> Candidates:
        """Without a dense weight, only nodes some sparse path scores."""
        if not self.weights.dense:
            positive = scores > 0
            rows, scores = rows[positive], scores[positive]
        return Candidates(rows.astype(np.int64), scores)


@register
class HybridGraphSearch(Hybrid):
    """Allan-Poe (Algorithm 2): best-first search of the hybrid graph with a pool of ``candidates``."""

    op: Literal["hybrid_graph"]
    candidates: int = Field(128, gt=0)

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        rows, scores = indexes.get("hybrid_graph").search(self.encode(query, indexes), self.scaled(indexes), self.candidates, self.k)
        return self.keep(rows, scores)


@register
class FusedExact(Hybrid):
    """Brute force over the fused vectors: every node scored; the oracle the graph search is measured against."""

    op: Literal["fused_exact"]

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        scores = hybrid_vectors(indexes).fused(self.encode(query, indexes), self.scaled(indexes))[0]
        top = ranked(np.arange(len(scores)), scores, self.k)
        return self.keep(top.rows, top.scores)


@register
class Multipath(Hybrid):
    """Separate-then-fuse (§2.2.3; Milvus, Infinity): each weighted path's own top ``depth`` (faiss HNSW,
    exact SPLADE, BM25), summed with the same calibrated weights; a path that missed a node adds 0."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"hybrid_graph", "dense", "dense_hnsw", "splade", "bm25"})
    op: Literal["multipath"]
    depth: int = Field(100, gt=0)

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        paths = (DenseHNSW(op="dense_hnsw", k=self.depth), Splade(op="splade", k=self.depth), BM25(op="bm25", k=self.depth))
        fused: dict[int, float] = {}
        for weight, path in zip(self.scaled(indexes), paths, strict=True):
            if weight:
                found = path.run(query, indexes)
                for row, score in zip(found.rows.tolist(), found.scores.tolist(), strict=True):
                    fused[row] = fused.get(row, 0.0) + weight * score
        top = from_dict(fused, self.k)
        return self.keep(top.rows, top.scores)
