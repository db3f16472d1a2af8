"""One writer per corpus: a kernel file lock per snapshot scope, with its owner written beside it.

The lock is ``flock`` on ``locks/<scope>.lock`` (and, for a lake on object storage, a lease there:
``warehouse/object_store.py``). The kernel drops it when its holder dies however it dies (kill -9
included), so a killed run never leaves a lock that must be broken by hand; the owner
record (pid, host, command, since) is only for the message a waiting writer shows. A process that
holds a scope may take it again (a run's own writes), so the lock is counted per process.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.scopes import WAIT_ENV, LockedError, wait_seconds

LOCKS = "locks"
POLL_S = 0.5
UNKNOWN_OWNER = "another writer"  # a lock whose holder has not written who it is yet
NAME_WAIT_S = 2.0  # how long a waiter waits for the holder to say who it is before announcing it unnamed

_held: dict[Path, list] = {}  # lock path -> [open handle, depth], for this process


@contextmanager
def writer_lock(home: Path, scope: str, purpose: str, announce: Callable[[str], None] | None = None, wait: float | None = None) -> Iterator[None]:
    """Hold the scope's writer lock: wait (announcing the holder once) up to ``wait`` seconds (default
    ``GRAPHLAKE_LOCK_WAIT``) for another holder, then fail naming it."""
    path = Path(home) / LOCKS / f"{scope}.lock"
    held = _held.get(path)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    wait = wait_seconds() if wait is None else wait  # a bad setting is refused before anything is made
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")
    try:
        _acquire(handle, path, scope, wait, announce or _to_stderr)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "purpose": purpose, "since": time.time()}))
        handle.flush()
        _held[path] = [handle, 1]
        try:
            with _lease(home, scope, purpose, announce):
                yield
        finally:
            del _held[path]
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def _lease(home: Path, scope: str, purpose: str, announce: Callable[[str], None] | None):
    """On a lake kept on object storage, the scope's lease there too: writers on other machines."""
    remote = remote_of(home)
    return remote.lease(scope, purpose, announce) if remote else nullcontext()


def holder(home: Path, scope: str) -> str | None:
    """Who holds the scope now, in words; None when nobody does."""
    path = Path(home) / LOCKS / f"{scope}.lock"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _owner(path)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def _acquire(handle, path: Path, scope: str, wait: float, announce: Callable[[str], None]) -> None:
    started = time.monotonic()
    deadline = started + wait
    announced = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            owner = _owner(path)
            if time.monotonic() >= deadline:
                raise LockedError(f"corpus {scope!r} is being written by {owner}; try again when it ends (or set {WAIT_ENV} to wait longer)") from None
            # a holder that has just taken the lock writes who it is a moment later: name it, unless it never says
            if not announced and (owner != UNKNOWN_OWNER or time.monotonic() - started >= NAME_WAIT_S):
                announce(f"corpus {scope!r} is being written by {owner}; waiting for it (up to {wait:.0f} s, {WAIT_ENV})")
                announced = True
            time.sleep(POLL_S)


def _owner(path: Path) -> str:
    try:
        owner = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        owner = {}
    if not owner:
        return UNKNOWN_OWNER
    since = time.strftime("%H:%M:%S", time.localtime(owner.get("since", 0)))
    return f"pid {owner.get('pid')} on {owner.get('host')} ({owner.get('purpose')}, since {since})"


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


DECLARATIONS = "declarations.lock"  # corpora.yaml's: a declaration is read, changed and written under it
_declaring = threading.RLock()  # the threads of this process in turn (again in the holding thread); flock, the processes
_declaring_held: dict[Path, int] = {}  # lock path -> depth, for the thread holding ``_declaring``


@contextmanager
def declarations_lock(home: Path) -> Iterator[None]:
    """Hold the lake's declarations for one read-change-write of ``corpora.yaml``, so that concurrent
    declarations, from threads or processes, each keep the others' (a declaration takes milliseconds:
    a waiter blocks, with no deadline)."""
    path = Path(home) / LOCKS / DECLARATIONS
    with _declaring:
        if path in _declaring_held:
            _declaring_held[path] += 1
            try:
                yield
            finally:
                _declaring_held[path] -= 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _declaring_held[path] = 1
            try:
                yield
            finally:
                del _declaring_held[path]
