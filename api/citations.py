"""A search's answer, one query at a time: the candidates of a batch made into hits that cite their
document (its title, source and metadata, the span of its text a node is) with the query's matched
words and a snippet."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlake.api.results import Hit, SearchResult
from graphlake.kernels.text.snippets import matched_terms, query_stems, snippet
from graphlake.retrieval.core import Candidates, Request
from graphlake.retrieval.index.corpus_indexes import CorpusIndexes
from graphlake.warehouse.readers.base import CITED_BY


@dataclass(frozen=True)
class Searched:
    """One corpus's search of a batch: the candidates of every query, made into an answer one query at a time."""

    corpus: str
    method: str
    snapshot: int
    indexes: CorpusIndexes
    request: Request
    found: list[Candidates]
    latency_ms: float  # per query
    notes: list[str]

    def result(self, i: int) -> SearchResult:
        hits = cited(self.corpus, self.indexes, self.request.queries[i], self.found[i], self.request.k)
        return SearchResult(self.corpus, self.method, self.snapshot, self.latency_ms, hits, [*self.notes, *self.short(len(hits))], {self.corpus: self.snapshot})

    def short(self, found: int) -> list[str]:
        """Why fewer hits than ``k`` came back, when they did: the method ranks no other node (BM25 and
        SPLADE score only the nodes sharing a term with the query), or there are no more to return."""
        k, allowed = self.request.k, self.request.allowed
        if found >= k:
            return []
        there = len(self.indexes.node_ids) if allowed is None else len(allowed.rows)
        which = "node" if allowed is None else "node the filter allows"
        if found >= there:
            return [f"{found} of the {k} hits asked: the corpus has no other {which}"]
        return [f"{found} of the {k} hits asked: {self.method} ranks no other {which} for this query"]


def cited(corpus: str, indexes: CorpusIndexes, query: str, candidates: Candidates, k: int) -> list[Hit]:
    """The top ``k`` candidates as hits that cite their document."""
    titles, docs, node_ids = indexes.titles(), indexes.doc_ids(), indexes.node_ids
    columns = indexes.memo(("hit columns",), lambda: {name: indexes.nodes().column(name).to_pylist() for name in ("text", "start", "end", "chunk_idx")})
    before, after = indexes.memo(("neighbour rows",), lambda: neighbours(indexes.node_documents(), np.asarray(columns["chunk_idx"])))
    records, documents = indexes.metadata().records, indexes.node_documents()
    stems = query_stems(query)
    hits = []
    for rank, (row, score) in enumerate(zip(candidates.rows[:k].tolist(), candidates.scores[:k].tolist(), strict=True), start=1):
        text, record = columns["text"][row], records[documents[row]]
        terms, spans = matched_terms(stems, text)
        source = next((record[key] for key in CITED_BY if isinstance(record.get(key), str)), None)
        previous, following = before[row], after[row]
        hits.append(
            Hit(
                rank, node_ids[row], docs[row], titles[docs[row]], text, float(score), corpus, source, columns["start"][row], columns["end"][row], terms, snippet(text, spans),
                dict(record), columns["chunk_idx"][row], node_ids[previous] if previous >= 0 else None, node_ids[following] if following >= 0 else None,
            )
        )
    return hits


def neighbours(documents: np.ndarray, chunks: np.ndarray) -> tuple[list[int], list[int]]:
    """Per node row, the row of its document's node before it and after it (-1: none)."""
    order = np.lexsort((chunks, documents))
    same = documents[order][1:] == documents[order][:-1]
    before, after = np.full(len(order), -1, dtype=np.int64), np.full(len(order), -1, dtype=np.int64)
    before[order[1:][same]] = order[:-1][same]
    after[order[:-1][same]] = order[1:][same]
    return before.tolist(), after.tolist()
