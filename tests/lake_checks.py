"""Comparing two lakes table by table, and the SQL the README and docs/ show: what the Dask and S3 tests assert."""

from __future__ import annotations

import math
import re
from pathlib import Path

from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.tables import TABLES

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # where a user reads SQL to copy
PER_RUN = {"run_id", "latency_ms", "plan_ms"}  # which run wrote a row and how long its query took: not its content


def rows(home: Path, corpora) -> dict[tuple[str, str], list[tuple]]:
    """Every table's committed rows, corpus by corpus, in key order, as SQL over the catalog sees them."""
    found = {}
    with Catalog(home).reader() as con:
        for table, spec in TABLES.items():
            columns = ", ".join(f'"{f.name}"' for f in spec.schema if f.name not in PER_RUN)
            order = ", ".join(f'"{name}"' for name in (*spec.partition_by, *spec.key))
            for corpus in corpora:
                found[table, corpus] = con.execute(f"SELECT {columns} FROM {table} WHERE corpus = ? ORDER BY {order}", [corpus]).fetchall()
    return found


def of_methods(found: dict[tuple[str, str], list[tuple]], methods) -> dict[tuple[str, str], list[tuple]]:
    """``rows`` with the method-partitioned tables (runs, metrics) kept to these methods' rows."""
    kept = {}
    for (table, corpus), values in found.items():
        columns = [f.name for f in TABLES[table].schema if f.name not in PER_RUN]
        at = columns.index("method") if "method" in columns else None
        kept[table, corpus] = values if at is None else [row for row in values if row[at] in set(methods)]
    return kept


NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")  # a decimal literal in a text (GRASP's compiled SQL)


def same(a, b) -> bool:
    """Equal values; floats within float32 noise (a query encoded with another thread count scores
    ~1e-7 apart: tests/test_rankings.py), also where a text spells them (the link scores in
    ``skb_plans.sql``)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6)
    if isinstance(a, str) and isinstance(b, str) and a != b:
        return NUMBER.split(a) == NUMBER.split(b) and same([float(x) for x in NUMBER.findall(a)], [float(x) for x in NUMBER.findall(b)])
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def differing(expected: dict, got: dict) -> dict:
    """The tables whose rows differ, each with its first differing pair of rows (or the row counts): what
    a failed comparison prints."""
    found = {}
    for key, rows_a in expected.items():
        rows_b = got.get(key, [])
        if not same(rows_a, rows_b):
            pairs = [(a, b) for a, b in zip(rows_a, rows_b, strict=False) if not same(a, b)]
            found[key] = pairs[0] if pairs else (len(rows_a), len(rows_b))
    return found


def readme_queries() -> list[str]:
    """Every ``graphlake sql`` command line of the README and docs/."""
    found = [query for page in DOCUMENTED for query in re.findall(r'^\.venv/bin/graphlake sql "(.+?)"(?: --json)?\s*$', page.read_text(encoding="utf-8"), flags=re.MULTILINE)]
    assert len(found) >= 10, "the documented SQL examples were not found"
    return found
