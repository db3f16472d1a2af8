"""Writes from the application to a corpus the lake owns (format ``api``): upserted documents and deleted
ids, checked whole before anything is written (a bad document is named by its place and id, and the
write leaves nothing), then appended to the corpus's log (``warehouse/write_log.py``), which makes them
durable before they are acknowledged. A corpus read from files or a benchmark keeps its source: a write
to it is refused, saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphlake.api.results import NAMESPACE, RequestError, UnknownName, Written
from graphlake.api.validation import MAX_NAME_CHARS, kind_of
from graphlake.common.suggest import did_you_mean
from graphlake.kernels.text.chunking import MAX_TEXT_CHARS
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusRegistry
from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.write_log import corpus_log

MAX_WRITE_DOCUMENTS = 1_000  # in one write
MAX_TITLE_CHARS = 2_000
FIELDS = ("id", "title", "text", "metadata")


def owned(home: Path, corpus: Any) -> str:
    """``corpus``, when it is a corpus the lake owns; else why it takes no writes."""
    if not isinstance(corpus, str):
        raise RequestError(f"corpus: a name, got {kind_of(corpus)}")
    declared = CorpusRegistry(home).all()
    if corpus not in declared:
        raise UnknownName(f"corpus {corpus!r} is not declared{did_you_mean(corpus, declared)} (`graphlake ingest api --corpus {corpus}` declares one the lake owns)")
    if declared[corpus].format != LAKE_OWNED:
        raise RequestError(
            f"corpus {corpus!r} is read from its {declared[corpus].format} source, which stays its only source: it takes no writes (write to a corpus the lake owns: `graphlake ingest api --corpus NAME`)"
        )
    if remote_of(home) is not None:
        raise RequestError(f"corpus {corpus!r}: writes need a lake on this machine's disk, not on object storage")
    return corpus


def upsert(home: Path, corpus: str, documents: Any) -> Written:
    """Add or replace ``documents`` (``{"id", "text", "title"?, "metadata"?}`` each) as one durable write."""
    corpus = owned(home, corpus)
    checked = [_document(i, d) for i, d in enumerate(_listed(documents, "documents"))]
    seen: dict[str, int] = {}
    for i, document in enumerate(checked):
        if document["id"] in seen:
            raise RequestError(f"documents[{i}] (id {document['id']!r}): the same id as documents[{seen[document['id']]}]")
        seen[document["id"]] = i
    write = corpus_log(home, corpus).append("upsert", documents=checked)
    return Written(corpus, write.seq, "upsert", len(checked))


def delete(home: Path, corpus: str, ids: Any) -> Written:
    """Delete the documents ``ids`` (an id the corpus lacks is no error: it stays absent) as one durable write."""
    corpus = owned(home, corpus)
    given = _listed(ids, "ids")
    for i, doc_id in enumerate(given):
        _id(doc_id, f"ids[{i}]")
    write = corpus_log(home, corpus).append("delete", ids=list(dict.fromkeys(given)))
    return Written(corpus, write.seq, "delete", len(given))


def _listed(value: Any, name: str) -> list:
    if not isinstance(value, list | tuple) or not value:
        raise RequestError(f"{name}: a non-empty list, got {kind_of(value)}")
    if len(value) > MAX_WRITE_DOCUMENTS:
        raise RequestError(f"{name}: {len(value):,} in one write, more than {MAX_WRITE_DOCUMENTS:,}: split it")
    return list(value)


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        raise RequestError(f"{where}: an id is a non-empty string of at most {MAX_NAME_CHARS} characters, got {kind_of(value)}")
    return value


def _document(i: int, document: Any) -> dict[str, Any]:
    """One document as the log keeps it, or a ``RequestError`` naming its place and id."""
    where = f"documents[{i}]"
    if not isinstance(document, dict):
        raise RequestError(f"{where}: an object {{id, text, title?, metadata?}}, got {kind_of(document)}")
    doc_id = _id(document.get("id"), f"{where}.id")
    where = f"{where} (id {doc_id!r})"
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise RequestError(f"{where}: unknown field {unknown[0]!r} (a document has {', '.join(FIELDS)}; anything else goes in its metadata)")
    text, title, metadata = document.get("text"), document.get("title") or "", document.get("metadata") or {}
    if not isinstance(text, str) or not text.strip():
        raise RequestError(f"{where}: text: a non-empty string, got {kind_of(text)}")
    if len(text) > MAX_TEXT_CHARS:
        raise RequestError(f"{where}: {len(text):,} characters of text, more than {MAX_TEXT_CHARS:,}: split it into several documents")
    if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
        raise RequestError(f"{where}: title: a string of at most {MAX_TITLE_CHARS:,} characters, got {kind_of(title)}")
    if not isinstance(metadata, dict) or not all(isinstance(key, str) for key in metadata):
        raise RequestError(f"{where}: metadata: an object with string keys, got {kind_of(metadata)}")
    if NAMESPACE in metadata:
        raise RequestError(f"{where}: metadata: {NAMESPACE!r} is the key graphlake's provenance travels under in the adapters")
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise RequestError(f"{where}: metadata: not JSON ({error})") from None
    return {"id": doc_id, "title": title, "text": text, "metadata": metadata}
