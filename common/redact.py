"""Secrets out of every message a client raises or logs: servers echo keys back ("Incorrect API key
provided: sk-..."), and a message reaches stderr, Dagster's run storage and the lake's metadata."""

from __future__ import annotations

import os
import re

SECRET_ENVS = ("GRAPHLAKE_LLM_API_KEY", "GRAPHLAKE_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
HIDDEN = "[redacted]"
# what looks like a key even when it is not one of ours: OpenAI-style keys, bearer tokens
_TOKENS = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}|(?<=[Bb]earer )[A-Za-z0-9._~+/\-]{6,}=*")


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with ``secrets``, the configured keys (``SECRET_ENVS``) and key-like tokens replaced by ``[redacted]``."""
    for secret in (*secrets, *map(os.environ.get, SECRET_ENVS)):
        if secret and len(secret) >= 4 and secret != "none":
            text = text.replace(secret, HIDDEN)
    return _TOKENS.sub(HIDDEN, text)
