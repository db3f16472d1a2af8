"""graphlake as a LangChain retriever (the ``langchain`` extra): a lake searched in process
(``GraphLake``) or through a running server (``RemoteLake``), its hits as LangChain ``Document``\\ s.
A document's metadata are its own, as ingested; graphlake's citation and provenance (corpus, node,
document, source, offsets, rank, score, method, snapshot, matched terms) sit beside them under
``"graphlake"``.

    from graphlake.api import open_lake

    retriever = open_lake("lake").as_retriever(corpus="demo", search_kwargs={"k": 3, "filter": "year >= 2016"})
    documents = retriever.invoke("Which vessel carried the BenthoCam sled?", k=2)

The settings are LangChain's: ``k``, ``filter``, ``method`` and any query-time parameter of the method
(``methods()`` lists them) set as fields, in ``search_kwargs``, or per call (``invoke(q, k=1)``), each
over the one before; a setting the method does not take is refused, not dropped. On a corpus the lake
owns, ``add_documents`` and ``delete`` write to it, as a ``VectorStoreRetriever``'s do.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from graphlake.api.results import NAMESPACE, RequestError, SearchResult
from graphlake.api.retriever_settings import SearchSettings, no_extra_arguments, upserted, written_corpus


class GraphLakeRetriever(BaseRetriever):
    """The top ``k`` nodes of ``method`` on ``corpus`` (a list: several, fused), those passing ``filter``."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")
    lake: Any  # a GraphLake or a RemoteLake: anything with their search() and asearch()
    corpus: str | list[str]
    method: str = "rrf"
    k: int = 4
    filter: dict | str | None = None
    search_kwargs: dict[str, Any] = Field(default_factory=dict)  # LangChain's name: k, filter, method and query-time parameters
    _written: int | None = PrivateAttr(None)  # the number of its last write: its searches read at least through it

    def _settings(self, call: dict[str, Any]) -> SearchSettings:
        call.pop("verbose", None)  # LangChain's own (its callbacks read it), passed on to every retriever
        settings = SearchSettings(self.corpus, self.method, self.k, self.filter).updated(self.search_kwargs, "search_kwargs").updated(call, "invoke")
        return settings.reading(self._written)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **call: Any) -> list[Document]:
        return documents(self._settings(call).search(self.lake, query))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **call: Any) -> list[Document]:
        return documents(await self._settings(call).asearch(self.lake, query))

    def add_documents(self, documents: list[Document], ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Upsert ``documents`` into the corpus (one the lake owns), as LangChain's ``VectorStoreRetriever``
        does: ids from ``ids``, else each document's own, else new ones; the ids, once the write is durable."""
        no_extra_arguments("add_documents", kwargs)
        given = list(ids) if ids is not None else [document.id or uuid.uuid4().hex for document in documents]
        if len(given) != len(documents):
            raise RequestError(f"add_documents: {len(given)} ids for {len(documents)} documents")
        self._written = self.lake.upsert(written_corpus(self.corpus), [upserted(i, document.page_content, document.metadata) for i, document in zip(given, documents, strict=True)]).seq
        return given

    async def aadd_documents(self, documents: list[Document], ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add_documents, documents, ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete the documents ``ids`` from the corpus (one the lake owns); True once the write is durable."""
        if not ids or kwargs:
            raise RequestError("delete: give the ids of the documents to delete (nothing else)")
        self._written = self.lake.delete(written_corpus(self.corpus), list(ids)).seq
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        return await asyncio.to_thread(self.delete, ids, **kwargs)


def documents(result: SearchResult) -> list[Document]:
    """A hit's text, or its context when one was asked (what a prompt should read), as a document."""
    return [Document(page_content=hit.context or hit.text, metadata={**hit.metadata, NAMESPACE: result.provenance(hit)}, id=hit.doc_id) for hit in result.hits]
