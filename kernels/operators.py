"""Retrieval operators over candidate lists, and methods declared as data.

A method is a tree of operators: leaves search an index (``O_vs``), inner nodes combine or
re-score their inputs (``fuse`` now; graph and model operators later). Methods are written in
YAML/TOML as ``{op: name, ...params}``; ``inputs`` name other methods or hold inline operators.
Every operator runs one query at a time, so a run's per-query latency is what a user would wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Protocol, Union

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from graphlake.kernels.bm25 import BM25Index


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


class MethodError(ValueError):
    """A method declaration that cannot run: unknown operator, bad parameter, unknown reference."""


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _ranked(rows: np.ndarray, scores: np.ndarray, k: int) -> Candidates:
    """Top-k of a score vector, ties broken by row for determinism."""
    k = min(k, len(scores))
    if k == 0:
        return Candidates(np.zeros(0, np.int64), np.zeros(0, np.float32))
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.lexsort((rows[part], -scores[part]))]
    return Candidates(rows[order], scores[order])


class BM25(_Op):
    """O_vs over the BM25 index (Lucene formula); documents that share no term are not returned."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"bm25"})
    op: Literal["bm25"]
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        scores, rows = indexes.bm25().search([query], self.k)
        keep = scores[0] > 0
        return Candidates(rows[0][keep].astype(np.int64), scores[0][keep])


class Dense(_Op):
    """O_vs, exact: inner product of the unit query vector with every node vector."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense"})
    op: Literal["dense"]
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        scores = indexes.dense() @ indexes.encode_dense(query)
        return _ranked(np.arange(len(scores)), scores, self.k)


class DenseHNSW(_Op):
    """O_vs, approximate: faiss HNSW over the same vectors (inner product)."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense", "dense_hnsw"})
    op: Literal["dense_hnsw"]
    k: int = Field(100, gt=0)
    ef_search: int = Field(128, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        index = indexes.dense_hnsw()
        index.hnsw.efSearch = max(self.ef_search, self.k)
        scores, rows = index.search(indexes.encode_dense(query)[None, :], self.k)
        keep = rows[0] >= 0
        return Candidates(rows[0][keep].astype(np.int64), scores[0][keep])


class Splade(_Op):
    """O_vs over learned sparse vectors: sparse dot product."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"splade"})
    op: Literal["splade"]
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        scores = np.asarray((indexes.splade() @ indexes.encode_splade(query).T).todense()).ravel()
        rows = np.flatnonzero(scores > 0)
        return _ranked(rows, scores[rows], self.k)


Input = Union[str, "Operator"]


class RRF(_Op):
    """Reciprocal rank fusion: sum of weight / (constant + rank) over the inputs (Cormack et al., 2009)."""

    op: Literal["rrf"]
    inputs: list[Input] = Field(min_length=1)
    weights: list[float] | None = None
    constant: float = Field(60.0, ge=0)
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        fused: dict[int, float] = {}
        for weight, candidates in zip(_weights(self), _run_inputs(self.inputs, query, indexes, methods), strict=True):
            for rank, row in enumerate(candidates.rows.tolist(), start=1):
                fused[row] = fused.get(row, 0.0) + weight / (self.constant + rank)
        return _from_dict(fused, self.k)


class WeightedSum(_Op):
    """Weighted sum of each input's scores after min-max normalisation per query (missing = 0)."""

    op: Literal["weighted_sum"]
    inputs: list[Input] = Field(min_length=1)
    weights: list[float] | None = None
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        fused: dict[int, float] = {}
        for weight, candidates in zip(_weights(self), _run_inputs(self.inputs, query, indexes, methods), strict=True):
            if len(candidates.scores) == 0:
                continue
            low, high = float(candidates.scores.min()), float(candidates.scores.max())
            span = high - low
            for row, score in zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True):
                fused[row] = fused.get(row, 0.0) + weight * ((score - low) / span if span > 0 else 1.0)
        return _from_dict(fused, self.k)


Operator = Annotated[Union[BM25, Dense, DenseHNSW, Splade, RRF, WeightedSum], Field(discriminator="op")]
for _model in (RRF, WeightedSum):
    _model.model_rebuild()
OPERATOR_NAMES = ("bm25", "dense", "dense_hnsw", "splade", "rrf", "weighted_sum")
_OPERATOR = TypeAdapter(Operator)


def _weights(op: RRF | WeightedSum) -> list[float]:
    if op.weights is None:
        return [1.0] * len(op.inputs)
    if len(op.weights) != len(op.inputs):
        raise MethodError(f"{op.op}: {len(op.weights)} weights for {len(op.inputs)} inputs")
    return op.weights


def _run_inputs(inputs: list[Input], query: str, indexes: Indexes, methods: Mapping[str, Any]) -> list[Candidates]:
    return [(methods[item] if isinstance(item, str) else item).run(query, indexes, methods) for item in inputs]


def _from_dict(scores: dict[int, float], k: int) -> Candidates:
    rows = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    return _ranked(rows, values, k)


def parse_methods(declared: Mapping[str, Any]) -> dict[str, Any]:
    """Validate every method; errors name the method, the operator and the offending parameter."""
    methods = {}
    for name, spec in declared.items():
        if not isinstance(spec, Mapping) or "op" not in spec:
            raise MethodError(f"method {name!r}: expected a mapping with 'op', got {spec!r}")
        _check_ops(name, spec)
        try:
            methods[name] = _OPERATOR.validate_python(dict(spec))
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise MethodError(f"method {name!r}: {problems}") from None
    for name, method in methods.items():
        _check_references(name, method, methods, [])
    return methods


def _check_ops(name: str, spec: Mapping[str, Any]) -> None:
    """A clear message for an unknown operator before pydantic's union error."""
    if spec.get("op") not in OPERATOR_NAMES:
        raise MethodError(f"method {name!r}: unknown operator {spec.get('op')!r}; known: {', '.join(OPERATOR_NAMES)}")
    for item in spec.get("inputs") or []:
        if isinstance(item, Mapping):
            _check_ops(name, item)


def _check_references(name: str, method: Any, methods: Mapping[str, Any], path: list[str]) -> None:
    for item in getattr(method, "inputs", []):
        if isinstance(item, str):
            if item not in methods:
                raise MethodError(f"method {name!r}: input {item!r} is not a declared method")
            if item in path + [name]:
                raise MethodError(f"method {name!r}: inputs form a cycle through {item!r}")
            _check_references(item, methods[item], methods, path + [name])
        else:
            _check_references(name, item, methods, path)


def needs(method: Any, methods: Mapping[str, Any]) -> set[str]:
    """The indexes a method reads, through its inputs."""
    found = set(getattr(method, "INDEXES", ()))
    for item in getattr(method, "inputs", ()):
        found |= needs(methods[item] if isinstance(item, str) else item, methods)
    return found
