"""BEIR layout: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv`` (header line optional).

A query's split is the split of the qrels file that judges it; queries judged nowhere keep none.
"""

from __future__ import annotations

from graphlake.warehouse.readers.base import CorpusBuilder, Ingested, IngestError, ReadRequest, add_qrels_file, find_file, iter_jsonl, record_metadata, require


def read(request: ReadRequest) -> Ingested:
    folder = request.path
    if not folder.is_dir():
        raise IngestError(folder, "expected a BEIR folder with corpus.jsonl, queries.jsonl and qrels/")
    builder = CorpusBuilder()
    for where, record in iter_jsonl(find_file(folder, "corpus.jsonl")):
        doc_id = require(record, "_id", where)
        located = where.with_record(doc_id)
        metadata = record_metadata(record, ("_id", "title", "text"), located)
        builder.add_document(doc_id, record.get("title") or "", require(record, "text", located), where, metadata)
    for where, record in iter_jsonl(find_file(folder, "queries.jsonl")):
        query_id = require(record, "_id", where)
        builder.add_query(query_id, require(record, "text", where.with_record(query_id)), where, None, record.get("metadata") or None)
    qrel_files = sorted((folder / "qrels").glob("*.tsv*"))
    if not qrel_files:
        raise IngestError(folder / "qrels", "no qrels/<split>.tsv files found")
    for path in qrel_files:
        add_qrels_file(builder, path, path.name.split(".")[0])
    return builder.build()
