"""Corpus snapshots: which version of each table partition and artefact of a corpus readers see.

A run writes new versions beside the current ones (``data-<run>.parquet``, ``v-<run>/``) and nothing
reads them but the run itself, until it commits: the scope's next snapshot, an immutable JSON file
``snapshots/<scope>/<number>.json`` that maps every partition and artefact to its version, is
created in one atomic, exclusive step (a hard link of a complete file). The newest snapshot is the
current one. A run that fails or is killed never commits, so the previous snapshot stays current
whole, and its own files are garbage that ``collect`` removes under the writer lock.

A scope is a corpus, or ``_lake`` for what belongs to no corpus (the lake's reranker). Why not Delta
Lake or Iceberg: both commit one table at a time, and a corpus is ~20 tables plus index and model
folders that must change together; a per-corpus manifest is that one multi-table commit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.scopes import LAKE_SCOPE

SNAPSHOTS = "snapshots"
KEEP = 2  # snapshots whose files stay: the current one, and the previous one for readers still on it
LEGACY_FILE = "data.parquet"  # lakes written before snapshots: one file per partition, swapped in place
_NUMBERED = re.compile(r"^(\d{8})\.json$")
PULL_S = 1.0  # on object storage: how stale a reader's view of another machine's commits may be
_pulled: dict[tuple[Path, str], float] = {}  # (home, scope) -> when this process last asked the store


def data_file(version: str) -> str:
    return f"data-{version}.parquet"


def artifact_folder(version: str) -> str:
    return f"v-{version}"


def new_version() -> str:
    """The version of a write made outside any run, committed on its own."""
    return f"direct-{uuid.uuid4().hex}"


class SnapshotError(ValueError):
    """A snapshot file that cannot be read; the message names it and the repair."""

    def __init__(self, path: Path, scope: str, why: str) -> None:
        super().__init__(f"{path}: not a readable snapshot ({why}); `graphlake doctor --repair` rolls {scope!r} back to its previous snapshot")
        self.path, self.scope = path, scope


@dataclass(frozen=True)
class Entry:
    name: str  # the data file or version folder
    written_at: float  # when it was staged (epoch seconds): freshness compares these
    rows: int | None = None  # a data file's row count, from its footer at commit (``graphlake doctor`` checks it)


@dataclass(frozen=True)
class Snapshot:
    number: int = 0
    run: str | None = None
    committed_at: float = 0.0
    tables: dict[str, Entry] = field(default_factory=dict)  # partition folder under tables/ -> its file
    artifacts: dict[str, Entry] = field(default_factory=dict)  # artefact folder under artifacts/ -> its version

    def to_json(self) -> str:
        def entries(found: dict[str, Entry]) -> dict:
            return {key: {"name": e.name, "written_at": e.written_at, **({"rows": e.rows} if e.rows is not None else {})} for key, e in sorted(found.items())}

        return json.dumps(
            {"number": self.number, "run": self.run, "committed_at": self.committed_at, "tables": entries(self.tables), "artifacts": entries(self.artifacts)},
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        raw = json.loads(text)

        def entries(found: dict) -> dict[str, Entry]:
            return {key: Entry(value["name"], value["written_at"], value.get("rows")) for key, value in found.items()}

        return cls(raw["number"], raw["run"], raw["committed_at"], entries(raw["tables"]), entries(raw["artifacts"]))


class Snapshots:
    """The snapshots of one lake: read the current one, commit the next, collect what none refers to."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.root = self.home / SNAPSHOTS
        self.remote = remote_of(self.home)

    def local(self, relative: str) -> Path:
        """The lake's file or folder at ``relative`` (under the home) on this disk: on a lake kept on
        object storage, brought down first if this cache lacks it (versions never change)."""
        path = self.home / relative
        if self.remote is not None and not path.exists():
            self.remote.download(relative, path)
        return path

    def push(self, path: Path) -> None:
        """A version just written whole, up to the object store (a lake on local disk: nothing to do)."""
        if self.remote is not None:
            self.remote.upload(path, path.relative_to(self.home).as_posix())

    def scopes(self) -> list[str]:
        """Every scope that has committed a snapshot or still has a legacy layout to adopt."""
        found = {p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")} if self.root.is_dir() else set()
        for folder in (self.home / "tables", self.home / "artifacts"):
            if folder.is_dir():
                found |= {p.name.removeprefix("corpus=") for p in folder.glob("*/corpus=*") if p.is_dir()}
        if (self.home / "artifacts").is_dir() and any((self.home / "artifacts").glob("*/CURRENT")):
            found.add(LAKE_SCOPE)
        if self.remote is not None:
            found |= set(self.remote.listing(SNAPSHOTS))
        return sorted(found)

    def current(self, scope: str) -> Snapshot:
        self._pull(scope)
        numbers = self._numbers(scope)
        if not numbers:
            return self._adopt_legacy(scope)
        try:
            return self.read(scope, numbers[-1])
        except FileNotFoundError:  # collected between the listing and the read: a newer one exists
            return self.current(scope)

    def read(self, scope: str, number: int) -> Snapshot:
        """The scope's snapshot ``number``; a file that is not one raises :class:`SnapshotError` naming it."""
        path = self.root / scope / f"{number:08d}.json"
        text = path.read_bytes()
        try:
            return Snapshot.from_json(text.decode("utf-8"))
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # ValueError: bad JSON or UTF-8
            raise SnapshotError(path, scope, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'incomplete'}") from None

    def numbers(self, scope: str) -> list[int]:
        """The scope's snapshot numbers on this disk, oldest first."""
        return self._numbers(scope)

    def number(self, scope: str) -> int:
        """The number of the scope's current snapshot, without reading it (a reader's cheap "anything
        new?"); 0 before its first (a legacy layout is adopted by ``current``, which publishes it as 1)."""
        self._pull(scope)
        numbers = self._numbers(scope)
        return numbers[-1] if numbers else 0

    def commit(self, scope: str, version: str) -> Snapshot | None:
        """The scope's next snapshot: the current one with every partition and artefact that ``version``
        staged in it; None (nothing committed) when it staged nothing. The caller holds the writer lock."""
        tables, artifacts = self.staged(scope, version)
        if not tables and not artifacts:
            return None
        self._pull(scope, fresh=True)  # a commit builds on the very newest, whoever made it
        base = self.current(scope)
        snapshot = Snapshot(base.number + 1, version, time.time(), {**base.tables, **tables}, {**base.artifacts, **artifacts})
        self._publish(scope, snapshot)
        return snapshot

    def commit_whole(self, scope: str, snapshot: Snapshot, run: str) -> Snapshot:
        """``snapshot``'s tables and artefacts as the scope's next snapshot (a repair's commit); the
        caller holds the writer lock."""
        self._pull(scope, fresh=True)
        numbers = self._numbers(scope)
        whole = Snapshot((numbers[-1] if numbers else 0) + 1, run, time.time(), snapshot.tables, snapshot.artifacts)
        self._publish(scope, whole)
        return whole

    def staged(self, scope: str, version: str) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """What ``version`` wrote in the scope, by partition folder (under tables/) and artefact folder (under artifacts/)."""
        tables: dict[str, Entry] = {}
        for path in self._table_partitions(scope):
            staged = path / data_file(version)
            if staged.is_file():
                tables[path.relative_to(self.home / "tables").as_posix()] = Entry(staged.name, staged.stat().st_mtime, pq.read_metadata(staged).num_rows)
        artifacts: dict[str, Entry] = {}
        for root in self._artifact_roots(scope):
            staged = root / artifact_folder(version)
            if staged.is_dir():
                artifacts[root.relative_to(self.home / "artifacts").as_posix()] = Entry(staged.name, staged.stat().st_mtime)
        if self.remote is not None:  # what workers on other machines staged, known only to the store
            for relative, written_at in self.remote.versions(scope).items():
                if relative.rsplit("/", 1)[-1] not in (data_file(version), artifact_folder(version)):
                    continue
                top, key = relative.split("/", 1)
                found = tables if top == "tables" else artifacts
                folder, name = key.rsplit("/", 1)
                found.setdefault(folder, Entry(name, written_at))
        return tables, artifacts

    def collect(self, scope: str) -> list[Path]:
        """Remove the scope's files that none of its last ``KEEP`` snapshots refers to (what failed or killed
        runs staged, superseded versions, temporaries) and its older snapshots; the paths removed. The
        caller holds the writer lock, so no run of the scope is staging files meanwhile."""
        numbers = self._numbers(scope)
        kept = [self.read(scope, n) for n in numbers[-KEEP:]]
        if not numbers:
            kept = [self._adopt_legacy(scope)]
        removed: list[Path] = []
        live_files = {(key, e.name) for s in kept for key, e in s.tables.items()}
        for path in self._table_partitions(scope):
            key = path.relative_to(self.home / "tables").as_posix()
            for item in path.iterdir():
                is_data = item.name.startswith("data") and item.name.endswith(".parquet")
                if (is_data and (key, item.name) not in live_files) or item.name.endswith(".tmp"):
                    item.unlink(missing_ok=True)
                    removed.append(item)
        live_folders = {(key, e.name) for s in kept for key, e in s.artifacts.items()}
        for root in self._artifact_roots(scope):
            key = root.relative_to(self.home / "artifacts").as_posix()
            for item in root.iterdir():
                if (item.name.startswith("v-") and (key, item.name) not in live_folders) or item.name.endswith(".tmp"):
                    shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink(missing_ok=True)
                    removed.append(item)
        for number in numbers[:-KEEP]:
            path = self.root / scope / f"{number:08d}.json"
            path.unlink(missing_ok=True)
            removed.append(path)
        return removed + self._collect_remote(scope)

    def _collect_remote(self, scope: str) -> list[Path]:
        """``collect`` on the object store: the versions none of the last ``KEEP`` snapshots there names."""
        if self.remote is None:
            return []
        folder = f"{SNAPSHOTS}/{scope}"
        numbers = sorted(int(m.group(1)) for m in map(_NUMBERED.match, self.remote.listing(folder)) if m)
        kept = [Snapshot.from_json(self.remote.read(f"{folder}/{n:08d}.json").decode()) for n in numbers[-KEEP:]]
        live = {f"tables/{key}/{e.name}" for s in kept for key, e in s.tables.items()} | {f"artifacts/{key}/{e.name}" for s in kept for key, e in s.artifacts.items()}
        gone = [relative for relative in self.remote.versions(scope) if relative not in live]
        gone += [f"{folder}/{n:08d}.json" for n in numbers[:-KEEP]]
        for relative in gone:
            self.remote.remove(relative)
        return [self.home / relative for relative in gone]

    def forget(self, scope: str) -> None:
        """Drop the scope's snapshots (one atomic rename aside first: readers see all of it or none; on
        the object store, its snapshot objects, newest first, then its versions)."""
        if self.remote is not None:
            for name in reversed(self.remote.listing(f"{SNAPSHOTS}/{scope}")):
                self.remote.remove(f"{SNAPSHOTS}/{scope}/{name}")
            for relative in self.remote.versions(scope):
                self.remote.remove(relative)
        folder = self.root / scope
        if folder.is_dir():
            aside = self.root / f".forgotten-{uuid.uuid4().hex}"
            os.replace(folder, aside)
            shutil.rmtree(aside)

    def _publish(self, scope: str, snapshot: Snapshot) -> None:
        name = f"{snapshot.number:08d}.json"
        if self.remote is not None and not self.remote.create(f"{SNAPSHOTS}/{scope}/{name}", snapshot.to_json().encode()):
            raise FileExistsError(f"{self.remote.url}/{SNAPSHOTS}/{scope}/{name} was committed by another writer")
        folder = self.root / scope
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{snapshot.number:08d}.{uuid.uuid4().hex}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(snapshot.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, folder / f"{snapshot.number:08d}.json")  # exclusive: two committers cannot both take a number
        finally:
            temporary.unlink(missing_ok=True)
        fsync_directory(folder)

    def _pull(self, scope: str, fresh: bool = False) -> None:
        """The store's newest snapshot of the scope into this cache, if it has a newer one: asked at
        most every ``PULL_S`` seconds by a process unless ``fresh`` (its own commits it knows at once)."""
        if self.remote is None:
            return
        asked = _pulled.get((self.home, scope))
        if asked is not None and time.monotonic() - asked < PULL_S and not fresh:
            return
        _pulled[self.home, scope] = time.monotonic()
        remote = sorted(int(m.group(1)) for m in map(_NUMBERED.match, self.remote.listing(f"{SNAPSHOTS}/{scope}")) if m)
        local = self._numbers(scope)
        if remote and (not local or remote[-1] > local[-1]):
            self.local(f"{SNAPSHOTS}/{scope}/{remote[-1]:08d}.json")

    def _numbers(self, scope: str) -> list[int]:
        folder = self.root / scope
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for m in map(_NUMBERED.match, os.listdir(folder)) if m)

    def _table_partitions(self, scope: str) -> list[Path]:
        """Every partition folder (holding data files) of the scope's tables."""
        if scope == LAKE_SCOPE:
            return []
        found = []
        for top in (self.home / "tables").glob(f"*/corpus={scope}"):
            found += [path for path in [top, *top.rglob("*=*")] if path.is_dir() and not any(p.is_dir() for p in path.glob("*=*"))]
        return found

    def _artifact_roots(self, scope: str) -> list[Path]:
        folder = self.home / "artifacts"
        pattern = "*" if scope == LAKE_SCOPE else f"*/corpus={scope}"
        return [path for path in folder.glob(pattern) if path.is_dir() and not any(path.glob("corpus=*"))] if folder.is_dir() else []

    def _adopt_legacy(self, scope: str) -> Snapshot:
        """A lake written before snapshots holds ``data.parquet`` per partition and a ``CURRENT`` pointer
        per artefact: its first snapshot is what they name (committed once, by whoever reads first)."""
        tables = {}
        for path in self._table_partitions(scope):
            legacy = path / LEGACY_FILE
            if legacy.is_file():
                tables[path.relative_to(self.home / "tables").as_posix()] = Entry(LEGACY_FILE, legacy.stat().st_mtime)
        artifacts = {}
        for root in self._artifact_roots(scope):
            pointer = root / "CURRENT"
            if pointer.is_file() and (root / pointer.read_text(encoding="utf-8").strip()).is_dir():
                artifacts[root.relative_to(self.home / "artifacts").as_posix()] = Entry(pointer.read_text(encoding="utf-8").strip(), pointer.stat().st_mtime)
        if not tables and not artifacts:
            return Snapshot()
        snapshot = Snapshot(1, None, time.time(), tables, artifacts)
        try:
            self._publish(scope, snapshot)
        except FileExistsError:  # another reader adopted it first
            return self.current(scope)
        return snapshot


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
