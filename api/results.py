"""What the API answers with, the same in Python and over HTTP: hits, search results, corpora, methods,
and the errors a request can meet (an unknown name, a value out of bounds, an index not built).

Plain dataclasses: a search builds one per hit, and pydantic's ``model_construct`` cost 5 µs apiece, a
third of a BM25 search on SciFact; the server's response models are these same classes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphlake.warehouse.scopes import DiskFull as DiskFull  # a write refused for want of room: 507 over HTTP
from graphlake.warehouse.write_checks import WriteRefused


class UnknownName(LookupError):
    """A corpus or method the lake does not have; the message names the ones it has."""


class RequestError(ValueError):
    """A request the lake cannot answer as asked (a parameter out of bounds, one a method does not take)."""


class IndexNotBuilt(LookupError):
    """What a method reads on a corpus is not built, or was built from other inputs: the message names it
    and the command that builds it (never a path of the lake's machine)."""


def refused_as_request(check: Callable[[Any], Any], value: Any) -> Any:
    """``check(value)`` (``warehouse/write_checks.py``), its refusal a ``RequestError`` as every bad
    argument's is: the same in process and, before anything is sent, in the remote client."""
    try:
        return check(value)
    except WriteRefused as error:
        raise RequestError(str(error)) from None


class NameConflict(RequestError):
    """A corpus name another corpus has, or one kept for the bundled demo (409 over HTTP)."""


class Overloaded(RuntimeError):
    """A write refused because the lake is encoding as many as it may at once: retry in ``retry_after``
    seconds (429 with ``Retry-After`` over HTTP)."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CorpusBusy(RuntimeError):
    """A corpus held by a build or another drop: the message names the holder (423 over HTTP)."""


class DamagedLog(IndexNotBuilt):
    """A lake-owned corpus's log of writes holds an entry (or a mark) that cannot be trusted: the message
    names it and ``graphlake doctor --repair``; nothing is served or written from it meanwhile (409)."""


class RowsCut(UserWarning):
    """An SQL answer cut to its row limit: there were more rows."""


NAMESPACE = "graphlake"  # the key under which a framework's document carries graphlake's provenance
PROVENANCE = ("corpus", "node_id", "doc_id", "title", "source", "start", "end", "spans", "context_start", "context_end", "rank", "score", "relevance", "fresh", "terms", "snippet")


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved node, with what an answer cites it by: its document's source (URL or path), its
    place in the document (``document text[start:end]`` is ``text``; ``chunk``: its best node's position
    among the document's nodes; ``prev_node_id`` and ``next_node_id``: the nodes either side of its
    span), the query's words it holds and a snippet around them, and the document's metadata as it was
    ingested. A hit is a span (``api/hit_spans.py``): its best node merged with the ranked nodes of its
    document it overlaps; ``spans`` lists its own ``[start, end]`` first, then, grouped by document, the
    document's other ranked spans. ``context``: the text around it, when asked, from ``context_start``
    to ``context_end``."""

    rank: int
    node_id: str
    doc_id: str
    title: str
    text: str
    score: float
    corpus: str
    source: str | None  # the document's url, source or path metadata, the first it has
    start: int
    end: int
    terms: list[str]  # the text's words that match the query's (stemmed as BM25 compares them), as the text spells them
    snippet: str
    metadata: dict
    chunk: int
    prev_node_id: str | None  # the document's node before this one, None for its first
    next_node_id: str | None
    spans: list[list[int]]
    context: str | None = None
    context_start: int | None = None
    context_end: int | None = None
    relevance: float | None = None  # the chance a hit so scored is relevant, by its method's calibration here (api/relevance.py); None: uncalibrated
    fresh: bool = False  # a pending write's, found in the fresh segment (retrieval/pending/segment.py), not yet folded into the graphs


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One query's answer, from one snapshot of the corpus (``snapshot``: its number)."""

    corpus: str  # several corpora searched in one call: their names joined by "+"
    method: str
    snapshot: int  # several corpora: -1, and ``snapshots`` has each
    latency_ms: float
    hits: list[Hit]
    notes: list[str]  # what ranked in place of an untrained model, and other caveats of this method here
    snapshots: dict[str, int]  # per corpus searched, its snapshot
    calibration: str | None = None  # how the hits' relevance was fitted, or why it was not

    def provenance(self, hit: Hit) -> dict:
        """What cites ``hit`` and how it was found (corpus, node, document, title, source, offsets, rank,
        score, matched terms, snippet, method, snapshot): what a framework's document carries under
        ``NAMESPACE``, beside the document's own metadata, which it leaves as it was."""
        return {**{name: getattr(hit, name) for name in PROVENANCE}, "method": self.method, "snapshot": self.snapshots.get(hit.corpus, self.snapshot)}


@dataclass(frozen=True, slots=True)
class Written:
    """An acknowledged write: durable in the corpus's log under number ``seq`` (a search given
    ``after_write=seq`` sees it), searchable in its fresh segment until the next build folds it in."""

    corpus: str
    seq: int
    op: str  # upsert | delete
    documents: int  # upserted or deleted ids, as given


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A document as it was written or ingested, with its metadata exactly as given: what reading
    documents by id or in pages returns (a search returns its nodes, as ``Hit``\\ s)."""

    id: str
    text: str
    title: str
    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DocumentPage:
    """One page of a corpus's documents in id order; ``next``: the cursor (``after=``) of the page after
    it, None on the last. A document present throughout a paging is on exactly one page, whatever is
    written meanwhile (the cursor is an id, not an offset)."""

    documents: list[StoredDocument]
    next: str | None


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    name: str
    format: str
    snapshot: int
    nodes: int  # 0 before its nodes are built
    queries: int
    pending: int = 0  # a lake-owned corpus's writes not yet folded into its snapshot


@dataclass(frozen=True, slots=True)
class MethodInfo:
    name: str
    paper: str
    about: str
    switched_on: bool
    query_time: list[str]  # the parameters a request may set for it
