"""The lake's read-only SQL (``graphlake sql``, the API's ``sql``): each statement runs in a child
process of its own, so that its limits hold for every shape of statement and for its result too.

DuckDB's ``memory_limit`` bounds its buffer pool only: a 1.5 GB ``repeat`` or a 400-million element
list is allocated outside it, and a result turned into Python objects is outside DuckDB altogether.
The child caps its whole address space at what it needs to start plus the limit, keeps at most
``limit`` rows of the result (saying when it cut), and stops itself at the time limit; the parent kills
it past that, so even a statement that never checks for an interrupt ends on time, and a statement
that fails however it fails costs the caller nothing but the child.

The child reads only the committed snapshots' files (DuckDB's ``allowed_paths`` is their list: no
glob over the lake's folders reaches a staged file or an older version), writes nowhere, and cannot
be reconfigured. The statements must all be queries (SELECT, and EXPLAIN of one), checked by DuckDB's
own parser, and none may read the process's configuration or the views' definitions
(``current_setting('allowed_paths')`` would list every file of the lake by its absolute path,
``duckdb_views()`` the same inside each view's text, ``duckdb_settings()`` the account's home too):
the names a statement calls are read from DuckDB's own syntax tree. An error's message names the lake
as ``<lake>`` and the account's home as ``~``.
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from graphlake.common.settings import SQL_MEMORY_MB, SQL_TIMEOUT
from graphlake.common.stopping import Stop, check
from graphlake.common.unicode_checks import lone_surrogate

TIMEOUT_ENV, MEMORY_ENV = SQL_TIMEOUT.name, SQL_MEMORY_MB.name
MAX_ROWS = 1_000_000  # the most rows one answer may carry
POLL_S = 0.25  # how often a statement's caller looks whether it was called off
STARTUP_SECONDS = 20.0  # the child's own start (imports, the catalog), on top of the statement's time limit
HEADROOM_MB = 256  # address space past the limit for the result's batches and their encoding (at most the limit)

_READING = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
# what names the lake's files or the account's folders: settings, views' text, extensions, secrets
REVEALING = frozenset(
    {"current_setting", "getenv", "getvariable", "duckdb_settings", "duckdb_views", "duckdb_extensions", "duckdb_secrets", "which_secret"}
    | {"duckdb_temporary_files", "duckdb_databases", "duckdb_external_file_cache", "duckdb_logs", "duckdb_log_contexts", "pg_views", "pg_settings", "information_schema.views"}
)  # fmt: skip
_REVEALING_TEXT = re.compile(r"\b(?:" + "|".join(sorted(REVEALING)).replace(".", r"\s*\.\s*") + r"|pragma_\w+)\b", re.IGNORECASE)
_EXPLAINED = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)  # what precedes the explained statement


class SandboxError(ValueError):
    """A statement the lake's read-only SQL refuses or stops (the message keeps DuckDB's own lines)."""


class ReadOnlyError(SandboxError):
    """A statement that would write, sent to the lake's read-only SQL."""


class LimitError(SandboxError):
    """A statement that ran past the sandbox's time or memory limit."""


class PermissionRefused(SandboxError):
    """A statement that reads a file the sandbox does not let it read."""


_ERRORS = {cls.__name__: cls for cls in (SandboxError, ReadOnlyError, LimitError, PermissionRefused)}


@dataclass(frozen=True)
class Answer:
    """The last statement's rows (at most the limit), whether rows were cut, and the catalog's notes."""

    table: pa.Table
    cut: bool = False
    left_out: list[str] = field(default_factory=list)


def limits() -> tuple[float, int]:
    """The time limit (seconds) and the memory limit (MB) from the environment, checked."""
    seconds = SQL_TIMEOUT.number(error=SandboxError)
    megabytes = int(SQL_MEMORY_MB.number(error=SandboxError))
    return seconds, megabytes


def run_sql(home: Path, statement: str, limit: int, stop: Stop | None = None, megabytes: int | None = None) -> Answer:
    """Run ``statement`` on the lake at ``home`` in a child process; at most ``limit`` rows come back.
    ``stop``: the child is killed when it is called off (``Stopped``), and its time limit is the sooner of
    the sandbox's and the stop's deadline. ``megabytes``: a lower memory limit than the sandbox's (a
    server's share of its budget)."""
    seconds, configured = limits()
    megabytes = configured if megabytes is None else min(megabytes, configured)
    by_deadline = stop is not None and stop.left() < seconds
    if by_deadline:
        seconds = max(stop.left(), 0.1)
    if not 1 <= limit <= MAX_ROWS:
        raise SandboxError(f"limit: between 1 and {MAX_ROWS:,} rows, got {limit}")
    if not statement.strip():
        raise SandboxError("statement: empty; write a query (SELECT ...)")
    if not statement.isascii() and (bad := lone_surrogate(statement)) is not None:
        raise SandboxError(f"statement: not valid Unicode (a lone surrogate at character {bad + 1})")
    command = [sys.executable, "-m", "graphlake.warehouse.sql_sandbox", str(home), str(limit), repr(seconds), str(megabytes)]
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}  # glibc's per-thread arenas would reserve address space the cap counts
    done = _child(command, statement.encode("utf-8"), seconds + (0 if by_deadline else STARTUP_SECONDS), env, stop)
    if done is None or (by_deadline and done.returncode == 3 and b'"LimitError"' in done.stdout[:200] and b"ran past" in done.stdout[:300]):
        check(stop, "the statement's end")  # the deadline's own message, when it was the deadline
        raise LimitError(_past_time(seconds))
    header, _, body = done.stdout.partition(b"\n")
    if done.returncode < 0:  # killed (the kernel's OOM killer) or aborted where it could not say why
        raise LimitError(f"the statement stopped the SQL process ({_how(done.returncode)}), most likely past the memory limit of {megabytes} MB (set {MEMORY_ENV} for more)")
    if not header:
        said = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise SandboxError(f"the SQL process failed (exit status {done.returncode}): {said}")
    if done.returncode != 0:
        said = json.loads(header)
        raise _ERRORS[said["error"]](said["message"])
    said = json.loads(header)
    table = pa.ipc.open_stream(body).read_all() if body else pa.table({})
    return Answer(table, said["cut"], said["left_out"])


def _child(command: list[str], given: bytes, seconds: float, env: dict[str, str], stop: Stop | None) -> subprocess.CompletedProcess | None:
    """The child's run, None when it ran past ``seconds`` (killed); killed and ``Stopped`` when ``stop``
    is called off meanwhile (checked four times a second)."""
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as child:
        if stop is not None:
            stop.when_called_off(child.kill)  # a server shutting down kills it before it exits
        ends, sent = time.monotonic() + seconds, given
        while True:
            try:
                out, err = child.communicate(sent, timeout=min(POLL_S, max(ends - time.monotonic(), 0.01)))
                if stop is not None and stop.called_off is not None:  # killed by its hook, not out of memory
                    check(stop, "the statement's end")
                return subprocess.CompletedProcess(command, child.returncode, out, err)
            except subprocess.TimeoutExpired:
                sent = None  # taken with the first call
            if stop is not None and stop.called_off is not None:
                child.kill()
                child.communicate()
                check(stop, "the statement's end")
            if time.monotonic() >= ends:
                child.kill()
                child.communicate()
                return None


def _past_time(seconds: float) -> str:
    return f"the statement ran past {seconds:g} s and was stopped (set {TIMEOUT_ENV} for a longer limit)"


def _how(returncode: int) -> str:
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"exit status {returncode}"


def reading_statements(con: duckdb.DuckDBPyConnection, query: str) -> list:
    """``query``'s statements, if DuckDB's parser finds only queries among them (an EXPLAIN only of a
    query: EXPLAIN ANALYZE runs what it explains); else the refusal naming the first other. COPY ... TO,
    EXPORT, SET, CALL and any DDL or DML would change a file, the catalog or the session."""
    statements = con.extract_statements(query)
    for statement in statements:
        explained = _EXPLAINED.sub("", statement.query, count=1) if statement.type == duckdb.StatementType.EXPLAIN else None
        if explained is not None and explained != statement.query:
            reading_statements(con, explained)
        elif statement.type not in _READING or explained is not None:  # an EXPLAIN of a form not recognised: refused
            raise ReadOnlyError(
                f"the lake's SQL connection is read-only: {statement.type.name} statement `{_shown(statement.query)}` refused; its tables change only through `graphlake ingest` / `graphlake materialize`"
            )
        else:
            _refuse_revealing(con, statement.query)
    return statements


def _shown(query: str) -> str:
    shown = " ".join(query.split())
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _refuse_revealing(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Refuse a query that calls what names the lake's files or the account's folders (``REVEALING``,
    any ``pragma_`` function): the functions and tables it names, from DuckDB's syntax tree; a form the
    tree cannot be written for (PIVOT) is read as text, a mention anywhere refused."""
    (tree,) = con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()[0]
    parsed = json.loads(tree)
    if parsed.get("error"):
        named = {re.sub(r"\s+", "", match.group(0).lower()) for match in _REVEALING_TEXT.finditer(query)}
    else:
        named = set()
        _names(parsed, named)
    found = sorted(name for name in named if name in REVEALING or name.startswith("pragma_"))
    if found:
        raise PermissionRefused(
            f"statement `{_shown(query)}`: {found[0]} reads the SQL process's settings or the views' text, which name the lake's files: refused"
            " (the tables and their columns: SELECT * FROM information_schema.columns)"
        )


def _names(node: object, found: set[str]) -> None:
    """The functions a serialized statement calls and the tables it reads (a name without its schema)."""
    if isinstance(node, dict):
        if isinstance(node.get("function_name"), str):
            found.add(node["function_name"].lower())
        if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
            table, schema = node["table_name"].lower(), str(node.get("schema_name") or "").lower()
            found |= {table, f"{schema}.{table}"}
        for value in node.values():
            _names(value, found)
    elif isinstance(node, list):
        for item in node:
            _names(item, found)


def _confine(con: duckdb.DuckDBPyConnection, files: list[str], megabytes: int) -> None:
    """Only the committed files readable, nothing written (not even spill files), and no setting liftable."""
    listed = ", ".join("'" + path.replace("'", "''") + "'" for path in files)
    con.execute(f"SET memory_limit = '{megabytes}MB'")
    con.execute("SET temp_directory = ''")  # past the memory limit a statement fails, it never spills into the lake
    con.execute(f"SET allowed_paths = [{listed}]")
    con.execute("SET enable_external_access = false")  # every other file, extensions, ATTACH
    con.execute("SET lock_configuration = true")  # no SET/RESET can lift the ones above


def _cap_address_space(megabytes: int) -> None:
    """What the child has mapped now (Python, DuckDB, the catalog) plus the limit and some headroom: an
    allocation past it fails, in DuckDB as an out-of-memory error, whatever allocates it."""
    with open("/proc/self/status") as status:
        mapped_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    cap = (mapped_kb << 10) + ((megabytes + min(HEADROOM_MB, megabytes)) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _rows(con: duckdb.DuckDBPyConnection, query: str, most: int, megabytes: int) -> pa.Table:
    """The first ``most`` rows of ``query``, read a batch at a time: the rest are never produced."""
    reader = con.sql(query).to_arrow_reader(2048)
    batches, rows, size = [], 0, 0
    for batch in reader:
        batches.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
        if size > megabytes << 20:
            raise LimitError(f"the result is over the memory limit of {megabytes} MB; select fewer rows or columns (or set {MEMORY_ENV})")
        if rows >= most:
            break
    return pa.Table.from_batches(batches, reader.schema).slice(0, most)


def _answer(home: Path, statement: str, limit: int, seconds: float, megabytes: int) -> tuple[dict, bytes]:
    from graphlake.warehouse.catalog import Catalog

    catalog = Catalog(home)
    with catalog.reader() as con:
        _confine(con, catalog.files, megabytes)
        statements = reading_statements(con, statement)
        if not statements:
            raise SandboxError("statement: no SQL in it (only comments or semicolons); write a query (SELECT ...)")
        *before, last = statements
        _cap_address_space(megabytes)
        timer = threading.Timer(seconds, con.interrupt)
        timer.start()
        try:
            for earlier in before:
                con.execute(earlier).fetchall()
            table = _rows(con, last.query, limit + 1, megabytes)
        except duckdb.InterruptException:
            raise LimitError(_past_time(seconds)) from None
        finally:
            timer.cancel()
    cut = table.num_rows > limit
    table = _redacted_text(table.slice(0, limit), home)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return {"cut": cut, "left_out": catalog.left_out}, sink.getvalue()


def _from_memory(error: BaseException | None) -> bool:
    """Whether ``error`` is a MemoryError or was raised while handling one (a stream closed in its wake)."""
    while error is not None:
        if isinstance(error, MemoryError):
            return True
        error = error.__cause__ or error.__context__
    return False


def _main(home: str, limit: str, seconds: str, megabytes: str) -> int:
    statement = sys.stdin.buffer.read().decode("utf-8")
    try:
        header, body = _answer(Path(home), statement, int(limit), float(seconds), int(megabytes))
    except SandboxError as error:
        said = {"error": type(error).__name__, "message": str(error)}
    except duckdb.OutOfMemoryException as error:
        said = {"error": "LimitError", "message": f"{str(error).splitlines()[0]} (the limit is {megabytes} MB: set {MEMORY_ENV} for more)"}
    except duckdb.PermissionException as error:
        said = {"error": "PermissionRefused", "message": str(error).splitlines()[0]}
    except duckdb.Error as error:
        said = {"error": "SandboxError", "message": str(error).strip()}  # DuckDB's own lines: "Did you mean", the statement, a caret
    except Exception as error:
        if not _from_memory(error):
            raise
        # the result's conversion, past the cap (a MemoryError, or what closing a half-written stream then raised)
        said = {"error": "LimitError", "message": f"Out of Memory Error: the result did not fit (the limit is {megabytes} MB: set {MEMORY_ENV} for more)"}
    else:
        sys.stdout.buffer.write(json.dumps(header).encode() + b"\n")
        sys.stdout.buffer.write(body)  # not joined to the header: that would copy the whole result once more
        return 0
    said["message"] = redacted(said["message"], Path(home))
    sys.stdout.buffer.write(json.dumps(said).encode() + b"\n")
    return 3


def _redacted_text(table: pa.Table, home: Path) -> pa.Table:
    """``table`` with its text columns ``redacted``: a plan (``EXPLAIN ANALYZE``) names the files it read
    by their absolute paths, and so may a catalog view no list foresaw."""
    import pyarrow.compute as pc

    for i, column in enumerate(table.columns):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            for folder, shown in _folders(home):
                column = pc.replace_substring(column, str(folder), shown)
            table = table.set_column(i, table.field(i), column)
    return table


def _folders(home: Path) -> list[tuple[Path, str]]:
    """What ``redacted`` replaces: the lake's folder (resolved and as given) and the account's home."""
    return [(folder, shown) for folder, shown in ((home.resolve(), "<lake>"), (home.absolute(), "<lake>"), (Path.home(), "~")) if len(str(folder)) > 1]


def redacted(message: str, home: Path) -> str:
    """``message`` with the lake's folder written ``<lake>`` and the account's home ``~``: an error
    names a file by its absolute path, which tells a client where the server keeps its data."""
    for folder, shown in _folders(home):
        message = message.replace(str(folder), shown)
    return message


if __name__ == "__main__":
    sys.exit(_main(*sys.argv[1:]))
