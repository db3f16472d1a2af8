"""The DuckDB catalog: one database file in the lake root with a view per table.

Each view reads exactly the Parquet files of the corpora's current snapshots, so SQL sees what a
commit made visible and nothing a run is still staging; every commit refreshes the views (a table
with no committed file is an empty, typed stub). A file lock keeps refreshes from colliding with
readers in other processes.
"""

from __future__ import annotations

import fcntl
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from graphlake.warehouse.graph_sql import install_macros
from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.snapshots import Snapshots
from graphlake.warehouse.tables import TABLES, TableSpec

CATALOG_FILE = "catalog.duckdb"

_DUCKDB_TYPES = {
    pa.string(): "VARCHAR",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.float32(): "FLOAT",
    pa.list_(pa.float32()): "FLOAT[]",
    pa.list_(pa.int32()): "INTEGER[]",
    pa.bool_(): "BOOLEAN",
}


_READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class ReadOnlyError(ValueError):
    """A statement that would write, sent to the lake's read-only SQL."""


class Catalog:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / CATALOG_FILE
        self._lock_path = self.home / f".{CATALOG_FILE}.lock"

    def refresh(self) -> None:
        """(Re)create every table's view and the graph macros; a lock held by an outside program only delays it."""
        try:
            with self._locked(fcntl.LOCK_EX), duckdb.connect(str(self.path)) as con:
                files = self._committed_files()
                for spec in TABLES.values():
                    con.execute(f'CREATE OR REPLACE VIEW "{spec.name}" AS {self._view_sql(spec, files.get(spec.name, []))}')
                install_macros(con)
        except duckdb.IOException as error:
            warnings.warn(f"catalog {self.path} not refreshed (another program holds it): {error}", stacklevel=2)

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection to the catalog, creating it first if the lake is new."""
        if not self.path.exists() or remote_of(self.home) is not None:  # on object storage, others commit too
            self.refresh()
        with self._locked(fcntl.LOCK_SH), duckdb.connect(str(self.path), read_only=True) as con:
            yield con

    @contextmanager
    def sandbox(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection that reads nothing outside the lake's folder, writes nowhere, and
        cannot be reconfigured: what ``graphlake sql`` hands a user. Statements go through
        :meth:`run_read_only`; a full DuckDB session is any client opening ``catalog.duckdb``."""
        with self.reader() as con:
            folder = str(self.home.resolve()).replace("'", "''")
            con.execute(f"SET allowed_directories = ['{folder}/']")
            con.execute("SET enable_external_access = false")  # files outside those, extensions, ATTACH
            con.execute("SET lock_configuration = true")  # no SET/RESET can lift the two above
            yield con

    @staticmethod
    def run_read_only(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyConnection:
        """Execute ``query`` if DuckDB's own parser finds only queries in it (SELECT, and EXPLAIN);
        else refuse it naming the statement. COPY ... TO, EXPORT, SET, CALL and any DDL or DML would
        change a file, the catalog or the session."""
        result = con
        for statement in _reading_statements(con, query):
            result = con.execute(statement)
        return result

    @staticmethod
    def read_only_table(con: duckdb.DuckDBPyConnection, query: str) -> pa.Table:
        """The last statement's rows as Arrow, the statements checked as :meth:`run_read_only` checks them."""
        *before, last = _reading_statements(con, query) or [None]
        for statement in before:
            con.execute(statement)
        return con.sql(last.query).to_arrow_table() if last is not None else pa.table({})

    def _committed_files(self) -> dict[str, list[str]]:
        """Table -> the data files of every scope's current snapshot."""
        snapshots = Snapshots(self.home)
        files: dict[str, list[str]] = {}
        for scope in snapshots.scopes():
            for key, entry in snapshots.current(scope).tables.items():
                files.setdefault(key.split("/", 1)[0], []).append(str(snapshots.local(f"tables/{key}/{entry.name}")))
        return files

    def _view_sql(self, spec: TableSpec, files: list[str]) -> str:
        if files:
            listed = ", ".join("'" + path.replace("'", "''") + "'" for path in sorted(files))
            return f"SELECT * FROM read_parquet([{listed}], union_by_name = true, hive_partitioning = false)"
        columns = ", ".join(f'CAST(NULL AS {_DUCKDB_TYPES[f.type]}) AS "{f.name}"' for f in spec.schema)
        return f"SELECT {columns} WHERE false"

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as handle:
            fcntl.flock(handle, mode)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _reading_statements(con: duckdb.DuckDBPyConnection, query: str) -> list:
    """``query``'s statements, if DuckDB's parser finds only queries among them; else the refusal naming the first other."""
    statements = con.extract_statements(query)
    for statement in statements:
        if statement.type not in _READING:
            shown = " ".join(statement.query.split())
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ReadOnlyError(
                f"the lake's SQL connection is read-only: {statement.type.name} statement `{shown}` refused; "
                "its tables change only through `graphlake ingest` / `graphlake materialize`"
            )
    return statements
