"""Numeric settings read from the environment, checked in one place so every bad value gets the same
clear message naming the variable."""

from __future__ import annotations

import math
import os


def number_from_env(name: str, default: float, *, kind: type = float, least: float | None = None, most: float | None = None, error: type[Exception] = ValueError) -> float:
    """``name``'s value as ``kind`` (``default`` when unset or empty), within ``[least, most]``;
    else ``error`` naming the variable and what it must be."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise error(f"{name}={raw!r} is not {'a whole number' if kind is int else 'a number'}") from None
    if not math.isfinite(value):
        raise error(f"{name}={raw!r} is not a finite number")
    if (least is not None and value < least) or (most is not None and value > most):
        bounds = f"between {least:g} and {most:g}" if least is not None and most is not None else f"at least {least:g}" if least is not None else f"at most {most:g}"
        raise error(f"{name}={raw!r} must be {bounds}")
    return value
