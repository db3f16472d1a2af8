"""A lake's durable copy on S3-compatible object storage (``GRAPHLAKE_HOME=s3://bucket/prefix``).

The lake's versions are immutable (``data-<run>.parquet``, ``v-<run>/``), so the object store needs
only three things of its own: upload a version once it is whole, create a snapshot object only if
no writer created that number before (``If-None-Match: *``: the commit point, as the hard link is
on a local disk), and a writer lease per scope (a lock object replaced only by whoever read its
current ETag, ``If-Match``), because an object store has no ``flock`` that dies with its holder:
a killed holder's lease runs out instead. The endpoint is botocore's own setting
(``AWS_ENDPOINT_URL``), the credentials its usual ones.

A lake on S3 is worked on in a local cache (``cache_for``): a write lands there and goes up at once
(a Dask worker on another machine reads it from the store), a read brings the version down once.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from graphlake.common.settings import CACHE, LEASE_S
from graphlake.warehouse.scopes import LAKE_SCOPE, LockedError, wait_seconds

REMOTE_FILE = "remote.json"  # in a cache: the lake it caches
_stores: dict[Path, ObjectStore | None] = {}


def lease_seconds() -> float:
    """How long a writer's lease lasts unrenewed: a holder renews every third of it; a killed one's is free this long after."""
    return LEASE_S.number(error=LockedError)


def cache_for(url: str, folder: Path | None = None) -> Path:
    """The local cache of the lake at ``url`` (``folder``, else ``$GRAPHLAKE_CACHE``, else one under
    ``~/.cache``), naming it."""
    store = ObjectStore(url)
    configured = folder or CACHE.text()
    cache = Path(configured).expanduser() if configured else Path.home() / ".cache" / "graphlake" / store.bucket / (store.prefix or "_")
    cache.mkdir(parents=True, exist_ok=True)
    marker = cache / REMOTE_FILE
    named = json.loads(marker.read_text(encoding="utf-8"))["url"] if marker.is_file() else None
    if named not in (None, store.url):
        raise ObjectStoreError(f"{cache} caches {named}, not {store.url}: set {CACHE.name} to another folder")
    if named is None:
        marker.write_text(json.dumps({"url": store.url}), encoding="utf-8")
    return cache.resolve()


def remote_of(home: Path) -> ObjectStore | None:
    """The object store a lake's home caches; None for a lake on a local disk."""
    home = Path(home)
    if home not in _stores:
        marker = home / REMOTE_FILE
        _stores[home] = ObjectStore(json.loads(marker.read_text(encoding="utf-8"))["url"]) if marker.is_file() else None
    return _stores[home]


class ObjectStoreError(RuntimeError):
    """An object could not be written or read; the message names it."""


class ObjectStore:
    def __init__(self, url: str) -> None:
        import s3fs

        if not url.startswith("s3://") or len(url) <= len("s3://"):
            raise ObjectStoreError(f"not an object-store lake: {url!r} (write s3://bucket/prefix)")
        self.url = url.rstrip("/")
        self.bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/")
        self.fs = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)  # the endpoint as the environment says now

    def key(self, relative: str) -> str:
        return "/".join(part for part in (self.prefix, relative.strip("/")) if part)

    def path(self, relative: str) -> str:
        return f"{self.bucket}/{self.key(relative)}"

    def upload(self, local: Path, relative: str) -> None:
        """A whole file, or a folder's files, under ``relative``."""
        if local.is_dir():
            for file in sorted(p for p in local.rglob("*") if p.is_file()):
                self.fs.put_file(str(file), self.path(f"{relative}/{file.relative_to(local).as_posix()}"))
        else:
            self.fs.put_file(str(local), self.path(relative))

    def download(self, relative: str, local: Path) -> Path:
        """The object (or every object under the folder) at ``local``, made whole before it appears there."""
        if local.exists():
            return local
        local.parent.mkdir(parents=True, exist_ok=True)
        arriving = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
        keys = self.fs.find(self.path(relative))
        if not keys:
            raise ObjectStoreError(f"{self.url}/{relative} does not exist")
        for key in keys:
            inside = key.removeprefix(self.path(relative)).lstrip("/")
            target = arriving / inside if inside else arriving
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(key, str(target))
        try:
            os.replace(arriving, local)
        except OSError:  # another reader brought it first: the same immutable version
            if not local.exists():
                raise
        return local

    def versions(self, scope: str) -> dict[str, float]:
        """Every version the store holds for the scope (a table partition's data file, an artefact's
        version folder), by path relative to the lake, with when it was written (epoch seconds)."""
        found: dict[str, float] = {}
        root = self.path("")
        for top in ("tables", "artifacts"):
            try:
                listed = self.fs.find(self.path(top), detail=True)
            except FileNotFoundError:
                continue
            for key, info in listed.items():
                parts = key.removeprefix(root).strip("/").split("/")
                corpora = [p.removeprefix("corpus=") for p in parts if p.startswith("corpus=")]
                if corpora != ([] if scope == LAKE_SCOPE else [scope]):
                    continue
                folders = [i for i, p in enumerate(parts) if p.startswith("v-")]
                if folders:
                    version = "/".join(parts[: folders[0] + 1])
                elif parts[-1].startswith("data") and parts[-1].endswith(".parquet"):
                    version = "/".join(parts)
                else:
                    continue
                found[version] = max(found.get(version, 0.0), info["LastModified"].timestamp())
        return found

    def mirror(self, relative: str, local: Path) -> None:
        """A file that changes in place (``corpora.yaml``): ``local`` made the store's copy, or removed if it has none."""
        data = self.read(relative)
        if data is None:
            local.unlink(missing_ok=True)
            return
        local.parent.mkdir(parents=True, exist_ok=True)
        arriving = local.with_name(f".{local.name}.{uuid.uuid4().hex}.tmp")
        arriving.write_bytes(data)
        os.replace(arriving, local)

    def create(self, relative: str, data: bytes) -> bool:
        """Write the object only if it does not exist yet; False if it did (another writer's)."""
        try:
            self.fs.pipe_file(self.path(relative), data, mode="create")
        except FileExistsError:
            return False
        return True

    def read(self, relative: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.path(relative))
        except FileNotFoundError:
            return None

    def listing(self, relative: str) -> list[str]:
        """The names directly under a folder."""
        try:
            return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self.path(relative), detail=False, refresh=True))
        except FileNotFoundError:
            return []

    def remove(self, relative: str) -> None:
        self.fs.rm(self.path(relative), recursive=True)

    def _call(self, method: str, **arguments):
        return self.fs.call_s3(method, Bucket=self.bucket, **arguments)

    @contextmanager
    def lease(self, scope: str, purpose: str, announce: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the scope's writer lease, renewed in the background; wait for another holder up to
        ``GRAPHLAKE_LOCK_WAIT`` seconds (a dead one's lease runs out within ``lease_seconds()``)."""
        key = self.key(f"locks/{scope}.lease")
        owner = {"id": uuid.uuid4().hex, "pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose}
        etag = self._take(key, owner, scope, announce)
        renewing = _Renewal(self, key, owner, etag)
        renewing.start()
        try:
            yield
        finally:
            renewing.stop()
            try:
                self._call("delete_object", Key=key, IfMatch=renewing.etag)
            except (FileExistsError, FileNotFoundError):
                pass  # lost to a waiter after a stall: the lease is theirs now

    def _take(self, key: str, owner: dict, scope: str, announce: Callable[[str], None] | None) -> str:
        deadline, announced = time.monotonic() + wait_seconds(), False
        while True:
            body = _lease_body(owner)
            try:
                return self._call("put_object", Key=key, IfNoneMatch="*", **body)["ETag"]
            except FileExistsError:  # s3fs's word for a precondition that failed: somebody holds it
                pass
            try:
                found = self._call("head_object", Key=key)  # owner and ETag in one answer
                holder, etag = json.loads(found["Metadata"].get("owner", "{}")), found["ETag"]
            except FileNotFoundError:
                continue  # released meanwhile: try again at once
            if holder.get("until", 0) < time.time():  # its holder died: take it over, if nobody did first
                try:
                    return self._call("put_object", Key=key, IfMatch=etag, **body)["ETag"]
                except (FileExistsError, FileNotFoundError):
                    continue
            described = f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('purpose')})"
            if time.monotonic() >= deadline:
                raise LockedError(f"corpus {scope!r} is being written by {described}; try again when it ends")
            if announce and not announced:
                announce(f"corpus {scope!r} is being written by {described}; waiting for it")
                announced = True
            time.sleep(0.5)


class _Renewal(threading.Thread):
    def __init__(self, store: ObjectStore, key: str, owner: dict, etag: str) -> None:
        super().__init__(daemon=True)
        self.store, self.key, self.owner, self.etag = store, key, owner, etag
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(lease_seconds() / 3):
            try:
                self.etag = self.store._call("put_object", Key=self.key, IfMatch=self.etag, **_lease_body(self.owner))["ETag"]
            except (FileExistsError, FileNotFoundError):
                return  # taken over: the commit's If-None-Match still refuses a second writer's number

    def stop(self) -> None:
        self._done.set()
        self.join()


def _lease_body(owner: dict) -> dict:
    """The lease object: its owner and expiry as metadata (read with the ETag in one HEAD), and as its text."""
    text = json.dumps({**owner, "until": time.time() + lease_seconds()})
    return {"Body": text.encode(), "Metadata": {"owner": text}}
