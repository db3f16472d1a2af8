"""``once``: a method of no arguments computed once per object, even when the threads serving requests
ask for it together, and kept for the object's life. What a long-lived read-only object (a snapshot's
tables, an index set's derived structures) reads or derives: named methods, not an open cache."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

T = TypeVar("T")
_GUARD = threading.Lock()  # makes each object's own lock once


def object_lock(owner: Any) -> threading.RLock:
    """The object's own reentrant lock (what one computation asks of another may need it too)."""
    lock = owner.__dict__.get("_once_lock")
    if lock is None:
        with _GUARD:
            lock = owner.__dict__.setdefault("_once_lock", threading.RLock())
    return lock


def once(method: Callable[[Any], T]) -> Callable[[Any], T]:
    """``method`` computed on first call and kept on the object; later calls return the kept value."""
    slot = f"_once_{method.__name__}"

    @wraps(method)
    def kept(self: Any) -> T:
        found = self.__dict__.get(slot, _MISSING)
        if found is _MISSING:
            with object_lock(self):
                found = self.__dict__.get(slot, _MISSING)
                if found is _MISSING:
                    found = method(self)
                    self.__dict__[slot] = found
        return found

    return kept


_MISSING = object()
