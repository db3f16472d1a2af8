"""Format readers: raw benchmark files -> documents, queries, qrels, foreign keys.

Each format is one function ``ReadRequest -> Ingested``; the table below is the only list of formats.
"""

from __future__ import annotations

from collections.abc import Callable

from graphlake.warehouse.readers import beir, demo, files, jsonl, multihop, sql_schemas
from graphlake.warehouse.readers.base import Ingested, IngestError, ReadRequest

FORMATS: dict[str, Callable[[ReadRequest], Ingested]] = {
    "beir": beir.read,
    "hotpotqa": multihop.read_hotpotqa,
    "hotpotqa-ircot": multihop.read_ircot,
    "2wiki": multihop.read_2wiki,
    "musique": multihop.read_musique,
    "hipporag": multihop.read_hipporag,
    "spider": sql_schemas.read_spider,
    "bird": sql_schemas.read_bird,
    "jsonl": jsonl.read,
    "files": files.read,
    "demo": demo.read,
}

__all__ = ["FORMATS", "Ingested", "IngestError", "ReadRequest"]
