"""``graphlake doctor``: check every committed file of every corpus, and repair a damaged corpus from
the versions its earlier snapshots kept.

A check reads each scope's current snapshot and, for every partition it names, the data file's Parquet
footer and its row count against the one the commit recorded; for every artefact, its folder; for a
corpus the lake owns, every entry of its log of pending writes (``warehouse/write_log.py``). A
repair, under the scope's writer lock: a snapshot file that cannot be read is set aside (the one
before it becomes current); then each damaged entry of the current snapshot is replaced by the newest
intact version an earlier snapshot kept, or dropped when none did (the next ``graphlake materialize``
rebuilds what is missing), and the result is committed as the next snapshot. Nothing is deleted: a
set-aside snapshot keeps its name after a ``.damaged-`` prefix.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.parquet as pq

from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.locks import writer_lock
from graphlake.warehouse.scopes import WRITES
from graphlake.warehouse.snapshots import Entry, Snapshot, SnapshotError, Snapshots
from graphlake.warehouse.write_log import WriteLog


@dataclass(frozen=True)
class Damage:
    scope: str
    path: Path
    problem: str

    def __str__(self) -> str:
        return f"{self.scope}: {self.path}: {self.problem}"


def examine(home: Path, scopes: list[str] | None = None) -> list[Damage]:
    """What is wrong with the current snapshot of each scope (every scope by default)."""
    snapshots = Snapshots(home)
    found: list[Damage] = []
    for scope in scopes or snapshots.scopes():
        try:
            snapshot = snapshots.current(scope)
        except SnapshotError as error:
            found.append(Damage(scope, error.path, "the snapshot file cannot be read"))
            continue
        found += _damaged_entries(home, scope, snapshot).values()
    return found + _damaged_logs(home, scopes)


def _damaged_logs(home: Path, scopes: list[str] | None) -> list[Damage]:
    """What is wrong with the lake-owned corpora's logs of pending writes."""
    root = Path(home) / WRITES
    names = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [Damage(name, path, problem) for name in names if scopes is None or name in scopes for path, problem in WriteLog(home, name, lambda: 0).problems()]


def repair(home: Path, scope: str) -> list[str]:
    """Make the scope's current snapshot whole again (see the module); what was done, a line each."""
    done: list[str] = []
    snapshots = Snapshots(home)
    with writer_lock(home, scope, "graphlake doctor --repair"):
        if (Path(home) / WRITES / scope).is_dir():
            done += WriteLog(home, scope, lambda: 0).repair()
        snapshot = None
        for number in reversed(snapshots.numbers(scope)):
            try:
                snapshot = snapshots.read(scope, number)
                break
            except SnapshotError as error:
                aside = error.path.with_name(f".damaged-{uuid.uuid4().hex[:8]}-{error.path.name}")
                os.replace(error.path, aside)
                done.append(f"set aside the unreadable snapshot {error.path.name} (now {aside.name})")
        if snapshot is None:
            return done
        damaged = _damaged_entries(home, scope, snapshot)
        if damaged:
            tables, artifacts = dict(snapshot.tables), dict(snapshot.artifacts)
            for (kind, key), damage in damaged.items():
                entries = tables if kind == "tables" else artifacts
                intact = _earlier_intact(home, snapshots, scope, snapshot.number, kind, key)
                if intact is None:
                    del entries[key]
                    done.append(f"dropped {kind}/{key} ({damage.problem}; no earlier snapshot kept an intact version): `graphlake materialize --corpus {scope}` rebuilds it")
                else:
                    entries[key] = intact
                    done.append(f"{kind}/{key}: back to {intact.name} ({damage.problem} in {snapshot.number:08d}.json)")
            snapshots.commit_whole(scope, replace(snapshot, tables=tables, artifacts=artifacts), "doctor-repair")
    if done:
        Catalog(home).refresh()
    return done


def _damaged_entries(home: Path, scope: str, snapshot: Snapshot) -> dict[tuple[str, str], Damage]:
    found = {}
    for kind in ("tables", "artifacts"):
        for key, entry in getattr(snapshot, kind).items():
            problem = _problem(home, kind, key, entry)
            if problem:
                found[kind, key] = Damage(scope, home / kind / key / entry.name, problem)
    return found


def _problem(home: Path, kind: str, key: str, entry: Entry) -> str | None:
    """What is wrong with a version a snapshot names (a data file, an artefact folder); None when it is whole."""
    path = home / kind / key / entry.name
    if kind == "artifacts":
        return None if path.is_dir() and any(path.iterdir()) else "the artefact folder is missing or empty"
    if not path.is_file():
        return "the data file is missing"
    try:
        rows = pq.read_metadata(path).num_rows
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError and others for a damaged footer
        return f"not a readable Parquet file ({str(error).splitlines()[0]})"
    if entry.rows is not None and rows != entry.rows:
        return f"{rows} rows where the commit recorded {entry.rows}"
    return None


def _earlier_intact(home: Path, snapshots: Snapshots, scope: str, before: int, kind: str, key: str) -> Entry | None:
    """The newest version of ``key`` an earlier, readable snapshot names that is intact on disk."""
    for number in reversed([n for n in snapshots.numbers(scope) if n < before]):
        try:
            entry = getattr(snapshots.read(scope, number), kind).get(key)
        except SnapshotError:
            continue
        if entry is not None and _problem(home, kind, key, entry) is None:
            return entry
    return None
