"""One damaged corpus does not take the lake down: with a truncated data file, then an unreadable
snapshot, in corpus 'side', SQL over the other corpora and their queries still answer (SQL says what it
left out), another corpus is still written, and ``graphlake doctor`` names the damage and repairs it
from the versions the earlier snapshots kept, or drops a partition none kept (for materialize)."""

from __future__ import annotations

import pyarrow as pa
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.warehouse.snapshots import Snapshots
from graphlake.warehouse.storage import LakeStorage


def documents(n: int, prefix: str) -> pa.Table:
    return pa.table({"doc_id": [f"{prefix}{i}" for i in range(n)], "title": [""] * n, "text": [f"text {i}" for i in range(n)], "metadata": [None] * n})


def cli(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def still_answering(home) -> str:
    """SQL over the demo corpus and a demo query answer; what SQL noted on stderr."""
    counted = cli("sql", "select count(*) as n from documents where corpus = 'demo'", "--json")
    assert counted.exit_code == 0 and '"n": ' in counted.stdout, counted.output
    assert cli("query", "--corpus", "demo", "--method", "bm25", "--json", "sled").exit_code == 0
    return counted.stderr


def test_a_damaged_corpus_is_left_out_named_and_repaired(demo_copy):
    home = demo_copy
    lake = LakeStorage(home)
    lake.write("documents", {"corpus": "side"}, documents(2, "old"))
    newer = lake.write("documents", {"corpus": "side"}, documents(3, "new"))
    assert Snapshots(home).numbers("side") == [1, 2]

    newer.write_bytes(newer.read_bytes()[: newer.stat().st_size // 2])  # a cut-off copy of the current version
    assert f"'side' left out of SQL: {newer}: not a readable snapshot (missing or truncated)" in still_answering(home)
    found = cli("doctor")
    assert found.exit_code == 1 and f"damaged: side: {newer}: not a readable Parquet file" in found.stderr, found.output
    repaired = cli("doctor", "--repair")
    assert repaired.exit_code == 0 and "side: tables/documents/corpus=side: back to data-direct-" in repaired.stderr, repaired.output
    assert lake.read("documents", {"corpus": "side"}).column("doc_id").to_pylist() == ["old0", "old1"]
    assert "left out" not in still_answering(home)

    current = home / "snapshots" / "side" / "00000003.json"
    current.write_text('{"number": 3, "tabl')  # a snapshot cut off mid-write
    assert f"'side' left out of SQL: {current}: not a readable snapshot (JSONDecodeError" in still_answering(home)
    lake.write("documents", {"corpus": "third"}, documents(1, "t"))  # another corpus is still written and committed
    assert cli("sql", "select count(*) as n from documents where corpus = 'third'", "--json").stdout.startswith('[{"n": 1}]')
    found = cli("doctor", "--corpus", "side")
    assert found.exit_code == 1 and f"damaged: side: {current}: the snapshot file cannot be read" in found.stderr, found.output
    repaired = cli("doctor", "--repair", "--corpus", "side")
    assert repaired.exit_code == 0, repaired.output
    assert "set aside the unreadable snapshot 00000003.json" in repaired.stderr  # then 2 is current, whose newer file is cut off
    assert "tables/documents/corpus=side: back to data-direct-" in repaired.stderr
    assert lake.read("documents", {"corpus": "side"}).column("doc_id").to_pylist() == ["old0", "old1"]
    counted = cli("sql", "select corpus, count(*) as n from documents where corpus <> 'demo' group by all order by 1", "--json")
    assert counted.stdout.startswith('[{"corpus": "side", "n": 2}, {"corpus": "third", "n": 1}]') and "left out" not in counted.stderr
    assert cli("doctor").exit_code == 0

    only = next(home.glob("tables/documents/corpus=third/data-*.parquet"))  # its one and only version
    only.write_bytes(b"PAR1" + bytes(64))  # a file of the right name and size class, not Parquet
    repaired = cli("doctor", "--repair", "--corpus", "third")
    assert repaired.exit_code == 0, repaired.output
    assert "dropped tables/documents/corpus=third (not a readable Parquet file" in repaired.stderr
    assert "`graphlake materialize --corpus third` rebuilds it" in repaired.stderr
    assert not lake.has("documents", {"corpus": "third"}) and cli("doctor").exit_code == 0
