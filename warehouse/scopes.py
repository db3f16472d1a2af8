"""What the lake's writers share: the scopes a snapshot and a writer lock are taken on (a corpus, or the
lake-wide scope of artefacts that belong to no corpus), the error a writer that cannot wait gets, and
how long it waits. The bottom of ``locks``, ``object_store`` and ``snapshots``, which import it."""

from __future__ import annotations

from collections.abc import Mapping

from graphlake.common.settings import LOCK_WAIT

LAKE_SCOPE = "_lake"
WRITES = "writes"  # the folder of the lake-owned corpora's logs of pending writes (warehouse/write_log.py)
WAIT_ENV = LOCK_WAIT.name


class LockedError(RuntimeError):
    """Another writer holds the corpus; the message names it."""


def wait_seconds() -> float:
    return LOCK_WAIT.number(error=LockedError)


def scope_of(partition: Mapping[str, str]) -> str:
    """The scope a table partition or artefact belongs to: its corpus, else the lake's."""
    return partition.get("corpus", LAKE_SCOPE)
