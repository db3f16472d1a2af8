"""A lake opened for applications: searches that load each corpus's indexes and models once per snapshot
and keep them warm, batches that encode and search at once, and read-only SQL.

Every search reads one snapshot of its corpus (and of the lake-wide models): the warm indexes are read
through a lake pinned to the snapshots current when they were loaded, and when a build commits a newer
one the next request loads that one, while requests already running finish on theirs.

Beside the facade: the arguments' checks (``validation.py``), the hits that cite their documents
(``citations.py``) and the fusion of several corpora's rankings (``corpora_fusion.py``)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from graphlake.api.budget import CHUNK_QUERIES, MemoryBudget, Shape, estimate, give_memory_back
from graphlake.api.citations import Searched
from graphlake.api.corpora_fusion import fused
from graphlake.api.results import CorpusInfo, IndexNotBuilt, MethodInfo, RequestError, RowsCut, SearchResult, UnknownName, Written
from graphlake.api.hit_spans import Shown
from graphlake.api.relevance import Calibration, fitted
from graphlake.api.validation import check_names, check_queries, corpora_named, kind_of, parsed_filter, shown
from graphlake.common.settings import HOME, REFRESH_S
from graphlake.common.suggest import did_you_mean
from graphlake.retrieval.core import MethodError, Methods, Op, needs, query_encodings, unfiltered, walk
from graphlake.retrieval.evaluation import first_stage_gap
from graphlake.retrieval.filters import Filter, FilterError
from graphlake.retrieval.index.corpus_indexes import CorpusIndexes
from graphlake.retrieval.learned_kinds import corpus_indexes
from graphlake.retrieval.index.metadata import DocumentMetadata
from graphlake.retrieval.methods import available_methods, load_methods
from graphlake.warehouse.config_files import one_line
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusRegistry, CorpusSpec
from graphlake.warehouse.home import home_of
from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.scopes import LAKE_SCOPE
from graphlake.warehouse.snapshots import SNAPSHOTS
from graphlake.warehouse.sql_sandbox import MAX_ROWS, SandboxError, run_sql
from graphlake.warehouse.storage import LakeStorage, NotBuilt, StorageError

if TYPE_CHECKING:  # a lake-owned corpus's writes: imported where one is written or searched, not by every query
    from graphlake.retrieval.index.fresh import FreshSegment
    from graphlake.warehouse.write_log import Write

POOLS = ("k", "candidates", "depth")
ASYNC_SEARCHES = 1  # awaited searches at once: more threads contend for the interpreter's lock with the event loop  # an operator's fields that size the candidates it keeps per query


def open_lake(location: str | Path = "") -> GraphLake:
    """The lake at ``location``: a folder, ``s3://bucket/prefix``, or (empty) ``$GRAPHLAKE_HOME``, else the project's ``lake/``."""
    return GraphLake(home_of(location or HOME.text() or ""))


@dataclass(frozen=True)
class _Warm:
    """A corpus's indexes and the methods, as of one version of the lake."""

    version: tuple[int, int, float]  # the corpus's snapshot, the lake-wide snapshot, methods.yaml's mtime
    indexes: CorpusIndexes
    methods: Methods
    folded: int = 0  # a lake-owned corpus: the last write its snapshot folded
    gaps: dict[str, str | None] = field(default_factory=dict)  # per method: its note when it loses to its first stage here

    def gap(self, corpus: str, method: str) -> str | None:
        if method not in self.gaps:
            self.gaps[method] = first_stage_gap(self.indexes.lake, corpus, method, self.methods)
        return self.gaps[method]

    def calibration(self, corpus: str, method: str) -> Calibration | str:
        """The method's relevance calibration here (``api/relevance.py``), or why it has none."""

        def fit() -> Calibration | str:
            lake, partition = self.indexes.lake, {"corpus": corpus}
            if not lake.has("runs", {**partition, "method": method}) or not lake.has("qrels", partition):
                return f"no stored run of {method!r} on {corpus!r} with gold to fit it on (`graphlake eval --corpus {corpus} --methods {method}` makes one)"
            return fitted(lake.read("runs", {**partition, "method": method}), lake.read("queries", partition), lake.read("qrels", partition))

        return self.indexes.memo(("relevance calibration", method), fit)


class GraphLake:
    """Search a lake's corpora with any switched-on method, and read it with SQL; safe to share between threads."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self._warm: dict[str, _Warm] = {}
        self._stamps: dict[str, tuple[int, ...] | None] = {}
        self._loading = threading.Lock()
        self._remote = remote_of(self.home) is not None
        self._snapshots, self._methods_file = str(self.home / SNAPSHOTS), str(self.home / "methods.yaml")
        self._worker = ThreadPoolExecutor(ASYNC_SEARCHES, thread_name_prefix="graphlake-search")  # its thread starts with the first awaited search
        self._fresh: dict[str, FreshSegment] = {}  # per lake-owned corpus: its pending writes, searchable
        self._freshening = threading.Lock()
        self._read: dict[str, dict[int, Write]] = {}  # per lake-owned corpus: the log entries read so far

    def corpora(self) -> list[CorpusInfo]:
        lake = LakeStorage(self.home)
        return [self._info(lake, spec) for _, spec in sorted(CorpusRegistry(self.home).all().items())]

    def _info(self, lake: LakeStorage, spec: CorpusSpec) -> CorpusInfo:
        partition = {"corpus": spec.name}
        pending = 0
        if spec.format == LAKE_OWNED:
            from graphlake.warehouse.write_log import pending_writes

            pending = len(pending_writes(self.home, spec.name))
        return CorpusInfo(spec.name, spec.format, lake.snapshot(spec.name).number, lake.rows("nodes", partition), lake.rows("queries", partition), pending)

    def create_corpus(self, name: str, **settings: Any) -> CorpusInfo:
        """Declare a corpus the lake owns, filled by ``upsert`` (``settings``: ``chunking``, ``models``,
        ``train_corpus``, ``alpha_corpus``, as corpora.yaml takes them); declaring one that exists is no error."""
        if not isinstance(name, str):
            raise RequestError(f"name: a corpus name, got {kind_of(name)}")
        try:
            spec = CorpusRegistry(self.home).declare_owned(name, replace=False, **settings)
        except ValueError as error:  # a name taken, a bad name or setting (pydantic's lines made one)
            raise RequestError(one_line(error)[:300]) from None
        return self._info(LakeStorage(self.home), spec)

    def upsert(self, corpus: str, documents: list[dict[str, Any]]) -> Written:
        """Add or replace documents (``{"id", "text", "title"?, "metadata"?}``) of a corpus the lake owns;
        acknowledged once durable, searchable by the next search, folded in by the next build."""
        from graphlake.api import writes

        return writes.upsert(self.home, corpus, documents)

    def delete(self, corpus: str, ids: list[str]) -> Written:
        """Delete documents of a corpus the lake owns by id: no search of this lake returns them once
        acknowledged (another process's, within its refresh interval, ``$GRAPHLAKE_REFRESH_S``)."""
        from graphlake.api import writes

        written = writes.delete(self.home, corpus, ids)
        self._fresh.pop(corpus, None)  # the next search reads the log again, whatever the refresh interval
        return written

    def methods(self) -> list[MethodInfo]:
        declared, switched = available_methods(self.home)
        methods = load_methods(self.home)
        return [
            MethodInfo(name=name, paper=item.paper, about=item.about, switched_on=name in switched, query_time=sorted(_query_time(methods[name])))
            for name, item in declared.items()
        ]

    def warm(self, corpus: str, method: str) -> None:
        """Load what ``method`` reads on ``corpus`` now (indexes, models), so that the first search's latency is the search's."""
        check_names(corpus, method)
        with _built(corpus):
            warm = self._current(corpus)
            _method(warm.methods, method, {}, 1).run("warm up", warm.indexes)

    def loading(self, corpus: str) -> str | None:
        """The index of ``corpus`` being loaded now (``warm``, a first search), None when none is."""
        warm = self._warm.get(corpus)
        return None if warm is None else warm.indexes.loading

    def search(self, /, corpus: str | list[str], method: str, query: str, k: int = 10, filter: Filter | dict | str | None = None, group_by: str = "span", context: int | str | None = None, min_relevance: float | None = None, **overrides: Any) -> SearchResult:
        """The ``k`` best nodes for ``query``, of those whose document passes ``filter`` (``retrieval/filters.py``:
        ``{"field": "year", "gte": 2015}`` or ``"year >= 2015"``); ``overrides`` set the method's query-time
        parameters (``methods()`` lists them). A hit is a span of its document (``api/hit_spans.py``): its
        best node with the ranked nodes of its document it overlaps (``group_by="span"``), one a document
        (``"document"``), or the ranked nodes as they are (``"chunk"``, as the evaluation reads them);
        ``context``: that many neighbouring nodes a side, or ``"document"``, with each hit. Each hit's
        ``relevance`` is its score calibrated for the method on the corpus (``api/relevance.py``);
        ``min_relevance`` keeps those at least that relevant. Several corpora (a list) are searched alike
        and their rankings fused by reciprocal rank, each hit naming its corpus."""
        if not isinstance(query, str):
            raise RequestError(f"query: a string, got {kind_of(query)}")
        return list(self.answers(corpus, method, [query], k, filter, overrides, shown=shown(group_by, context, min_relevance)))[0]

    def search_batch(
        self, /, corpus: str | list[str], method: str, queries: list[str], k: int = 10, filter: Filter | dict | str | None = None, group_by: str = "span", context: int | str | None = None, min_relevance: float | None = None, **overrides: Any
    ) -> list[SearchResult]:
        """Each query's ``k`` best nodes, the batch encoded at once and searched through the method's batched path.
        Every argument is checked before any work: a bad one raises ``RequestError`` naming it."""
        return list(self.answers(corpus, method, queries, k, filter, overrides, shown=shown(group_by, context, min_relevance)))

    async def asearch(self, /, corpus: str | list[str], method: str, query: str, k: int = 10, filter: Filter | dict | str | None = None, group_by: str = "span", context: int | str | None = None, min_relevance: float | None = None, **overrides: Any) -> SearchResult:
        """``search`` in the lake's search thread: awaiting it leaves the event loop free while the indexes work."""
        return await self._in_worker(partial(self.search, corpus, method, query, k, filter, group_by, context, min_relevance, **overrides))

    async def asearch_batch(
        self, /, corpus: str | list[str], method: str, queries: list[str], k: int = 10, filter: Filter | dict | str | None = None, group_by: str = "span", context: int | str | None = None, min_relevance: float | None = None, **overrides: Any
    ) -> list[SearchResult]:
        """``search_batch`` in the lake's search thread."""
        return await self._in_worker(partial(self.search_batch, corpus, method, queries, k, filter, group_by, context, min_relevance, **overrides))

    async def _in_worker(self, search: Callable[[], Any]) -> Any:
        """Awaited searches run one at a time in a thread of the lake's: each holds the interpreter's lock
        for much of its time, and six in as many threads starved the event loop of it for 34-120 ms
        between two of its turns, one thread 14-22 ms (a loaded 2-core machine, graphlake_ltr)."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, search)

    def as_retriever(self, **settings: Any) -> Any:
        """A LangChain retriever over this lake (the ``langchain`` extra): ``corpus``, then ``method``, ``k``,
        ``filter`` and ``search_kwargs`` as ``graphlake.api.langchain.GraphLakeRetriever`` takes them."""
        from graphlake.api.langchain import GraphLakeRetriever

        return GraphLakeRetriever(lake=self, **settings)

    def answers(
        self,
        corpus: str | list[str],
        method: str,
        queries: list[str],
        k: int,
        filter: Filter | dict | str | None,
        overrides: dict[str, Any],
        budget: MemoryBudget | None = None,
        shown: Shown = Shown(),
    ) -> Iterator[SearchResult]:
        """``search_batch`` as an iterator, with the query-time values as one mapping whatever their names (a
        body field named ``queries`` or ``self`` is a value the method refuses, not a second argument). The
        arguments are checked and the batch searched now (a bad one raises here); each query's hits are
        made as it is reached, so a server streams a batch of 256 answers of 1,000 hits without holding
        them all. With a ``budget`` (the server's), the search's
        memory is estimated from its shape (``api/budget.py``) and held from before the search until the
        last answer is made; ``OverBudget`` when it does not fit."""
        names = corpora_named(corpus)
        for name in names:
            check_names(name, method)
        check_queries(queries, k)
        expression = parsed_filter(filter)
        overrides = dict(overrides)
        after = overrides.pop("after_write", None)  # every method takes it: read your writes
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise RequestError(f"after_write: a write's number (what upsert and delete return), got {after!r}"[:200])
        for attempt in range(2):
            warm = {name: self._current(name) for name in names}
            try:
                fresh = {name: self._pending(name, warm[name], after) for name in names}
                break
            except _Trimmed:  # a build committed and trimmed the log meanwhile: read its snapshot
                if attempt:
                    raise
        if expression is not None and len(names) > 1:  # a field some corpus has is no typo: the others match nothing by it
            try:
                DocumentMetadata.check_all(expression, [w.indexes.metadata() for w in warm.values()])
            except FilterError as error:
                raise RequestError(str(error)) from None
        pool = shown.pool(k)  # the ranked nodes that fill k hits once merged or grouped
        ops = {name: _method(warm[name].methods, method, overrides, pool) for name in names}
        cost = sum(estimate(_shape(warm[name].indexes, ops[name], queries, pool)) for name in names) if budget is not None else 0
        if budget is not None:
            budget.take(cost)
        try:
            searched = []
            for name in names:
                with _built(name):
                    searched.append(self._search(name, warm[name], fresh[name], method, ops[name], queries, k, pool, expression, len(names) == 1, shown))
        except BaseException:
            if budget is not None:
                budget.give_back(cost)
            raise

        def each() -> Iterator[SearchResult]:
            try:
                for i in range(len(queries)):
                    results = tuple(corpus_searched.result(i) for corpus_searched in searched)
                    yield results[0] if len(results) == 1 else fused(results, k)
            finally:
                if budget is not None:
                    budget.give_back(cost)

        return each()

    def _search(
        self, corpus: str, warm: _Warm, fresh: FreshSegment | None, method: str, op: Op, queries: list[str], k: int, pool: int, expression: Filter | None, check: bool, shown: Shown
    ) -> Searched:
        """One corpus's ``pool`` candidates for every query, ``CHUNK_QUERIES`` at a time, shown as ``k`` hits;
        ``check``: refuse a filter naming a field none of its documents has. With ``fresh`` (a lake-owned
        corpus's pending writes), the snapshot's nodes of documents written since are masked as a filter
        masks, and the pending nodes ranked in (``retrieval/operators/pending.py``)."""
        if expression is not None and (refusing := unfiltered(op)) is not None:
            raise RequestError(f"method {method!r} cannot filter: its {refusing.op} operator has no filtered search (leave the filter out, or use a method that has: rrf, ap_three, ...)")
        calibration = warm.calibration(corpus, method)
        if shown.min_relevance is not None and isinstance(calibration, str):
            raise RequestError(f"min_relevance: {method!r} on {corpus!r} has no relevance calibration: {calibration}")
        try:
            request = warm.indexes.request(queries, expression, check, pool)
        except FilterError as error:
            raise RequestError(str(error)) from None
        if fresh is not None:
            request = replace(request, allowed=fresh.allowed(request.allowed))
        started, found = time.perf_counter(), []
        for start in range(0, len(queries), CHUNK_QUERIES):
            chunk = request.of(queries[start : start + CHUNK_QUERIES])
            chunk.prime(needs(op))
            ranked = op.run_batch(chunk, warm.indexes)
            if fresh is not None:
                from graphlake.retrieval.operators.pending import with_pending

                ranked = with_pending(op, chunk, warm.indexes, fresh, expression, ranked, pool)
            found += ranked
            if len(queries) > CHUNK_QUERIES:
                give_memory_back()
        latency = (time.perf_counter() - started) * 1000 / len(queries)
        gap = warm.gap(corpus, method)
        notes = [*request.notes, *([gap] if gap else [])]
        if fresh is not None:
            notes.append(f"{fresh.writes} pending write(s) through number {fresh.through} searched in the fresh segment ({len(fresh.present)} documents, {len(fresh)} nodes; the next build folds them into the graphs)")
        tables = warm.indexes if fresh is None else fresh.tables
        return Searched(corpus, method, warm.version[0], tables, request, found, round(latency, 3), notes, k, shown, calibration, len(warm.indexes.node_ids) if fresh else None)

    def sql(self, statement: str, limit: int = 10_000) -> pa.Table:
        """A read-only SQL query over the lake's committed tables, in the sandbox ``graphlake sql`` uses
        (a process of its own, within ``$GRAPHLAKE_SQL_TIMEOUT`` and ``$GRAPHLAKE_SQL_MEMORY_MB``): at most
        ``limit`` rows, with a ``RowsCut`` warning when there were more."""
        if not isinstance(statement, str) or not statement.strip():
            raise RequestError(f"statement: SQL text, got {kind_of(statement)}")
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
        registry = CorpusRegistry(self.home)  # read once for the request: the warm indexes resolve the corpus's models through it
        declared = registry.all()
        if corpus not in declared:
            raise UnknownName(f"corpus {corpus!r} is not declared{did_you_mean(corpus, declared)} (the lake has: {', '.join(sorted(declared)) or 'none'})")
        with self._loading:
            warm = self._warm.get(corpus)
            if warm is None or warm.version != version:
                pinned = lake.pinned(corpus, LAKE_SCOPE)
                version = (pinned.pins[corpus].number, pinned.pins[LAKE_SCOPE].number, version[2])
                folded = _folded(pinned, corpus) if declared[corpus].format == LAKE_OWNED else 0
                warm = _Warm(version, corpus_indexes(pinned, corpus, registry=registry), load_methods(self.home), folded)
                self._warm[corpus] = warm
            self._stamps[corpus] = stamp
        return warm

    def _pending(self, corpus: str, warm: _Warm, after: int | None) -> FreshSegment | None:
        """A lake-owned corpus's writes its snapshot has not folded, as a fresh segment (None: none
        pending); the segment of the writes seen before is kept and grown, their encodings reused."""
        if warm.indexes.spec.format != LAKE_OWNED:
            if after is not None:
                raise RequestError(f"after_write: corpus {corpus!r} takes no writes (it is read from its {warm.indexes.spec.format} source)")
            return None
        recent = self._fresh.get(corpus)
        if recent is not None and recent.indexes is warm.indexes and (after is None or after <= recent.through) and time.monotonic() - recent.made < REFRESH_S.number(error=RequestError):
            return recent  # refreshed less than the refresh interval ago (Elasticsearch's refresh, Lucene's near-real-time reader)
        from graphlake.retrieval.index.fresh import FreshSegment
        from graphlake.warehouse.write_log import WriteLog, WriteLogError

        log = WriteLog(self.home, corpus, lambda: warm.folded)
        numbers = [seq for seq in log.numbers() if seq > warm.folded]
        last = numbers[-1] if numbers else warm.folded
        if after is not None and after > last:
            raise RequestError(f"after_write: write {after} is not in corpus {corpus!r}'s log (its last is {last})")
        if not numbers:
            return None
        with self._freshening:
            segment = self._fresh.get(corpus)
            if segment is not None and segment.indexes is warm.indexes and (segment.through, segment.writes) == (last, len(numbers)):
                return segment
            read = self._read.setdefault(corpus, {})
            for seq in [seq for seq in read if seq <= warm.folded]:
                del read[seq]
            for seq in numbers:
                if seq not in read:
                    try:
                        read[seq] = log.read(seq)
                    except WriteLogError:
                        if not log.path(seq).exists():
                            raise _Trimmed from None
                        raise
            with _built(corpus):
                segment = FreshSegment(warm.indexes, [read[seq] for seq in numbers], last, before=segment)
            self._fresh[corpus] = segment
        return segment

    def _stamp(self, corpus: str) -> tuple[int, ...] | None:
        """When the corpus's and the lake-wide snapshot folders and methods.yaml last changed (a commit
        adds a file to its folder); None on object storage, where a commit shows only in the store."""
        if self._remote:
            return None
        return tuple(map(_mtime, (f"{self._snapshots}/{corpus}", f"{self._snapshots}/{LAKE_SCOPE}", self._methods_file)))


def _folded(lake: LakeStorage, corpus: str) -> int:
    from graphlake.warehouse.write_log import folded_through

    return folded_through(lake, corpus)


class _Trimmed(Exception):
    """A log entry a newer snapshot folded was trimmed while an older one was read."""


@contextmanager
def _built(corpus: str) -> Iterator[None]:
    """A table or artefact a search reads that is missing or stale, as ``IndexNotBuilt`` naming what and
    the command that builds it, without the lake's paths (a server's answer must not show them)."""
    try:
        yield
    except StorageError as error:
        what = error.what if isinstance(error, NotBuilt) else str(error).splitlines()[0]
        hint = f"`graphlake materialize --corpus {corpus}` or `graphlake query --build ...` builds it"
        raise IndexNotBuilt(f"corpus {corpus!r}: {what} ({hint})") from None


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return -1


def _shape(indexes: CorpusIndexes, op: Op, queries: list[str], k: int) -> Shape:
    """What a search's memory is estimated from: the batch, the corpus, and the method's widest pool."""
    dense, splade = query_encodings(needs(op))
    pool = max((value for node in walk(op) for name in POOLS if isinstance(value := getattr(node, name, None), int)), default=k)
    text_bytes = indexes.memo(("mean text bytes",), lambda: max(1, int(pc.mean(pc.binary_length(indexes.nodes().column("text"))).as_py() or 1)))
    return Shape(len(queries), max(map(len, queries)), k, max(pool, k), len(indexes.node_ids), text_bytes, dense, splade)


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
