"""A lake on a read-only mount (a published lake, a shared volume) is read without writing anything:
SQL, a query, the evaluation of what is built and the Python API answer; a command that would build
says in one line that it cannot, and no file of the lake changes.

As root the copy is bind-mounted read-only (the kernel refuses every write, root's too); otherwise it
is made unwritable with chmod, which binds every other user."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import copy_lake

API = """
import json, sys
from graphlake.api import open_lake
lake = open_lake(sys.argv[1])
hits = lake.search("demo", "bm25", "sled", k=3).hits
print(json.dumps({"hits": len(hits), "nodes": lake.sql("select count(*) as n from nodes").column("n")[0].as_py()}))
"""


@pytest.fixture
def read_only_lake(demo_lake, tmp_path) -> Iterator[Path]:
    copy = copy_lake(demo_lake.home, tmp_path / "copy")
    if os.geteuid() != 0:
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        yield copy
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        return
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "--bind", "-o", "ro", str(copy), str(mounted)], capture_output=True).returncode != 0:
        pytest.skip("running as root where a read-only bind mount cannot be made: nothing here is unwritable to root")
    try:
        yield mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


def listing(home: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*") if p.is_file()}


def test_a_read_only_lake_answers_sql_query_eval_and_the_api(read_only_lake, tmp_path):
    home = read_only_lake
    with pytest.raises(OSError):
        (home / "probe").write_text("x")
    before = listing(home)
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(tmp_path / "dagster")}

    def graphlake(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).parent / "graphlake"), *args], env=env, capture_output=True, text=True, timeout=300)

    counted = graphlake("sql", "select count(*) as n from nodes where corpus = 'demo'", "--json")
    assert counted.returncode == 0 and json.loads(counted.stdout)[0]["n"] > 0, counted.stderr
    found = graphlake("query", "--corpus", "demo", "--method", "bm25", "--json", "sled")
    assert found.returncode == 0 and json.loads(found.stdout)["hits"], found.stderr
    evaluated = graphlake("eval", "--corpus", "demo", "--methods", "bm25", "--json")
    assert evaluated.returncode == 0 and json.loads(evaluated.stdout), evaluated.stderr
    api = subprocess.run([sys.executable, "-c", API, str(home)], env=env, capture_output=True, text=True, timeout=300)
    assert api.returncode == 0 and json.loads(api.stdout)["hits"] == 3, api.stderr
    built = graphlake("materialize", "--corpus", "demo")
    assert built.returncode == 1 and built.stderr.strip().splitlines() == [
        f"error: the lake at {home} cannot be written by this process (read-only, or not its folder): `graphlake materialize` on corpus 'demo' "
        "builds what is missing or stale and writes to it; reading it (sql, query, eval of what is built, the API) needs no write"
    ]
    collected = graphlake("gc")  # it would remove files: refused the same way, in one line
    assert collected.returncode == 1 and collected.stderr.strip().splitlines() == [
        f"error: the lake at {home} cannot be written by this process (read-only, or not its folder): `graphlake gc` removes files from it and "
        "writes to it; reading it (sql, query, eval of what is built, the API) needs no write"
    ], collected.stderr
    assert listing(home) == before
