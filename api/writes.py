"""Writes from the application to a corpus the lake owns (format ``api``): upserted documents and deleted
ids, checked whole before anything is written (``warehouse/write_checks.py``: a bad document is named by
its place, id and field, and the write leaves nothing), then appended to the corpus's log
(``warehouse/write_log.py``), which makes them durable before they are acknowledged. A corpus read from
files or a benchmark keeps its source: a write to it is refused, saying why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphlake.api.results import NAMESPACE, DamagedLog, RequestError, UnknownName, Written, refused_as_request
from graphlake.api.validation import kind_of
from graphlake.common.stopping import Stop, check
from graphlake.common.suggest import did_you_mean
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusRegistry
from graphlake.warehouse.locks import declarations_lock
from graphlake.warehouse.object_store import remote_of
from graphlake.warehouse.write_checks import checked_documents, checked_ids
from graphlake.warehouse.write_log import Op, Write, WriteLogError, corpus_log


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


def upsert(home: Path, corpus: str, documents: Any, encoded: Callable[[str, list[dict]], Callable[[int], None]] | None = None, stop: Stop | None = None) -> Written:
    """Add or replace ``documents`` (``{"id", "text", "title"?, "metadata"?}`` each) as one durable write;
    ``encoded``: encodes the checked documents before the write is appended and returns what keeps their
    vectors once it has its number (``SearcherManager.encoded_write``), all before the acknowledgement."""
    corpus = owned(home, corpus)
    checked = refused_as_request(checked_documents, documents)
    for i, document in enumerate(checked):
        if NAMESPACE in document["metadata"]:
            raise RequestError(f"documents[{i}] (id {document['id']!r}): metadata: {NAMESPACE!r} is the key graphlake's provenance travels under in the adapters")
    keep = encoded(corpus, checked) if encoded is not None else None
    check(stop, "the write was appended: nothing was written")
    write = _appended(home, corpus, "upsert", checked)
    if keep is not None:
        keep(write.seq)
    return Written(corpus, write.seq, "upsert", len(checked))


def delete(home: Path, corpus: str, ids: Any) -> Written:
    """Delete the documents ``ids`` (an id the corpus lacks is no error: it stays absent) as one durable write."""
    corpus = owned(home, corpus)
    given = refused_as_request(checked_ids, ids)
    write = _appended(home, corpus, "delete", given)
    return Written(corpus, write.seq, "delete", len(given))


def _appended(home: Path, corpus: str, op: Op, given: list) -> Write:
    """The write appended to the corpus's log; ``DamagedLog`` when the log's numbering cannot be trusted,
    ``UnknownName`` when the corpus was dropped meanwhile. Its folder is made only while the corpus is
    declared, under the declarations' lock a drop withdraws it under, and a drop renames the folder away
    before removing it: a write the drop overtakes finds no folder and is refused, never re-creating it."""
    log = corpus_log(home, corpus)
    if not log.folder.is_dir():
        with declarations_lock(home):
            if corpus not in CorpusRegistry(home).all():
                raise UnknownName(f"corpus {corpus!r} was dropped while this write was made: nothing was written")
            log.folder.mkdir(parents=True, exist_ok=True)
    try:
        return log.append(op, **({"documents": given} if op == "upsert" else {"ids": given}))
    except WriteLogError as error:
        raise DamagedLog(str(error)) from None
    except FileNotFoundError:
        raise UnknownName(f"corpus {corpus!r} was dropped while this write was made: nothing was written") from None
