"""``graphlake serve``: the API over HTTP (FastAPI on uvicorn), bound to 127.0.0.1 unless told otherwise.

``POST /search`` and ``POST /search/batch`` answer what :meth:`GraphLake.search` and ``search_batch``
return (a batch streamed, one query's answer at a time); ``POST /corpora`` declares a corpus the lake
owns, ``POST`` and ``DELETE /corpora/{corpus}/documents`` upsert and delete its documents (answered once
durable); ``POST /sql`` a read-only statement's rows
(an Arrow IPC stream), ``POST /warm`` loads a method's indexes; ``GET`` (and ``HEAD``) ``/corpora``,
``/methods`` and ``/health``; the OpenAPI docs at ``/docs``. With ``$GRAPHLAKE_API_KEY`` set, every
route but ``/health`` wants it, as ``Authorization: Bearer <key>`` (the scheme in any case, as HTTP
has it) or ``X-API-Key: <key>``; it is compared in constant time and never logged (nor is any query
string). Every refusal, the HTTP layer's own included (``api/http_protocol.py``), is a 4xx or 503
whose body is one line of at most 300 characters: ``{"error": "..."}``; a malformed body, one over
``MAX_BODY_BYTES`` (refused before it is read whole), a head over 64 KiB or ``MAX_HEADERS`` headers,
an unknown path (no redirect for a trailing slash), and a search whose index the lake has not built
(409) among them. Values are strict: ``"k": "5"`` or ``true`` is refused, not read as a number.
Searches and SQL run under a deadline and stop when their client disconnects (``api/running.py``); the
OpenAPI document lists every status a route answers (``documented``)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Union

import pyarrow as pa
from fastapi import FastAPI, Request
from fastapi import Path as PathParameter
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, TypeAdapter
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from graphlake.api.access import key_matches
from graphlake.api.budget import MemoryBudget, OverBudget, give_memory_back, tame_allocator
from graphlake.api.http_protocol import MAX_BODY_BYTES, MAX_ERROR_CHARS, JsonErrorsProtocol, error_line, logging_config
from graphlake.api.lake import GraphLake
from graphlake.api.requests import (
    METADATA_VALUE,
    METADATA_VALUE_SCHEMA,
    VALUE_PLACEHOLDER,
    VALUE_REF,
    BatchRequest,
    CorpusRequest,
    DeleteRequest,
    DocumentIds,
    Dropped,
    Embedded,
    EmbedRequest,
    GetRequest,
    Health,
    IdsRequest,
    ListRequest,
    SearchRequest,
    SqlRequest,
    UpsertRequest,
    WarmRequest,
    answer_json,
)  # fmt: skip
from graphlake.api.results import CorpusBusy, CorpusInfo, DocumentPage, IndexNotBuilt, MethodInfo, NameConflict, Overloaded, RequestError, RowsCut, SearchResult, StoredDocument, UnknownName, Written
from graphlake.api.running import Running
from graphlake.common.settings import API_KEY, SERVE_DEADLINE_S, SERVE_GRACE_S, SERVE_PRIVATE_DOCS
from graphlake.common.stopping import Stop, Stopped
from graphlake.common.unicode_checks import SPACES_ONLY_NOT
from graphlake.retrieval.core import METHOD_NAME, OPERATORS
from graphlake.warehouse.corpora import CORPUS_NAME
from graphlake.warehouse.scopes import DiskFull
from graphlake.warehouse.write_checks import MAX_NAME_CHARS

LOG = logging.getLogger("uvicorn.error")  # the server's log
ANSWER_S = 2.0  # after the grace, how long requests stopped at shutdown have to answer before uvicorn cancels them
EXIT_S = 5.0  # after uvicorn's shutdown, how long a request stuck in one stage may hold the process up
OPEN_PATHS = frozenset({"/health"})
DOCS_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})  # no data: open unless GRAPHLAKE_SERVE_PRIVATE_DOCS
MCP_PATH = "/mcp"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
MAX_HEADERS = 100  # Envoy's default count
KEY_FORMS = "Authorization: Bearer <key>, or X-API-Key: <key>"


def refusal(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """Every refusal's shape: ``{"error": "<one line>"}``."""
    return JSONResponse({"error": error_line(message)}, status_code=status, headers=headers)


class Refusal(BaseModel):
    """What every status but 200 answers."""

    error: str = Field(description=f"why, on one line of at most {MAX_ERROR_CHARS} characters")


RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before asking again", "schema": {"type": "integer"}}}
HEADERS = {405: {"Allow": {"description": "the methods the path takes", "schema": {"type": "string"}}}, 429: RETRY_AFTER, 503: RETRY_AFTER}
WHY = {
    400: "not an HTTP request or a body this server reads (malformed, not UTF-8, a number of over 4,300 digits)",
    401: "the API key is missing or wrong ($GRAPHLAKE_API_KEY is set on the server)",
    404: "no such corpus or method (the message names the ones the lake has)",
    409: "what the request reads is not built, a corpus's log of writes is damaged (the message names the command), or a corpus name is taken",
    413: f"the body is over {MAX_BODY_BYTES >> 20} MiB",
    422: "a value the request may not hold, or one the lake cannot answer as asked",
    423: "a build holds the corpus",
    405: "the path does not take this method (Allow names the ones it takes)",
    408: "the request's head or body did not arrive within $GRAPHLAKE_SERVE_HEAD_TIMEOUT_S / $GRAPHLAKE_SERVE_BODY_TIMEOUT_S",
    429: "the lake is encoding as many writes as it may at once, or this address holds as many connections as it may ($GRAPHLAKE_SERVE_CLIENT_CONNECTIONS)",
    431: "too many headers, or a request head over 64 KiB",
    500: "an internal error; the server's log has the details",
    501: "a Transfer-Encoding other than chunked",
    503: "the server is at its memory budget, or shutting down: try again (Retry-After)",
    504: "the request ran past its deadline (timeout_s, or the server's $GRAPHLAKE_SERVE_DEADLINE_S) and was stopped",
    507: "no room on the lake's disk; nothing of the write was kept",
}
EVERY_ROUTE = (400, 405, 408, 413, 429, 431, 500, 501)
CorpusInPath = Annotated[str, PathParameter(max_length=MAX_NAME_CHARS, pattern=f"^{CORPUS_NAME.pattern}$", description="a corpus's name")]


def documented(*statuses: int, guarded: bool = True) -> dict[int | str, dict[str, Any]]:
    """The refusals a route answers, for its OpenAPI entry (``EVERY_ROUTE`` besides, and 401 where the key guards it)."""
    found = sorted({*statuses, *EVERY_ROUTE, *((401,) if guarded else ())})
    return {status: {"model": Refusal, "description": WHY[status], **({"headers": HEADERS[status]} if status in HEADERS else {})} for status in found}


def create_app(lake: GraphLake, api_key: str | None = None, host: str = "127.0.0.1") -> FastAPI:
    """The HTTP app over ``lake``; ``api_key`` (default ``$GRAPHLAKE_API_KEY``) guards every route but
    /health; with the ``mcp`` extra, MCP's streamable HTTP at /mcp (``api/mcp_server.py``)."""
    agents = _mcp_routes(lake, host)
    running = Running()

    app = FastAPI(title="graphlake", summary="Graph-RAG retrieval over a graphlake lake", version="1", redirect_slashes=False, lifespan=agents[1] if agents else None)
    app.state.running = running  # what ``serve`` stops at the end of the shutdown's grace
    app.router.route_class = _JsonRoute
    _guard(app, api_key if api_key is not None else API_KEY.text() or "")
    _refusals(app)
    budget = MemoryBudget.from_env()  # the searches' and the SQL statements' alike
    _lake_routes(app, lake, budget, running)
    _search_routes(app, lake, budget, running)
    if agents:
        app.router.routes.extend(agents[0])
    return app


def _mcp_routes(lake: GraphLake, host: str) -> tuple[list, Callable] | None:
    """MCP's route at /mcp with every tool (writes too: the API key guards it as it guards every route),
    and the lifespan its session manager runs in; None without the ``mcp`` extra."""
    try:
        from graphlake.api.mcp_server import mcp_server
    except ImportError:
        return None
    server = mcp_server(lake, writes=True)
    routes = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=host).routes

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return routes, lifespan


def _guard(app: FastAPI, key: str) -> None:
    """The key every route but the open ones requires, the limits on a request's body and headers, and
    a 500 for what no route foresaw that leaves the connection usable (``_Contained``)."""
    app.add_middleware(_Contained)  # added first, runs last: around the routes alone
    open_paths = OPEN_PATHS | (frozenset() if SERVE_PRIVATE_DOCS.flag() else DOCS_PATHS)

    app.add_middleware(_KeyRequired, routes=app, key=key, open_paths=open_paths)
    app.add_middleware(_Limits, body=MAX_BODY_BYTES, headers=MAX_HEADERS)  # added last, runs first: before the key


def _refusals(app: FastAPI) -> None:
    """Every error as a refusal of one shape (``refusal``), with the status that says whose mistake it is."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"] if part != "body" and _named(part)) or "body"
        if problem["type"] == "json_invalid":
            where, problem["msg"] = "body", f"not JSON ({problem.get('ctx', {}).get('error', 'a decode error')} at character {problem['loc'][-1]})"
        if problem["type"] == "string_unicode":
            problem["msg"] = "not valid Unicode (a lone surrogate, \\ud800 to \\udfff)"
        if problem["type"] == "string_pattern_mismatch":
            given = str(problem.get("input", ""))
            problem["msg"] = f"{given if len(given) <= 40 else given[:37] + '...'!r} is {PATTERNS.get(problem.get('ctx', {}).get('pattern'), 'not of the form the schema gives')}"
        return refusal(422, f"{where}: {problem['msg']}")

    @app.exception_handler(HTTPException)
    async def refused_by_http(request: Request, error: HTTPException) -> JSONResponse:
        detail = _unreadable(error.__cause__) if error.status_code == 400 else str(error.detail)
        return refusal(error.status_code, detail, error.headers)

    @app.exception_handler(IndexNotBuilt)
    async def not_built(request: Request, error: IndexNotBuilt) -> JSONResponse:
        return refusal(409, str(error))

    @app.exception_handler(NameConflict)
    async def name_taken(request: Request, error: NameConflict) -> JSONResponse:
        return refusal(409, str(error))

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:  # outside the routes (a middleware's): Starlette re-raises it, uvicorn closes
        return refusal(500, _internal(error), {"Connection": "close"})

    @app.exception_handler(UnknownName)
    async def unknown(request: Request, error: UnknownName) -> JSONResponse:
        return refusal(404, str(error))

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        return refusal(422, str(error))

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, error: Overloaded) -> JSONResponse:
        return refusal(429, str(error), {"Retry-After": str(error.retry_after)})

    @app.exception_handler(CorpusBusy)
    async def busy(request: Request, error: CorpusBusy) -> JSONResponse:
        return refusal(423, str(error))

    @app.exception_handler(DiskFull)
    async def no_room(request: Request, error: DiskFull) -> JSONResponse:
        return refusal(507, str(error))

    @app.exception_handler(Stopped)
    async def stopped(request: Request, error: Stopped) -> JSONResponse:
        if error.why == "disconnected":  # nobody reads the answer: the server's log says it
            LOG.info("%s %s: %s", request.method, request.url.path, error)
        return refusal(504, str(error)) if error.why == "deadline" else refusal(503, str(error), {"Retry-After": "1"})

    @app.exception_handler(OverBudget)
    async def over_budget(request: Request, error: OverBudget) -> JSONResponse:
        return refusal(503, str(error), {"Retry-After": "1"}) if error.busy else refusal(422, str(error))


def _lake_routes(app: FastAPI, lake: GraphLake, budget: MemoryBudget, running: Running) -> None:
    """What is in the lake, the writes to the corpora it owns, warming, and SQL."""

    @app.api_route("/health", methods=["GET", "HEAD"], responses=documented(guarded=False))
    def health() -> Health:
        return Health(status="ok", corpora=len(lake.corpora()))

    @app.api_route("/corpora", methods=["GET", "HEAD"], responses=documented())
    def corpora() -> list[CorpusInfo]:
        return lake.corpora()

    @app.api_route("/methods", methods=["GET", "HEAD"], responses=documented())
    def methods() -> list[MethodInfo]:
        return lake.methods()

    @app.post("/corpora", responses=documented(409, 422, 507))
    def create_corpus(request: CorpusRequest) -> CorpusInfo:
        """Declare a corpus the lake owns (no error if it exists), filled by the writes below."""
        return lake.create_corpus(request.name)

    async def upsert(corpus: CorpusInPath, request: UpsertRequest, http: Request) -> Written:
        """Add or replace documents of a corpus the lake owns; answered once the write is durable, with its number
        (past its deadline, or its client gone, before the write is appended: nothing is written)."""
        documents = [document.model_dump() for document in request.documents]
        return await running.stoppable(http, request.timeout_s, lambda stop: lake.upsert(corpus, documents, stop))

    # its numbers read as written (_AsSentRoute): a document's metadata comes back as it went in, 1.0 a float
    app.router.add_api_route("/corpora/{corpus}/documents", upsert, methods=["POST"], responses=documented(404, 409, 422, 429, 503, 504, 507), route_class_override=_AsSentRoute)

    @app.delete("/corpora/{corpus}/documents", responses=documented(404, 409, 422, 429, 507))
    def delete(corpus: CorpusInPath, request: DeleteRequest) -> Written:
        """Delete documents of a corpus the lake owns by id; answered once the write is durable, with its number."""
        return lake.delete(corpus, request.ids)

    @app.post("/corpora/{corpus}/ids", responses=documented(404, 409, 422))
    def document_ids(corpus: CorpusInPath, request: IdsRequest) -> DocumentIds:
        """The ids of the corpus's documents that pass the filter (all without one), committed and pending, as a search now reads them."""
        return DocumentIds(ids=lake.document_ids(corpus, request.filter))

    @app.post("/corpora/{corpus}/documents/get", responses=documented(404, 409, 422))
    def get_documents(corpus: CorpusInPath, request: GetRequest) -> list[StoredDocument]:
        """The documents with these ids (committed and pending, as a search now reads them; unknown ids left out), in the order asked."""
        return lake.get_documents(corpus, request.ids)

    @app.post("/corpora/{corpus}/documents/list", responses=documented(404, 409, 422))
    def list_documents(corpus: CorpusInPath, request: ListRequest) -> DocumentPage:
        """A page of the corpus's documents in id order, from the first id past ``after``; ``next`` is the cursor of the page after."""
        return lake.list_documents(corpus, request.after, request.limit, request.filter)

    @app.post("/embed", responses=documented(404, 409, 422, 503, 504))
    async def embed(request: EmbedRequest, http: Request) -> Embedded:
        """The texts as the corpus's dense model encodes them (as passages or as queries)."""
        return Embedded(vectors=await running.stoppable(http, request.timeout_s, lambda stop: lake.embed(request.corpus, request.texts, request.kind, stop)))

    @app.delete("/corpora/{corpus}", responses=documented(404, 422, 423, 507))
    def drop_corpus(corpus: CorpusInPath) -> Dropped:
        """Remove the corpus: its declaration, log, tables and artefacts, in one step (423 while a build holds it)."""
        return Dropped(corpus=corpus, dropped=lake.drop_corpus(corpus))

    @app.post("/warm", responses=documented(404, 409, 422, 503, 504))
    async def warm(request: WarmRequest, http: Request) -> Health:
        """Load what the method reads on the corpus now, so that the first search's latency is the search's."""
        await running.stoppable(http, request.timeout_s, lambda stop: lake.warm(request.corpus, request.method, stop))
        return Health(status="warm", corpora=1)

    @app.post("/sql", response_class=Response, responses={200: {"content": {ARROW_STREAM: {}}, "description": "the rows, as an Arrow IPC stream"}, **documented(422, 503, 504)})
    async def sql(request: SqlRequest, http: Request) -> Response:
        """A read-only statement in the lake's SQL sandbox; the rows as an Arrow IPC stream, ``X-Rows-Cut: 1`` when there were more than ``limit``."""

        def answered(stop: Stop) -> tuple[bytes, bool]:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", RowsCut)
                table = lake.sql(request.statement, request.limit, stop, budget)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            return sink.getvalue().to_pybytes(), any(issubclass(w.category, RowsCut) for w in said)

        rows, cut = await running.stoppable(http, request.timeout_s, answered)
        return Response(rows, media_type=ARROW_STREAM, headers={"X-Rows-Cut": "1"} if cut else {})


def _search_routes(app: FastAPI, lake: GraphLake, budget: MemoryBudget, running: Running) -> None:
    """The searches, within the memory ``budget``, and the schema that lists each method's query-time parameters."""

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, with each method's query-time parameters in the search bodies (the models
        allow any further field: the method validates its own, strictly)."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for body in ("SearchRequest", "BatchRequest"):
                schema["components"]["schemas"][body]["properties"].update(query_time_parameters(lake))
            schema = _placed(schema)
            schema["components"]["schemas"][METADATA_VALUE] = METADATA_VALUE_SCHEMA
            for body in schema["components"]["schemas"].values():  # the deadline a request may ask for: at most the server's
                for branch in body.get("properties", {}).get("timeout_s", {}).get("anyOf", []):
                    if branch.get("type") == "number":
                        branch["maximum"] = SERVE_DEADLINE_S.number()
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi

    @app.post("/search", response_model=SearchResult, responses=documented(404, 409, 422, 503, 504))
    async def search(request: SearchRequest, http: Request) -> Response:
        def answered(stop: Stop) -> bytes:
            [answer] = lake.answers(request.corpus, request.method, [request.query], request.k, request.filter, request.overrides(), budget, request.shown(), stop)
            return answer_json(answer)

        return Response(await running.stoppable(http, request.timeout_s, answered), media_type="application/json")

    @app.post("/search/batch", response_model=list[SearchResult], responses=documented(404, 409, 422, 503, 504))
    async def search_batch(request: BatchRequest, http: Request) -> StreamingResponse:
        def answered(stop: Stop) -> Iterator[SearchResult]:
            return lake.answers(request.corpus, request.method, request.queries, request.k, request.filter, request.overrides(), budget, request.shown(), stop)

        answers = await running.stoppable(http, request.timeout_s, answered)  # the search; its answers are then written one at a time
        return StreamingResponse(_json_list(answers), media_type="application/json", background=BackgroundTask(give_memory_back))


def query_time_parameters(lake: GraphLake) -> dict[str, dict[str, Any]]:
    """Per query-time parameter of the lake's methods (``k`` aside): its JSON schema, the union of the
    types its operators take (``weights``: a list of numbers for rrf, path weights for ap_three), and
    the methods that take it."""
    takers: dict[str, list[str]] = {}
    for method in lake.methods():
        for name in method.query_time:
            takers.setdefault(name, []).append(method.name)
    found = {}
    for name, methods in sorted(takers.items()):
        if name == "k":
            continue
        types = list(dict.fromkeys(op.model_fields[name].annotation for op in OPERATORS.values() if name in op.QUERY_TIME and name in op.model_fields))
        schema = _inlined(TypeAdapter(Union[tuple(types)] if len(types) > 1 else types[0]).json_schema())  # noqa: UP007 (a tuple of types)
        found[name] = {**schema, "description": f"query-time parameter of {', '.join(methods)}"}
    return found


def _placed(node: Any) -> Any:
    """The schema with the metadata value's reference where its placeholder stands."""
    if node == VALUE_PLACEHOLDER:
        return dict(VALUE_REF)
    if isinstance(node, dict):
        return {key: _placed(value) for key, value in node.items()}
    return [_placed(item) for item in node] if isinstance(node, list) else node


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema with its ``$defs`` written in place (the OpenAPI document keeps its own components)."""
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        return [inline(item) for item in node] if isinstance(node, list) else node

    return inline(schema)


def _key_of(headers: Headers) -> tuple[str, str | None]:
    """The key a request sends, or why its form is refused: ``Authorization`` must name the Bearer
    scheme (in any case); ``X-API-Key`` is the key alone (surrounding spaces dropped)."""
    if "x-api-key" in headers:
        return headers["x-api-key"].strip(), None
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if not scheme:
        return "", None
    if scheme.lower() != "bearer" or not token.strip():
        return "", "Authorization: expected 'Bearer <key>'"
    return token.strip(), None


def _unreadable(cause: BaseException | None) -> str:
    """Why a body could not be read as JSON, from what the parser raised."""
    if isinstance(cause, UnicodeDecodeError):
        return f"body: not UTF-8 (byte {cause.start + 1})"
    if isinstance(cause, RecursionError):
        return "body: JSON nested too deeply to read"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "body: a number of more than 4,300 digits"
    return "body: not JSON that can be read"


def _json_list(answers: Iterator[SearchResult]) -> Iterator[bytes]:
    """A JSON list written one answer at a time."""
    yield b"["
    for i, answer in enumerate(answers):
        yield (b"," if i else b"") + answer_json(answer)
    yield b"]"


def _json_number(text: str) -> int | float:
    """A JSON number with a fraction or an exponent: a whole one (``18572.0``, ``1e3``) is an integer, as
    JSON Schema counts it, so that a strict integer field takes what the schema calls an integer."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= 2**53 else value


class _JsonRequest(Request):
    """A body read as JSON in UTF-8 alone (``json.loads`` of bytes takes UTF-16 and UTF-32 too), its
    numbers with a fraction or an exponent by ``numbers``."""

    numbers: Callable[[str], Any] | None = staticmethod(_json_number)

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads((await self.body()).decode("utf-8"), parse_float=self.numbers)
        return self._json


class _AsSentRequest(_JsonRequest):
    numbers = None  # a document's metadata comes back as it went in: 1.0 a float


class _JsonRoute(APIRoute):
    """A route whose body is read as ``_JsonRequest`` reads it (every route but the upsert, whose
    documents are stored as sent: ``_AsSentRoute``)."""

    request_class: type[_JsonRequest] = _JsonRequest

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(self.request_class(request.scope, request.receive))

        return route


class _AsSentRoute(_JsonRoute):
    request_class = _AsSentRequest


def _methods_at(app: FastAPI, path: str) -> frozenset[str]:
    """Every method some route takes at ``path`` (Starlette's own 405 names only the first route's);
    empty for a path no route has, or one a mounted app answers whatever its method."""
    found: set[str] = set()
    for route in app.routes:
        regex, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and regex.match(path):
            if not methods:
                return frozenset()
            found |= methods
    return frozenset(found)


PATTERNS = {
    f"^{CORPUS_NAME.pattern}$": "not a corpus name (letters, digits and _ . -)",
    f"^{METHOD_NAME.pattern}$": "not a method name (letters, digits and _)",
    SPACES_ONLY_NOT: "empty (only spaces)",
}  # what a request's text failed, in words


def _named(part: int | str) -> bool:
    """A part of a validation error's place that names a field or an index, not pydantic's tag for the
    member of a union it tried (``constrained-str``, ``list[...]``)."""
    return isinstance(part, int) or (part.isidentifier() and part not in ("str", "int", "float", "bool", "none"))


def _internal(error: BaseException) -> str:
    return f"internal error ({type(error).__name__}); the server's log has the details"


class _Contained:
    """An error a route did not foresee, answered as a 500 refusal with its traceback in the server's log,
    the connection kept open for the client's next request: Starlette's own handler re-raises the error
    after answering, and uvicorn then drops the connection without a ``Connection: close``. Once an
    answer has started (a streamed batch) nothing more can be said: the connection is closed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as error:
            if started:
                raise
            LOG.exception("%s %s failed", scope["method"], scope["path"])
            await refusal(500, _internal(error))(scope, receive, send)


class _KeyRequired:
    """A 405 naming every method a path takes (before the key: the schema says so anyway), then a 401
    without the key on every path but ``open_paths``. Plain ASGI, not Starlette's ``BaseHTTPMiddleware``:
    that one wraps every ``receive`` in a task group of its own, which made each search's disconnect
    watch (``api/running.py``) cost about 0.4 ms of CPU (``benchmarks/results/serve_overhead.md``)."""

    def __init__(self, app: ASGIApp, routes: FastAPI, key: str, open_paths: frozenset[str]) -> None:
        self.app, self.routes, self.key, self.open_paths = app, routes, key, open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method, path = scope["method"], scope["path"]
        allowed = _methods_at(self.routes, path)
        if allowed and method not in allowed:
            listed = ", ".join(sorted(allowed))
            return await refusal(405, f"{method} {path}: this path takes {listed}", {"Allow": listed})(scope, receive, send)
        if self.key and path not in self.open_paths:
            given, problem = _key_of(Headers(scope=scope))
            if problem is None and not key_matches(given, self.key):
                problem = "missing or wrong API key"
            if problem is not None:
                return await refusal(401, f"{problem} ({KEY_FORMS})")(scope, receive, send)
        await self.app(scope, receive, send)


class _Limits:
    """Refuses a request with more than ``headers`` headers (431), and a body over ``body`` bytes with a
    413: by its Content-Length before reading any of it, or (chunked) as soon as it passes the limit;
    the app is then handed the body read."""

    def __init__(self, app: ASGIApp, body: int, headers: int) -> None:
        self.app, self.body, self.headers = app, body, headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if len(scope["headers"]) > self.headers:
            return await refusal(431, f"headers: at most {self.headers}, got {len(scope['headers'])}", {"Connection": "close"})(scope, receive, send)
        headers = Headers(scope=scope)
        if "content-length" in headers and "transfer-encoding" in headers:  # a request smuggler's pair (RFC 9112, 6.3)
            return await refusal(400, "Content-Length beside Transfer-Encoding: send one of them", {"Connection": "close"})(scope, receive, send)
        coding = headers.get("transfer-encoding")
        if coding is not None and coding.strip().lower() != "chunked":  # gzip, say: read as plain bytes it would be garbage
            return await refusal(501, f"Transfer-Encoding {coding.strip()[:40]!r}: only chunked is read", {"Connection": "close"})(scope, receive, send)
        hosts = len(headers.getlist("host"))
        if scope.get("http_version") == "1.1" and hosts != 1:  # RFC 9112, 3.2: exactly one
            return await refusal(400, f"Host: one header in an HTTP/1.1 request, got {hosts}", {"Connection": "close"})(scope, receive, send)
        declared = headers.get("content-length", "")
        if declared and (not declared.isdigit() or int(declared) > self.body):
            return await self._refuse(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            chunks.append(message.get("body", b""))
            size, more = size + len(chunks[-1]), message.get("more_body", False)
            if size > self.body:
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
        await refusal(413, f"body: over {self.body >> 20} MiB", {"Connection": "close"})(scope, receive, send)


def serve(lake: GraphLake, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``lake`` until interrupted, with a bounded head and the API's own refusals (``api/http_protocol.py``).
    SIGTERM (or Ctrl-C) lets the running requests finish for ``$GRAPHLAKE_SERVE_GRACE_S``, then stops
    them (a search at its next stage, an SQL process killed: each answers 503); a request stuck inside
    one stage past ``ANSWER_S`` + ``EXIT_S`` more does not hold the process up: it exits."""
    import uvicorn

    tame_allocator()
    grace, app = SERVE_GRACE_S.number(), create_app(lake, host=host)
    running: Running = app.state.running

    class Graceful(uvicorn.Server):
        """uvicorn's shutdown, the running requests called off at the grace's end: each then answers its
        503 at its next stage, before uvicorn cancels what is left ``ANSWER_S`` later (a bare 500)."""

        async def shutdown(self, sockets=None) -> None:
            def call_off() -> None:
                if stopped := running.call_off():
                    LOG.warning("stopping %d request(s) still running at shutdown", stopped)

            timer = asyncio.get_running_loop().call_later(grace, call_off)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    config = uvicorn.Config(app, host=host, port=port, log_level="info", http=JsonErrorsProtocol, log_config=logging_config(), timeout_graceful_shutdown=math.ceil(grace + ANSWER_S))
    Graceful(config).run()
    watchdog = threading.Timer(EXIT_S, _exit_stuck)  # a worker thread (not a daemon) would keep the process alive
    watchdog.daemon = True
    watchdog.start()


def _exit_stuck() -> None:
    LOG.error("a request was still running %g s after the server stopped it: exiting", EXIT_S)
    logging.shutdown()
    os._exit(1)
