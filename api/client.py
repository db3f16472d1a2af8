"""A running ``graphlake serve``, searched as a ``GraphLake`` is: the same calls, the same results and
errors, over HTTP, and awaitable (``asearch``) without blocking the event loop. What the adapters and
``graphlake query --server`` talk to a server through."""

from __future__ import annotations

import asyncio
import warnings
import weakref
from typing import Any
from urllib.parse import quote

import httpx
import pyarrow as pa

from graphlake.api.results import (
    CorpusBusy,
    CorpusInfo,
    DiskFull,
    DocumentPage,
    Hit,
    IndexNotBuilt,
    MethodInfo,
    NameConflict,
    Overloaded,
    RequestError,
    RowsCut,
    SearchResult,
    StoredDocument,
    UnknownName,
    Written,
    refused_as_request,
)
from graphlake.common.settings import API_KEY
from graphlake.retrieval.filters import Filter
from graphlake.warehouse.write_checks import checked_documents, checked_ids


class ServerError(RuntimeError):
    """The server could not be reached, or failed; the message is its own, in one line."""


class RemoteLake:
    """The lake a server at ``url`` serves, with ``GraphLake``'s calls: ``search`` and ``search_batch``
    (and their awaitable ``asearch`` and ``asearch_batch``), ``corpora``, ``methods``, ``warm``, ``sql``,
    ``create_corpus``, ``upsert``, ``delete``, ``get_documents``, ``list_documents``, ``embed``, ``drop_corpus`` and
    ``as_retriever``; ``api_key`` (default ``$GRAPHLAKE_API_KEY``) is sent when set."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 300.0) -> None:
        self.url = url.rstrip("/")
        key = api_key if api_key is not None else API_KEY.text()
        self._options = {"timeout": timeout, "headers": {"Authorization": f"Bearer {key}"} if key else {}}
        self._client = httpx.Client(**self._options)
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()  # a client is its loop's

    def search(
        self,
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
        return _result(self._post("/search", _body(corpus, method, k, filter, {"group_by": group_by, "context": context, "min_relevance": min_relevance, **overrides}, query=query)))

    def search_batch(
        self,
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
        return [
            _result(item)
            for item in self._post("/search/batch", _body(corpus, method, k, filter, {"group_by": group_by, "context": context, "min_relevance": min_relevance, **overrides}, queries=queries))
        ]

    async def asearch(
        self,
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
        return _result(await self._apost("/search", _body(corpus, method, k, filter, {"group_by": group_by, "context": context, "min_relevance": min_relevance, **overrides}, query=query)))

    async def asearch_batch(
        self,
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
        return [
            _result(item)
            for item in await self._apost("/search/batch", _body(corpus, method, k, filter, {"group_by": group_by, "context": context, "min_relevance": min_relevance, **overrides}, queries=queries))
        ]

    def corpora(self) -> list[CorpusInfo]:
        return [CorpusInfo(**item) for item in self._read(self._send("GET", "/corpora", None))]

    def methods(self) -> list[MethodInfo]:
        return [MethodInfo(**item) for item in self._read(self._send("GET", "/methods", None))]

    def create_corpus(self, name: str) -> CorpusInfo:
        """Have the server declare a corpus its lake owns."""
        return CorpusInfo(**self._read(self._send("POST", "/corpora", {"name": name}), conflict=NameConflict))

    def upsert(self, corpus: str, documents: list[dict[str, Any]]) -> Written:
        """Add or replace documents of a corpus the lake owns, as ``GraphLake.upsert``."""
        checked = refused_as_request(checked_documents, documents)  # refused as in process, before anything is sent
        return Written(**self._post(f"/corpora/{quote(corpus, safe='')}/documents", {"documents": checked}))

    def delete(self, corpus: str, ids: list[str]) -> Written:
        """Delete documents of a corpus the lake owns by id, as ``GraphLake.delete``."""
        refused_as_request(checked_ids, ids)
        return Written(**self._read(self._send("DELETE", f"/corpora/{quote(corpus, safe='')}/documents", {"ids": list(ids)})))

    def document_ids(self, corpus: str, filter: Filter | dict | str | None = None) -> list[str]:
        """The ids of the corpus's documents that pass ``filter``, as ``GraphLake.document_ids``."""
        return self._post(f"/corpora/{quote(corpus, safe='')}/ids", {"filter": _filter(filter)})["ids"]

    def get_documents(self, corpus: str, ids: list[str]) -> list[StoredDocument]:
        """The documents with these ids, as ``GraphLake.get_documents``."""
        if isinstance(ids, list | tuple) and not ids:
            return []
        wanted = refused_as_request(checked_ids, ids)
        return [StoredDocument(**item) for item in self._post(f"/corpora/{quote(corpus, safe='')}/documents/get", {"ids": wanted})]

    def list_documents(self, corpus: str, after: str | None = None, limit: int = 100, filter: Filter | dict | str | None = None) -> DocumentPage:
        """A page of the corpus's documents in id order, as ``GraphLake.list_documents``."""
        page = self._post(f"/corpora/{quote(corpus, safe='')}/documents/list", {"after": after, "limit": limit, "filter": _filter(filter)})
        return DocumentPage([StoredDocument(**item) for item in page["documents"]], page["next"])

    def embed(self, corpus: str, texts: list[str], kind: str = "passage") -> list[list[float]]:
        """``texts`` as the corpus's dense model encodes them, as ``GraphLake.embed``."""
        return self._post("/embed", {"corpus": corpus, "texts": texts, "kind": kind})["vectors"]

    def drop_corpus(self, name: str) -> bool:
        """Have the server remove a corpus, as ``GraphLake.drop_corpus``."""
        return self._read(self._send("DELETE", f"/corpora/{quote(name, safe='')}", None))["dropped"]

    def warm(self, corpus: str, method: str) -> None:
        """Have the server load what ``method`` reads on ``corpus`` now."""
        self._post("/warm", {"corpus": corpus, "method": method})

    def sql(self, statement: str, limit: int = 10_000) -> pa.Table:
        """The server's answer to a read-only statement, as ``GraphLake.sql`` gives it (``RowsCut`` warned when cut)."""
        answer = self._send("POST", "/sql", {"statement": statement, "limit": limit})
        if answer.status_code != 200:
            self._read(answer)
        if answer.headers.get("x-rows-cut") == "1":
            warnings.warn(RowsCut(f"the first {limit:,} rows of more"), stacklevel=2)
        return pa.ipc.open_stream(answer.content).read_all()

    def as_retriever(self, **settings: Any) -> Any:
        """A LangChain retriever over this server's lake, as ``GraphLake.as_retriever``."""
        from graphlake.api.langchain import GraphLakeRetriever

        return GraphLakeRetriever(lake=self, **settings)

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        """Close the running loop's connections (each event loop has its own)."""
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def _post(self, route: str, body: dict) -> Any:
        return self._read(self._send("POST", route, body))

    def _send(self, verb: str, route: str, body: dict | None) -> httpx.Response:
        try:
            return self._client.request(verb, self.url + route, json=body)
        except httpx.HTTPError as error:
            raise ServerError(f"server {self.url}: {error}") from None

    async def _apost(self, route: str, body: dict) -> Any:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            client = self._async[loop] = httpx.AsyncClient(**self._options)
        try:
            answer = await client.post(self.url + route, json=body)
        except httpx.HTTPError as error:
            raise ServerError(f"server {self.url}: {error}") from None
        return self._read(answer)

    def _read(self, answer: httpx.Response, conflict: type[Exception] = IndexNotBuilt) -> Any:
        """The answer's JSON, or its refusal raised as the Python API raises it (409: ``conflict``)."""
        if answer.status_code == 200:
            return answer.json()
        json_answer = answer.headers.get("content-type", "").startswith("application/json")
        message = answer.json().get("error", answer.text) if json_answer else answer.text
        if answer.status_code == 429:
            raise Overloaded(message, int(answer.headers.get("retry-after", "1")))
        raise {404: UnknownName, 409: conflict, 422: RequestError, 423: CorpusBusy, 507: DiskFull}.get(answer.status_code, ServerError)(message)


def _body(corpus: Any, method: str, k: int, filter: Any, overrides: dict, **query: Any) -> dict:
    body = {"corpus": corpus, "method": method, "k": k, **query, **overrides}
    if filter is not None:
        body["filter"] = _filter(filter)
    return body


def _filter(filter: Filter | dict | str | None) -> dict | str | None:
    """A filter as JSON carries it."""
    return filter if filter is None or isinstance(filter, dict | str) else filter.model_dump(by_alias=True, exclude_none=True)


def _result(answer: dict) -> SearchResult:
    return SearchResult(**{**answer, "hits": [Hit(**hit) for hit in answer["hits"]]})
