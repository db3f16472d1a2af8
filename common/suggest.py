"""'Did you mean' for a name a person typed: a method, a corpus, an asset."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean x?"`` (or ``x or y``) for the choices closest to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, sorted(set(choices)), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""
