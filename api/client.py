"""A running ``graphlake serve``, searched as a ``GraphLake`` is: the same calls, the same results and
errors, over HTTP. What the adapters and ``graphlake query --server`` talk to a server through."""

from __future__ import annotations

from typing import Any

import httpx

from graphlake.api.results import Hit, RequestError, SearchResult, UnknownName
from graphlake.common.settings import API_KEY
from graphlake.retrieval.filters import Filter


class ServerError(RuntimeError):
    """The server could not be reached, or failed; the message is its own, in one line."""


class RemoteLake:
    """``search`` and ``search_batch`` of the lake a server at ``url`` serves; ``api_key`` (default
    ``$GRAPHLAKE_API_KEY``) is sent when set."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 300.0) -> None:
        self.url = url.rstrip("/")
        key = api_key if api_key is not None else API_KEY.text()
        self._client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"} if key else {})

    def search(self, corpus: str | list[str], method: str, query: str, k: int = 10, filter: Filter | dict | str | None = None, **overrides: Any) -> SearchResult:
        return _result(self._post("/search", _body(corpus, method, k, filter, overrides, query=query)))

    def search_batch(
        self, corpus: str | list[str], method: str, queries: list[str], k: int = 10, filter: Filter | dict | str | None = None, **overrides: Any
    ) -> list[SearchResult]:
        return [_result(item) for item in self._post("/search/batch", _body(corpus, method, k, filter, overrides, queries=queries))]

    def close(self) -> None:
        self._client.close()

    def _post(self, route: str, body: dict) -> Any:
        try:
            answer = self._client.post(self.url + route, json=body)
        except httpx.HTTPError as error:
            raise ServerError(f"server {self.url}: {error}") from None
        if answer.status_code == 200:
            return answer.json()
        json_answer = answer.headers.get("content-type", "").startswith("application/json")
        message = answer.json().get("error", answer.text) if json_answer else answer.text
        raise {404: UnknownName, 422: RequestError}.get(answer.status_code, ServerError)(message)


def _body(corpus: Any, method: str, k: int, filter: Any, overrides: dict, **query: Any) -> dict:
    body = {"corpus": corpus, "method": method, "k": k, **query, **overrides}
    if filter is not None:
        body["filter"] = filter if isinstance(filter, dict | str) else filter.model_dump(by_alias=True, exclude_none=True)
    return body


def _result(answer: dict) -> SearchResult:
    return SearchResult(**{**answer, "hits": [Hit(**hit) for hit in answer["hits"]]})
