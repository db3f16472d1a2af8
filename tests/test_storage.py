"""The lake's storage contract: versions made visible by snapshot commits, contract checks, per-corpus isolation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.snapshots import Snapshots
from graphlake.warehouse.storage import LakeStorage, StorageError


def documents(n: int, prefix: str = "d") -> pa.Table:
    return pa.table(
        {
            "doc_id": [f"{prefix}{i}" for i in range(n)],
            "title": [f"title {i}" for i in range(n)],
            "text": [f"text {i}" for i in range(n)],
            "metadata": [None] * n,
        }
    )


def test_write_then_read_round_trips_and_fills_partition_column(tmp_path):
    lake = LakeStorage(tmp_path)
    path = lake.write("documents", {"corpus": "a"}, documents(3))
    assert path.parent == tmp_path / "tables" / "documents" / "corpus=a" and path.name.startswith("data-")
    assert Snapshots(tmp_path).current("a").tables["documents/corpus=a"].name == path.name  # committed on its own
    table = lake.read("documents", {"corpus": "a"})
    assert table.column("corpus").to_pylist() == ["a", "a", "a"]
    assert table.column("doc_id").to_pylist() == ["d0", "d1", "d2"]
    assert table.schema.names[:5] == ["corpus", "doc_id", "title", "text", "metadata"]


def test_write_failing_halfway_leaves_previous_version(tmp_path, monkeypatch):
    lake = LakeStorage(tmp_path)
    old = lake.write("documents", {"corpus": "a"}, documents(5, "old"))
    monkeypatch.setattr("graphlake.warehouse.storage.ROW_GROUP_ROWS", 10)
    calls = {"n": 0}
    original = pq.ParquetWriter.write_batch

    def failing(self, batch, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full (simulated)")
        return original(self, batch, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_batch", failing)
    with pytest.raises(OSError, match="disk full"):
        lake.write("documents", {"corpus": "a"}, documents(100, "new"))
    assert calls["n"] == 3  # it really got halfway
    assert lake.read("documents", {"corpus": "a"}).column("doc_id").to_pylist() == [f"old{i}" for i in range(5)]
    assert [p.name for p in (tmp_path / "tables" / "documents" / "corpus=a").iterdir()] == [old.name]


def test_killed_writer_leaves_previous_version_and_its_leftover_is_ignored(tmp_path):
    lake = LakeStorage(tmp_path)
    old = lake.write("documents", {"corpus": "a"}, documents(4, "old"))
    writer = textwrap.dedent(
        f"""
        import time, pyarrow as pa, pyarrow.parquet as pq
        from graphlake.warehouse import storage
        storage.ROW_GROUP_ROWS = 100
        original = pq.ParquetWriter.write_batch
        def slow(self, batch, *a, **k):
            original(self, batch, *a, **k)
            print("batch", flush=True)
            time.sleep(0.5)
        pq.ParquetWriter.write_batch = slow
        n = 10_000
        table = pa.table({{"doc_id": [f"new{{i}}" for i in range(n)], "title": ["t"] * n, "text": ["x"] * n, "metadata": [None] * n}})
        storage.LakeStorage({str(tmp_path)!r}).write("documents", {{"corpus": "a"}}, table)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "batch"
    assert process.stdout.readline().strip() == "batch"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    partition = tmp_path / "tables" / "documents" / "corpus=a"
    leftovers = [p for p in partition.iterdir() if p != old]
    assert len(leftovers) == 1 and leftovers[0].name.endswith(".tmp")
    assert lake.read("documents", {"corpus": "a"}).column("doc_id").to_pylist() == [f"old{i}" for i in range(4)]
    with Catalog(tmp_path).reader() as con:
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (4,)
    newer = [lake.write("documents", {"corpus": "a"}, documents(n, "next")) for n in (2, 3)]
    removed = set(Snapshots(tmp_path).collect("a"))  # the leftover, and the version and snapshot two commits back
    assert removed == {leftovers[0], old, tmp_path / "snapshots" / "a" / "00000001.json"}
    assert sorted(partition.iterdir()) == sorted(newer)


def test_contract_violations_are_refused_before_anything_is_written(tmp_path):
    lake = LakeStorage(tmp_path)
    with pytest.raises(StorageError, match=r"missing columns \['title'\]"):
        lake.write("documents", {"corpus": "a"}, documents(2).drop_columns(["title"]))
    duplicated = pa.concat_tables([documents(2), documents(1)])
    with pytest.raises(StorageError, match=r"duplicate \('doc_id',\): d0"):
        lake.write("documents", {"corpus": "a"}, duplicated)
    with pytest.raises(StorageError, match="rows with corpus other than 'a'"):
        lake.write("documents", {"corpus": "a"}, documents(2).append_column("corpus", pa.array(["a", "b"])))
    with pytest.raises(StorageError, match="bad corpus"):
        lake.write("documents", {"corpus": "../escape"}, documents(1))
    with pytest.raises(StorageError, match="partitioned by"):
        lake.write("edges", {"corpus": "a"}, pa.table({"src": ["x"], "dst": ["y"], "kind": ["k"], "weight": [1.0], "source": ["s"]}))
    assert not (tmp_path / "tables").exists() or not any((tmp_path / "tables").rglob("*.parquet"))


def test_one_corpus_write_never_touches_another(tmp_path):
    lake = LakeStorage(tmp_path)
    lake.write("documents", {"corpus": "a"}, documents(2))
    other = lake.write("documents", {"corpus": "b"}, documents(3))
    before = other.stat()
    lake.write("documents", {"corpus": "a"}, documents(5))
    after = other.stat()
    assert (before.st_ino, before.st_mtime_ns, before.st_size) == (after.st_ino, after.st_mtime_ns, after.st_size)


def test_an_unchanged_write_keeps_the_current_version_and_its_time(tmp_path):
    lake = LakeStorage(tmp_path)
    path = lake.write("documents", {"corpus": "a"}, documents(3))
    before = path.stat()
    assert lake.write("documents", {"corpus": "a"}, documents(3)) == path
    assert (before.st_ino, before.st_mtime_ns) == (path.stat().st_ino, path.stat().st_mtime_ns)
    assert lake.write("documents", {"corpus": "a"}, documents(3, "e")) != path  # one changed value is a new version
    assert lake.read("documents", {"corpus": "a"}).column("doc_id").to_pylist() == ["e0", "e1", "e2"]


def test_catalog_views_are_typed_when_empty_and_read_every_partition(tmp_path):
    catalog = Catalog(tmp_path)
    with catalog.reader() as con:
        assert con.execute("SELECT count(*) FROM nodes").fetchone() == (0,)
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'nodes'").fetchall())
        assert types["chunk_idx"] == "INTEGER" and types["text"] == "VARCHAR"
    lake = LakeStorage(tmp_path)
    lake.write("documents", {"corpus": "a"}, documents(2))
    lake.write("documents", {"corpus": "b"}, documents(3))  # each commit refreshes the views
    with catalog.reader() as con:
        counts = con.execute("SELECT corpus, count(*) FROM documents GROUP BY ALL ORDER BY 1").fetchall()
        assert counts == [("a", 2), ("b", 3)]
        con.execute("CREATE TABLE scratch (x INTEGER)")  # in the reader's own memory: no other reader, no file sees it
    with catalog.reader() as con, duckdb.connect(str(catalog.path), read_only=True) as outside:
        for client in (con, outside):  # outside clients read the file every commit rewrites
            assert client.execute("SELECT corpus, count(*) FROM documents GROUP BY ALL ORDER BY 1").fetchall() == counts
            assert not client.execute("SELECT * FROM information_schema.tables WHERE table_name = 'scratch'").fetchall()


def test_readers_see_a_commit_at_once_and_a_moved_lake_reads_its_own_files(tmp_path):
    """Killed between publishing a snapshot and rewriting catalog.duckdb, a commit is still what every
    graphlake reader sees, all of it; an open reader does not hold up the next commit; a lake moved
    elsewhere reads the files where it is now."""
    home = tmp_path / "lake"
    lake = LakeStorage(home)
    lake.write("documents", {"corpus": "a"}, documents(2, "old"))
    lake.write("queries", {"corpus": "a"}, pa.table({"query_id": ["q"], "text": ["t"], "split": ["test"], "metadata": [None]}))
    run = lake.bound("run1")
    run.write("documents", {"corpus": "a"}, documents(3, "new"))
    run.write("queries", {"corpus": "a"}, pa.table({"query_id": ["q", "r"], "text": ["t", "u"], "split": ["test"] * 2, "metadata": [None] * 2}))
    stale = Catalog(home).path.read_bytes()
    Snapshots(home).commit("a", "run1")  # published; the catalog file is not rewritten (the kill)
    assert Catalog(home).path.read_bytes() == stale
    read = "SELECT (SELECT count(*) FROM documents WHERE corpus = 'a'), (SELECT count(*) FROM queries), (SELECT min(doc_id) FROM documents WHERE corpus = 'a')"
    with Catalog(home).reader() as con:
        assert con.execute(read).fetchone() == (3, 2, "new0")
    with Catalog(home).reader() as con:  # a reader still open does not hold up a commit (it once waited on its lock)
        lake.write("documents", {"corpus": "b"}, documents(1, "b"))
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (3,)  # its own snapshot's view, as opened
    moved = tmp_path / "moved"
    home.rename(moved)
    with Catalog(moved).reader() as con:
        assert con.execute(read).fetchone() == (3, 2, "new0")


def test_a_run_s_versions_are_its_own_until_it_commits_them_all_at_once(tmp_path):
    lake = LakeStorage(tmp_path)
    lake.write("documents", {"corpus": "a"}, documents(2, "old"))
    lake.write_artifact("bm25", {"corpus": "a"}, lambda folder: (folder / "index").write_text("old"))
    before = Snapshots(tmp_path).current("a").number
    run = lake.bound("run1")
    run.write("documents", {"corpus": "a"}, documents(3, "new"))
    run.write("queries", {"corpus": "a"}, pa.table({"query_id": ["q"], "text": ["t"], "split": ["test"], "metadata": [None]}))
    run.write_artifact("bm25", {"corpus": "a"}, lambda folder: (folder / "index").write_text("new"))
    assert run.read("documents", {"corpus": "a"}).num_rows == 3 and (run.artifact("bm25", {"corpus": "a"}) / "index").read_text() == "new"
    assert lake.read("documents", {"corpus": "a"}).num_rows == 2 and not lake.has("queries", {"corpus": "a"})
    assert (lake.artifact("bm25", {"corpus": "a"}) / "index").read_text() == "old"
    with Catalog(tmp_path).reader() as con:
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (2,)
    assert run.commit("a") == {"a": before + 1}  # one snapshot for everything the run wrote; none for _lake
    assert lake.read("documents", {"corpus": "a"}).num_rows == 3 and lake.has("queries", {"corpus": "a"})
    assert (lake.artifact("bm25", {"corpus": "a"}) / "index").read_text() == "new"
    with Catalog(tmp_path).reader() as con:
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (3,)


def test_a_run_that_never_commits_leaves_the_snapshot_whole_and_its_files_collectable(tmp_path):
    lake = LakeStorage(tmp_path)
    lake.write("documents", {"corpus": "a"}, documents(2, "old"))
    current = Snapshots(tmp_path).current("a")
    failed = lake.bound("failed-run")
    staged = failed.write("documents", {"corpus": "a"}, documents(5, "new"))
    built = failed.write_artifact("dense_hnsw", {"corpus": "a"}, lambda folder: (folder / "index").write_text("x"))
    assert Snapshots(tmp_path).current("a") == current
    assert not lake.has("documents", {"corpus": "b"}) and lake.artifact_written_at("dense_hnsw", {"corpus": "a"}) is None
    assert set(Snapshots(tmp_path).collect("a")) == {staged, built}  # the snapshot refers to neither
    assert lake.read("documents", {"corpus": "a"}).column("doc_id").to_pylist() == ["old0", "old1"]


def test_a_lake_written_before_snapshots_is_adopted_as_its_first(tmp_path):
    partition = tmp_path / "tables" / "documents" / "corpus=a"
    partition.mkdir(parents=True)
    pq.write_table(documents(2).append_column("corpus", pa.array(["a", "a"])), partition / "data.parquet")
    root = tmp_path / "artifacts" / "reranker"
    (root / "v-old").mkdir(parents=True)
    (root / "CURRENT").write_text("v-old")
    lake = LakeStorage(tmp_path)
    assert lake.read("documents", {"corpus": "a"}).num_rows == 2 and lake.artifact("reranker", {}) == root / "v-old"
    with Catalog(tmp_path).reader() as con:
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (2,)
    assert Snapshots(tmp_path).current("a").number == 1


def test_row_changes_match_by_key_and_compare_every_column():
    from graphlake.warehouse.row_changes import row_changes

    before = pa.table({"node_id": ["a", "b", "c"], "dense": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "text": ["x", "y", "z"]})
    after = pa.table({"node_id": ["a", "b", "d", "e"], "dense": [[1.0, 2.0], [3.0, 4.5], [7.0, 8.0], [0.0, 0.0]], "text": ["x", "y", "w", "v"]})
    assert row_changes(before, after, ["node_id"]) == {"added": 2, "changed": 1, "removed": 1}
    assert row_changes(None, after, ["node_id"]) == {"added": 4, "changed": 0, "removed": 0}
    assert row_changes(after, after, ["node_id"]) == {"added": 0, "changed": 0, "removed": 0}


def test_graphlake_gc_removes_what_a_failed_run_left_and_keeps_the_snapshot(lake):
    from typer.testing import CliRunner

    from graphlake.cli import app

    LakeStorage(lake).write("documents", {"corpus": "a"}, documents(2, "old"))
    staged = LakeStorage(lake).bound("failed-run").write("documents", {"corpus": "a"}, documents(5, "new"))
    done = CliRunner().invoke(app, ["gc"], catch_exceptions=False)
    assert done.exit_code == 0 and "a: 1 files and folders removed" in done.stderr, done.output
    assert not staged.exists() and LakeStorage(lake).read("documents", {"corpus": "a"}).column("doc_id").to_pylist() == ["old0", "old1"]
