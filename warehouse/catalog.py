"""The DuckDB catalog: one database file in the lake root with a view per table.

Each view reads exactly the Parquet files of the corpora's current snapshots, so SQL sees what a
commit made visible and nothing a run is still staging; every commit refreshes the views (a table
with no committed file is an empty, typed stub). A file lock keeps refreshes from colliding with
readers in other processes.
"""

from __future__ import annotations

import fcntl
import re
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from graphlake.common.settings import number_from_env
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
_EXPLAINED = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)  # what precedes the explained statement
TIMEOUT_ENV, MEMORY_ENV = "GRAPHLAKE_SQL_TIMEOUT", "GRAPHLAKE_SQL_MEMORY_MB"


class SandboxError(ValueError):
    """A statement the lake's read-only SQL refuses or stops."""


class ReadOnlyError(SandboxError):
    """A statement that would write, sent to the lake's read-only SQL."""


class LimitError(SandboxError):
    """A statement that ran past the sandbox's time or memory limit."""


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
        """A read-only connection that reads only the lake's committed tables (not its configuration,
        snapshots or Dagster's storage), writes nowhere (not even spill files), stops a statement past
        ``GRAPHLAKE_SQL_TIMEOUT`` seconds or ``GRAPHLAKE_SQL_MEMORY_MB``, and cannot be reconfigured:
        what ``graphlake sql`` and the API hand a user. Statements go through :meth:`run_read_only`; a
        full DuckDB session is any client opening ``catalog.duckdb``."""
        seconds = number_from_env(TIMEOUT_ENV, 60.0, least=0.1, error=SandboxError)
        megabytes = number_from_env(MEMORY_ENV, 2048, kind=int, least=64, error=SandboxError)
        with self.reader() as con:
            tables = str((self.home / "tables").resolve()).replace("'", "''")
            con.execute(f"SET memory_limit = '{megabytes}MB'")
            con.execute("SET temp_directory = ''")  # past the memory limit a statement fails, it never spills into the lake
            con.execute(f"SET allowed_directories = ['{tables}/']")
            con.execute("SET enable_external_access = false")  # files outside those, extensions, ATTACH
            con.execute("SET lock_configuration = true")  # no SET/RESET can lift the ones above
            timer = threading.Timer(seconds, con.interrupt)
            timer.start()
            try:
                yield con
            except duckdb.InterruptException:
                raise LimitError(f"the statement ran past {seconds:g} s and was stopped (set {TIMEOUT_ENV} for a longer limit)") from None
            except duckdb.OutOfMemoryException as error:
                raise LimitError(f"{str(error).splitlines()[0]} (the limit is {megabytes} MB: set {MEMORY_ENV} for more)") from None
            finally:
                timer.cancel()

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
    """``query``'s statements, if DuckDB's parser finds only queries among them (an EXPLAIN only of a
    query: EXPLAIN ANALYZE runs what it explains); else the refusal naming the first other."""
    statements = con.extract_statements(query)
    for statement in statements:
        explained = _EXPLAINED.sub("", statement.query, count=1) if statement.type == duckdb.StatementType.EXPLAIN else None
        if explained is not None and explained != statement.query:
            _reading_statements(con, explained)
        elif statement.type not in _READING or explained is not None:  # an EXPLAIN of a form not recognised: refused
            shown = " ".join(statement.query.split())
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise ReadOnlyError(
                f"the lake's SQL connection is read-only: {statement.type.name} statement `{shown}` refused; "
                "its tables change only through `graphlake ingest` / `graphlake materialize`"
            )
    return statements
