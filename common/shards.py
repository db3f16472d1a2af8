"""A step's per-node work (encoding, NER, triples) cut into shards of nodes; on a Dask cluster each shard
is a task of its own, so one corpus's work spreads over every worker.

A run on Dask (``GRAPHLAKE_DASK``) executes each Dagster step as a task on a worker; from inside that
task, :func:`map_shards` submits the shards to the same cluster through ``distributed.worker_client``
(which hands the step's thread back to the worker while it waits, so a two-thread cluster cannot
deadlock on its own step) and gathers their results in order. The step then writes its one table as
before, so the shards land inside the run's single snapshot commit. Anywhere else the shards run one
after the other in the step's process. Either way the shard function must be a module-level function
(or a ``functools.partial`` of one): it is pickled to the workers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphlake.common.settings import SHARD_NODES

SHARD_ENV = SHARD_NODES.name  # nodes a shard: one model call's worth of batches, and the in-process progress step


@dataclass
class Sharded:
    """Where a step's shards ran: their count, and per worker how many (empty in-process)."""

    shards: int = 0
    workers: dict[str, int] = field(default_factory=dict)

    def as_metadata(self) -> dict[str, Any]:
        return {"shards": self.shards, **({"shard_workers": dict(sorted(self.workers.items()))} if self.workers else {})}


def shard_nodes() -> int:
    return int(SHARD_NODES.number())


def map_shards(function: Callable[[list], list], items: Sequence, advance: Callable[[int], None] = lambda count: None, name: str = "shard") -> tuple[list, Sharded]:
    """``function`` over ``items`` shard by shard, results in the items' order; ``advance(count)`` after
    each shard. ``function`` maps a list of items to a list of as many results."""
    size = shard_nodes()
    shards = [list(items[start : start + size]) for start in range(0, len(items), size)]
    worker = _dask_worker()
    done = Sharded(len(shards))
    if worker is None or len(shards) <= 1:
        results = []
        for shard in shards:
            results.extend(_checked(function, shard))
            advance(len(shard))
        return results, done
    from distributed import as_completed, worker_client

    with worker_client() as client:
        run = uuid.uuid4().hex[:12]  # two steps of one name (two corpora) may shard at once
        keys = [f"{name}-{run}-{index}" for index in range(len(shards))]
        futures = client.map(_located, [function] * len(shards), shards, key=keys)
        by_key = {}
        for future in as_completed(futures):
            address, result = future.result()
            by_key[future.key] = result
            done.workers[address] = done.workers.get(address, 0) + 1
            advance(len(result))
    return [result for key in keys for result in by_key[key]], done


def _dask_worker():
    """The Dask worker this code runs in, or None (no ``distributed``, or not inside a worker's task)."""
    try:
        from distributed import get_worker
    except ImportError:
        return None
    try:
        return get_worker()
    except ValueError:
        return None


def _located(function: Callable[[list], list], shard: list) -> tuple[str, list]:
    from distributed import get_worker

    return get_worker().address, _checked(function, shard)


def _checked(function: Callable[[list], list], shard: list) -> list:
    results = list(function(shard))
    if len(results) != len(shard):
        raise RuntimeError(f"{getattr(function, '__name__', function)!r} returned {len(results)} results for a shard of {len(shard)} items")
    return results
