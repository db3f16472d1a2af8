"""The bottom of retrieval: operators, their candidates and errors, the operator registry, one walk of
an operator tree, and the two things every operator receives: a ``Request`` (one search's own state)
and the corpus's ``Indexes`` (long-lived and shared between requests). Everything above builds on
these names; this module imports no other layer of retrieval.

An operator is a pydantic model (its fields are its parameters, unknown ones refused) registered under
its ``op`` name with ``@register``; what it reads is its ``INDEXES`` (index kinds,
``retrieval/index/kinds.py``), from which the runs' inputs, staleness and asset lineage follow.
``run_batch(request, indexes)`` is the contract, in the manner of Lucene's searcher and query: the
indexes are loaded once and shared by every request, while the queries, their encodings, the filter's
rows, the notes and the candidates shared between operators belong to the request that made them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, TypeVar, get_args

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo

from graphlake.common.stopping import Stop, check
from graphlake.kernels.results import Allowed, best_of, unfilled

if TYPE_CHECKING:
    import scipy.sparse as sp

    from graphlake.warehouse.storage import LakeStorage

METHOD_NAME = re.compile(r"[A-Za-z0-9_]+")

# The upper bounds of what one query may ask for, so that no request's cost is unbounded: a stage's
# arrays are at most MAX_CANDIDATES long (and never longer than the corpus: the kernels clamp to it),
# a cross-encoder scores at most MAX_MODEL_CALLS pairs, a weight is finite and at most MAX_WEIGHT.
MAX_CANDIDATES = 10_000
MAX_MODEL_CALLS = 1_000
MAX_WEIGHT = 1e6
MAX_KEYWORDS = 32
SHOWN_NAMES = 5  # refused names an error lists
MAX_INPUTS = 64  # rankings one fusion combines
MAX_EXACT_NODES = 10_000_000  # a filter_exact_below: beyond every corpus one machine holds
Count = Annotated[int, Field(gt=0, le=MAX_CANDIDATES)]  # k, depth, a pool of candidates, ef_search
ModelCalls = Annotated[int, Field(gt=0, le=MAX_MODEL_CALLS)]  # a reranker's depth, a budget of cross-encoder calls
Weight = Annotated[float, Field(ge=0, le=MAX_WEIGHT)]
Keyword = Annotated[str, Field(min_length=1, max_length=100)]
ExactBelow = Annotated[int, Field(ge=0, le=MAX_EXACT_NODES)]  # fewer nodes than this pass a filter: score them exactly


def method_asset_names(name: str) -> tuple[str, str, str]:
    """The assets a declared method gets: its run, its metrics, its per-query metrics."""
    return f"run_{name}", f"metrics_{name}", f"query_metrics_{name}"


class MethodError(ValueError):
    """A method declaration that cannot run: unknown operator, bad parameter, unknown reference;
    ``method`` names the declared method at fault, when one is."""

    def __init__(self, message: str, method: str | None = None) -> None:
        super().__init__(message)
        self.method = method


@dataclass(frozen=True, kw_only=True)
class Candidates:
    """One query's candidates in the kernels' vocabulary (``kernels/results.py``): scores (float64) and
    node rows (indexes into the corpus's node list), best first, ties to the lower row; ``meta`` carries
    what an operator tells the ones above it about this query (GRASP's plan metadata)."""

    scores: np.ndarray
    rows: np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scores", np.asarray(self.scores, np.float64))  # a float32 kernel's widened: no value changes

    def top(self, k: int) -> Candidates:
        return Candidates(scores=self.scores[:k], rows=self.rows[:k], meta=self.meta)


def unfill(scores: np.ndarray, rows: np.ndarray) -> list[Candidates]:
    """Each query's candidates from a search kernel's ``(scores, rows)`` (``kernels/results.py``), in its
    order, without the fill: the one way the kernels' answers come up."""
    return [Candidates(scores=kept[0], rows=kept[1]) for kept in (unfilled(s, r) for s, r in zip(scores, rows, strict=True))]


def ranked(*, scores: np.ndarray, rows: np.ndarray, k: int) -> Candidates:
    """The top ``k`` of ``rows`` by their ``scores``, ties to the lower row (by keyword, as ``Candidates``)."""
    order = best_of(scores, rows, k)
    return Candidates(scores=scores[order], rows=np.asarray(rows[order], np.int64))


def min_max(scores: np.ndarray) -> np.ndarray:
    """Scores scaled to [0, 1] within their list (all 1 where they are equal), so that paths, and
    corpora, with other score scales compare."""
    scores = np.asarray(scores, np.float64)
    span = float(np.ptp(scores)) if len(scores) else 0.0
    return (scores - scores.min()) / span if span > 0 else np.ones(len(scores))


def from_dict(scores: dict[int, float], k: int) -> Candidates:
    rows = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    return ranked(scores=values, rows=rows, k=k)


LEXICAL = frozenset({"bm25", "splade"})  # a method reading only these encodes no dense query vector
SPLADE_READERS = frozenset({"splade", "hybrid_graph"})


def query_encodings(read: set[str] | frozenset[str]) -> tuple[bool, bool]:
    """Whether a method reading the index kinds ``read`` (``needs``) encodes its queries with the dense
    model, and with SPLADE."""
    return not read <= LEXICAL, bool(read & SPLADE_READERS)


class QueryEncoders(Protocol):
    """The corpus's query encoders (``retrieval/index/encoders.py``), which a request is given."""

    def dense(self, texts: list[str]) -> np.ndarray: ...

    def splade(self, texts: list[str]) -> sp.csr_matrix: ...


@dataclass
class Request:
    """One search's own state, made per request by its caller (the API's searcher, a run, a training
    step) and dropped with it: the queries,
    the number of hits kept (``k``), the rows the filter allows (None: all), their encodings (computed
    ahead for the batch by ``prime``) and entity mentions (``mentions``), the notes operators leave (what they did in place of what they
    could not, in order, once each) and each operator's candidates per query, so that an operator several
    methods or inputs share runs once per request (``shared_run``).

    ``of(queries)`` is the same request for some of its queries: the encodings, mentions, notes and
    candidates stay shared, and so does ``stop``, the deadline or cause that ends the search early."""

    queries: list[str]
    encoders: QueryEncoders
    k: int = 10
    allowed: Allowed | None = None
    notes: dict[str, None] = field(default_factory=dict)
    encoded: dict[str, tuple[np.ndarray | None, sp.csr_matrix | None]] = field(default_factory=dict)
    ran: dict[tuple[str, str], Candidates] = field(default_factory=dict)
    found_mentions: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    stop: Stop | None = None  # checked before each operator runs and before the queries are encoded

    def of(self, queries: list[str]) -> Request:
        return replace(self, queries=list(queries))

    def note(self, text: str) -> None:
        self.notes.setdefault(text)

    def prime(self, read: set[str] | frozenset[str]) -> None:
        """Encode the request's queries at once (each encoder one batched call) for a method reading the
        index kinds ``read`` (``needs``), for ``dense`` and ``splade`` to answer from."""
        dense, splade = query_encodings(read)
        texts = [t for t in dict.fromkeys(self.queries) if t not in self.encoded]
        if not texts or not (dense or splade):
            return
        check(self.stop, "encoding the queries")
        vectors = self.encoders.dense(texts) if dense else [None] * len(texts)
        weights = self.encoders.splade(texts) if splade else None
        for i, text in enumerate(texts):
            self.encoded[text] = (vectors[i], weights[i] if weights is not None else None)

    def dense(self, query: str) -> np.ndarray:
        """The query's dense vector, by the corpus's dense model."""
        primed = self.encoded.get(query, (None, None))[0]
        return primed if primed is not None else self.encoders.dense([query])[0]

    def splade(self, query: str) -> sp.csr_matrix:
        """The query's SPLADE weights, a (1, vocabulary) row."""
        primed = self.encoded.get(query, (None, None))[1]
        return primed if primed is not None else self.encoders.splade([query])

    def mentions(self, texts: list[str], extractor: str = "spacy") -> list[list[tuple[str, str]]]:
        """Each text's entity mentions (name, type) by ``extractor`` (``spacy`` or ``regex``), the texts
        not read yet in one pass: the operators of a request share them (SPRIG's seeds, GRASP's planner)."""
        missing = [t for t in dict.fromkeys(texts) if (extractor, t) not in self.found_mentions]
        if missing:
            from graphlake.kernels.text.entities import regex_entities, spacy_entities  # spaCy loads with the first query that needs it

            extract = {"spacy": spacy_entities, "regex": regex_entities}[extractor]
            self.found_mentions.update(((extractor, t), found) for t, found in zip(missing, extract(missing), strict=True))
        return [self.found_mentions[extractor, t] for t in texts]

    def shared(self, key: str, compute: Callable[[Request], list[Candidates]]) -> list[Candidates]:
        """Per query, what ``compute`` gives for the operator ``key`` names, computed only for the queries
        this request has not asked it of yet."""
        missing = [q for q in dict.fromkeys(self.queries) if (key, q) not in self.ran]
        if missing:
            self.ran.update(((key, q), found) for q, found in zip(missing, compute(self.of(missing)), strict=True))
        return [self.ran[key, q] for q in self.queries]


def masked(candidates: Candidates, allowed: Allowed | None) -> Candidates:
    """The candidates the mask allows. Most operators search within it already; one that searches every
    row (FastInsight's dense fallback and graph expansion, GAR's frontier) would otherwise return the
    snapshot's node of a document deleted or rewritten since."""
    if allowed is None or not len(candidates.rows):
        return candidates
    keep = allowed.keep(candidates.rows)
    return candidates if keep.all() else replace(candidates, scores=candidates.scores[keep], rows=candidates.rows[keep])


class Indexes(Protocol):
    """What the operator contract needs of a corpus's loaded indexes (``retrieval/index/index_set.py``:
    ``IndexSet``, which operators read through its typed handles)."""

    lake: LakeStorage
    corpus: str
    encoders: QueryEncoders

    def get(self, name: str) -> Any: ...


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
    """An operator: its parameters are its fields; ``INDEXES`` names what it reads (see ``needs``).

    ``run_batch`` is the contract: each query's candidates for a batch of queries, inputs run once for
    the whole batch; ``run`` is a batch of one."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    INDEXES: ClassVar[frozenset[str]] = frozenset()
    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k"})  # parameters a request may set: no index is built from them
    # how it honours a request's metadata filter (``Request.allowed``): "index" (it searches only the
    # allowed nodes), "inputs" (it returns only its inputs' candidates); None: it cannot, and refuses one
    FILTER: ClassVar[Literal["index", "inputs"] | None] = None
    _key: str | None = PrivateAttr(None)
    _needs: frozenset[str] | None = PrivateAttr(None)

    def canonical(self) -> str:
        """The canonical declaration (every parameter, inputs expanded): equal keys rank alike, so a
        request runs each distinct operator once however many methods share it."""
        if self._key is None:
            self._key = self.model_dump_json(serialize_as_any=True)
        return self._key

    def __eq__(self, other: object) -> bool:
        """Equal declarations (the cached key and reads are not part of what an operator is)."""
        return isinstance(other, Op) and self.canonical() == other.canonical()

    def __hash__(self) -> int:
        return hash(self.canonical())

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Op:
        copy = super().model_copy(update=update, deep=deep)
        copy._key = copy._needs = None  # its parameters may differ: both are computed again
        return copy

    def reads(self) -> frozenset[str]:
        """Index kinds it reads itself; ``kind/part`` where it needs one part of a kind (a trained network)."""
        return self.INDEXES

    def children(self) -> list[Op]:
        """The operators this one runs."""
        return list(getattr(self, "inputs", ()))

    def uses_llm(self) -> bool:
        """Whether it calls the lake's LLM server itself."""
        return False

    def at_query_time(self, values: Mapping[str, Any]) -> Op:
        """This operator with a request's values of its query-time parameters, validated as a declaration is
        but strictly: a number is not read from a string or a boolean (a request's ``"5"`` is refused)."""
        fields = type(self).model_fields
        refused = sorted(name for name in values if name not in self.QUERY_TIME or name not in fields)
        if refused:
            takes = ", ".join(sorted(self.QUERY_TIME & set(fields))) or "none"
            named = ", ".join(refused[:SHOWN_NAMES]) + (f" and {len(refused) - SHOWN_NAMES:,} more" if len(refused) > SHOWN_NAMES else "")
            raise MethodError(f"{self.op}: {named} cannot be set per query (it takes: {takes})")
        try:
            return type(self).model_validate({**{name: getattr(self, name) for name in fields}, **values}, strict=True)
        except ValidationError as error:
            raise MethodError(f"{self.op}: {problem(error)}") from None

    def widened(self) -> Op | None:
        """The same operator with a wider ``k`` whose first ``k`` are this one's answer, which a request
        runs in its place so that the methods asking it for several depths share one run (None: none)."""
        return None

    def first_stage(self) -> Op | None:
        """For a reranker, the ranking it reorders: what it has to beat (None for any other operator)."""
        return None

    def run(self, query: str, indexes: Indexes) -> Candidates:
        """One query's candidates: a request of one, unfiltered."""
        return self.run_batch(Request([query], indexes.encoders), indexes)[0]

    def run_batch(self, request: Request, indexes: Indexes) -> list[Candidates]:
        """Each of the request's queries' candidates, in its order; their encodings are computed ahead
        (``Request.prime``) where the caller could."""
        raise NotImplementedError


class PerQuery(Op):
    """An operator whose kernel takes one query at a time (a graph walk over Python structures, a smoothing
    of one query's candidate graph, a cross-encoder's budget): the batch runs its inputs once for all
    queries, then ``run_one`` per query."""

    def run_batch(self, request: Request, indexes: Indexes) -> list[Candidates]:
        inputs = run_inputs_batch(self, request, indexes)
        return [self.run_one(query, found, request, indexes) for query, found in zip(request.queries, inputs, strict=True)]

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: Indexes) -> Candidates:
        """One query's candidates, given its inputs' (``inputs``, in the declared order)."""
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


def problem(error: ValidationError) -> str:
    """One line for a validation error: where and what. Of a union's alternatives the one that is not a
    mismatched literal (``weights``' mapping, not ``'tuned_two'``), named without pydantic's branch tags."""
    problems = error.errors()
    chosen = next((p for p in problems if p["type"] != "literal_error"), problems[0])
    where = ".".join(str(part) for part in chosen["loc"] if isinstance(part, int) or part.isidentifier())  # not `constrained-float`, `list[str]`
    return f"{where}: {chosen['msg']}"


def shared_run(op: Op, request: Request, indexes: Indexes) -> list[Candidates]:
    """``op``'s candidates for each of the request's queries, run on the queries it has not run it on yet:
    within one request an operator that several methods or inputs share runs once."""
    if not request.queries:
        return []
    check(request.stop, op.op)
    wide = op.widened()
    if wide is not None:
        return [found.top(op.k) for found in shared_run(wide, request, indexes)]
    return request.shared(op.canonical(), lambda missing: op.run_batch(missing, indexes))


def run_inputs_batch(op: Op, request: Request, indexes: Indexes) -> list[list[Candidates]]:
    """Per query, its inputs' candidates (each input run once on the whole batch)."""
    inputs = getattr(op, "inputs", ())
    if not inputs:
        return [[] for _ in request.queries]
    per_input = [shared_run(item, request, indexes) for item in inputs]
    return [list(found) for found in zip(*per_input, strict=True)]


def parse_operator(spec: Mapping[str, Any], method: str, resolve: Callable[[str], Op] | None = None) -> Op:
    """One operator from its declaration; errors name the method, the operator and the parameter. The
    operator modules register themselves when imported (``retrieval/methods.py`` imports them)."""
    if not isinstance(spec, Mapping) or "op" not in spec:
        raise MethodError(f"method {method!r}: expected a mapping with 'op', got {spec!r}", method)
    cls = OPERATORS.get(spec["op"])
    if cls is None:
        raise MethodError(f"method {method!r}: unknown operator {spec['op']!r}; known: {', '.join(OPERATORS)}", method)
    try:
        return cls.model_validate(dict(spec), context={"method": method, "resolve": resolve})
    except _Nested as nested:
        raise nested.error from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, (spec['op'], *e['loc'])))}: {e['msg']}" for e in error.errors())
        raise MethodError(f"method {method!r}: {problems}", method) from None


class Methods(dict[str, Op]):
    """The lake's switched-on methods by name (what gets run assets), and every method it may use.

    Iterating gives the switched-on methods; ``methods[name]`` reaches any available one too, since a
    method or a training step may read one that is not switched on (GraphER's ``grapher_base``, the
    reranker's miners). ``declared`` holds every available method's declaration."""

    def __init__(self, parsed: dict[str, Op], declared: Mapping[str, Any], available: Mapping[str, Op] | None = None) -> None:
        super().__init__(parsed)
        self.declared = dict(declared)
        self.available = {**(available or {}), **parsed}

    def __missing__(self, name: str) -> Op:
        return self.available[name]

    def params(self, name: str) -> dict:
        """The declaration with named inputs expanded, so a run records everything that produced it."""
        spec = dict(self.declared[name])
        if "inputs" in spec:
            spec["inputs"] = [self.params(item) if isinstance(item, str) else item for item in spec["inputs"]]
        return spec


def walk(op: Op) -> Iterator[Op]:
    """The operator and every operator it runs, depth first, each occurrence once."""
    yield op
    for child in op.children():
        yield from walk(child)


def needs(op: Op) -> frozenset[str]:
    """The index kinds (``kind`` or ``kind/part``) a method reads, through its inputs; computed once
    per operator (a learned part's name hashes the declaration)."""
    if op._needs is None:
        op._needs = frozenset(name for node in walk(op) for name in node.reads())
    return op._needs


def unfiltered(op: Op) -> Op | None:
    """The first operator of a method that cannot honour a metadata filter (None: the method can)."""
    return next((node for node in walk(op) if node.FILTER is None), None)


def uses_llm(op: Op) -> bool:
    """Whether a method calls the LLM server: its assets are opt-in, as the LLM assets are (group ``llm``)."""
    return any(node.uses_llm() for node in walk(op))
