"""Methods: trees of registered operators declared as data, parsed once, run one query at a time.

A method is written in YAML as ``{op: name, ...params}``; ``inputs`` name other methods or hold
inline operators, and are resolved to operator objects when the methods are parsed, so running one
needs nothing but the query and the corpus's indexes. An operator is a pydantic model (its fields
are its parameters, unknown ones refused) registered under its ``op`` name with ``@register``; what
it reads is its ``INDEXES`` (names in the index registry, ``retrieval/indexes.py``), from which the
runs' inputs, staleness and asset lineage follow.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar, get_args

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, ValidationInfo

from graphlake.common.progress import StepProgress
from graphlake.warehouse.config_files import key_line, load_mapping

if TYPE_CHECKING:
    import pyarrow as pa

    from graphlake.retrieval.indexes import LakeIndexes
    from graphlake.warehouse.storage import Lake

DEFAULT_METHODS = Path(__file__).resolve().parents[1] / "pipelines" / "methods.yaml"
METHOD_NAME = re.compile(r"[A-Za-z0-9_]+")
SPLIT_PARAM = "query_split"  # in a run's params when it ran one split's queries only
SAMPLE_PARAM = "query_sample"  # and when it ran a seeded sample of that many of them


def method_asset_names(name: str) -> tuple[str, str, str]:
    """The assets a declared method gets: its run, its metrics, its per-query metrics."""
    return f"run_{name}", f"metrics_{name}", f"query_metrics_{name}"


class MethodError(ValueError):
    """A method declaration that cannot run: unknown operator, bad parameter, unknown reference."""


@dataclass(frozen=True)
class Candidates:
    """One query's candidates: node rows (indexes into the corpus's node list) and scores, best first;
    ``meta`` carries what an operator tells the ones above it about this query (GRASP's plan metadata)."""

    rows: np.ndarray
    scores: np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)

    def top(self, k: int) -> Candidates:
        return Candidates(self.rows[:k], self.scores[:k], self.meta)


def ranked(rows: np.ndarray, scores: np.ndarray, k: int) -> Candidates:
    """Top-k of a score vector, ties broken by row for determinism."""
    k = min(k, len(scores))
    if k == 0:
        return Candidates(np.zeros(0, np.int64), np.zeros(0, np.float32))
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.lexsort((rows[part], -scores[part]))]
    return Candidates(rows[order], scores[order])


def from_dict(scores: dict[int, float], k: int) -> Candidates:
    rows = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    return ranked(rows, values, k)


class _Nested(Exception):
    """Carries a MethodError out of a pydantic validator unwrapped (pydantic wraps ValueErrors)."""

    def __init__(self, error: MethodError) -> None:
        self.error = error


def _resolve(value: Any, info: ValidationInfo) -> Any:
    """An input as an operator: a declared method's by name, or an inline one parsed in place."""
    if isinstance(value, Op) or not isinstance(value, str | Mapping):
        return value
    context = info.context or {}
    try:
        if isinstance(value, str):
            if "resolve" not in context:
                raise MethodError(f"input {value!r} names a method, but no methods were given to resolve it")
            return context["resolve"](value)
        return parse_operator(value, context.get("method", "?"), context.get("resolve"))
    except MethodError as error:
        raise _Nested(error) from None


class Op(BaseModel):
    """An operator: its parameters are its fields; ``INDEXES`` names what it reads (see ``needs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    INDEXES: ClassVar[frozenset[str]] = frozenset()

    def indexes(self) -> frozenset[str]:
        """Index kinds it reads itself; ``kind/part`` where it needs one part of a kind (a trained network)."""
        return self.INDEXES

    def children(self) -> list[Op]:
        """The operators this one runs."""
        return list(getattr(self, "inputs", ()))

    def uses_llm(self) -> bool:
        """Whether it calls the lake's LLM server itself."""
        return False

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        raise NotImplementedError


Input = Annotated[Op, BeforeValidator(_resolve)]  # a method's name or an inline operator, resolved when parsed

OPERATORS: dict[str, type[Op]] = {}
OpClass = TypeVar("OpClass", bound=type[Op])


def register(cls: OpClass) -> OpClass:
    """Make an operator class usable in methods under the name its ``op: Literal[...]`` field carries."""
    (name,) = get_args(cls.model_fields["op"].annotation)
    known = OPERATORS.get(name)
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        raise MethodError(f"operator {name!r} is registered twice: {known.__module__}.{known.__qualname__} and {cls.__module__}.{cls.__qualname__}")
    OPERATORS[name] = cls
    return cls


def run_inputs(op: Op, query: str, indexes: LakeIndexes) -> list[Candidates]:
    return [item.run(query, indexes) for item in op.inputs]


def parse_operator(spec: Mapping[str, Any], method: str, resolve: Callable[[str], Op] | None = None) -> Op:
    """One operator from its declaration; errors name the method, the operator and the parameter."""
    _load_operators()
    if not isinstance(spec, Mapping) or "op" not in spec:
        raise MethodError(f"method {method!r}: expected a mapping with 'op', got {spec!r}")
    cls = OPERATORS.get(spec["op"])
    if cls is None:
        raise MethodError(f"method {method!r}: unknown operator {spec['op']!r}; known: {', '.join(OPERATORS)}")
    try:
        return cls.model_validate(dict(spec), context={"method": method, "resolve": resolve})
    except _Nested as nested:
        raise nested.error from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, (spec['op'], *e['loc'])))}: {e['msg']}" for e in error.errors())
        raise MethodError(f"method {method!r}: {problems}") from None


class Methods(dict[str, Op]):
    """Parsed methods by name, and the declarations they came from."""

    def __init__(self, parsed: dict[str, Op], declared: Mapping[str, Any]) -> None:
        super().__init__(parsed)
        self.declared = dict(declared)

    def params(self, name: str) -> dict:
        """The declaration with named inputs expanded, so a run records everything that produced it."""
        spec = dict(self.declared[name])
        if "inputs" in spec:
            spec["inputs"] = [self.params(item) if isinstance(item, str) else item for item in spec["inputs"]]
        return spec


def parse_methods(declared: Mapping[str, Any]) -> Methods:
    """Validate every method and resolve its inputs; errors name the method and the problem."""
    for name, spec in declared.items():
        if not isinstance(name, str) or not METHOD_NAME.fullmatch(name):
            raise MethodError(f"method {name!r}: a name is letters, digits and underscores (it names the method's Dagster assets)")
        if not isinstance(spec, Mapping) or "op" not in spec:
            raise MethodError(f"method {name!r}: expected a mapping with 'op', got {spec!r}")
    parsed: dict[str, Op] = {}

    def resolve(name: str, path: tuple[str, ...]) -> Op:
        if name not in parsed:
            if name not in declared:
                raise MethodError(f"method {path[-1]!r}: input {name!r} is not a declared method")
            if name in path:
                raise MethodError(f"method {path[-1]!r}: inputs form a cycle through {name!r}")
            parsed[name] = parse_operator(declared[name], name, lambda item: resolve(item, (*path, name)))
        return parsed[name]

    for name in declared:
        resolve(name, ())
    return Methods({name: parsed[name] for name in declared}, declared)


def load_methods(home: Path | None = None) -> Methods:
    """The project's methods, overridden and extended by the lake's ``methods.yaml`` (none: the project's alone)."""
    declared = load_mapping(DEFAULT_METHODS)
    override = Path(home) / "methods.yaml" if home is not None else None
    overrides = load_mapping(override) if override is not None and override.is_file() else {}
    try:
        return parse_methods(declared | overrides)
    except MethodError as error:
        named = re.match(r"method '(\w+)'", str(error))
        source = override if named and named.group(1) in overrides else DEFAULT_METHODS
        raise MethodError(f"{key_line(source, named.group(1)) if named else source}: {error}") from None


def needs(op: Op) -> set[str]:
    """The index kinds (``kind`` or ``kind/part``) a method reads, through its inputs."""
    found = set(op.indexes())
    for child in op.children():
        found |= needs(child)
    return found


def uses_llm(op: Op) -> bool:
    """Whether a method calls the LLM server: its assets are opt-in, as the LLM assets are (group ``llm``)."""
    return op.uses_llm() or any(uses_llm(child) for child in op.children())


def _load_operators() -> None:
    """Import the project's operator modules, which register themselves."""
    from graphlake.retrieval import operators  # noqa: F401


def run_method(
    name: str,
    method: Op,
    params: dict,
    lake: Lake,
    corpus: str,
    split: str | None = None,
    reuse_pairs: bool = False,
    sample: int | None = None,
    report: Callable[[str], None] | None = None,
) -> tuple[pa.Table, dict]:
    """Run the corpus's queries (one split's, if given; a seeded ``sample`` of them, if given) through
    the method, one at a time, timing each; ``report`` hears the progress."""
    import pyarrow as pa

    from graphlake.retrieval.indexes import LakeIndexes
    from graphlake.warehouse.storage import StorageError

    queries = select_queries(lake.read("queries", {"corpus": corpus}).select(["query_id", "text", "split"]), split, sample)
    if split is not None:
        if not queries.num_rows:
            raise StorageError(f"corpus {corpus!r} has no queries in split {split!r}")
        params = {**params, SPLIT_PARAM: split}
    if sample is not None:
        params = {**params, SAMPLE_PARAM: sample}
    indexes = LakeIndexes(lake, corpus, reuse_pairs)
    node_ids, doc_ids = indexes.node_ids, indexes.doc_ids()
    method.run("warm up", indexes)  # load indexes and models outside the timed loop
    columns: dict[str, list] = {k: [] for k in ("query_id", "rank", "node_id", "doc_id", "score", "latency_ms")}
    latencies = []
    progress = StepProgress(f"{name} on {corpus}", queries.num_rows, report, unit="queries")
    for query_id, text in zip(queries.column("query_id").to_pylist(), queries.column("text").to_pylist(), strict=True):
        started = time.perf_counter()
        candidates = method.run(text, indexes)
        latency = (time.perf_counter() - started) * 1000
        latencies.append(latency)
        for rank, (row, score) in enumerate(zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True), start=1):
            columns["query_id"].append(query_id)
            columns["rank"].append(rank)
            columns["node_id"].append(node_ids[row])
            columns["doc_id"].append(doc_ids[row])
            columns["score"].append(float(score))
            columns["latency_ms"].append(latency)
        progress.advance()
    n = len(columns["rank"])
    table = pa.table(
        {"run_id": [uuid.uuid4().hex] * n, "method": [name] * n, "params": [json.dumps(params, sort_keys=True)] * n, **columns}
    )
    summary = {f"latency_{p}_ms": round(float(np.percentile(latencies, int(p[1:]))), 3) if latencies else 0.0 for p in ("p50", "p95", "p99")}
    summary = {"queries": len(latencies), **summary}
    if indexes.pair_cache:
        summary |= {"reused_pairs": indexes.pair_cache.hits, "encoded_pairs": indexes.pair_cache.misses}
    notes = ([] if latencies else [f"corpus {corpus!r} has no queries to run; graphlake query searches it"]) + list(indexes.notes)
    return table, summary | ({"note": "\n".join(notes)} if notes else {})


def select_queries(queries: pa.Table, split: str | None, sample: int | None) -> pa.Table:
    """The queries a run covers: the split's (every one if None), then, with ``sample``, that many of them
    drawn with seed 0 (all when there are fewer), in stored order. Slow methods (a cross-encoder over
    100 serialised candidates) are evaluated on such a sample on a CPU; its metrics say how many queries."""
    import pyarrow.compute as pc

    if split is not None:
        queries = queries.filter(pc.equal(queries.column("split"), split))
    if sample is None or sample >= queries.num_rows:
        return queries
    picked = np.sort(np.random.default_rng(0).choice(queries.num_rows, sample, replace=False))
    return queries.take(picked)


def search(home: Path, corpus: str, name: str, text: str, top: int) -> tuple[list[dict], float, list[str]]:
    """One ad-hoc query: hits with node id, score, title and text, the search time in ms, and the
    notes of operators that ranked by a default (an untrained model)."""
    from graphlake.retrieval.indexes import LakeIndexes
    from graphlake.warehouse.storage import Lake

    method = load_methods(home)[name]
    indexes = LakeIndexes(Lake(home), corpus)
    method.run("warm up", indexes)
    started = time.perf_counter()
    candidates = method.run(text, indexes).top(top)
    latency = (time.perf_counter() - started) * 1000
    titles, texts = indexes.titles(), indexes.nodes().column("text")
    hits = [
        {"node_id": indexes.node_ids[row], "score": float(score), "title": titles[indexes.doc_ids()[row]], "text": texts[row].as_py()}
        for row, score in zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True)
    ]
    return hits, latency, list(indexes.notes)
