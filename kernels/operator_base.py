"""What every retrieval operator shares: candidate lists, the indexes it may read, its base model.

Kept apart from the operator catalogue so operator families (fusion, graph propagation) can live
in their own modules and still compose through ``inputs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Union

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict

from graphlake.kernels.bm25 import BM25Index

if TYPE_CHECKING:
    from graphlake.kernels.cross_encoder import CrossEncoder
    from graphlake.kernels.entity_graph import EntityGraph
    from graphlake.kernels.graph_operators import TunedRankers

@dataclass(frozen=True)
class Candidates:
    """One query's candidates: node rows (indexes into the corpus's node list) and scores, best first."""

    rows: np.ndarray
    scores: np.ndarray

    def top(self, k: int) -> Candidates:
        return Candidates(self.rows[:k], self.scores[:k])


class Indexes(Protocol):
    """What operators may read for one corpus; loaded lazily by the caller."""

    def bm25(self) -> BM25Index: ...
    def dense(self) -> np.ndarray: ...
    def dense_hnsw(self): ...
    def splade(self) -> sp.csr_matrix: ...
    def encode_dense(self, text: str) -> np.ndarray: ...
    def encode_splade(self, text: str) -> sp.csr_matrix: ...
    def entity_graph(self, hub_prune_percent: float, degree_cap: int) -> EntityGraph: ...
    def query_entities(self, text: str, extractor: str) -> list[str]: ...
    def proximity(self) -> str: ...
    def candidate_graph(self, rows: np.ndarray, proximity: str, extractor: str) -> sp.csr_matrix: ...
    def tuned_rankers(self) -> TunedRankers: ...
    def reranker(self) -> CrossEncoder: ...
    def pair_features(self, query: str, rows: np.ndarray) -> np.ndarray: ...
    def texts(self) -> list[str]: ...
    def corpus_graph(self, kinds: tuple[str, ...]) -> tuple[sp.csr_matrix, np.ndarray]: ...
    def corpus_graph_kinds(self) -> tuple[str, ...]: ...


class MethodError(ValueError):
    """A method declaration that cannot run: unknown operator, bad parameter, unknown reference."""


class Op(BaseModel):
    """An operator: its parameters are its fields; ``INDEXES`` names what it reads (see ``needs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    INDEXES: ClassVar[frozenset[str]] = frozenset()

    def indexes(self) -> frozenset[str]:
        return self.INDEXES

    def children(self) -> list:
        """The operators this one runs (names of methods or inline operators)."""
        return list(getattr(self, "inputs", ()))


def ranked(rows: np.ndarray, scores: np.ndarray, k: int) -> Candidates:
    """Top-k of a score vector, ties broken by row for determinism."""
    k = min(k, len(scores))
    if k == 0:
        return Candidates(np.zeros(0, np.int64), np.zeros(0, np.float32))
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.lexsort((rows[part], -scores[part]))]
    return Candidates(rows[order], scores[order])


Input = Union[str, "Operator"]  # "Operator" is resolved by graphlake.kernels.operators


def run_inputs(inputs: list, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> list[Candidates]:
    """Run each input: a declared method by name, or an inline operator."""
    return [(methods[item] if isinstance(item, str) else item).run(query, indexes, methods) for item in inputs]


def from_dict(scores: dict[int, float], k: int) -> Candidates:
    rows = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    return ranked(rows, values, k)
