"""Partitioned Parquet storage whose versions become visible by corpus snapshot.

Each partition of a table is a folder, ``tables/<table>/corpus=<c>[/kind=<k>]/``, holding one
Parquet file per version (``data-<version>.parquet``); each artefact (an index, a model) is a folder
per version, ``artifacts/<name>[/corpus=<c>]/v-<version>/``. Which versions readers see is the
corpus's current snapshot (``warehouse/snapshots.py``). A ``LakeStorage`` bound to a run (``run_id``)
writes that run's versions and reads them before the snapshot's, so a run sees its own work and no
one else does until it commits; an unbound ``LakeStorage`` commits each write on its own, under the
corpus's writer lock. Writing one corpus never touches another corpus's files.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from graphlake.common.scratch_sql import scratch_cursor
from graphlake.warehouse.locks import writer_lock
from graphlake.warehouse.object_store import ObjectStoreError
from graphlake.warehouse.pair_cache import FOLDER as PAIR_CACHE
from graphlake.warehouse.scopes import LAKE_SCOPE, WRITES, scope_of
from graphlake.warehouse.snapshots import Entry, Snapshot, Snapshots, artifact_folder, data_file, fsync_directory, new_version
from graphlake.warehouse.tables import TableSpec, table_spec

ROW_GROUP_ROWS = 64_000
_PARTITION_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class StorageError(RuntimeError):
    """A table could not be written or read; the message names the table and partition."""


class NotBuilt(StorageError):
    """A table's partition or an artefact that has no version yet: ``what`` names it, ``where`` is the
    folder looked in (the message has both; a server answers with ``what`` only)."""

    def __init__(self, what: str, where: Path) -> None:
        self.what, self.where = what, where
        super().__init__(f"{what} (looked in {where})")


class LakeStorage:
    def __init__(self, home: Path, run_id: str | None = None, pins: Mapping[str, Snapshot] | None = None) -> None:
        self.home = Path(home)
        self.tables_dir = self.home / "tables"
        self.run_id = run_id
        self.snapshots = Snapshots(self.home)
        self.pins = dict(pins or {})  # scope -> the snapshot this lake reads, whatever commits meanwhile

    def bound(self, run_id: str | None) -> LakeStorage:
        """This lake as the run ``run_id`` sees it (its own versions first), or as every reader does (None)."""
        return LakeStorage(self.home, run_id)

    def pinned(self, *scopes: str) -> LakeStorage:
        """This lake reading the scopes' current snapshots from now on, so that everything read through it
        (a server's warm indexes) comes from one version while writers commit newer ones."""
        return LakeStorage(self.home, self.run_id, {**self.pins, **{scope: self.snapshots.current(scope) for scope in scopes}})

    def snapshot(self, scope: str) -> Snapshot:
        """The scope's snapshot this lake reads: its pin, else the current one."""
        return self.pins[scope] if scope in self.pins else self.snapshots.current(scope)

    def partition_dir(self, table: str, partition: Mapping[str, str]) -> Path:
        spec = table_spec(table)
        if set(partition) != set(spec.partition_by):
            raise StorageError(f"table {table!r} is partitioned by {spec.partition_by}, got {dict(partition)}")
        path = self.tables_dir / table
        for column in spec.partition_by:
            value = partition[column]
            if not _PARTITION_VALUE.match(value):
                raise StorageError(f"bad {column} {value!r} for table {table!r}: use letters, digits, '_', '.', '-'")
            path = path / f"{column}={value}"
        return path

    def write(self, table: str, partition: Mapping[str, str], data: pa.Table) -> Path:
        """Validate ``data`` against the table contract and stage it as the partition's next version
        (committed at once, under the corpus's writer lock, when this lake is bound to no run).

        Data equal to the current version is not written again: the partition keeps its write time,
        so re-ingesting unchanged files leaves everything built from them (indexes, a trained model,
        runs, the pair cache) current instead of stale.
        """
        data = conform(table_spec(table), partition, data)
        with self._version(scope_of(partition)) as version:
            return self._stage(table, partition, data, version)

    def holds(self, table: str, partition: Mapping[str, str], data: pa.Table) -> bool:
        """Whether the partition's current version is ``data`` as a write would store it (so that writing
        it would change nothing)."""
        return self._same(table, partition, conform(table_spec(table), partition, data)) is not None

    def _same(self, table: str, partition: Mapping[str, str], data: pa.Table) -> Path | None:
        """The current version's file when it holds exactly ``data`` (already conformed), else None."""
        current = self._file(table, partition)
        return current if current is not None and _read(current).equals(data) else None

    def _stage(self, table: str, partition: Mapping[str, str], data: pa.Table, version: str) -> Path:
        same = self._same(table, partition, data)
        if same is not None:
            return same
        directory = self.partition_dir(table, partition)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / data_file(version)
        temporary = directory / f".{final.name}.{uuid.uuid4().hex}.tmp"  # named per write: no other writer touches it
        try:
            with pq.ParquetWriter(temporary, data.schema, compression="zstd") as writer:
                for batch in data.to_batches(max_chunksize=ROW_GROUP_ROWS):
                    writer.write_batch(batch)
            with open(temporary, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        fsync_directory(directory)
        self.snapshots.push(final)
        return final

    def write_artifact(self, name: str, partition: Mapping[str, str], fill: Callable[[Path], None]) -> Path:
        """Build an artefact folder (an index, a model) with ``fill`` as the artefact's next version
        (committed at once when this lake is bound to no run); a failed build leaves nothing."""
        root = self._artifact_root(name, partition)
        with self._version(scope_of(partition)) as version:
            root.mkdir(parents=True, exist_ok=True)
            folder = root / artifact_folder(version)
            building = root / f".{folder.name}.{uuid.uuid4().hex}.tmp"
            building.mkdir()
            try:
                fill(building)
                if folder.exists():  # the same run builds it again (a retried step)
                    shutil.rmtree(folder)
                os.replace(building, folder)
            except BaseException:
                shutil.rmtree(building, ignore_errors=True)
                raise
            fsync_directory(root)
            self.snapshots.push(folder)
            return folder

    @contextmanager
    def writing(self, scope: str, purpose: str, announce: Callable[[str], None] | None = None) -> Iterator[list[Path]]:
        """Hold the scope's writer lock for a run, after removing what failed or killed runs left there
        (the paths removed)."""
        with writer_lock(self.home, scope, purpose, announce=announce):
            yield self.snapshots.collect(scope)

    @contextmanager
    def _version(self, scope: str) -> Iterator[str]:
        """The version a write stages: the run's; or, unbound, a version of its own, written and committed
        under the scope's writer lock (so ``gc`` cannot take it for a dead run's leftover)."""
        if self.run_id is not None:
            yield self.run_id
            return
        version = new_version()
        with writer_lock(self.home, scope, "a direct write"):
            yield version
            self.snapshots.commit(scope, version)
        self._refresh_catalog()

    def artifact(self, name: str, partition: Mapping[str, str]) -> Path:
        found = self._folder(name, partition)
        if found is None:
            raise NotBuilt(f"artefact {name!r} has no version for {dict(partition)} yet", self._artifact_root(name, partition))
        return found

    def has(self, table: str, partition: Mapping[str, str]) -> bool:
        return self._file(table, partition) is not None

    def written_at(self, table: str, partition: Mapping[str, str]) -> float | None:
        """When the partition's current version was written (epoch seconds), None if it has none."""
        entry = self._entry(table, partition)
        return entry.written_at if entry else None

    def artifact_written_at(self, name: str, partition: Mapping[str, str]) -> float | None:
        """When the artefact's current version was built, None if it has none."""
        root = self._artifact_root(name, partition)
        staged = self._staged(root / artifact_folder(self.run_id)) if self.run_id else None
        if staged is not None:
            return staged.stat().st_mtime
        entry = self.snapshot(scope_of(partition)).artifacts.get(root.relative_to(self.home / "artifacts").as_posix())
        return entry.written_at if entry else None

    def partitions(self, table: str, partition: Mapping[str, str]) -> list[dict[str, str]]:
        """The partitions of ``table`` that have a version and agree with ``partition`` on its columns."""
        spec = table_spec(table)
        scope = scope_of(partition)
        keys = set(self.snapshot(scope).tables)
        if self.run_id:
            keys |= set(self.snapshots.staged(scope, self.run_id)[0])  # here, and on object storage other machines' too
        found = []
        for key in sorted(keys):
            parts = key.split("/")
            if parts[0] != table:
                continue
            values = dict(part.split("=", 1) for part in parts[1:])
            if set(values) == set(spec.partition_by) and all(values[c] == v for c, v in partition.items()):
                found.append(values)
        return found

    def _artifact_root(self, name: str, partition: Mapping[str, str]) -> Path:
        path = self.home / "artifacts" / name
        for column, value in partition.items():
            if not _PARTITION_VALUE.match(value):
                raise StorageError(f"bad {column} {value!r} for artefact {name!r}")
            path = path / f"{column}={value}"
        return path

    def forget(self, corpus: str, wait: float | None = None) -> list[Path]:
        """Remove every table partition, artefact, cache, write log and snapshot of a corpus, under its
        writer lock (``wait``: the seconds to wait for another writer, default ``GRAPHLAKE_LOCK_WAIT``);
        the folders removed.

        Its snapshots go first (one atomic rename), so readers see the whole corpus or none of it."""
        if not _PARTITION_VALUE.match(corpus):
            raise StorageError(f"bad corpus {corpus!r}: use letters, digits, '_', '.', '-'")
        with writer_lock(self.home, corpus, "graphlake forget", wait=wait):
            self.snapshots.forget(corpus)
            found = [*self.tables_dir.glob(f"*/corpus={corpus}"), *(self.home / "artifacts").glob(f"*/corpus={corpus}")]
            found += [path for path in [self.home / PAIR_CACHE / corpus, self.home / WRITES / corpus] if path.is_dir()]
            for path in found:
                aside = path.with_name(f".forgotten-{uuid.uuid4().hex}")
                os.replace(path, aside)
                shutil.rmtree(aside)
        self._refresh_catalog()
        return found

    def rows(self, table: str, partition: Mapping[str, str]) -> int:
        """The partition's row count from its file's footer (0 when it has no version)."""
        path = self._file(table, partition)
        return pq.ParquetFile(path).metadata.num_rows if path is not None else 0

    def first_value(self, table: str, partition: Mapping[str, str], column: str) -> Any:
        """The column's value in the partition's first row, read from that column alone (None: no
        version, no rows, or no such column)."""
        path = self._file(table, partition)
        if path is None or column not in pq.ParquetFile(path).schema_arrow.names:
            return None
        values = _read(path, [column]).column(column)
        return values[0].as_py() if len(values) else None

    def read(self, table: str, partition: Mapping[str, str]) -> pa.Table:
        path = self._file(table, partition)
        if path is None:
            raise NotBuilt(f"table {table!r} has no partition {dict(partition)} yet", self.partition_dir(table, partition))
        return _read(path)

    def _entry(self, table: str, partition: Mapping[str, str]) -> Entry | None:
        """The version readers of this lake see: the run's own, else the committed snapshot's."""
        directory = self.partition_dir(table, partition)
        if self.run_id:
            staged = self._staged(directory / data_file(self.run_id))
            if staged is not None:
                return Entry(staged.name, staged.stat().st_mtime)
        return self.snapshot(scope_of(partition)).tables.get(directory.relative_to(self.tables_dir).as_posix())

    def _file(self, table: str, partition: Mapping[str, str]) -> Path | None:
        entry = self._entry(table, partition)
        return self._here(self.partition_dir(table, partition) / entry.name) if entry else None

    def _folder(self, name: str, partition: Mapping[str, str]) -> Path | None:
        root = self._artifact_root(name, partition)
        staged = self._staged(root / artifact_folder(self.run_id)) if self.run_id else None
        if staged is not None:
            return staged
        entry = self.snapshot(scope_of(partition)).artifacts.get(root.relative_to(self.home / "artifacts").as_posix())
        return self._here(root / entry.name) if entry else None

    def _here(self, path: Path) -> Path:
        """A committed version on this disk (brought down from the object store if need be)."""
        return self.snapshots.local(path.relative_to(self.home).as_posix())

    def _staged(self, path: Path) -> Path | None:
        """The run's own version at ``path``, if it wrote one (on object storage: on any machine)."""
        if path.exists():
            return path
        if self.snapshots.remote is None:
            return None
        try:
            return self._here(path)
        except ObjectStoreError:
            return None

    def commit(self, corpus: str | None) -> dict[str, int]:
        """Commit what this lake's run staged for ``corpus`` (its partition; None for a run of lake-wide
        assets) and for the lake-wide scope, each as its next snapshot under its writer lock; the
        snapshot numbers, by scope (none for a scope the run did not write)."""
        if self.run_id is None:
            raise StorageError("only a lake bound to a run has anything to commit")
        committed = {}
        for scope in [s for s in (corpus, LAKE_SCOPE) if s]:
            with writer_lock(self.home, scope, f"committing run {self.run_id}"):
                snapshot = self.snapshots.commit(scope, self.run_id)
            if snapshot is not None:
                committed[scope] = snapshot.number
        if committed:
            self._refresh_catalog()
        return committed

    def _refresh_catalog(self) -> None:
        from graphlake.warehouse.catalog import Catalog

        Catalog(self.home).refresh()


def conform(spec: TableSpec, partition: Mapping[str, str], data: pa.Table) -> pa.Table:
    """Fill partition columns, check required columns, cast to contract types, refuse duplicate keys."""
    for column, value in partition.items():
        if column not in data.column_names:
            data = data.append_column(column, pa.array([value] * data.num_rows, pa.string()))
    missing = [f.name for f in spec.schema if f.name not in data.column_names]
    if missing:
        raise StorageError(f"table {spec.name!r} is missing columns {missing}")
    for column, value in partition.items():
        if data.num_rows and not data.column(column).equals(pa.chunked_array([[value] * data.num_rows], pa.string())):
            raise StorageError(f"table {spec.name!r}: rows with {column} other than {value!r} in partition {dict(partition)}")
    required = spec.schema.names
    ordered = data.select(required + [c for c in data.column_names if c not in required])
    try:
        cast = ordered.cast(pa.schema(list(spec.schema) + [ordered.schema.field(c) for c in ordered.column_names[len(required) :]]))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise StorageError(f"table {spec.name!r} does not match its contract: {error}") from error
    _check_unique(spec, partition, cast)
    return cast


def _check_unique(spec: TableSpec, partition: Mapping[str, str], data: pa.Table) -> None:
    keys = ", ".join(f'"{c}"' for c in spec.key)
    with scratch_cursor() as con:
        con.register("keyed", data.select(list(spec.key)))
        duplicates = con.execute(f"SELECT {keys}, count(*) AS n FROM keyed GROUP BY ALL HAVING n > 1 LIMIT 5").fetchall()
    if duplicates:
        shown = "; ".join(", ".join(map(str, row[:-1])) for row in duplicates)
        raise StorageError(f"table {spec.name!r} partition {dict(partition)}: duplicate {spec.key}: {shown}")


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file's table (or ``columns`` of it): read as one file, not through pyarrow's dataset
    layer, which ``pq.read_table`` imports (0.2 CPU-s of a fresh query's first read)."""
    with pq.ParquetFile(path) as parquet:
        return parquet.read(columns=columns)
