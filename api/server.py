"""``graphlake serve``: the API over HTTP (FastAPI on uvicorn), bound to 127.0.0.1 unless told otherwise.

``POST /search`` and ``POST /search/batch`` answer what :meth:`GraphLake.search` and ``search_batch``
return; ``GET /corpora``, ``/methods`` and ``/health``; the OpenAPI docs at ``/docs``. With
``$GRAPHLAKE_API_KEY`` set, every route but ``/health`` wants it (``Authorization: Bearer <key>`` or
``X-API-Key``), compared in constant time and never logged. Every refused request gets a 4xx whose
body is one line: ``{"error": "..."}``; so does a malformed body, one over ``MAX_BODY_BYTES`` (refused
before it is read whole), an unknown path, and a search whose index the lake has not built (409).
Values are strict: ``"k": "5"`` or ``true`` is refused, not read as a number."""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from graphlake.api.access import KEY_ENV, key_matches
from graphlake.api.lake import MAX_BATCH, MAX_CORPORA, MAX_K, MAX_NAME_CHARS, MAX_QUERY_CHARS, GraphLake
from graphlake.api.results import CorpusInfo, MethodInfo, RequestError, SearchResult, UnknownName
from graphlake.retrieval.filters import MAX_FILTER_CHARS
from graphlake.warehouse.storage import StorageError

OPEN_PATHS = frozenset({"/health"})
MAX_BODY_BYTES = 4 << 20  # a full batch of the longest queries, escaped, fits with room to spare


class _Search(BaseModel):
    """Any other field is one of the method's query-time parameters (``GET /methods`` lists them)."""

    model_config = ConfigDict(extra="allow", strict=True)

    corpus: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)] | Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]], Field(min_length=1, max_length=MAX_CORPORA)
    ]  # several: their rankings fused, each hit naming its corpus
    method: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    k: int = Field(10, ge=1, le=MAX_K)
    filter: dict[str, Any] | Annotated[str, Field(max_length=MAX_FILTER_CHARS)] | None = None  # retrieval/filters.py: JSON or text

    def overrides(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SearchRequest(_Search):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)


class BatchRequest(_Search):
    queries: list[str] = Field(min_length=1, max_length=MAX_BATCH)


class Health(BaseModel):
    status: str
    corpora: int


def create_app(lake: GraphLake, api_key: str | None = None) -> FastAPI:
    """The HTTP app over ``lake``; ``api_key`` (default ``$GRAPHLAKE_API_KEY``) guards every route but /health."""
    key = api_key if api_key is not None else os.environ.get(KEY_ENV, "")
    app = FastAPI(title="graphlake", summary="Graph-RAG retrieval over a graphlake lake", version="1")
    app.add_middleware(_BodyLimit, limit=MAX_BODY_BYTES)

    @app.middleware("http")
    async def require_key(request: Request, call_next):
        if key and request.url.path not in OPEN_PATHS:
            given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not key_matches(given, key):
                return JSONResponse({"error": "missing or wrong API key (Authorization: Bearer <key>, or X-API-Key)"}, status_code=401)
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"] if part != "body") or "body"
        if problem["type"] == "json_invalid":
            where, problem["msg"] = "body", f"not JSON ({problem.get('ctx', {}).get('error', 'a decode error')} at character {problem['loc'][-1]})"
        return JSONResponse({"error": f"{where}: {problem['msg']}"}, status_code=422)

    @app.exception_handler(HTTPException)
    async def refused_by_http(request: Request, error: HTTPException) -> JSONResponse:
        detail = "body: not JSON that can be read (nested too deeply?)" if error.status_code == 400 else str(error.detail)
        return JSONResponse({"error": " ".join(detail.split())}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(StorageError)
    async def not_built(request: Request, error: StorageError) -> JSONResponse:
        return JSONResponse({"error": str(error).splitlines()[0]}, status_code=409)

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:  # the traceback goes to the server's log
        return JSONResponse({"error": f"internal error ({type(error).__name__}); the server's log has the details"}, status_code=500)

    @app.exception_handler(UnknownName)
    async def unknown(request: Request, error: UnknownName) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=404)

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=422)

    @app.get("/health")
    def health() -> Health:
        return Health(status="ok", corpora=len(lake.corpora()))

    @app.get("/corpora")
    def corpora() -> list[CorpusInfo]:
        return lake.corpora()

    @app.get("/methods")
    def methods() -> list[MethodInfo]:
        return lake.methods()

    @app.post("/search")
    def search(request: SearchRequest) -> SearchResult:
        return lake.search(request.corpus, request.method, request.query, request.k, request.filter, **request.overrides())

    @app.post("/search/batch")
    def search_batch(request: BatchRequest) -> list[SearchResult]:
        return lake.search_batch(request.corpus, request.method, request.queries, request.k, request.filter, **request.overrides())

    return app


class _BodyLimit:
    """Refuses a body over ``limit`` bytes with a 413 in the API's shape: by its Content-Length before
    reading any of it, or (chunked) as soon as it passes the limit; the app is then handed the body read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared and (not declared.isdigit() or int(declared) > self.limit):
            return await self._refuse(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            chunks.append(message.get("body", b""))
            size, more = size + len(chunks[-1]), message.get("more_body", False)
            if size > self.limit:
                return await self._refuse(scope, receive, send)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse({"error": f"body: over {self.limit >> 20} MiB"}, status_code=413, headers={"Connection": "close"})
        await response(scope, receive, send)


def serve(lake: GraphLake, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``lake`` until interrupted (uvicorn's access log names paths, never headers)."""
    import uvicorn

    uvicorn.run(create_app(lake), host=host, port=port, log_level="info")
