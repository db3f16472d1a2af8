"""A corpus the lake owns (format ``api``): its documents are the committed snapshot's, with the log of
pending writes (``warehouse/write_log.py``) applied in order on top, up to its last entry when read.

Replaying a run of the log that the snapshot already holds changes nothing (each document ends as the
last write that touched it left it), so a fold read twice, or after a crash between a commit and the
trim of the log, gives the same documents. They are sorted by id: the same final documents make the
same tables, whatever order the writes came in, so a folded corpus ranks as one built from scratch.
"""

from __future__ import annotations

import pyarrow as pa

from graphlake.warehouse.readers.base import Ingested, NoDocuments, ReadRequest
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.tables import row_schema
from graphlake.warehouse.write_log import apply, corpus_log, folded_through


def read(request: ReadRequest) -> Ingested:
    """``request.path`` is the corpus's log folder, ``<home>/writes/<corpus>``."""
    home, corpus = request.path.parent.parent, request.path.name
    lake = LakeStorage(home)
    partition = {"corpus": corpus}
    documents = {row["doc_id"]: row for row in lake.read("documents", partition).to_pylist()} if lake.has("documents", partition) else {}
    writes = corpus_log(home, corpus).pending()
    for write in writes:
        apply(documents, write)
    if not documents:
        raise NoDocuments(request.path, "no documents yet: a lake-owned corpus is filled by upserts (`GraphLake.upsert`, `POST /corpora/{corpus}/documents`)")
    rows = [{key: row[key] for key in ("doc_id", "title", "text", "metadata")} for _, row in sorted(documents.items())]
    empty = {name: row_schema(name).empty_table() for name in ("queries", "qrels", "foreign_keys")}
    through = writes[-1].seq if writes else folded_through(lake, corpus)
    notes = [f"folded {len(writes)} pending write(s), through number {through}"] if writes else []
    return Ingested(pa.Table.from_pylist(rows, row_schema("documents")), empty["queries"], empty["qrels"], empty["foreign_keys"], notes, log_through=through)
