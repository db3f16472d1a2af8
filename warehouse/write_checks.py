"""What a write to a corpus the lake owns may hold: checked whole before anything touches the disk, and
again on every entry the log is read back from (``write_log.py``), so that an entry a crash or a hand
damaged is named, never served.

What goes in comes back exactly: a value that could not be stored or filtered exactly is refused,
naming the field, rather than stored changed. Numbers are JSON's (a whole number within ±2^53, which
a float64 filter column holds exactly; a finite float), strings are valid Unicode (a lone surrogate
cannot be written as UTF-8), metadata nest at most ``MAX_METADATA_DEPTH`` deep, and a document's text
is at most ``MAX_DOCUMENT_CHARS``, which one search's memory budget holds once chunked and encoded.
Only the standard library: a remote client runs the same checks before it sends.
"""

from __future__ import annotations

from typing import Any

from graphlake.common.unicode_checks import blank, lone_surrogate, same_id

MAX_NAME_CHARS = 200  # an id
MAX_WRITE_DOCUMENTS = 1_000  # in one write
MAX_TITLE_CHARS = 2_000
MAX_DOCUMENT_CHARS = 1_000_000  # a document's text: ~2,000 nodes; a 20M-character one took a search 27 s and 1.3 GB
MAX_WRITE_CHARS = 10_000_000  # all of one write's texts
MAX_METADATA_DEPTH = 32  # objects and lists within a document's metadata
EXACT_INTEGER = 2**53  # beyond it a float64 column (what a filter compares) rounds the number
FIELDS = ("id", "title", "text", "metadata")


class WriteRefused(ValueError):
    """A write the lake cannot store exactly as given; the message names the document and the field."""


def kind_of(value: Any) -> str:
    return "an empty string" if isinstance(value, str) and blank(value) else type(value).__name__


def checked_documents(documents: Any) -> list[dict[str, Any]]:
    """The documents of an upsert as the log keeps them (``{"id", "title", "text", "metadata"}``), or
    ``WriteRefused`` naming the first bad one by its place and id."""
    checked = [checked_document(i, d) for i, d in enumerate(_listed(documents, "documents"))]
    seen: dict[str, int] = {}
    for i, document in enumerate(checked):
        if document["id"] in seen:
            raise WriteRefused(f"documents[{i}] (id {document['id']!r}): the same id as documents[{seen[document['id']]}]")
        seen[document["id"]] = i
    total = sum(len(d["text"]) for d in checked)
    if total > MAX_WRITE_CHARS:
        raise WriteRefused(f"documents: {total:,} characters of text in one write, more than {MAX_WRITE_CHARS:,}: split it into several writes")
    return checked


def checked_ids(ids: Any) -> list[str]:
    """The ids of a delete, each once, in the order given."""
    given = _listed(ids, "ids")
    return list(dict.fromkeys(checked_id(doc_id, f"ids[{i}]") for i, doc_id in enumerate(given)))


def checked_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or blank(value) or len(value) > MAX_NAME_CHARS:
        raise WriteRefused(f"{where}: an id is a non-empty string of at most {MAX_NAME_CHARS} characters, got {kind_of(value)}")
    _unicode(value, where)
    return same_id(value)


def checked_document(i: int, document: Any) -> dict[str, Any]:
    """One document as the log keeps it, or ``WriteRefused`` naming its place, id and field."""
    where = f"documents[{i}]"
    if not isinstance(document, dict):
        raise WriteRefused(f"{where}: an object {{id, text, title?, metadata?}}, got {kind_of(document)}")
    doc_id = checked_id(document.get("id"), f"{where}.id")
    where = f"{where} (id {doc_id!r})"
    unknown = sorted(str(key) for key in set(document) - set(FIELDS))
    if unknown:
        raise WriteRefused(f"{where}: unknown field {unknown[0]!r} (a document has {', '.join(FIELDS)}; anything else goes in its metadata)")
    text, title, metadata = document.get("text"), document.get("title"), document.get("metadata")
    title, metadata = "" if title is None else title, {} if metadata is None else metadata  # absent or null: none
    if not isinstance(text, str) or blank(text):
        raise WriteRefused(f"{where}: text: a non-empty string, got {kind_of(text)}")
    if len(text) > MAX_DOCUMENT_CHARS:
        raise WriteRefused(f"{where}: text: {len(text):,} characters, more than {MAX_DOCUMENT_CHARS:,}: split it into several documents")
    _unicode(text, f"{where}: text")
    if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
        raise WriteRefused(f"{where}: title: a string of at most {MAX_TITLE_CHARS:,} characters, got {kind_of(title)}")
    _unicode(title, f"{where}: title")
    if not isinstance(metadata, dict):
        raise WriteRefused(f"{where}: metadata: an object, got {kind_of(metadata)}")
    _exact(metadata, f"{where}: metadata")
    return {"id": doc_id, "title": title, "text": text, "metadata": metadata}


def _listed(value: Any, name: str) -> list:
    if not isinstance(value, list | tuple) or not value:
        raise WriteRefused(f"{name}: a non-empty list, got {kind_of(value)}")
    if len(value) > MAX_WRITE_DOCUMENTS:
        raise WriteRefused(f"{name}: {len(value):,} in one write, more than {MAX_WRITE_DOCUMENTS:,}: split it")
    return list(value)


def _exact(metadata: dict, where: str) -> None:
    """Refuse what JSON would not give back as it was given, walking the metadata without recursion."""
    stack: list[tuple[Any, str, int]] = [(metadata, where, 1)]
    while stack:
        value, at, depth = stack.pop()
        if isinstance(value, dict | list) and depth > MAX_METADATA_DEPTH:
            raise WriteRefused(f"{at}: nested more than {MAX_METADATA_DEPTH} deep")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise WriteRefused(f"{at}: a key is a string, got {kind_of(key)} {key!r}"[:300])
                _unicode(key, f"{at}: key {key!r}")
                stack.append((item, f"{at}.{key}", depth + 1))
        elif isinstance(value, list):
            stack += [(item, f"{at}[{i}]", depth + 1) for i, item in enumerate(value)]
        elif isinstance(value, str):
            _unicode(value, at)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if abs(value) > EXACT_INTEGER:
                shown = f"{value:.3g}" if abs(value) < 1e300 else f"of about 10^{int(value.bit_length() * 0.30103)}"  # never a float that overflows
                raise WriteRefused(f"{at}: the whole number {shown} is beyond ±2^53, which a filter cannot compare exactly (store it as a string)")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise WriteRefused(f"{at}: {value} is not a JSON number")
        else:
            raise WriteRefused(f"{at}: a {type(value).__name__} is not a JSON value (strings, numbers, true/false, null, lists and objects are; a date goes in as an ISO string)")


def _unicode(text: str, where: str) -> None:
    if not text.isascii() and (bad := lone_surrogate(text)) is not None:  # isascii: a flag, no scan
        raise WriteRefused(f"{where}: not valid Unicode (a lone surrogate at character {bad})")
