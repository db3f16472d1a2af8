"""What a hit is, in a document: a method ranks nodes (chunks), and chunks of one document overlap
where the chunker carried context over (18-27 of 50 hits on a files corpus overlapped another's text).
A search answers with spans: by default each hit is a chunk merged with the ranked chunks of its
document it overlaps (``"span"``), one hit per document with ``"document"`` (its best chunk's span, its
other ranked spans listed, each merged where they overlap, as Elasticsearch's field collapsing keeps the
best hit of a group and its inner hits), or the raw chunks as evaluated with ``"chunk"``. ``context``
widens each hit by neighbouring chunks, or to its whole document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

GROUPINGS = ("span", "document", "chunk")
Grouping = Literal["span", "document", "chunk"]
MAX_CONTEXT = 10  # neighbouring chunks a side
MAX_POOL = 10_000  # the candidates a grouping reads past k, at most (the operators' own bound on a pool)


@dataclass(frozen=True)
class Shown:
    """How a search's hits are shown: grouped ``by`` (``GROUPINGS``), with ``context`` (neighbouring nodes a
    side, or ``"document"``) or without, those of at least ``min_relevance`` or all."""

    by: str = "span"
    context: int | str | None = None
    min_relevance: float | None = None  # hits below it dropped (api/relevance.py)

    def pool(self, k: int) -> int:
        """How many ranked nodes to read to fill ``k`` hits: a merge takes a node from the list, a document
        grouping every other node of a document."""
        return min(MAX_POOL, {"chunk": k, "span": 2 * k + 10, "document": 5 * k + 50}[self.by])


@dataclass
class Span:
    """One hit's rows (its best node first) and its document offsets; ``others``: the document's other
    ranked spans, with ``"document"``."""

    rows: list[int]
    start: int
    end: int
    others: list[list[int]] = field(default_factory=list)  # [start, end], in rank order

    def overlaps(self, start: int, end: int) -> bool:
        return start < self.end and self.start < end

    def take(self, row: int, start: int, end: int) -> None:
        self.rows.append(row)
        self.start, self.end = min(self.start, start), max(self.end, end)

    def take_all(self, other: Span) -> None:
        self.rows += other.rows
        self.start, self.end = min(self.start, other.start), max(self.end, other.end)

    def other(self, start: int, end: int) -> None:
        """One more ranked span of this hit's document, merged with those listed it overlaps."""
        for listed in self.others:
            if start < listed[1] and listed[0] < end:
                listed[0], listed[1] = min(listed[0], start), max(listed[1], end)
                return
        self.others.append([start, end])


def spans(rows: list[int], documents: list, starts: list[int], ends: list[int], k: int, by: str) -> list[Span]:
    """The first ``k`` hits of the ranked ``rows``, each node merged into the best-ranked hit of its
    document it overlaps (``span``, ``document``), or listed among its document's hit's others (``document``)."""
    if by == "chunk":
        return [Span([row], starts[row], ends[row]) for row in rows[:k]]
    found: list[Span] = []
    of_document: dict[object, list[Span]] = {}
    for row in rows:
        start, end, document = starts[row], ends[row], documents[row]
        held = of_document.setdefault(document, [])
        into = next((span for span in held if span.overlaps(start, end)), None)
        if into is not None:
            into.take(row, start, end)
            for joined in [span for span in held if span is not into and span.overlaps(into.start, into.end)]:  # grown into a later one
                into.take_all(joined)
                held.remove(joined), found.remove(joined)
        elif held and by == "document":
            held[0].other(start, end)
        elif len(found) < k:
            span = Span([row], start, end)
            found.append(span)
            held.append(span)
    return found
