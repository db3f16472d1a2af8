"""Who may ask a server, and where the CLI finds one: the environment variables, and the key check."""

from __future__ import annotations

import hmac

KEY_ENV = "GRAPHLAKE_API_KEY"  # set: `graphlake serve` requires this key, `graphlake query --server` sends it
SERVER_ENV = "GRAPHLAKE_SERVER"  # a running `graphlake serve` (http://host:port) that `graphlake query` asks


def key_matches(given: str, key: str) -> bool:
    """Whether a request's key is the server's, compared in constant time (no timing tells how much matched)."""
    return hmac.compare_digest(given.encode(), key.encode())
