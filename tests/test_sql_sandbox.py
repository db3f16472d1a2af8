"""``graphlake sql`` is read-only for real: no statement it runs writes a file, reads outside the lake's
tables' committed files, loads code or lifts those limits, or runs or answers without bound (in time,
memory or rows); every query the README shows still runs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.common.stopping import Stop, Stopped
from graphlake.warehouse.sql_sandbox import run_sql
from lake_checks import readme_queries

SECRET = "sk-never-print-me-4711"


def sql(*args: str):
    return CliRunner().invoke(app, ["sql", *args], catch_exceptions=False)


def test_every_escape_is_refused_naming_what_and_every_readme_query_runs(reads_demo, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHLAKE_LLM_API_KEY", SECRET)
    home = reads_demo.home
    outside = tmp_path / "outside"
    outside.mkdir()
    duckdb.sql(f"COPY (SELECT 42 AS answer) TO '{outside / 'mine.parquet'}'")
    (outside / "notes.csv").write_text("a,b\n1,2\n")
    committed = next(home.glob("tables/nodes/corpus=demo/data-*.parquet"))
    before = committed.read_bytes()
    escapes = {
        f"COPY (SELECT 1) TO '{outside / 'out.csv'}'": "COPY",
        f"COPY (SELECT 1 AS x) TO '{committed}'": "COPY",  # over the lake's own committed data
        "SELECT 1; COPY (SELECT 1) TO 'later.csv'": "COPY",  # nothing runs when any statement writes
        f"EXPORT DATABASE '{outside / 'export'}'": "EXPORT",
        f"ATTACH '{outside / 'other.duckdb'}' AS other": "ATTACH",
        "INSTALL httpfs": "LOAD",
        "LOAD httpfs": "LOAD",
        "SET enable_external_access = true": "SET",
        "RESET allowed_directories": "SET",
        "PRAGMA enable_profiling": "PRAGMA",
        "CREATE OR REPLACE VIEW nodes AS SELECT 1 AS node_id": "CREATE",
        "DROP VIEW nodes": "DROP",
        "INSERT INTO documents SELECT * FROM documents": "INSERT",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{committed}'": "COPY",  # EXPLAIN ANALYZE runs what it explains
        f"explain (analyze, format json) /* c */ COPY (SELECT 1) TO '{outside / 'out.csv'}'": "COPY",
        f"SELECT * FROM read_text('{home / 'corpora.yaml'}')": "corpora.yaml",  # the lake's configuration
        f"SELECT * FROM read_blob('{home}/dagster/**')": "dagster",  # Dagster's run storage
        f"SELECT * FROM read_text('{home}/snapshots/*/*.json')": "snapshots",
        "SELECT * FROM read_text('/proc/self/environ')": "/proc/self/environ",
        f"SELECT * FROM read_csv('{outside / 'notes.csv'}')": "notes.csv",
        f"SELECT * FROM read_parquet('{outside / 'mine.parquet'}')": "mine.parquet",
        "SELECT * FROM glob('/etc/*')": "/etc/*",
        f"SELECT * FROM read_blob('{home.parent}/*')": str(home.parent),
        # only the committed snapshots' files: a glob over a table's folder would add older versions and staged files
        f"SELECT * FROM read_parquet('{committed.parent}/*.parquet')": "<lake>/tables/nodes/corpus=demo/*.parquet",  # an error names the lake's folder <lake>
        f"SELECT * FROM glob('{home}/tables/**')": "tables/**",
        # what names the lake's files by their absolute paths, or the account's folders
        "SELECT current_setting('allowed_paths')": "current_setting",
        "SELECT name, value FROM duckdb_settings() WHERE value LIKE '%/%'": "duckdb_settings",
        "select reverse(sql) from DUCKDB_VIEWS()": "duckdb_views",
        "SELECT view_definition FROM information_schema . views": "information_schema.views",
        "SELECT * FROM duckdb_extensions()": "duckdb_extensions",
        "WITH s AS (SELECT * FROM duckdb_settings) SELECT * FROM s": "duckdb_settings",
        "SELECT * FROM pragma_database_list": "pragma_database_list",
        "select name, setting from pg_catalog.pg_settings where name in ('allowed_paths', 'secret_directory')": "pg_settings",
        "SELECT * FROM (PIVOT (SELECT getenv('HOME') AS h, 1 AS n) ON h USING sum(n))": "getenv",  # a form without a syntax tree, read as text
    }
    for statement, named in escapes.items():
        refused = sql(statement)
        assert refused.exit_code == 1, (statement, refused.output)
        assert named in refused.stderr and ("read-only" in refused.stderr or "refused" in refused.stderr), (statement, refused.stderr)
        assert SECRET not in refused.output and "Traceback" not in refused.output
    assert not (outside / "out.csv").exists() and not (outside / "export").exists() and not (outside / "other.duckdb").exists()
    assert not Path("later.csv").exists() and committed.read_bytes() == before
    for query in readme_queries():
        answered = sql(query, "--json")
        assert answered.exit_code == 0 and answered.stdout.startswith("["), (query, answered.output)
    assert sql("SELECT count(*) AS n FROM read_parquet(?)".replace("?", f"'{committed}'"), "--json").exit_code == 0  # the lake's own files stay readable
    planned = sql("EXPLAIN ANALYZE SELECT * FROM documents", "--json")  # its plan names the files it read: as <lake>/...
    assert planned.exit_code == 0 and "<lake>/tables/documents" in planned.stdout and str(home) not in planned.stdout, planned.output[:500]
    broken = sql("SELEC 1")
    said = broken.stderr.strip().splitlines()  # DuckDB's own lines kept: the statement and a caret under the fault
    assert broken.exit_code == 1 and said[0] == 'error: Parser Error: syntax error at or near "SELEC"' and "SELEC 1" in said[-2] and "^" in said[-1], said
    misspelt = sql("select count(*) from nodez")
    assert misspelt.exit_code == 1 and 'Did you mean "nodes"' in misspelt.stderr, misspelt.stderr


def test_a_runaway_statement_is_stopped_in_one_line(reads_demo, monkeypatch):
    monkeypatch.setenv("GRAPHLAKE_SQL_TIMEOUT", "1")
    stopped = sql("SELECT count(*) FROM range(100000000000000)")
    assert stopped.exit_code == 1 and "ran past 1 s" in stopped.stderr and len(stopped.stderr.strip().splitlines()) == 1, stopped.output
    monkeypatch.setenv("GRAPHLAKE_SQL_TIMEOUT", "20")
    monkeypatch.setenv("GRAPHLAKE_SQL_MEMORY_MB", "64")
    stopped = sql("SELECT count(DISTINCT i) FROM range(100000000) t(i)")  # a hash table past 64 MB, and no spilling
    assert stopped.exit_code == 1 and "64 MB" in stopped.stderr and len(stopped.stderr.strip().splitlines()) == 1, stopped.output
    # allocations outside DuckDB's buffer pool (one huge string, one huge list) are bounded too
    monkeypatch.setenv("GRAPHLAKE_SQL_MEMORY_MB", "256")
    for statement in ("SELECT length(repeat('x', 1500000000))", "SELECT len(range(400000000))"):
        stopped = sql(statement)
        assert stopped.exit_code == 1 and "Out of Memory" in stopped.stderr and "256 MB" in stopped.stderr and len(stopped.stderr.strip().splitlines()) == 1, stopped.output
    # a result is produced within the limits: rows past --limit are never produced, and a note says they were cut
    monkeypatch.setenv("GRAPHLAKE_SQL_TIMEOUT", "1")
    cut = sql("SELECT range FROM range(300000000)", "--json")
    assert cut.exit_code == 0 and len(json.loads(cut.stdout)) == 1000 and "the first 1,000 rows are shown" in cut.stderr, cut.output
    whole = sql("SELECT range FROM range(5)", "--json", "--limit", "5")
    assert json.loads(whole.stdout) == [{"range": i} for i in range(5)] and "note" not in whole.stderr
    sliced = sql("SELECT range FROM range(2500)", "--limit", "2500")  # printed 1,000 rows at a time, under one header
    assert sliced.exit_code == 0 and sliced.stdout.count("range") == 1 and "2499" in sliced.stdout, sliced.output[-500:]
    for statement, said in (("  ", "statement: empty"), ("/* nothing */ ;", "statement: no SQL in it")):
        refused = sql(statement)
        assert refused.exit_code == 1 and said in refused.stderr, refused.output
    monkeypatch.setenv("GRAPHLAKE_SQL_TIMEOUT", "nan")
    assert "GRAPHLAKE_SQL_TIMEOUT='nan'" in sql("SELECT 1").stderr


def test_a_statement_called_off_says_so_never_out_of_memory(reads_demo):
    """The stop's hook kills the child at once, also while the child starts (0.3 s): the parent then sees
    a killed process and must say why (it said "most likely past the memory limit" there)."""
    for delay in (0.3, 1.0):
        stop = Stop.within(60)
        threading.Timer(delay, stop.call_off, ("disconnected",)).start()
        with pytest.raises(Stopped, match="the client disconnected: stopped before the statement's end"):
            run_sql(reads_demo.home, "SELECT count(*) FROM range(100000000000000)", 10, stop)


@pytest.mark.parametrize("statement", ["SELECT 1", "EXPLAIN SELECT 1", "DESCRIBE nodes", "SHOW TABLES", "WITH a AS (SELECT 2 AS x) SELECT x FROM a"])
def test_plain_queries_of_every_form_pass(lake, statement):
    assert sql(statement).exit_code == 0
