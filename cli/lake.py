"""Commands that set up and look after the lake: the demo, a corpus's ingest, listing and forgetting
corpora, collecting leftovers, checking and repairing committed files, the configuration in effect."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from graphlake.cli.app import app, console, errors, fail, print_summary, read_run_config, run_assets
from graphlake.warehouse.config_files import one_line
from graphlake.warehouse.corpora import DEMO_CONFIG, DEMO_CORPUS, DEMO_SPLIT, FORMAT_CHUNKING, LAKE_OWNED, Chunking, CorpusRegistry, CorpusSpec
from graphlake.warehouse.home import lake_home, require_writable
from graphlake.warehouse.readers import FORMATS
from graphlake.warehouse.scopes import LockedError
from graphlake.warehouse.storage import LakeStorage, StorageError

INGEST_FORMATS = [name for name in FORMATS if name != "demo"]


RERANKER = "reranker"  # the lake-wide cross-encoder: its asset and its index kind


# what the demo's closing lines suggest, each one a command that works on the lake it built
# (tests/test_first_hour.py runs them there)
DEMO_NEXT = [
    ("graphlake methods", "every method by paper; --use switches more on"),
    ('graphlake query --corpus demo --method rrf "Which vessel carried the sled?"', "one search"),
    ('graphlake query --corpus demo --filter "year > 2015" "Who built the sled?"', "only documents from 2016 on"),
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
    from graphlake.retrieval.learned_kinds import INDEX_KINDS
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.reports import evaluation_report, random_floor

    home = lake_home()
    methods = load_methods(home)
    # the demo's 11 training queries teach the cross-encoder to tell a relevant passage from its hard
    # negatives, not to rerank a whole corpus: it is not trained here, and the methods that rerank with it are left out
    left_out = [name for name, method in methods.items() if RERANKER in {index.partition("/")[0] for index in needs(method)}]
    shown = [name for name, method in methods.items() if name not in left_out and not uses_llm(method)]  # LLM methods need a server
    config = read_run_config(DEMO_CONFIG)
    skipped = AssetSelection.assets(*(asset for name in left_out for asset in method_asset_names(name)))
    # and what only they read that is learned: the cross-encoder, GRASP's reranker fine-tuned from it
    kinds = lambda names: {index.partition("/")[0] for name in names for index in needs(methods[name])}  # noqa: E731
    skipped |= AssetSelection.assets(*INDEX_KINDS.index_assets(kind for kind in kinds(left_out) - kinds(shown) if INDEX_KINDS.kind(kind).fitting is not None))
    # a build like any other (every query run, its source recorded), so that `materialize --corpus demo` next finds it current
    run_assets(DEMO_CORPUS, default_selection(home) - skipped, config, "demo", incremental=True)
    print_summary(DEMO_CORPUS)
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


@app.command()
def ingest(
    format: Annotated[str, typer.Argument(help=f"One of: {', '.join(INGEST_FORMATS)}.")],
    corpus: Annotated[str, typer.Option(help="Name of the corpus (its partition).")],
    path: Annotated[
        Path | None, typer.Argument(help="The file or folder the format expects (.gz read transparently); none for api, a corpus the lake owns, filled by the application's writes.")
    ] = None,
    queries: Annotated[Path | None, typer.Option(help="Separate query file (files, jsonl: JSON lines {id, text, split?, qrels?: {doc_id: relevance}}; hipporag, spider, bird: their own).")] = None,
    qrels: Annotated[Path | None, typer.Option(help="Gold for those queries (files, jsonl): BEIR's query-id<TAB>doc-id<TAB>score or TREC's 'qid 0 doc-id relevance' lines.")] = None,
    split: Annotated[str | None, typer.Option(help="Split for the queries (default: from the file name).")] = None,
    encoding: Annotated[str | None, typer.Option(help="files: decode with this encoding (latin-1, cp1252, utf-16...; default UTF-8, or what a byte-order mark says).")] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="files: skip files that cannot be decoded or are binary, and list them, instead of stopping.")] = False,
    ext: Annotated[
        list[str] | None,
        typer.Option(
            "--ext",
            help="files: also read files with this suffix (repeatable: --ext .html --ext .py). Read anyway: .txt .md .markdown .rst .text, extension-less files, README/NEWS/COPYING-style names whatever their suffix, and their .gz.",
        ),
    ] = None,
    chunk_size: Annotated[int | None, typer.Option(min=1, help="Chunk window in tokens (default: per format).")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(min=0, help="Tokens shared by consecutive chunks (default: 0 with --chunk-size, else the format's).")] = None,
    train_corpus: Annotated[str | None, typer.Option(help="Corpus whose queries tune/train the learned rankers used on this one (GraphER).")] = None,
    alpha_corpus: Annotated[str | None, typer.Option(help="Corpus whose queries pick GraphER's alpha (default: the training corpus).")] = None,
) -> None:
    """Declare a corpus and materialize its ingest and chunking assets."""
    if format not in INGEST_FORMATS:
        fail(f"unknown format {format!r}; one of {', '.join(INGEST_FORMATS)}")
    if format == LAKE_OWNED:
        _declare_owned(corpus, path, queries, qrels, _chunking(format, chunk_size, chunk_overlap), train_corpus, alpha_corpus)
        return
    if path is None:
        fail(f"format {format!r} reads a file or folder: give its path")
    for given in (path, queries, qrels):
        if given is not None and not given.exists():
            fail(f"{given}: no such file or folder")
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
        fail(one_line(error))
    from dagster import AssetSelection

    run_assets(corpus, AssetSelection.groups("ingest", "chunking"), None, "ingest", declare=spec)  # a failed run leaves corpora.yaml as it was
    print_summary(corpus)


def _declare_owned(corpus: str, path: Path | None, queries: Path | None, qrels: Path | None, chunking: Chunking | None, train_corpus: str | None, alpha_corpus: str | None) -> None:
    """Declare a corpus the lake owns: nothing to read yet; the application's writes fill it."""
    if path is not None or queries is not None or qrels is not None:
        fail(f"format {LAKE_OWNED!r} reads no file: its documents are what the application writes (GraphLake.upsert, POST /corpora/{{corpus}}/documents)")
    try:
        CorpusRegistry(lake_home()).declare_owned(corpus, **{k: v for k, v in {"chunking": chunking, "train_corpus": train_corpus, "alpha_corpus": alpha_corpus}.items() if v is not None})
    except ValueError as error:
        fail(one_line(error))
    errors.print(
        f"declared {corpus!r}, a corpus the lake owns: upsert documents through the API or `graphlake serve`; the reindex sensor or `graphlake materialize --corpus {corpus}` folds them in",
        highlight=False,
    )


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
def corpora(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of declarations, chunking and linking resolved.")] = False,
) -> None:
    """List the declared corpora."""
    declared = CorpusRegistry(lake_home()).all().values()
    if as_json:
        print(json.dumps([{**spec.model_dump(mode="json"), "chunking": spec.effective_chunking.model_dump(), "linking": asdict(spec.effective_linking)} for spec in declared]))
        return
    table = Table("corpus", "format", "path", "chunking")
    for spec in declared:
        chunking = spec.effective_chunking
        table.add_row(spec.name, spec.format, spec.path, f"{chunking.size}/{chunking.overlap}" if chunking.size else "whole")
    console.print(table)


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
    lake = LakeStorage(home)
    known = corpus in registry.all() or any(lake.tables_dir.glob(f"*/corpus={corpus}"))
    if not known:
        fail(f"corpus {corpus!r} is neither declared nor in the lake at {home}")
    if not yes and not typer.confirm(f"Remove corpus {corpus!r} and everything built from it in {home}?"):
        fail("nothing removed")
    try:
        removed = lake.forget(corpus)
    except StorageError as error:
        fail(str(error))
    declared = registry.remove(corpus)
    forget_partition(home, corpus)
    errors.print(f"forgot {corpus!r}: {len(removed)} folders removed{', declaration withdrawn' if declared else ''}", highlight=False)


@app.command()
def gc() -> None:
    """Remove what failed or killed runs left and the versions no snapshot refers to any more (each
    corpus keeps its current and its previous snapshot), one corpus at a time under its writer lock."""
    home = lake_home()
    require_writable(home, "`graphlake gc` removes files from it and")
    lake = LakeStorage(home)
    for scope in lake.snapshots.scopes():
        try:
            with lake.writing(scope, "graphlake gc") as removed:
                pass  # taking the scope to write is where leftovers are collected: gc does only that
        except LockedError as error:
            fail(str(error))
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
        fail(f"{len(damaged)} damaged; `graphlake doctor --repair` makes each corpus whole from its earlier snapshots and sets damaged log entries aside")
    for scope in dict.fromkeys(d.scope for d in damaged):
        try:
            for line in repair_scope(home, scope):
                errors.print(f"{scope}: {line}", highlight=False, soft_wrap=True)
        except LockedError as error:
            fail(str(error))
    left = examine(home, [corpus] if corpus else None)
    if left:
        fail(f"still damaged after the repair: {'; '.join(map(str, left))}")
    errors.print("repaired: every committed file is whole", highlight=False)


@app.command()
def config(
    as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
) -> None:
    """The configuration in effect: the lake's files (or the packaged defaults they replace) and every
    GRAPHLAKE_ variable, each with its value and where it came from; exit 1 when a value is unusable."""
    from graphlake.common.settings import VARIABLES, problems
    from graphlake.pipelines.dagster_home import dagster_home_of
    from graphlake.retrieval.methods import DEFAULT_METHODS
    from graphlake.warehouse.corpora import REGISTRY_FILE
    from graphlake.warehouse.encoder_specs import MODELS_FILE

    home = lake_home()
    files = []
    for name, path, otherwise, fallback in (  # fallback: the file used where the lake has none
        (REGISTRY_FILE, home / REGISTRY_FILE, "absent", None),
        (MODELS_FILE, home / MODELS_FILE, "packaged", None),
        ("methods.yaml", home / "methods.yaml", "packaged", DEFAULT_METHODS),
        ("dagster.yaml", dagster_home_of(home) / "dagster.yaml", "absent", None),
    ):
        present = path.is_file()
        files.append({"name": name, "path": str(path if present or fallback is None else fallback), "source": "lake" if present else otherwise})
    variables = [{"name": v.name, "value": v.shown(), "source": v.source()} for v in VARIABLES]
    wrong = problems()
    if as_json:
        console.print_json(json.dumps({"home": str(home), "files": files, "variables": variables, "problems": wrong}))
    else:
        table = Table(title=f"lake {home}", title_justify="left")
        for column in ("setting", "value", "from"):
            table.add_column(column, overflow="fold")
        for entry in files:
            table.add_row(escape(entry["name"]), escape(entry["path"]), entry["source"])
        for entry in variables:
            table.add_row(escape(entry["name"]), escape(entry["value"]), entry["source"])
        console.print(table)
    if wrong:
        fail("; ".join(wrong))
