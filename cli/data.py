"""Commands that take data out of the lake: read-only SQL, graph exports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

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
