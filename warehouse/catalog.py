"""The DuckDB catalog: a view per table over exactly the Parquet files of the corpora's current
snapshots, so SQL sees what a commit made visible and nothing a run is still staging (a table with no
committed file is an empty, typed stub), with the graph macros.

graphlake's own readers (``graphlake sql``, the API, reports) build the catalog in memory from the
snapshots when they connect: they see a commit the moment its snapshot is published (a kill between
publishing and anything after cannot leave them on two versions), take no lock and write nothing
(a lake on a read-only mount is readable), and name the files where the lake is now (a moved or
copied lake keeps working). For other DuckDB clients every commit also writes ``catalog.duckdb``,
built beside the old file and swapped in whole; writers serialize on a lock of their own, readers
never wait for it.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from graphlake.common.settings import number_from_env
from graphlake.warehouse.graph_sql import install_macros
from graphlake.warehouse.snapshots import SnapshotError, Snapshots
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
        self.left_out: list[str] = []  # the scopes the last catalog built left out, and why

    def refresh(self) -> None:
        """Rewrite ``catalog.duckdb`` for outside clients from the current snapshots: built in a temporary
        file and renamed over the old one, so a client opens one version or the other."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # writers one at a time: the last to rename read every commit before it
            scratch = self.home / f".{CATALOG_FILE}.{os.getpid()}.tmp"
            scratch.unlink(missing_ok=True)
            try:
                with duckdb.connect(str(scratch)) as con:
                    self._create(con)
                os.replace(scratch, self.path)
            finally:
                scratch.unlink(missing_ok=True)
                Path(f"{scratch}.wal").unlink(missing_ok=True)

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection whose views read the current snapshots, built in memory: no lock, no file written."""
        with duckdb.connect(":memory:") as con:
            self._create(con)
            yield con

    def _create(self, con: duckdb.DuckDBPyConnection) -> None:
        files = self._committed_files()
        for spec in TABLES.values():
            con.execute(f'CREATE OR REPLACE VIEW "{spec.name}" AS {self._view_sql(spec, files.get(spec.name, []))}')
        install_macros(con)

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
        """Table -> the data files of every scope's current snapshot, where the lake is now. A scope
        whose snapshot cannot be read or names a missing or truncated file is left out whole (its
        tables would read wrong or fail every query of theirs), and ``left_out`` says why."""
        snapshots = Snapshots(self.home)
        files: dict[str, list[str]] = {}
        self.left_out = []
        for scope in snapshots.scopes():
            try:
                found = [(key.split("/", 1)[0], snapshots.local(f"tables/{key}/{entry.name}")) for key, entry in snapshots.current(scope).tables.items()]
                damaged = next((path for _, path in found if not _looks_whole(path)), None)
                if damaged is not None:
                    raise SnapshotError(damaged, scope, "missing or truncated")
            except SnapshotError as error:
                self.left_out.append(f"{scope!r} left out of SQL: {error}")
                continue
            for table, path in found:
                files.setdefault(table, []).append(str(path))
        return files

    def _view_sql(self, spec: TableSpec, files: list[str]) -> str:
        if files:
            listed = ", ".join("'" + path.replace("'", "''") + "'" for path in sorted(files))
            return f"SELECT * FROM read_parquet([{listed}], union_by_name = true, hive_partitioning = false)"
        columns = ", ".join(f'CAST(NULL AS {_DUCKDB_TYPES[f.type]}) AS "{f.name}"' for f in spec.schema)
        return f"SELECT {columns} WHERE false"


def _looks_whole(path: Path) -> bool:
    """A Parquet file that exists and ends with the format's magic bytes: a cut-off copy or write does not."""
    try:
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return handle.read(4) == b"PAR1"
    except OSError:
        return False


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
