"""The bundled demo corpus: generic JSON-lines documents and queries plus one Spider-style schema."""

from __future__ import annotations

from graphlake.warehouse.readers import jsonl, sql_schemas
from graphlake.warehouse.readers.base import CorpusBuilder, Ingested, ReadRequest, find_file


def read(request: ReadRequest) -> Ingested:
    folder = request.path
    builder = CorpusBuilder()
    jsonl.add_documents(builder, find_file(folder, "corpus.jsonl"))
    sql_schemas.add_schemas(builder, find_file(folder, "tables.json"))
    jsonl.add_queries(builder, find_file(folder, "queries.jsonl"), request.split)
    return builder.build()
