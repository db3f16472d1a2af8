"""A lake opened for applications: searches that load each corpus's indexes and models once per snapshot
and keep them warm, batches that encode and search at once, and read-only SQL.

Every search reads one snapshot of its corpus (and of the lake-wide models): the warm indexes are read
through a lake pinned to the snapshots current when they were loaded, and when a build commits a newer
one the next request loads that one, while requests already running finish on theirs.

Beside the facade: the arguments' checks (``validation.py``), the hits that cite their documents
(``citations.py``) and the fusion of several corpora's rankings (``corpora_fusion.py``)."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from graphlake.api.budget import CHUNK_QUERIES, MemoryBudget, Shape, estimate, give_memory_back
from graphlake.api.citations import Searched
from graphlake.api.corpora_fusion import fused
from graphlake.api.hit_spans import Shown
from graphlake.api.results import CorpusBusy, CorpusInfo, DocumentPage, MethodInfo, NameConflict, RequestError, RowsCut, SearchResult, StoredDocument, UnknownName, Written, refused_as_request
from graphlake.api.searchers import Generation, SearcherManager, built
from graphlake.api.validation import EMBED_KINDS, MAX_PAGE, check_name, check_names, check_queries, check_texts, corpora_named, kind_of, parsed_filter, shown
from graphlake.common import stopping
from graphlake.common.settings import HOME, SERVE_REQUEST_MB, SQL_MEMORY_MB
from graphlake.common.stopping import Stop
from graphlake.common.suggest import did_you_mean
from graphlake.common.unicode_checks import same_id
from graphlake.retrieval.core import MethodError, Methods, Op, Request, needs, query_encodings, unfiltered, walk
from graphlake.retrieval.filters import Filter, FilterError
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.index.metadata import DocumentMetadata
from graphlake.retrieval.methods import available_methods, load_methods
from graphlake.warehouse.config_files import one_line
from graphlake.warehouse.corpora import DEMO_CORPUS, LAKE_OWNED, CorpusRegistry, CorpusSpec, NameTaken
from graphlake.warehouse.home import home_of
from graphlake.warehouse.scopes import WRITES, LockedError
from graphlake.warehouse.sql_sandbox import MAX_ROWS, LimitError, SandboxError, run_sql
from graphlake.warehouse.storage import LakeStorage, StorageError

POOLS = ("k", "candidates", "depth")  # an operator's fields that size the candidates it keeps per query
ASYNC_SEARCHES = 1  # awaited searches at once: more threads contend for the interpreter's lock with the event loop


def open_lake(location: str | Path = "") -> GraphLake:
    """The lake at ``location``: a folder, ``s3://bucket/prefix``, or (empty) ``$GRAPHLAKE_HOME``, else the project's ``lake/``."""
    return GraphLake(home_of(location or HOME.text() or ""))


class GraphLake:
    """Search a lake's corpora with any switched-on method, and read it with SQL; safe to share between threads."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.searchers = SearcherManager(self.home)  # what each search reads: the one place that decides it
        self._worker = ThreadPoolExecutor(ASYNC_SEARCHES, thread_name_prefix="graphlake-search")  # its thread starts with the first awaited search

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
        except NameTaken as error:
            raise NameConflict(str(error)) from None
        except ValueError as error:  # a bad name or setting (pydantic's lines made one)
            raise RequestError(one_line(error)[:300]) from None
        return self._info(LakeStorage(self.home), spec)

    def upsert(self, corpus: str, documents: list[dict[str, Any]], stop: Stop | None = None) -> Written:
        """Add or replace documents (``{"id", "text", "title"?, "metadata"?}``) of a corpus the lake owns;
        encoded, then acknowledged once durable, in every search that starts after (``api/searchers.py``),
        folded in by the next build; ``Overloaded`` when the lake is encoding as many as it may at once.
        ``stop``: checked once the documents are encoded, before the write is appended (``Stopped``: nothing written)."""
        from graphlake.api import writes

        return writes.upsert(self.home, corpus, documents, encoded=self.searchers.encoded_write, stop=stop)

    def delete(self, corpus: str, ids: list[str]) -> Written:
        """Delete documents of a corpus the lake owns by id: no search that starts after the
        acknowledgement returns them, in this process or another."""
        from graphlake.api import writes

        return writes.delete(self.home, corpus, ids)

    def document_ids(self, corpus: str, filter: Filter | dict | str | None = None) -> list[str]:
        """The ids of ``corpus``'s documents that pass ``filter`` (all without one), as a search starting
        now reads them: committed, less those pending writes replaced or deleted, then the pending ones
        (what a LlamaIndex ``delete(ref_doc_id)`` finds the nodes of a document by)."""
        check_name("corpus", corpus)
        expression = parsed_filter(filter)
        with built(corpus):
            return self.searchers.acquire(corpus).document_ids(expression)

    def get_documents(self, corpus: str, ids: list[str]) -> list[StoredDocument]:
        """The documents of ``corpus`` with these ids, as a search starting now reads them (committed and
        pending; a deleted or unknown id is left out), in the order of ``ids``."""
        check_name("corpus", corpus)
        from graphlake.warehouse.write_checks import checked_ids

        if isinstance(ids, list | tuple) and not ids:
            return []
        wanted = refused_as_request(checked_ids, ids)
        with built(corpus):
            documents = self.searchers.acquire(corpus).documents()
        found = documents.filter(pc.is_in(documents.column("doc_id"), pa.array(wanted, pa.string())))
        by_id = {row["doc_id"]: row for row in found.to_pylist()}
        return [_stored(by_id[doc_id]) for doc_id in wanted if doc_id in by_id]

    def list_documents(self, corpus: str, after: str | None = None, limit: int = 100, filter: Filter | dict | str | None = None) -> DocumentPage:
        """``corpus``'s documents in id order, committed and pending, ``limit`` (at most ``MAX_PAGE``) at a
        time from the first id past ``after`` (a page's ``next``), those passing ``filter``."""
        check_name("corpus", corpus)
        if after is not None and not isinstance(after, str):
            raise RequestError(f"after: a page's cursor (a document id), got {kind_of(after)}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise RequestError(f"limit: documents a page, an integer from 1 to {MAX_PAGE}, got {limit!r}")
        expression = parsed_filter(filter)
        with built(corpus):
            generation = self.searchers.acquire(corpus)
        if expression is not None:
            try:
                generation.metadata().check(expression)  # a misspelt field is refused, as a search refuses it, not an empty page
            except FilterError as error:
                raise RequestError(str(error)) from None
        documents = generation.documents(expression)
        if after is not None:
            documents = documents.filter(pc.greater(documents.column("doc_id"), pa.scalar(same_id(after))))
        page = documents.take(pc.select_k_unstable(documents, k=min(limit + 1, documents.num_rows), sort_keys=[("doc_id", "ascending")])) if documents.num_rows else documents
        rows = page.to_pylist()
        return DocumentPage([_stored(row) for row in rows[:limit]], rows[limit - 1]["doc_id"] if len(rows) > limit else None)

    def drop_corpus(self, name: str) -> bool:
        """Remove a corpus: its declaration, then its log, tables, artefacts and caches (its snapshots
        first, in one rename), under its writer lock (``CorpusBusy`` naming the holder while a build holds
        it); whether there was anything to remove. A crash between the two leaves files that a second drop
        removes. The lake-wide models keep what they learned from it."""
        from graphlake.warehouse.locks import writer_lock

        check_name("corpus", name)
        if name == DEMO_CORPUS:
            raise RequestError(f"corpus {name!r} is the bundled demo, which is not declared in corpora.yaml: `graphlake forget {name}` removes what it built")
        registry, lake = CorpusRegistry(self.home), LakeStorage(self.home)
        if name not in registry.all() and not any(lake.tables_dir.glob(f"*/corpus={name}")) and not (self.home / WRITES / name).exists() and lake.snapshot(name).number == 0:
            return False
        try:
            with writer_lock(self.home, name, "dropping the corpus", wait=0):
                registry.remove(name)  # first: a write racing the drop is refused (``api/writes.py``), it cannot make the log again
                lake.forget(name)
        except LockedError as error:
            raise CorpusBusy(str(error).split(";")[0] + "; drop it when that ends") from None
        except StorageError as error:
            raise RequestError(one_line(error)) from None
        self.searchers.forget(name)
        return True

    def embed(self, corpus: str, texts: list[str], kind: str = "passage", stop: Stop | None = None) -> list[list[float]]:
        """``texts`` as ``corpus``'s dense model encodes them (``kind``: ``passage`` as its nodes are, or
        ``query``): the vectors its dense search compares, for an application that wants the same ones.
        ``stop``: checked before each ``CHUNK_QUERIES`` texts are encoded."""
        check_name("corpus", corpus)
        checked = check_texts(texts)
        if kind not in EMBED_KINDS:
            raise RequestError(f"kind: one of {', '.join(EMBED_KINDS)}, got {kind!r}"[:200])
        with built(corpus):
            encoders = self.searchers.served(corpus).indexes.encoders
            encode = encoders.dense_passages if kind == "passage" else encoders.dense
            vectors = []
            for start in range(0, len(checked), CHUNK_QUERIES):
                stopping.check(stop, f"text {start + 1} of {len(checked)}")
                vectors += encode(checked[start : start + CHUNK_QUERIES]).astype(float).tolist()
        return vectors

    def methods(self) -> list[MethodInfo]:
        declared, switched = available_methods(self.home)
        methods = load_methods(self.home)
        return [MethodInfo(name=name, paper=item.paper, about=item.about, switched_on=name in switched, query_time=sorted(_query_time(methods[name]))) for name, item in declared.items()]

    def warm(self, corpus: str, method: str, stop: Stop | None = None) -> None:
        """Load what ``method`` reads on ``corpus`` now (indexes, models), so that the first search's latency is
        the search's; ``stop``: checked before each operator runs (what is loaded stays loaded)."""
        check_names(corpus, method)
        with built(corpus):
            served = self.searchers.served(corpus)
            stopping.check(stop, f"{method} ran")
            _method(served.methods, method, {}, 1).run_batch(Request(["warm up"], served.indexes.encoders, stop=stop), served.indexes)
            served.searched.add(method)

    def loading(self, corpus: str) -> str | None:
        """The index of ``corpus`` being loaded now (``warm``, a first search), None when none is."""
        return self.searchers.loading(corpus)

    def search(
        self,
        /,
        corpus: str | list[str],
        method: str,
        query: str,
        k: int = 10,
        filter: Filter | dict | str | None = None,
        group_by: str = "span",
        context: int | str | None = None,
        min_relevance: float | None = None,
        **overrides: Any,
    ) -> SearchResult:
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
        self,
        /,
        corpus: str | list[str],
        method: str,
        queries: list[str],
        k: int = 10,
        filter: Filter | dict | str | None = None,
        group_by: str = "span",
        context: int | str | None = None,
        min_relevance: float | None = None,
        **overrides: Any,
    ) -> list[SearchResult]:
        """Each query's ``k`` best nodes, the batch encoded at once and searched through the method's batched path.
        Every argument is checked before any work: a bad one raises ``RequestError`` naming it."""
        return list(self.answers(corpus, method, queries, k, filter, overrides, shown=shown(group_by, context, min_relevance)))

    async def asearch(
        self,
        /,
        corpus: str | list[str],
        method: str,
        query: str,
        k: int = 10,
        filter: Filter | dict | str | None = None,
        group_by: str = "span",
        context: int | str | None = None,
        min_relevance: float | None = None,
        **overrides: Any,
    ) -> SearchResult:
        """``search`` in the lake's search thread: awaiting it leaves the event loop free while the indexes work."""
        return await self._in_worker(partial(self.search, corpus, method, query, k, filter, group_by, context, min_relevance, **overrides))

    async def asearch_batch(
        self,
        /,
        corpus: str | list[str],
        method: str,
        queries: list[str],
        k: int = 10,
        filter: Filter | dict | str | None = None,
        group_by: str = "span",
        context: int | str | None = None,
        min_relevance: float | None = None,
        **overrides: Any,
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
        stop: Stop | None = None,
    ) -> Iterator[SearchResult]:
        """``search_batch`` as an iterator, with the query-time values as one mapping whatever their names (a
        body field named ``queries`` or ``self`` is a value the method refuses, not a second argument). The
        arguments are checked and the batch searched now (a bad one raises here); each query's hits are
        made as it is reached, so a server streams a batch of 256 answers of 1,000 hits without holding
        them all. With a ``budget`` (the server's), the search's
        memory is estimated from its shape (``api/budget.py``) and held from before the search until the
        last answer is made; ``OverBudget`` when it does not fit. With a ``stop`` (the server's deadline and
        disconnect), the search checks it between its stages and raises ``Stopped``; the wait for the
        budget ends at its deadline too."""
        names = corpora_named(corpus)
        for name in names:
            check_names(name, method)
        check_queries(queries, k)
        expression = parsed_filter(filter)
        overrides = dict(overrides)
        after = overrides.pop("after_write", None)  # every method takes it: read your writes
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise RequestError(f"after_write: a write's number (what upsert and delete return), got {after!r}"[:200])
        generations = {name: self.searchers.acquire(name, after) for name in names}
        if expression is not None and len(names) > 1:  # a field some corpus has is no typo: the others match nothing by it
            try:
                DocumentMetadata.check_all(expression, [g.metadata() for g in generations.values()])
            except FilterError as error:
                raise RequestError(str(error)) from None
        pool = shown.pool(k)  # the ranked nodes that fill k hits once merged or grouped
        ops = {name: _method(generations[name].methods, method, overrides, pool) for name in names}
        for generation in generations.values():
            generation.served.searched.add(method)  # what a newer snapshot is warmed with before it serves
        cost = sum(estimate(_shape(generations[name], ops[name], queries, pool)) for name in names) if budget is not None else 0
        if budget is not None:
            for name, generation in generations.items():  # the pending writes' segments stay in memory between searches
                budget.resident(f"fresh:{name}", generation.fresh.nbytes if generation.fresh is not None else 0)
            budget.take(cost, stop)
        try:
            searched = []
            for name in names:
                with built(name):
                    searched.append(_search(generations[name], method, ops[name], queries, k, pool, expression, len(names) == 1, shown, stop))
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

    def sql(self, statement: str, limit: int = 10_000, stop: Stop | None = None, budget: MemoryBudget | None = None) -> pa.Table:
        """A read-only SQL query over the lake's committed tables, in the sandbox ``graphlake sql`` uses
        (a process of its own, within ``$GRAPHLAKE_SQL_TIMEOUT`` and ``$GRAPHLAKE_SQL_MEMORY_MB``): at most
        ``limit`` rows, with a ``RowsCut`` warning when there were more. ``stop``: its process is killed
        when the stop is called off or its deadline passes (``Stopped``). With a ``budget`` (the server's),
        the statement waits for its place in it and its process's memory is kept within one request's share."""
        if not isinstance(statement, str) or not statement.strip():
            raise RequestError(f"statement: SQL text, got {kind_of(statement)}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ROWS:
            raise RequestError(f"limit: a whole number of rows from 1 to {MAX_ROWS:,}, got {limit!r}")
        try:
            if budget is None:
                answer = run_sql(self.home, statement, limit, stop)
            else:
                with budget.statement(stop) as megabytes:
                    answer = run_sql(self.home, statement, limit, stop, megabytes)
        except LimitError as error:
            said = str(error).splitlines()[0]  # a server's statement has its share of one request's budget
            raise RequestError(said.replace(f"set {SQL_MEMORY_MB.name}", f"set {SERVE_REQUEST_MB.name}") if budget is not None else said) from None
        except SandboxError as error:
            raise RequestError(str(error).splitlines()[0]) from None
        if answer.cut:
            warnings.warn(RowsCut(f"the first {limit:,} rows of more; sql(..., limit=N) returns up to {MAX_ROWS:,}"), stacklevel=2)
        return answer.table


def _shape(generation: Generation, op: Op, queries: list[str], k: int) -> Shape:
    """What a search's memory is estimated from: the batch, the corpus, and the method's widest pool."""
    dense, splade = query_encodings(needs(op))
    pool = max((value for node in walk(op) for name in POOLS if isinstance(value := getattr(node, name, None), int)), default=k)
    nodes = len(generation.indexes.snapshot.node_ids)
    return Shape(len(queries), max(map(len, queries)), k, max(pool, k), nodes, generation.served.text_bytes(), dense, splade)


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


def _stored(row: dict[str, Any]) -> StoredDocument:
    return StoredDocument(row["doc_id"], row["text"], row["title"] or "", json.loads(row["metadata"]) if row["metadata"] else {})


def _query_time(op: Op) -> set[str]:
    return set(op.QUERY_TIME) & set(type(op).model_fields)


def _unbuilt(corpus: str, method: str, op: Op) -> str:
    """The note of a search of a corpus the lake owns that was never built."""
    from graphlake.retrieval.pending.merge import first_stage, fuses_first_stages

    said = f"corpus {corpus!r} has no build yet: its pending documents are searched alone"
    if first_stage(op) or fuses_first_stages(op):
        return said
    return f"{said}, ranked by the fusion of bm25, dense and SPLADE ({method!r} reads what a build makes: `graphlake materialize --corpus {corpus}`)"


def _on_its_scale(op: Op, built: bool) -> bool:
    """Whether pending nodes are scored on the method's own scale (so its calibration reads them): a first
    stage merges them by its own score, ``rrf`` fuses them by its own fusion, and a built corpus's other
    methods place them at a rank with that rank's score."""
    from graphlake.retrieval.pending.merge import first_stage, fuses_first_stages

    return built or first_stage(op) or fuses_first_stages(op)


def _search(generation: Generation, method: str, op: Op, queries: list[str], k: int, pool: int, expression: Filter | None, check: bool, shown: Shown, stop: Stop | None = None) -> Searched:
    """One corpus's ``pool`` candidates for every query, ``CHUNK_QUERIES`` at a time, shown as ``k`` hits;
    ``check``: refuse a filter naming a field none of its documents has. With a fresh segment (a
    lake-owned corpus's pending writes), the snapshot's nodes of documents written since are masked as a
    filter masks, and the pending nodes ranked in (``retrieval/pending/merge.py``)."""
    served, fresh, indexes = generation.served, generation.fresh, generation.indexes
    corpus, built = served.corpus, indexes.snapshot.built
    if expression is not None and (refusing := unfiltered(op)) is not None:
        raise RequestError(f"method {method!r} cannot filter: its {refusing.op} operator has no filtered search (leave the filter out, or use a method that has: rrf, ap_three, ...)")
    calibration = served.calibration(method)
    if shown.min_relevance is not None and isinstance(calibration, str):
        raise RequestError(f"min_relevance: {method!r} on {corpus!r} has no relevance calibration: {calibration}")
    try:
        if check and expression is not None:  # the fields of the committed and the pending documents alike
            generation.metadata().check(expression)
        request = replace(new_request(indexes, queries, expression if built else None, False, pool), stop=stop)
    except FilterError as error:
        raise RequestError(str(error)) from None
    if fresh is not None:
        request = replace(request, allowed=fresh.allowed(request.allowed))
    started, found = time.perf_counter(), []
    for start in range(0, len(queries), CHUNK_QUERIES):
        chunk = request.of(queries[start : start + CHUNK_QUERIES])
        stopping.check(stop, f"query {start + 1} of {len(queries)}")
        if not built:  # a corpus the lake owns, never built: its pending documents are the corpus
            from graphlake.retrieval.pending.merge import pending_alone

            found += pending_alone(op, chunk, fresh, expression, pool)
            continue
        chunk.prime(needs(op))
        ranked = op.run_batch(chunk, indexes)
        if fresh is not None:
            from graphlake.retrieval.pending.merge import with_pending

            ranked = with_pending(op, chunk, indexes, fresh, expression, ranked, pool)
        found += ranked
        if len(queries) > CHUNK_QUERIES:
            give_memory_back()
    latency = (time.perf_counter() - started) * 1000 / len(queries)
    gap = served.gap(method)
    notes = [*request.notes, *([gap] if gap else []), *([] if built else [_unbuilt(corpus, method, op)]), *indexes.snapshot.models.untuned.values()]
    if fresh is not None:
        notes.append(
            f"{fresh.writes} pending write(s) through number {fresh.through} searched in the fresh segment ({len(fresh.present)} documents, {len(fresh)} nodes; the next build folds them into the graphs)"
        )
    fresh_from = len(indexes.snapshot.node_ids) if fresh else None
    return Searched(
        corpus, method, generation.snapshot, generation.citable, request, found, round(latency, 3), notes, k, shown, calibration, fresh_from, fresh is not None and _on_its_scale(op, built)
    )
