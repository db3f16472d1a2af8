"""graphlake's Python API, for applications that retrieve: open a lake (a folder or ``s3://``), list its
corpora and methods, search one query or a batch with warm indexes, and read it with SQL.

    from graphlake.api import open_lake

    lake = open_lake("lake")
    result = lake.search("demo", "rrf", "Which vessel carried the BenthoCam sled?", k=3)
    for hit in result.hits:
        print(hit.rank, hit.title, hit.score)

``graphlake serve`` answers the same over HTTP (``graphlake.api.server``). The names load on first use,
so that a light part (``graphlake.api.access``) can be imported without the retrieval stack."""

from importlib import import_module
from typing import Any

_WHERE = {
    **dict.fromkeys(("GraphLake", "open_lake"), "graphlake.api.lake"),
    **dict.fromkeys(("MAX_BATCH", "MAX_K", "MAX_QUERY_CHARS"), "graphlake.api.validation"),
    **dict.fromkeys(
        (
            "CorpusBusy",
            "CorpusInfo",
            "DamagedLog",
            "DiskFull",
            "DocumentPage",
            "Hit",
            "IndexNotBuilt",
            "MethodInfo",
            "NameConflict",
            "Overloaded",
            "RequestError",
            "RowsCut",
            "SearchResult",
            "StoredDocument",
            "UnknownName",
        ),
        "graphlake.api.results",
    ),
    **dict.fromkeys(("RemoteLake", "ServerError"), "graphlake.api.client"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'graphlake.api' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
