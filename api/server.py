"""``graphlake serve``: the API over HTTP (FastAPI on uvicorn), bound to 127.0.0.1 unless told otherwise.

``POST /search`` and ``POST /search/batch`` answer what :meth:`GraphLake.search` and ``search_batch``
return; ``GET /corpora``, ``/methods`` and ``/health``; the OpenAPI docs at ``/docs``. With
``$GRAPHLAKE_API_KEY`` set, every route but ``/health`` wants it (``Authorization: Bearer <key>`` or
``X-API-Key``), compared in constant time and never logged. Every refused request gets a 4xx whose
body is one line: ``{"error": "..."}``."""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from graphlake.api.access import KEY_ENV, key_matches
from graphlake.api.lake import MAX_BATCH, MAX_K, MAX_QUERY_CHARS, GraphLake
from graphlake.api.results import CorpusInfo, MethodInfo, RequestError, SearchResult, UnknownName

OPEN_PATHS = frozenset({"/health"})


class _Search(BaseModel):
    """Any other field is one of the method's query-time parameters (``GET /methods`` lists them)."""

    model_config = ConfigDict(extra="allow")

    corpus: str = Field(min_length=1, max_length=200)
    method: str = Field(min_length=1, max_length=200)
    k: int = Field(10, ge=1, le=MAX_K)

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
        return JSONResponse({"error": f"{where}: {problem['msg']}"}, status_code=422)

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
        return lake.search(request.corpus, request.method, request.query, request.k, **request.overrides())

    @app.post("/search/batch")
    def search_batch(request: BatchRequest) -> list[SearchResult]:
        return lake.search_batch(request.corpus, request.method, request.queries, request.k, **request.overrides())

    return app


def serve(lake: GraphLake, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``lake`` until interrupted (uvicorn's access log names paths, never headers)."""
    import uvicorn

    uvicorn.run(create_app(lake), host=host, port=port, log_level="info")
