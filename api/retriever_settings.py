"""What the framework retrievers share: a search's settings (corpus, method, ``k``, filter, how hits are
grouped and their context, and the method's query-time parameters), set at construction, in ``search_kwargs`` and per call, each over the
one before, and the search they make on a lake, in a thread or on the event loop."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from graphlake.api.results import NAMESPACE, RequestError, SearchResult

NAMED = ("k", "filter", "method", "group_by", "context", "min_relevance")  # the settings every method takes; any other is one of the method's query-time parameters


@dataclass(frozen=True)
class SearchSettings:
    corpus: str | list[str]
    method: str
    k: int
    filter: Any
    group_by: str = "span"
    context: int | str | None = None
    min_relevance: float | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def updated(self, values: dict[str, Any], where: str) -> SearchSettings:
        """These settings with ``values`` over them; ``where`` names where they were given when one is refused."""
        if not isinstance(values, dict) or not all(isinstance(name, str) for name in values):
            raise RequestError(f"{where}: a mapping of setting names to values, got {values!r}"[:200])
        named = {name: values[name] for name in NAMED if name in values}
        return replace(self, **named, overrides={**self.overrides, **{name: value for name, value in values.items() if name not in NAMED}})

    def reading(self, written: int | None) -> SearchSettings:
        """These settings, reading the corpus at least through write ``written`` (the retriever's own
        last write: read your writes through any server of the lake), unless they say otherwise."""
        if written is None or "after_write" in self.overrides or not isinstance(self.corpus, str):
            return self
        return replace(self, overrides={**self.overrides, "after_write": written})

    def search(self, lake: Any, query: str) -> SearchResult:
        return lake.search(self.corpus, self.method, query, self.k, self.filter, self.group_by, self.context, self.min_relevance, **self.overrides)

    async def asearch(self, lake: Any, query: str) -> SearchResult:
        return await lake.asearch(self.corpus, self.method, query, self.k, self.filter, self.group_by, self.context, self.min_relevance, **self.overrides)


def written_corpus(corpus: str | list[str]) -> str:
    """The one corpus a retriever writes to; a retriever over several takes no writes."""
    if not isinstance(corpus, str):
        raise RequestError(f"a retriever over several corpora ({', '.join(corpus)}) takes no writes: write through one corpus's retriever or the lake")
    return corpus


def upserted(doc_id: str, text: str, metadata: dict[str, Any] | None, retrieved: bool = True) -> dict[str, Any]:
    """A framework's document as the lake takes it: its metadata as given and its ``title`` field as its
    title; ``retrieved``: a retriever's document, which may be one it returned, written back, whose
    provenance is dropped (a vector store's documents carry none: a key of that name is refused)."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise RequestError(f"document {doc_id!r}: metadata: a mapping of fields to values, got {type(metadata).__name__}")
    own = {key: value for key, value in metadata.items() if key != NAMESPACE} if retrieved else dict(metadata)
    title = own.get("title")
    return {"id": doc_id, "text": text, "title": title if isinstance(title, str) else "", "metadata": own}


STORE_SETTINGS = frozenset({"group_by", "context", "after_write", "k", "filter"})  # a vector store's own (whole documents, its writes read) or its call's arguments


def no_extra_arguments(call: str, kwargs: dict[str, Any]) -> None:
    """An adapter's call given an argument it does not take: refused naming it, never dropped."""
    if kwargs:
        raise RequestError(f"{call}: unknown argument {sorted(kwargs)[0]!r}")
