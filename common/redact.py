"""Secrets out of every message a client raises or logs: servers echo keys back ("Incorrect API key
provided: sk-..."), and a message reaches stderr, Dagster's run storage and the lake's metadata."""

from __future__ import annotations

import os
import re

from graphlake.common.settings import VARIABLES

CLOUD_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")  # the object store's, read by botocore
HIDDEN = "[redacted]"
# what looks like a key even when it is not one of ours: OpenAI-style keys, bearer tokens
_TOKENS = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}|(?<=[Bb]earer )[A-Za-z0-9._~+/\-]{6,}=*")


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with ``secrets``, the configured keys (the secret settings, the cloud's) and key-like tokens replaced by ``[redacted]``."""
    for secret in (*secrets, *(v.text() for v in VARIABLES if v.secret), *map(os.environ.get, CLOUD_SECRETS)):
        if secret and len(secret) >= 4 and secret != "none":
            text = text.replace(secret, HIDDEN)
    return _TOKENS.sub(HIDDEN, text)
