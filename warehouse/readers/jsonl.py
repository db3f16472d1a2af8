"""Generic JSON lines: documents ``{id, title, text, metadata?}``, optional queries file. A document's
other fields join its metadata (``{id, title, text, year}``: year is filterable).

Query records are ``{id, text, split?, qrels?: {doc_id: relevance}, metadata?}``: gold travels with
its query, so a user's own collection needs no second gold file.
"""

from __future__ import annotations

from pathlib import Path

from graphlake.warehouse.readers.base import CorpusBuilder, Ingested, IngestError, ReadRequest, add_qrels_file, iter_jsonl, record_metadata, require


def read(request: ReadRequest) -> Ingested:
    builder = CorpusBuilder()
    add_documents(builder, request.path)
    if request.queries is not None:
        add_queries(builder, request.queries, request.split)
    if request.qrels is not None:
        add_qrels_file(builder, request.qrels, request.split)
    return builder.build()


def add_documents(builder: CorpusBuilder, path: Path) -> None:
    for where, record in iter_jsonl(path):
        doc_id = require(record, "id", where)
        metadata = record_metadata(record, ("id", "title", "text"), where.with_record(doc_id))
        builder.add_document(doc_id, require(record, "title", where.with_record(doc_id)), require(record, "text", where.with_record(doc_id)), where, metadata)


def add_queries(builder: CorpusBuilder, path: Path, split: str | None = None) -> None:
    for where, record in iter_jsonl(path):
        query_id = require(record, "id", where)
        located = where.with_record(query_id)
        query_split = split or record.get("split")
        builder.add_query(query_id, require(record, "text", located), where, query_split, record.get("metadata"))
        gold = record.get("qrels") or {}
        if not isinstance(gold, dict):
            raise IngestError(located, "field 'qrels' should be an object {doc_id: relevance}")
        for doc_id, relevance in gold.items():
            if not isinstance(relevance, int) or isinstance(relevance, bool):
                raise IngestError(located, f"relevance of {doc_id!r} should be an integer")
            builder.add_qrel(query_id, doc_id, where, relevance, query_split)
