"""graphlake for agents: an MCP server (the ``mcp`` extra) whose tools search a lake, list its corpora and
read its documents, and write to the corpora it owns.

Two transports: ``graphlake mcp`` speaks over stdio to the agent host that launched it (it runs as that
user, so its write tools are there only with ``--writes``); ``graphlake serve`` also answers MCP's
streamable HTTP at ``/mcp``, behind the server's API key like every route but ``/health``, with the write
tools. A tool's arguments are the HTTP request model's fields (``api/requests.py``), checked by that
same model, so a search or a write is refused the same way over either; a search's query-time
parameters go in ``parameters``. What a tool returns is the HTTP route's JSON.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from graphlake.api.requests import MAX_NAME_CHARS, DeleteRequest, GetRequest, ListRequest, SearchRequest, UpsertRequest, answer_json
from graphlake.api.results import CorpusBusy, DiskFull, IndexNotBuilt, Overloaded, RequestError, UnknownName

INSTRUCTIONS = (
    "graphlake retrieves passages from a lake of corpora. Call `corpora` for their names and `methods` for the "
    "retrieval methods, then `search` (a corpus, a method such as rrf or dense, a query, k); each hit cites its "
    "document (doc_id, source, start/end offsets). `get_documents` reads whole documents by id, `list_documents` "
    "pages through a corpus. Where offered, `upsert` and `delete` write to a corpus the lake owns; the next search sees them."
)
REFUSALS = (RequestError, UnknownName, IndexNotBuilt, Overloaded, DiskFull, CorpusBusy)
CORPUS = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, description="a corpus of the lake (`corpora` lists them)")]


def mcp_server(lake: Any, writes: bool) -> MCPServer:
    """The tools over ``lake`` (a ``GraphLake`` or ``RemoteLake``); ``writes``: with ``upsert`` and ``delete``."""
    server = MCPServer("graphlake", instructions=INSTRUCTIONS)
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    def search(request: SearchRequest, parameters: dict[str, Any] | None) -> dict:
        """Search a corpus (or several, fused) with a retrieval method: the top k hits, each citing its document."""
        shown = {"group_by": request.group_by, "context": request.context, "min_relevance": request.min_relevance}
        answer = lake.search(request.corpus, request.method, request.query, k=request.k, filter=request.filter, **shown, **(parameters or {}), **request.overrides())
        return json.loads(answer_json(answer))

    _add(server, search, SearchRequest, extra={"parameters": (dict[str, Any] | None, Field(None, description="the method's query-time parameters (`methods` lists them)"))}, annotations=read_only)
    _add(
        server,
        lambda corpus, request: {"documents": [asdict(d) for d in lake.get_documents(corpus, request.ids)]},
        GetRequest,
        "get_documents",
        "Documents of a corpus by id, whole, with their metadata as written.",
        corpus=True,
        annotations=read_only,
    )
    _add(
        server,
        lambda corpus, request: asdict(lake.list_documents(corpus, request.after, request.limit, request.filter)),
        ListRequest,
        "list_documents",
        "A page of a corpus's documents in id order; pass its `next` as `after` for the page after.",
        corpus=True,
        annotations=read_only,
    )
    _add(server, lambda request: {"corpora": [asdict(c) for c in lake.corpora()]}, None, "corpora", "The lake's corpora: name, format, snapshot, nodes, pending writes.", annotations=read_only)
    _add(
        server,
        lambda request: {"methods": [asdict(m) for m in lake.methods()]},
        None,
        "methods",
        "The retrieval methods, whether each is switched on, and their query-time parameters.",
        annotations=read_only,
    )
    if writes:
        written = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
        _add(
            server,
            lambda corpus, request: asdict(lake.upsert(corpus, [d.model_dump() for d in request.documents])),
            UpsertRequest,
            "upsert",
            "Add or replace documents of a corpus the lake owns; durable when answered, seen by the next search.",
            corpus=True,
            annotations=written,
        )
        _add(
            server,
            lambda corpus, request: asdict(lake.delete(corpus, request.ids)),
            DeleteRequest,
            "delete",
            "Delete documents of a corpus the lake owns by id; durable when answered.",
            corpus=True,
            annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True),
        )
    return server


def _add(
    server: MCPServer,
    call: Callable,
    model: type[BaseModel] | None,
    name: str | None = None,
    description: str | None = None,
    *,
    corpus: bool = False,
    extra: dict[str, tuple[Any, Any]] | None = None,
    annotations: ToolAnnotations | None = None,
) -> None:
    """A tool whose arguments are ``model``'s fields (after ``corpus``, where the HTTP route has it in its
    path; then ``extra``: name -> (type, Field)), checked by ``model`` itself, then run as
    ``call(corpus?, request, *extra)`` in a worker thread (the lake's calls block)."""
    extra = extra or {}
    parameters = [inspect.Parameter("corpus", inspect.Parameter.KEYWORD_ONLY, annotation=CORPUS)] if corpus else []
    for field_name, info in (model.model_fields if model is not None else {}).items():
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        parameters.append(inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation))
    for field_name, (kind, info) in extra.items():
        parameters.append(inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, default=info.default, annotation=Annotated[kind, Field(description=info.description)]))

    async def tool(**arguments: Any) -> Any:
        given = {k: v for k, v in arguments.items() if not (corpus and k == "corpus") and k not in extra}
        try:
            request = model.model_validate(given) if model is not None else None
        except ValidationError as error:
            problem = error.errors()[0]
            raise ToolError(f"{'.'.join(map(str, problem['loc'])) or 'arguments'}: {problem['msg']}") from None
        leading = (arguments["corpus"], request) if corpus else (request,)
        try:
            return await anyio.to_thread.run_sync(lambda: call(*leading, *(arguments.get(k) for k in extra)))
        except REFUSALS as error:  # the caller's to mend, in the API's own line; anything else is the server's failure
            raise ToolError(str(error)) from None

    tool.__signature__ = inspect.Signature(parameters, return_annotation=dict[str, Any])  # type: ignore[attr-defined]: structured output, the route's JSON object
    tool.__name__ = name or call.__name__
    server.add_tool(tool, name=name or call.__name__, description=description or inspect.getdoc(call), annotations=annotations)
