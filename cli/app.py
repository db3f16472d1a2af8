"""The ``graphlake`` application: its one-line errors, ``--verbose``, and what several command groups
share (running assets and freshness plans, a corpus's summary)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from graphlake.retrieval.core import MethodError
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.config_files import ConfigFileError, load_yaml
from graphlake.warehouse.corpora import CorpusSpec
from graphlake.warehouse.home import HomeError, lake_home
from graphlake.warehouse.storage import LakeStorage

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
VERBOSE = {"on": False}  # --verbose, set by the app's callback
# set by a command that read the lake, printed its answer and wrote nothing: the console script
# (cli/main.py) may then end the process without tearing the interpreter down
ENDING = {"read_only": False}


@app.callback()
def _options(verbose: Annotated[bool, typer.Option("--verbose", help="On failure, show the traceback and Dagster's own log.")] = False) -> None:
    VERBOSE["on"] = verbose


def fail(message: str, trace: str = "") -> None:
    """One line on stderr (never wrapped), the traceback above it with --verbose."""
    if trace and VERBOSE["on"]:
        errors.print(trace, highlight=False, markup=False, soft_wrap=True)
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def run_assets(corpus: str, selection, config: Path | dict | None, command: str, declare: CorpusSpec | None = None, incremental: bool = False) -> None:
    """Materialize (a Dagster selection, a selection string, or asset names), failing cleanly;
    ``config`` is a run config, or the YAML file holding one; the run belongs to the job of ``command``;
    ``declare``: the corpus's new declaration, kept only if the run succeeds. Progress and notes go
    to stderr, with ``--json`` too: a long ``eval --json`` in a log showed nothing for half an hour."""
    from graphlake.pipelines.runner import MaterializeError, RunConfigError, materialize_corpus

    run_config = read_run_config(config) if isinstance(config, Path) else config
    try:
        notes = materialize_corpus(lake_home(), corpus, selection, errors, run_config, VERBOSE["on"], command, declare, incremental)
    except RunConfigError as error:
        fail(f"{config if isinstance(config, Path) else 'run config'}: invalid run config: {error}")
    except MaterializeError as error:
        fail(str(error), error.trace)
    _print_notes(notes, corpus, incremental)


def _print_notes(notes: dict[str, str], corpus: str, build: bool) -> None:
    """Each line of the assets' notes once, with the assets that left it (on stderr, like the progress).
    In a ``build`` of a corpus without queries, one line says what that means (empty runs and
    evaluations, trained models standing in their defaults) rather than one a method or a model."""
    if build and notes and LakeStorage(lake_home()).rows("queries", {"corpus": corpus}) == 0:
        from graphlake.retrieval.learned_kinds import INDEX_KINDS

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


def read_run_config(path: Path) -> dict:
    try:
        loaded = load_yaml(path)
    except ConfigFileError as error:
        fail(str(error))
    if not isinstance(loaded, dict) or not set(loaded) <= {"ops"}:
        fail(f"{path}: a run config is a mapping with one key, ops: {{asset name: {{config: {{...}}}}}}")
    return loaded


def run_plan(refresh, command: str) -> None:
    """Run a freshness plan: the corpora learned indexes learn from first, each in a run of its own."""
    for corpus, assets in refresh.order():
        ops = {asset: config for asset, config in refresh.ops.items() if asset in assets}
        run_assets(corpus, assets, {"ops": ops} if ops else None, command)


def print_summary(corpus: str) -> None:
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
