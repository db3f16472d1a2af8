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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

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


class Catalog:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / CATALOG_FILE
        self._lock_path = self.home / f".{CATALOG_FILE}.lock"
        self.left_out: list[str] = []  # the scopes the last catalog built left out, and why
        self.files: list[str] = []  # every data file the last catalog built reads

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
        self.files = sorted(path for paths in files.values() for path in paths)
        for spec in TABLES.values():
            con.execute(f'CREATE OR REPLACE VIEW "{spec.name}" AS {self._view_sql(spec, files.get(spec.name, []))}')
        # a node carries its document's metadata, so that SQL filters nodes as searches do
        nodes = self._view_sql(TABLES["nodes"], files.get("nodes", []))
        con.execute(f'CREATE OR REPLACE VIEW "nodes" AS SELECT n.*, d.metadata FROM ({nodes}) AS n LEFT JOIN documents AS d ON d.corpus = n.corpus AND d.doc_id = n.doc_id')
        install_macros(con)

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
        """The table's rows; a ``metadata`` column is JSON, so that ``metadata->>'year'`` reads a field."""
        if files:
            listed = ", ".join("'" + path.replace("'", "''") + "'" for path in sorted(files))
            typed = " REPLACE (CAST(metadata AS JSON) AS metadata)" if "metadata" in spec.schema.names else ""
            return f"SELECT *{typed} FROM read_parquet([{listed}], union_by_name = true, hive_partitioning = false)"
        columns = ", ".join(f'CAST(NULL AS {"JSON" if f.name == "metadata" else _DUCKDB_TYPES[f.type]}) AS "{f.name}"' for f in spec.schema)
        return f"SELECT {columns} WHERE false"


def _looks_whole(path: Path) -> bool:
    """A Parquet file that exists and ends with the format's magic bytes: a cut-off copy or write does not."""
    try:
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return handle.read(4) == b"PAR1"
    except OSError:
        return False
