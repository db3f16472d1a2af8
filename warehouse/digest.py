"""The lake's digests: a node's content hash, and the fingerprint of what a learned artefact came from."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def content_hash(text: str) -> str:
    """The ``content_hash`` of a node (and of an encoder's input): unchanged text, unchanged hash."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def fingerprint(content: Any) -> str:
    """A digest of JSON-serialisable content (config, training queries, input timestamps), key order aside."""
    return content_hash(json.dumps(content, sort_keys=True))
