"""SQL over in-memory Arrow tables on one process-wide DuckDB database.

Opening a DuckDB database costs about 12 ms; a build checks and diffs two or three tables a step, and a
one-file edit paid 2 s of its overhead opening throwaway databases. A cursor on a shared in-memory
database costs microseconds. Each use gets its own cursor (DuckDB's connection for one thread), so
tables registered by one use are invisible to another, and a process forked with the database open
makes a fresh one rather than share the parent's. The database is closed at exit (left open, DuckDB's
bindings report its objects as leaked).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

_lock = threading.Lock()
_database: tuple[int, duckdb.DuckDBPyConnection] | None = None


@contextmanager
def scratch_cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    """A private cursor on this process's in-memory database, closed on exit with what it registered."""
    global _database
    with _lock:
        if _database is None or _database[0] != os.getpid():
            _database = (os.getpid(), duckdb.connect())
            atexit.register(_close)
        cursor = _database[1].cursor()
    try:
        yield cursor
    finally:
        cursor.close()


def _close() -> None:
    global _database
    with _lock:
        if _database is not None:
            _database[1].close()
            _database = None
