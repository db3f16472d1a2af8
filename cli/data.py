"""Commands that take data out of the lake: read-only SQL, graph exports."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pyarrow as pa
import typer
from rich.table import Table

from graphlake.cli.app import app, console, errors, fail
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.sql_sandbox import MAX_ROWS, PermissionRefused, SandboxError, run_sql
from graphlake.warehouse.storage import StorageError


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
        fail(f"refused: {error} (graphlake sql reads only the lake's committed tables; any DuckDB client can open {home / 'catalog.duckdb'} for a full session)")
    except SandboxError as error:
        fail(str(error).strip())  # DuckDB's own lines too: "Did you mean", the statement and a caret under the fault
    for line in answer.left_out:
        errors.print(f"[yellow]note:[/] {line}", highlight=False, soft_wrap=True)
    if answer.cut:
        errors.print(f"[yellow]note:[/] the first {limit:,} rows are shown; there are more (--limit N shows up to {MAX_ROWS:,})", highlight=False, soft_wrap=True)
    if as_json:
        _print_json(answer.table)
    else:
        _print_table(answer.table)


PRINTED_ROWS = 1_000  # rows turned into Python values and printed at a time: a million-row answer never is whole


def _slices(table: pa.Table) -> Iterator[list[tuple]]:
    for start in range(0, table.num_rows, PRINTED_ROWS):
        part = table.slice(start, PRINTED_ROWS)
        yield list(zip(*(column.to_pylist() for column in part.columns), strict=True))


def _print_json(table: pa.Table) -> None:
    """One JSON list of row objects, written a slice at a time."""
    names, first = table.column_names, True
    sys.stdout.write("[")
    for rows in _slices(table) if names else ():
        for row in rows:
            sys.stdout.write(("" if first else ", ") + json.dumps(dict(zip(names, row, strict=True)), default=str, ensure_ascii=False))
            first = False
    sys.stdout.write("]\n")


def _cell(value: object) -> str:
    return "NULL" if value is None else " ".join(str(value).split())


def _print_table(table: pa.Table) -> None:
    """A row a line, a slice at a time under the first slice's header and column widths: a long value
    (a JSON metadata column) is cut to its column's width, --json has it whole."""
    names = table.column_names
    most = max(20, console.width // max(1, len(names)))
    widths: list[int] = []
    for number, rows in enumerate(_slices(table)) if names else ():
        if not widths:
            widths = [min(most, max([len(name), *(len(_cell(row[i])) for row in rows)])) for i, name in enumerate(names)]
        shown = Table(show_lines=False, show_header=number == 0)
        for name, width in zip(names, widths, strict=True):
            shown.add_column(name, no_wrap=True, overflow="ellipsis", width=width)
        for row in rows:
            shown.add_row(*map(_cell, row))
        console.print(shown)


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
        fail(str(error))
    errors.print(f"wrote {written}", highlight=False, soft_wrap=True)
