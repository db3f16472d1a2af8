"""Atomic, partitioned Parquet storage.

Each partition of a table is one Parquet file, ``tables/<table>/corpus=<c>[/kind=<k>]/data.parquet``.
A write goes to a hidden temporary file beside it and is swapped in with ``os.replace``, so a
reader sees the old file or the new one, never a torn one, and a failed or killed write leaves the
previous version in place. Writing one corpus never touches another corpus's files.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from graphlake.warehouse.pair_cache import FOLDER as PAIR_CACHE
from graphlake.warehouse.tables import TableSpec, table_spec

DATA_FILE = "data.parquet"
ROW_GROUP_ROWS = 64_000
_PARTITION_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class StorageError(RuntimeError):
    """A table could not be written or read; the message names the table and partition."""


class Lake:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.tables_dir = self.home / "tables"

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
        """Validate ``data`` against the table contract and swap it in as the partition's new version.

        Data equal to the current version is not written again: the partition keeps its write time,
        so re-ingesting unchanged files leaves everything built from them (indexes, a trained model,
        runs, the pair cache) current instead of stale.
        """
        spec = table_spec(table)
        data = conform(spec, partition, data)
        directory = self.partition_dir(table, partition)
        final = directory / DATA_FILE
        if final.is_file() and pq.read_table(final).equals(data):
            return final
        directory.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(directory)
        temporary = directory / f".{DATA_FILE}.{uuid.uuid4().hex}.tmp"
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
        _fsync_directory(directory)
        return final

    def write_artifact(self, name: str, partition: Mapping[str, str], fill: Callable[[Path], None]) -> Path:
        """Build an artefact folder (an index, a model) with ``fill`` and publish it atomically.

        Each build goes to a fresh version folder; the pointer file ``CURRENT`` is swapped to it with
        ``os.replace`` and only then are older versions removed, so a failed build changes nothing.
        """
        root = self._artifact_root(name, partition)
        root.mkdir(parents=True, exist_ok=True)
        version = root / f"v-{uuid.uuid4().hex}"
        version.mkdir()
        try:
            fill(version)
            pointer = root / f".CURRENT.{uuid.uuid4().hex}.tmp"
            pointer.write_text(version.name, encoding="utf-8")
            os.replace(pointer, root / "CURRENT")
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)
            raise
        _fsync_directory(root)
        for old in root.glob("v-*"):
            if old != version:
                shutil.rmtree(old, ignore_errors=True)
        return version

    def artifact(self, name: str, partition: Mapping[str, str]) -> Path:
        root = self._artifact_root(name, partition)
        pointer = root / "CURRENT"
        if not pointer.is_file():
            raise StorageError(f"artefact {name!r} has no version for {dict(partition)} yet (looked in {root})")
        return root / pointer.read_text(encoding="utf-8").strip()

    def has(self, table: str, partition: Mapping[str, str]) -> bool:
        return (self.partition_dir(table, partition) / DATA_FILE).is_file()

    def written_at(self, table: str, partition: Mapping[str, str]) -> float | None:
        """When the partition's current version was written (epoch seconds), None if it has none."""
        path = self.partition_dir(table, partition) / DATA_FILE
        return path.stat().st_mtime if path.is_file() else None

    def artifact_written_at(self, name: str, partition: Mapping[str, str]) -> float | None:
        """When the artefact's current version was swapped in, None if it has none."""
        pointer = self._artifact_root(name, partition) / "CURRENT"
        return pointer.stat().st_mtime if pointer.is_file() else None

    def _artifact_root(self, name: str, partition: Mapping[str, str]) -> Path:
        path = self.home / "artifacts" / name
        for column, value in partition.items():
            if not _PARTITION_VALUE.match(value):
                raise StorageError(f"bad {column} {value!r} for artefact {name!r}")
            path = path / f"{column}={value}"
        return path

    def forget(self, corpus: str) -> list[Path]:
        """Remove every table partition, artefact and cache of a corpus; the folders removed.

        Each folder is first renamed aside (one atomic step), so a reader sees it whole or not at all."""
        if not _PARTITION_VALUE.match(corpus):
            raise StorageError(f"bad corpus {corpus!r}: use letters, digits, '_', '.', '-'")
        found = [*self.tables_dir.glob(f"*/corpus={corpus}"), *(self.home / "artifacts").glob(f"*/corpus={corpus}")]
        found += [path for path in [self.home / PAIR_CACHE / corpus] if path.is_dir()]
        for path in found:
            aside = path.with_name(f".forgotten-{uuid.uuid4().hex}")
            os.replace(path, aside)
            shutil.rmtree(aside)
        return found

    def read(self, table: str, partition: Mapping[str, str]) -> pa.Table:
        path = self.partition_dir(table, partition) / DATA_FILE
        if not path.is_file():
            raise StorageError(f"table {table!r} has no partition {dict(partition)} yet (looked for {path})")
        return pq.read_table(path)


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
        cast = ordered.cast(pa.schema(list(spec.schema) + [ordered.schema.field(c) for c in ordered.column_names[len(required):]]))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise StorageError(f"table {spec.name!r} does not match its contract: {error}") from error
    _check_unique(spec, partition, cast)
    return cast


def _check_unique(spec: TableSpec, partition: Mapping[str, str], data: pa.Table) -> None:
    keys = ", ".join(f'"{c}"' for c in spec.key)
    with duckdb.connect() as con:
        con.register("keyed", data.select(list(spec.key)))
        duplicates = con.execute(f"SELECT {keys}, count(*) AS n FROM keyed GROUP BY ALL HAVING n > 1 LIMIT 5").fetchall()
    if duplicates:
        shown = "; ".join(", ".join(map(str, row[:-1])) for row in duplicates)
        raise StorageError(f"table {spec.name!r} partition {dict(partition)}: duplicate {spec.key}: {shown}")


def _remove_stale_temporaries(directory: Path) -> None:
    """Temporaries left by a killed writer are garbage: the swap never happened."""
    for leftover in directory.glob(f".{DATA_FILE}.*.tmp"):
        leftover.unlink(missing_ok=True)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
