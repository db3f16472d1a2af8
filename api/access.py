"""Who may ask a server: the key check (the key and the server's address are settings, ``common/settings.py``)."""

from __future__ import annotations

import hmac


def key_matches(given: str, key: str) -> bool:
    """Whether a request's key is the server's, compared in constant time (no timing tells how much matched)."""
    return hmac.compare_digest(given.encode(), key.encode())
