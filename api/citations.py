"""A search's answer, one query at a time: the candidates of a batch made into hits that cite their
document (its title, source and metadata, the span of its text a node is) with the query's matched
words and a snippet."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from graphlake.api.hit_spans import Shown, spans
from graphlake.api.relevance import Calibration
from graphlake.api.results import Hit, SearchResult
from graphlake.common.once import once
from graphlake.kernels.text.snippets import matched_terms, query_stems, snippet
from graphlake.retrieval.core import Candidates, Request
from graphlake.retrieval.index.snapshot import Snapshot
from graphlake.warehouse.corpora import LAKE_OWNED
from graphlake.warehouse.tables import CITED_BY


@dataclass(frozen=True)
class Searched:
    """One corpus's search of a batch: the candidates of every query, made into an answer one query at a time."""

    corpus: str
    method: str
    snapshot: int
    tables: Citable  # the snapshot's, or with the pending nodes after them (FreshTables)
    request: Request
    found: list[Candidates]
    latency_ms: float  # per query
    notes: list[str]
    k: int  # hits asked, of the request's pool of ranked nodes
    shown: Shown
    calibration: Calibration | str  # of the method's scores here, or why there is none
    fresh_from: int | None = None  # the first row of a lake-owned corpus's pending nodes (retrieval/pending/segment.py), when it has some
    fresh_scaled: bool = True  # whether those are scored on the method's own scale (its calibration reads them)

    def result(self, i: int) -> SearchResult:
        hits = cited(self.corpus, self.tables, self.request.queries[i], self.found[i], self.k, self.shown, self.calibration, self.fresh_from, self.fresh_scaled)
        notes = [*self.notes, *self.short(len(hits), len(self.found[i].rows))]
        if (least := self.shown.min_relevance) is not None:
            kept = [replace(hit, rank=rank) for rank, hit in enumerate((hit for hit in hits if hit.relevance is not None and hit.relevance >= least), start=1)]
            notes += [f"min_relevance {least}: {len(hits) - len(kept)} of {len(hits)} hits below it left out"] if len(kept) < len(hits) else []
            hits = kept
        said = self.calibration if isinstance(self.calibration, str) else self.calibration.said()
        return SearchResult(self.corpus, self.method, self.snapshot, self.latency_ms, hits, notes, {self.corpus: self.snapshot}, said)

    def short(self, found: int, ranked: int) -> list[str]:
        """Why fewer hits than ``k`` came back, when they did: the method ranks no other node (BM25 and
        SPLADE score only the nodes sharing a term with the query), the nodes it ranked make fewer spans
        or documents, or there are no more to return."""
        k, allowed = self.k, self.request.allowed
        if found >= k:
            return []
        there = len(self.tables.snapshot.node_ids) if allowed is None else len(allowed.rows)
        which = "node" if allowed is None else "node the filter allows"
        if ranked >= there:
            return [f"{found} of the {k} hits asked: the corpus has no other {which}" + ("" if self.shown.by == "chunk" else f" ({ranked} nodes in {found} {self.shown.by}s)")]
        if ranked > found:
            return [f"{found} of the {k} hits asked: the {ranked} nodes {self.method} ranked make {found} {self.shown.by}s"]
        return [f"{found} of the {k} hits asked: {self.method} ranks no other {which} for this query"]


class Citable:
    """What hits are made from, read once per snapshot (or fresh segment): its tables, the node columns
    a hit shows, each node's neighbours in its document, the documents' texts."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    @once
    def columns(self) -> dict[str, list]:
        return {name: self.snapshot.nodes().column(name).to_pylist() for name in ("text", "start", "end", "chunk_idx")}

    @once
    def neighbours(self) -> tuple[list[int], list[int]]:
        """Per node row, the row of its document's node before it and after it (-1: none)."""
        return neighbours(self.snapshot.node_documents(), np.asarray(self.columns()["chunk_idx"]))

    @once
    def document_texts(self) -> list[str]:
        return self.snapshot.documents().column("text").to_pylist()

    @once
    def owned(self) -> bool:
        """Whether the corpus is the lake's own: a document with no url, source or path of its own
        (its metadata are kept exactly as given) is cited by its place in the lake."""
        return self.snapshot.spec.format == LAKE_OWNED

    def source(self, record: dict, doc_id: str) -> str | None:
        """What a hit cites its document by: its url, source or path metadata, the first it has; else,
        for a document the lake owns, ``lake://<corpus>/<id>``."""
        given = next((record[key] for key in CITED_BY if isinstance(record.get(key), str)), None)
        return given if given is not None or not self.owned() else f"lake://{self.snapshot.corpus}/{doc_id}"


def cited(
    corpus: str, tables: Citable, query: str, candidates: Candidates, k: int, shown: Shown, calibration: Calibration | str, fresh_from: int | None = None, fresh_scaled: bool = True
) -> list[Hit]:
    """The top ``k`` hits of the candidates, grouped as ``shown`` says (``api/hit_spans.py``), each citing
    its document, with its context when asked and its calibrated relevance where the method has one (a
    pending node, row ``fresh_from`` on, has none when it is ranked by other scores than the method's:
    ``fresh_scaled`` False)."""
    by, context, snapshot = shown.by, shown.context, tables.snapshot
    titles, docs, node_ids = snapshot.titles(), snapshot.doc_ids(), snapshot.node_ids
    columns, (before, after) = tables.columns(), tables.neighbours()
    records, documents = snapshot.metadata().records, snapshot.node_documents()
    stems = query_stems(query)
    hits = []
    rows = candidates.rows.tolist()
    ranked = spans(rows, documents, columns["start"], columns["end"], k, by)
    score_of = dict(zip(rows, candidates.scores.tolist(), strict=True))
    relevance = {} if isinstance(calibration, str) else dict(zip(rows, calibration(candidates.scores).tolist(), strict=True))
    pending = len(node_ids) if fresh_from is None else fresh_from
    for rank, span in enumerate(ranked, start=1):
        row = span.rows[0]
        first, last = min(span.rows, key=columns["start"].__getitem__), max(span.rows, key=columns["end"].__getitem__)
        text = tables.document_texts()[documents[row]][span.start : span.end] if len(span.rows) > 1 else columns["text"][row]
        record = records[documents[row]]
        terms, found = matched_terms(stems, text)
        around = _context(tables, documents[row], first, last, context) if context is not None else (None, None, None)
        hits.append(
            Hit(
                rank=rank,
                node_id=node_ids[row],
                doc_id=docs[row],
                title=titles[docs[row]],
                text=text,
                score=float(score_of[row]),
                corpus=corpus,
                source=tables.source(record, docs[row]),
                start=span.start,
                end=span.end,
                terms=terms,
                snippet=snippet(text, found),
                metadata=dict(record),
                chunk=columns["chunk_idx"][row],
                prev_node_id=node_ids[before[first]] if before[first] >= 0 else None,
                next_node_id=node_ids[after[last]] if after[last] >= 0 else None,
                spans=[[span.start, span.end], *span.others],
                context=around[0],
                context_start=around[1],
                context_end=around[2],
                relevance=relevance.get(row) if row < pending or fresh_scaled else None,
                fresh=row >= pending,
            )
        )
    return hits


def _context(tables: Citable, document: int, first: int, last: int, context: int | str) -> tuple[str, int, int]:
    """The text around a hit: ``context`` nodes before its first and after its last, or its whole document."""
    text = tables.document_texts()[document]
    if context == "document":
        return text, 0, len(text)
    (before, after), columns = tables.neighbours(), tables.columns()
    for _ in range(int(context)):
        first = before[first] if before[first] >= 0 else first
        last = after[last] if after[last] >= 0 else last
    start, end = columns["start"][first], columns["end"][last]
    return text[start:end], start, end


def neighbours(documents: np.ndarray, chunks: np.ndarray) -> tuple[list[int], list[int]]:
    """Per node row, the row of its document's node before it and after it (-1: none)."""
    order = np.lexsort((chunks, documents))
    same = documents[order][1:] == documents[order][:-1]
    before, after = np.full(len(order), -1, dtype=np.int64), np.full(len(order), -1, dtype=np.int64)
    before[order[1:][same]] = order[:-1][same]
    after[order[:-1][same]] = order[1:][same]
    return before.tolist(), after.tolist()
