"""A corpus stays one consistent snapshot however its writers end: killed (-9) at every asset boundary
of a re-materialization, or two of them at once. Real ``graphlake`` processes on a small corpus."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from crash_corpus import CORPUS, EDITED, METHODS, SELECTION, TEXTS, write_corpus
from graphlake.api import GraphLake
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.snapshots import Snapshots

TABLES = ("documents", "queries", "qrels", "nodes", "edges", "vectors", "runs")
GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))


def graphlake(home: Path, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    return subprocess.Popen([GRAPHLAKE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finished(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=600)
    return process.returncode, stderr


def build(home: Path, source: Path) -> None:
    for args in (("ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS), ("materialize", "--corpus", CORPUS, "--select", SELECTION)):
        code, stderr = finished(graphlake(home, *args))
        assert code == 0, stderr


def staged(home: Path) -> set[Path]:
    """Every data file and artefact version of the corpus on disk, committed or not."""
    return {*home.glob(f"tables/*/corpus={CORPUS}/**/data-*.parquet"), *home.glob(f"artifacts/*/corpus={CORPUS}/v-*")}


def contents(home: Path) -> dict[str, list[tuple]]:
    """The corpus's rows, table by table, as SQL over the catalog sees them (runs without their timings)."""
    found = {}
    with Catalog(home).reader() as con:
        for table in TABLES:
            columns = "query_id, rank, node_id" if table == "runs" else "*"
            found[table] = sorted(map(repr, con.execute(f"SELECT {columns} FROM {table} WHERE corpus = ?", [CORPUS]).fetchall()))
    return found


def dangling(home: Path) -> int:
    """Edges, vectors and run rows that name a node outside the snapshot's nodes."""
    nodes = f"(SELECT node_id FROM nodes WHERE corpus = '{CORPUS}')"
    with Catalog(home).reader() as con:
        return sum(
            con.execute(f"SELECT count(*) FROM {table} WHERE corpus = '{CORPUS}' AND ({condition})").fetchone()[0]
            for table, condition in (
                ("edges", f"src NOT IN {nodes} OR dst NOT IN {nodes}"),
                ("vectors", f"node_id NOT IN {nodes}"),
                ("runs", f"node_id NOT IN {nodes}"),
            )
        )


def answers(home: Path, monkeypatch) -> dict[str, int]:
    monkeypatch.setenv("GRAPHLAKE_HOME", str(home))
    return {method: len(GraphLake(home).search(CORPUS, method, "storm warnings", 3).hits) for method in METHODS}


@dataclass(frozen=True)
class Built:
    home: Path
    source: Path  # the corpus's declared files (a document's metadata names them, so a lake to compare with reads the same)
    contents: dict[str, list[tuple]]  # what one run of TEXTS on a fresh lake leaves, taken right after it


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    """TEXTS ingested and built once on a fresh lake: the kill test re-materializes this lake (its previous
    snapshot); the two writers must end as its contents, taken before (a second clean build of TEXTS)."""
    root = tmp_path_factory.mktemp("tiny")
    home, source = root / "lake", root / "raw"
    write_corpus(source, TEXTS)
    build(home, source)
    return Built(home, source, contents(home))


def test_a_kill_at_every_asset_boundary_leaves_the_previous_snapshot_whole(built, tmp_path, monkeypatch):
    home, source = built.home, built.source
    before, previous = Snapshots(home).current(CORPUS), contents(home)
    assert dangling(home) == 0
    write_corpus(source, EDITED)  # the edit, read by the killed runs themselves
    kills = 0
    while True:
        on_disk = staged(home)
        process = graphlake(home, "materialize", "--corpus", CORPUS, "--select", SELECTION)
        while process.poll() is None and len(staged(home) - on_disk) < kills:  # the run has staged `kills` versions
            time.sleep(0.02)
        if process.poll() is not None:
            break  # it finished before reaching this boundary: the last, complete run
        if kills == 0:
            time.sleep(2.0)  # the first kill: the run started, nothing staged yet
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        kills += 1
        assert Snapshots(home).current(CORPUS) == before, f"kill {kills}: a killed run committed"
        assert contents(home) == previous, f"kill {kills}: the corpus changed"
        assert dangling(home) == 0
        assert all(answers(home, monkeypatch).values())
    code, stderr = finished(process)
    assert code == 0, stderr
    assert kills >= 8, f"only {kills} boundaries were reached"  # documents ... run_rrf: the kills covered the run
    after = Snapshots(home).current(CORPUS)
    assert after.number == before.number + 1 and dangling(home) == 0 and all(answers(home, monkeypatch).values())
    clean = tmp_path / "clean"
    build(clean, source)
    assert contents(home) == contents(clean)  # the run after the kills equals one run on a fresh lake
    print(f"kill -9 matrix: {kills}/{kills} kills left the previous snapshot whole")


def test_two_writers_of_one_corpus_take_turns_and_end_as_one_run_would(built, tmp_path):
    home, source = tmp_path / "lake", built.source
    write_corpus(source, TEXTS)  # as it was built (the kill test edits it)
    code, stderr = finished(graphlake(home, "ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS))
    assert code == 0, stderr
    writers = [graphlake(home, "materialize", "--corpus", CORPUS, "--select", SELECTION) for _ in range(2)]
    ended = [finished(writer) for writer in writers]
    assert [code for code, _ in ended] == [0, 0], [stderr for _, stderr in ended]
    assert any(f"corpus '{CORPUS}' is being written by pid" in stderr for _, stderr in ended)  # the second waited, saying for whom
    assert not any("FileNotFoundError" in stderr for _, stderr in ended)
    assert contents(home) == built.contents  # as one clean run of the same files


def test_a_writer_that_will_not_wait_fails_naming_the_holder(tmp_path):
    from graphlake.warehouse.locks import writer_lock

    home, source = tmp_path / "lake", tmp_path / "raw"
    write_corpus(source, TEXTS)
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "GRAPHLAKE_LOCK_WAIT": "0"}
    with writer_lock(home, CORPUS, "a test holding the corpus"):
        ended = subprocess.run([GRAPHLAKE, "ingest", "jsonl", str(source / "docs.jsonl"), "--corpus", CORPUS], env=env, capture_output=True, text=True)
    assert ended.returncode == 1
    assert f"corpus '{CORPUS}' is being written by pid {os.getpid()}" in ended.stderr and "a test holding the corpus" in ended.stderr
    assert not (home / "corpora.yaml").exists()  # the failed ingest declared nothing
