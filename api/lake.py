"""A lake opened for applications: searches that load each corpus's indexes and models once per snapshot
and keep them warm, batches that encode and search at once, and read-only SQL.

Every search reads one snapshot of its corpus (and of the lake-wide models): the warm indexes are read
through a lake pinned to the snapshots current when they were loaded, and when a build commits a newer
one the next request loads that one, while requests already running finish on theirs."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from graphlake.api.budget import CHUNK_QUERIES, MemoryBudget, Shape, estimate, give_memory_back
from graphlake.api.results import CorpusInfo, Hit, MethodInfo, RequestError, RowsCut, SearchResult, UnknownName
from graphlake.common.settings import HOME
from graphlake.common.suggest import did_you_mean
from graphlake.common.unicode_checks import lone_surrogate
from graphlake.kernels.text.snippets import matched_terms, query_stems, snippet
from graphlake.retrieval.core import METHOD_NAME, Candidates, MethodError, Methods, Op, needs, unfiltered, walk
from graphlake.retrieval.evaluation import first_stage_gap
from graphlake.retrieval.filters import Filter, FilterError, parse_filter
from graphlake.retrieval.index.corpus_indexes import CorpusIndexes, query_encodings
from graphlake.retrieval.index.metadata import DocumentMetadata
from graphlake.retrieval.methods import available_methods, load_methods
from graphlake.warehouse.corpora import CORPUS_NAME, CorpusRegistry
from graphlake.warehouse.home import home_of
from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.readers.base import CITED_BY
from graphlake.warehouse.scopes import LAKE_SCOPE
from graphlake.warehouse.snapshots import SNAPSHOTS
from graphlake.warehouse.sql_sandbox import MAX_ROWS, SandboxError, run_sql
from graphlake.warehouse.storage import LakeStorage

MAX_QUERY_CHARS = 2_000
MAX_K = 1_000
MAX_BATCH = 256
MAX_NAME_CHARS = 200
MAX_CORPORA = 16  # searched in one call
RRF_CONSTANT = 60.0  # fusing several corpora's rankings (Cormack et al.)
POOLS = ("k", "candidates", "depth")  # an operator's fields that size the candidates it keeps per query


def open_lake(location: str | Path = "") -> GraphLake:
    """The lake at ``location``: a folder, ``s3://bucket/prefix``, or (empty) ``$GRAPHLAKE_HOME``, else the project's ``lake/``."""
    return GraphLake(home_of(location or HOME.text() or ""))


@dataclass(frozen=True)
class _Warm:
    """A corpus's indexes and the methods, as of one version of the lake."""

    version: tuple[int, int, float]  # the corpus's snapshot, the lake-wide snapshot, methods.yaml's mtime
    indexes: CorpusIndexes
    methods: Methods
    gaps: dict[str, str | None] = field(default_factory=dict)  # per method: its note when it loses to its first stage here

    def gap(self, corpus: str, method: str) -> str | None:
        if method not in self.gaps:
            self.gaps[method] = first_stage_gap(self.indexes.lake, corpus, method, self.methods)
        return self.gaps[method]


class GraphLake:
    """Search a lake's corpora with any switched-on method, and read it with SQL; safe to share between threads."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self._warm: dict[str, _Warm] = {}
        self._stamps: dict[str, tuple[int, ...] | None] = {}
        self._loading = threading.Lock()
        self._remote = remote_of(self.home) is not None
        self._snapshots, self._methods_file = str(self.home / SNAPSHOTS), str(self.home / "methods.yaml")

    def corpora(self) -> list[CorpusInfo]:
        lake = LakeStorage(self.home)
        found = []
        for name, spec in sorted(CorpusRegistry(self.home).all().items()):
            partition = {"corpus": name}
            found.append(CorpusInfo(name=name, format=spec.format, snapshot=lake.snapshot(name).number, nodes=lake.rows("nodes", partition), queries=lake.rows("queries", partition)))
        return found

    def methods(self) -> list[MethodInfo]:
        declared, switched = available_methods(self.home)
        methods = load_methods(self.home)
        return [
            MethodInfo(name=name, paper=item.paper, about=item.about, switched_on=name in switched, query_time=sorted(_query_time(methods[name])))
            for name, item in declared.items()
        ]

    def warm(self, corpus: str, method: str) -> None:
        """Load what ``method`` reads on ``corpus`` now (indexes, models), so that the first search's latency is the search's."""
        _check_names(corpus, method)
        warm = self._current(corpus)
        _method(warm.methods, method, {}, 1).run("warm up", warm.indexes.request())

    def loading(self, corpus: str) -> str | None:
        """The index of ``corpus`` being loaded now (``warm``, a first search), None when none is."""
        warm = self._warm.get(corpus)
        return None if warm is None else warm.indexes.loading

    def search(self, /, corpus: str | list[str], method: str, query: str, k: int = 10, filter: Filter | dict | str | None = None, **overrides: Any) -> SearchResult:
        """The ``k`` best nodes for ``query``, of those whose document passes ``filter`` (``retrieval/filters.py``:
        ``{"field": "year", "gte": 2015}`` or ``"year >= 2015"``); ``overrides`` set the method's query-time
        parameters (``methods()`` lists them). Several corpora (a list) are searched alike and their rankings
        fused by reciprocal rank, each hit naming its corpus."""
        if not isinstance(query, str):
            raise RequestError(f"query: a string, got {_kind(query)}")
        return list(self.answers(corpus, method, [query], k, filter, overrides))[0]

    def search_batch(
        self, /, corpus: str | list[str], method: str, queries: list[str], k: int = 10, filter: Filter | dict | str | None = None, **overrides: Any
    ) -> list[SearchResult]:
        """Each query's ``k`` best nodes, the batch encoded at once and searched through the method's batched path.
        Every argument is checked before any work: a bad one raises ``RequestError`` naming it."""
        return list(self.answers(corpus, method, queries, k, filter, overrides))

    def answers(
        self,
        corpus: str | list[str],
        method: str,
        queries: list[str],
        k: int,
        filter: Filter | dict | str | None,
        overrides: dict[str, Any],
        budget: MemoryBudget | None = None,
    ) -> Iterator[SearchResult]:
        """``search_batch`` as an iterator, with the query-time values as one mapping whatever their names (a
        body field named ``queries`` or ``self`` is a value the method refuses, not a second argument). The
        arguments are checked and the batch searched now (a bad one raises here); each query's hits are
        made as it is reached, so a server streams a batch of 256 answers of 1,000 hits without holding
        them all. With a ``budget`` (the server's), the search's
        memory is estimated from its shape (``api/budget.py``) and held from before the search until the
        last answer is made; ``OverBudget`` when it does not fit."""
        names = _corpora(corpus)
        for name in names:
            _check_names(name, method)
        _check(queries, k)
        expression = _filter(filter)
        warm = {name: self._current(name) for name in names}
        if expression is not None and len(names) > 1:  # a field some corpus has is no typo: the others match nothing by it
            try:
                DocumentMetadata.check_all(expression, [w.indexes.metadata() for w in warm.values()])
            except FilterError as error:
                raise RequestError(str(error)) from None
        ops = {name: _method(warm[name].methods, method, overrides, k) for name in names}
        cost = sum(estimate(_shape(warm[name].indexes, ops[name], queries, k)) for name in names) if budget is not None else 0
        if budget is not None:
            budget.take(cost)
        try:
            searched = [self._search(name, warm[name], method, ops[name], queries, expression, len(names) == 1) for name in names]
        except BaseException:
            if budget is not None:
                budget.give_back(cost)
            raise

        def each() -> Iterator[SearchResult]:
            try:
                for i, query in enumerate(queries):
                    results = tuple(corpus_searched.result(i, query, k) for corpus_searched in searched)
                    yield results[0] if len(results) == 1 else _fused(results, k)
            finally:
                if budget is not None:
                    budget.give_back(cost)

        return each()

    def _search(self, corpus: str, warm: _Warm, method: str, op: Op, queries: list[str], expression: Filter | None, check: bool) -> _Searched:
        """One corpus's candidates for every query, ``CHUNK_QUERIES`` at a time; ``check``: refuse a filter
        naming a field none of its documents has."""
        if expression is not None and (refusing := unfiltered(op)) is not None:
            raise RequestError(f"method {method!r} cannot filter: its {refusing.op} operator has no filtered search (leave the filter out, or use a method that has: rrf, ap_three, ...)")
        try:
            indexes = warm.indexes.request(expression, check)
        except FilterError as error:
            raise RequestError(str(error)) from None
        started, found = time.perf_counter(), []
        for start in range(0, len(queries), CHUNK_QUERIES):
            chunk = queries[start : start + CHUNK_QUERIES]
            indexes.prime(chunk, needs(op))
            found += op.run_batch(chunk, indexes)
            if len(queries) > CHUNK_QUERIES:
                give_memory_back()
        latency = (time.perf_counter() - started) * 1000 / len(queries)
        gap = warm.gap(corpus, method)
        return _Searched(corpus, method, warm.version[0], indexes, found, round(latency, 3), [*indexes.notes, *([gap] if gap else [])])

    def sql(self, statement: str, limit: int = 10_000) -> pa.Table:
        """A read-only SQL query over the lake's committed tables, in the sandbox ``graphlake sql`` uses
        (a process of its own, within ``$GRAPHLAKE_SQL_TIMEOUT`` and ``$GRAPHLAKE_SQL_MEMORY_MB``): at most
        ``limit`` rows, with a ``RowsCut`` warning when there were more."""
        if not isinstance(statement, str) or not statement.strip():
            raise RequestError(f"statement: SQL text, got {_kind(statement)}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ROWS:
            raise RequestError(f"limit: a whole number of rows from 1 to {MAX_ROWS:,}, got {limit!r}")
        try:
            answer = run_sql(self.home, statement, limit)
        except SandboxError as error:
            raise RequestError(str(error).splitlines()[0]) from None
        if answer.cut:
            warnings.warn(RowsCut(f"the first {limit:,} rows of more; sql(..., limit=N) returns up to {MAX_ROWS:,}"), stacklevel=2)
        return answer.table

    def _current(self, corpus: str) -> _Warm:
        """The corpus's warm indexes as of the lake's current snapshots, loaded when a build committed newer ones."""
        stamp = self._stamp(corpus)
        warm = self._warm.get(corpus)
        if warm is not None and stamp is not None and self._stamps.get(corpus) == stamp:
            return warm  # nothing was committed or declared since: a few stat calls decide it
        lake = LakeStorage(self.home)
        methods_file = self.home / "methods.yaml"
        version = (lake.snapshots.number(corpus), lake.snapshots.number(LAKE_SCOPE), methods_file.stat().st_mtime if methods_file.is_file() else 0.0)
        if warm is not None and warm.version == version:
            self._stamps[corpus] = stamp
            return warm
        registry = CorpusRegistry(self.home).all()
        if corpus not in registry:
            raise UnknownName(f"unknown corpus {corpus!r}{did_you_mean(corpus, registry)} (the lake has: {', '.join(sorted(registry)) or 'none'})")
        with self._loading:
            warm = self._warm.get(corpus)
            if warm is None or warm.version != version:
                pinned = lake.pinned(corpus, LAKE_SCOPE)
                version = (pinned.pins[corpus].number, pinned.pins[LAKE_SCOPE].number, version[2])
                warm = _Warm(version, CorpusIndexes(pinned, corpus), load_methods(self.home))
                self._warm[corpus] = warm
            self._stamps[corpus] = stamp
        return warm

    def _stamp(self, corpus: str) -> tuple[int, ...] | None:
        """When the corpus's and the lake-wide snapshot folders and methods.yaml last changed (a commit
        adds a file to its folder); None on object storage, where a commit shows only in the store."""
        if self._remote:
            return None
        return tuple(map(_mtime, (f"{self._snapshots}/{corpus}", f"{self._snapshots}/{LAKE_SCOPE}", self._methods_file)))


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return -1


def _kind(value: Any) -> str:
    return "an empty string" if isinstance(value, str) and not value.strip() else type(value).__name__


def _check_names(corpus: Any, method: Any) -> None:
    for what, value, pattern in (("corpus", corpus, CORPUS_NAME), ("method", method, METHOD_NAME)):
        if not isinstance(value, str) or not value:
            raise RequestError(f"{what}: a name, got {_kind(value)}")
        if len(value) > MAX_NAME_CHARS or not pattern.fullmatch(value):
            shown = value if len(value) <= 40 else value[:37] + "..."
            raise RequestError(f"{what}: {shown!r} is not a {what} name (letters, digits and {'_ . -' if what == 'corpus' else '_'})")


def _check(queries: list[str], k: int) -> None:
    if isinstance(queries, str) or not isinstance(queries, list | tuple):
        raise RequestError(f"queries: a list of strings, got {_kind(queries)} (search() takes one query)")
    if isinstance(k, bool) or not isinstance(k, int):
        raise RequestError(f"k: an integer, got {k!r}")
    if not queries:
        raise RequestError("queries: give at least one")
    if len(queries) > MAX_BATCH:
        raise RequestError(f"queries: at most {MAX_BATCH} in one batch, got {len(queries)}")
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise RequestError(f"query {i}: a string, got {_kind(query)}")
        if not query.strip():
            raise RequestError(f"query {i}: empty")
        if len(query) > MAX_QUERY_CHARS:
            raise RequestError(f"query {i}: at most {MAX_QUERY_CHARS} characters, got {len(query)}")
        if not query.isascii() and (bad := lone_surrogate(query)) is not None:  # isascii: a flag, no scan
            raise RequestError(f"query {i}: not valid Unicode (a lone surrogate at character {bad + 1})")
    if not 1 <= k <= MAX_K:
        raise RequestError(f"k: between 1 and {MAX_K}, got {k}")


def _corpora(corpus: Any) -> list[str]:
    """The corpora a request names: one, or a list of distinct ones."""
    if isinstance(corpus, list | tuple):
        if not corpus:
            raise RequestError("corpus: name at least one")
        if len(set(map(str, corpus))) != len(corpus):
            raise RequestError(f"corpus: each corpus once, got {', '.join(map(str, corpus))}")
        if len(corpus) > MAX_CORPORA:
            raise RequestError(f"corpus: at most {MAX_CORPORA} in one call, got {len(corpus)}")
        return list(corpus)
    return [corpus]


def _filter(given: Any) -> Filter | None:
    if given is None:
        return None
    try:
        return parse_filter(given)
    except FilterError as error:
        raise RequestError(str(error)) from None


@dataclass(frozen=True)
class _Searched:
    """One corpus's search of a batch: the candidates of every query, made into an answer one query at a time."""

    corpus: str
    method: str
    snapshot: int
    indexes: CorpusIndexes
    found: list[Candidates]
    latency_ms: float  # per query
    notes: list[str]

    def result(self, i: int, query: str, k: int) -> SearchResult:
        hits = _hits(self.corpus, self.indexes, query, self.found[i], k)
        return SearchResult(self.corpus, self.method, self.snapshot, self.latency_ms, hits, self.notes, {self.corpus: self.snapshot})


def _shape(indexes: CorpusIndexes, op: Op, queries: list[str], k: int) -> Shape:
    """What a search's memory is estimated from: the batch, the corpus, and the method's widest pool."""
    dense, splade = query_encodings(needs(op))
    pool = max((value for node in walk(op) for name in POOLS if isinstance(value := getattr(node, name, None), int)), default=k)
    text_bytes = indexes.memo(("mean text bytes",), lambda: max(1, int(pc.mean(pc.binary_length(indexes.nodes().column("text"))).as_py() or 1)))
    return Shape(len(queries), max(map(len, queries)), k, max(pool, k), len(indexes.node_ids), text_bytes, dense, splade)


def _hits(corpus: str, indexes: CorpusIndexes, query: str, candidates: Candidates, k: int) -> list[Hit]:
    """The top ``k`` candidates as hits that cite their document."""
    titles, docs, node_ids = indexes.titles(), indexes.doc_ids(), indexes.node_ids
    columns = indexes.memo(("hit columns",), lambda: {name: indexes.nodes().column(name).to_pylist() for name in ("text", "start", "end")})
    records, documents = indexes.metadata().records, indexes.node_documents()
    stems = query_stems(query)
    hits = []
    for rank, (row, score) in enumerate(zip(candidates.rows[:k].tolist(), candidates.scores[:k].tolist(), strict=True), start=1):
        text, record = columns["text"][row], records[documents[row]]
        terms, spans = matched_terms(stems, text)
        source = next((record[key] for key in CITED_BY if isinstance(record.get(key), str)), None)
        hits.append(
            Hit(rank, node_ids[row], docs[row], titles[docs[row]], text, float(score), corpus, source, columns["start"][row], columns["end"][row], terms, snippet(text, spans), dict(record))
        )
    return hits


def _fused(results: tuple[SearchResult, ...], k: int) -> SearchResult:
    """One query's rankings from several corpora fused by reciprocal rank (each hit keeps its corpus;
    its score becomes the fused one)."""
    scored = sorted(
        ((1.0 / (RRF_CONSTANT + hit.rank), position, hit) for position, result in enumerate(results) for hit in result.hits), key=lambda item: (-item[0], item[2].rank, item[1])
    )
    hits = [replace(hit, rank=rank, score=score) for rank, (score, _, hit) in enumerate(scored[:k], start=1)]
    return SearchResult(
        corpus="+".join(r.corpus for r in results),
        method=results[0].method,
        snapshot=-1,
        latency_ms=round(sum(r.latency_ms for r in results), 3),
        hits=hits,
        notes=[f"{r.corpus}: {note}" for r in results for note in r.notes],
        snapshots={r.corpus: r.snapshot for r in results},
    )


def _method(methods: Methods, name: str, overrides: dict[str, Any], k: int) -> Op:
    """The switched-on method ``name``, with the request's query-time values, returning at least ``k``."""
    if name not in methods:
        runs = f"(this lake runs: {', '.join(methods)})"
        if name in methods.available:
            raise UnknownName(f"method {name!r} is not switched on in this lake (`graphlake methods --use {name}` adds it) {runs}")
        raise UnknownName(f"unknown method {name!r}{did_you_mean(name, list(methods.available))} {runs}")
    op = methods[name]
    try:
        if overrides:
            op = op.at_query_time(overrides)
        if "k" in type(op).model_fields and op.k < k:
            op = op.at_query_time({"k": k})
    except MethodError as error:
        raise RequestError(str(error)) from None
    return op


def _query_time(op: Op) -> set[str]:
    return set(op.QUERY_TIME) & set(type(op).model_fields)
