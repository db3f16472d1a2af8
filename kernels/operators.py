"""Retrieval operators over candidate lists, and methods declared as data.

A method is a tree of operators: leaves search an index (``O_vs``), inner nodes combine or
re-score their inputs (fusion here; graph propagation in ``graph_operators``). Methods are written in
YAML/TOML as ``{op: name, ...params}``; ``inputs`` name other methods or hold inline operators.
Every operator runs one query at a time, so a run's per-query latency is what a user would wait.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Union

import numpy as np
from pydantic import Field, TypeAdapter, ValidationError

from graphlake.kernels.graph_operators import PPR, GraphRerank
from graphlake.kernels.operator_base import Candidates, Indexes, Input, MethodError, Op, from_dict, ranked, run_inputs
from graphlake.kernels.rerank_operators import GAR, CrossEncoderRerank, FastInsight


class BM25(Op):
    """O_vs over the BM25 index (Lucene formula); documents that share no term are not returned."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"bm25"})
    op: Literal["bm25"]
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        scores, rows = indexes.bm25().search([query], self.k)
        keep = scores[0] > 0
        return Candidates(rows[0][keep].astype(np.int64), scores[0][keep])


class Dense(Op):
    """O_vs, exact: inner product of the unit query vector with every node vector."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense"})
    op: Literal["dense"]
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        scores = indexes.dense() @ indexes.encode_dense(query)
        return ranked(np.arange(len(scores)), scores, self.k)


class DenseHNSW(Op):
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


class Splade(Op):
    """O_vs over learned sparse vectors: sparse dot product."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"splade"})
    op: Literal["splade"]
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        scores = np.asarray((indexes.splade() @ indexes.encode_splade(query).T).todense()).ravel()
        rows = np.flatnonzero(scores > 0)
        return ranked(rows, scores[rows], self.k)


class RRF(Op):
    """Reciprocal rank fusion: sum of weight / (constant + rank) over the inputs (Cormack et al., 2009)."""

    op: Literal["rrf"]
    inputs: list[Input] = Field(min_length=1)
    weights: list[float] | None = None
    constant: float = Field(60.0, ge=0)
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        fused: dict[int, float] = {}
        for weight, candidates in zip(_weights(self), run_inputs(self.inputs, query, indexes, methods), strict=True):
            for rank, row in enumerate(candidates.rows.tolist(), start=1):
                fused[row] = fused.get(row, 0.0) + weight / (self.constant + rank)
        return from_dict(fused, self.k)


class WeightedSum(Op):
    """Weighted sum of the inputs' scores, each min-max normalised per query unless ``normalise`` says
    otherwise for that input (GraphER mixes raw cosine with normalised BM25); missing = 0."""

    op: Literal["weighted_sum"]
    inputs: list[Input] = Field(min_length=1)
    weights: list[float] | None = None
    normalise: list[bool] | None = None
    k: int = Field(100, gt=0)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        fused: dict[int, float] = {}
        normalise = self.normalise if self.normalise is not None else [True] * len(self.inputs)
        if len(normalise) != len(self.inputs):
            raise MethodError(f"weighted_sum: {len(normalise)} normalise flags for {len(self.inputs)} inputs")
        inputs = run_inputs(self.inputs, query, indexes, methods)
        for weight, scale, candidates in zip(_weights(self), normalise, inputs, strict=True):
            if len(candidates.scores) == 0:
                continue
            low, span = float(candidates.scores.min()), float(np.ptp(candidates.scores))
            for row, score in zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True):
                value = ((score - low) / span if span > 0 else 1.0) if scale else score
                fused[row] = fused.get(row, 0.0) + weight * value
        return from_dict(fused, self.k)


Operator = Annotated[
    Union[BM25, Dense, DenseHNSW, Splade, RRF, WeightedSum, PPR, GraphRerank, CrossEncoderRerank, GAR, FastInsight],
    Field(discriminator="op"),
]
for _model in (RRF, WeightedSum, PPR, GraphRerank, CrossEncoderRerank, GAR):
    _model.model_rebuild(_types_namespace={"Operator": Operator})
OPERATOR_NAMES = (
    "bm25", "dense", "dense_hnsw", "splade", "rrf", "weighted_sum", "ppr", "graph_rerank", "cross_encoder", "gar", "fastinsight",
)
_OPERATOR = TypeAdapter(Operator)


def _weights(op: RRF | WeightedSum) -> list[float]:
    if op.weights is None:
        return [1.0] * len(op.inputs)
    if len(op.weights) != len(op.inputs):
        raise MethodError(f"{op.op}: {len(op.weights)} weights for {len(op.inputs)} inputs")
    return op.weights


METHOD_NAME = re.compile(r"[A-Za-z0-9_]+")


def parse_methods(declared: Mapping[str, Any]) -> dict[str, Any]:
    """Validate every method; errors name the method, the operator and the offending parameter."""
    methods = {}
    for name, spec in declared.items():
        if not isinstance(name, str) or not METHOD_NAME.fullmatch(name):
            raise MethodError(f"method {name!r}: a name is letters, digits and underscores (it names the method's Dagster assets)")
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
    for item in [*(spec.get("inputs") or []), spec.get("fallback")]:
        if isinstance(item, Mapping):
            _check_ops(name, item)


def _check_references(name: str, method: Any, methods: Mapping[str, Any], path: list[str]) -> None:
    for item in method.children():
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
    found = set(method.indexes())
    for item in method.children():
        found |= needs(methods[item] if isinstance(item, str) else item, methods)
    return found
