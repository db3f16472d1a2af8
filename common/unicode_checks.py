"""Text that cannot travel: a lone surrogate (JSON's ``"\ud800"``, Python's ``surrogateescape``) has no
UTF-8 form, so a tokenizer, DuckDB or Arrow fails on it deep inside; a request names it up front."""

from __future__ import annotations

import re
import unicodedata

# a character that is not a space: Python's whitespace (what str.strip() drops) and ECMAScript's, the one a
# JSON schema's pattern means, written so that either engine (and pydantic's Rust one) reads the same set
SPACES_ONLY_NOT = r"[^\s\x1c-\x1f\x85\ufeff]"
_TEXT = re.compile(SPACES_ONLY_NOT)


def lone_surrogate(text: str) -> int | None:
    """The index of the first half UTF-16 pair in ``text``, None if it has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def same_id(text: str) -> str:
    """An id as the lake compares and keeps it: in Unicode's composed form (NFC), so that "café" typed
    with one code point for the é and with an e and a combining accent (NFD) is one document."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def blank(text: str) -> bool:
    """Nothing but spaces (or nothing): a query, an id or a text that says nothing."""
    return _TEXT.search(text) is None
