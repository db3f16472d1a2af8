"""Format readers: raw benchmark files -> documents, queries, qrels, foreign keys.

Each format is one function ``ReadRequest -> Ingested``; the table below is the only list of formats.
A reader's module is imported when its format is first read, so that what only reads a built lake
(a query, the server) imports none of them (nor sqlglot, which the SQL schemas' reader parses with).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping

from graphlake.warehouse.readers.base import Ingested, IngestError, ReadRequest

Reader = Callable[[ReadRequest], Ingested]
_READERS = {  # format -> (module of this package, function)
    "beir": ("beir", "read"),
    "hotpotqa": ("multihop", "read_hotpotqa"),
    "hotpotqa-ircot": ("multihop", "read_ircot"),
    "2wiki": ("multihop", "read_2wiki"),
    "musique": ("multihop", "read_musique"),
    "hipporag": ("multihop", "read_hipporag"),
    "spider": ("sql_schemas", "read_spider"),
    "bird": ("sql_schemas", "read_bird"),
    "jsonl": ("jsonl", "read"),
    "files": ("files", "read"),
    "demo": ("demo", "read"),
    "api": ("lake_owned", "read"),
}


class _Formats(Mapping[str, Reader]):
    """The readers by format name, each imported on first use."""

    def __getitem__(self, name: str) -> Reader:
        module, function = _READERS[name]
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)

    def __contains__(self, name: object) -> bool:  # Mapping's would import the reader to answer
        return name in _READERS

    def __iter__(self) -> Iterator[str]:
        return iter(_READERS)

    def __len__(self) -> int:
        return len(_READERS)


FORMATS: Mapping[str, Reader] = _Formats()

__all__ = ["FORMATS", "Ingested", "IngestError", "ReadRequest"]
