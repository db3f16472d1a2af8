"""The object store's three primitives against a real S3-compatible server on loopback (moto's
server: one Python process, conditional writes implemented, nothing to download)."""

from __future__ import annotations

import pytest

from graphlake.warehouse.scopes import LockedError


@pytest.fixture
def store(s3_server):
    from graphlake.warehouse.object_store import ObjectStore

    return ObjectStore("s3://lake/prefix")


def test_a_snapshot_number_is_created_once(store):
    assert store.create("snapshots/demo/00000001.json", b"first")
    assert not store.create("snapshots/demo/00000001.json", b"second")
    assert store.read("snapshots/demo/00000001.json") == b"first"
    assert store.listing("snapshots/demo") == ["00000001.json"]


def test_versions_upload_and_download_whole(store, tmp_path):
    folder = tmp_path / "v-run1"
    (folder / "sub").mkdir(parents=True)
    (folder / "index.bin").write_bytes(b"\x00" * 1000)
    (folder / "sub" / "meta.json").write_text("{}")
    store.upload(folder, "artifacts/bm25/corpus=demo/v-run1")
    got = store.download("artifacts/bm25/corpus=demo/v-run1", tmp_path / "cache" / "v-run1")
    assert sorted(p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file()) == ["index.bin", "sub/meta.json"]
    assert (got / "index.bin").read_bytes() == b"\x00" * 1000


def test_one_lease_holder_and_a_dead_holders_lease_runs_out(store, monkeypatch):
    monkeypatch.setenv("GRAPHLAKE_LOCK_WAIT", "0")
    with store.lease("demo", "first"):
        with pytest.raises(LockedError, match="first"):
            with store.lease("demo", "second"):
                pass
    with store.lease("demo", "after release"):
        pass
    dead = '{"pid": 1, "host": "gone", "purpose": "killed", "until": 0}'
    store._call("put_object", Key=store.key("locks/demo.lease"), Body=dead.encode(), Metadata={"owner": dead})  # as a holder killed -9 leaves it
    with store.lease("demo", "taker"):
        assert b"taker" in store.read("locks/demo.lease")
