"""What the lake's writers share: the scopes a snapshot and a writer lock are taken on (a corpus, or the
lake-wide scope of artefacts that belong to no corpus), the error a writer that cannot wait gets, and
how long it waits, and the error a write that finds no room on the disk gets. The bottom of ``locks``,
``object_store`` and ``snapshots``, which import it."""

from __future__ import annotations

import errno
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from graphlake.common.settings import LOCK_WAIT

LAKE_SCOPE = "_lake"
WRITES = "writes"  # the folder of the lake-owned corpora's logs of pending writes (warehouse/write_log.py)
WAIT_ENV = LOCK_WAIT.name


class LockedError(RuntimeError):
    """Another writer holds the corpus; the message names it."""


class DiskFull(OSError):
    """The lake's disk (or the account's quota) has no room for a write; nothing of the write was kept."""


@contextmanager
def room_for(what: str) -> Iterator[None]:
    """Turn the disk's "no space" into ``DiskFull`` naming ``what`` was refused (the caller removes its
    partial files, as it does on any error)."""
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise DiskFull(f"{what}: no room on the lake's disk ({error.strerror}); nothing of it was kept: free space and write again") from None


def wait_seconds() -> float:
    return LOCK_WAIT.number(error=LockedError)


def scope_of(partition: Mapping[str, str]) -> str:
    """The scope a table partition or artefact belongs to: its corpus, else the lake's."""
    return partition.get("corpus", LAKE_SCOPE)
