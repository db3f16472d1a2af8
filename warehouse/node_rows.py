"""Documents cut into nodes, the retrieval units: one function for the build (``assets/chunking/nodes.py``)
and for the fresh segment of a lake-owned corpus's pending writes (``retrieval/pending/segment.py``), so that
a written document is searched as the node rows its fold will store."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from graphlake.kernels.text.chunking import Chunk
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.tables import row_schema


def node_id(doc_id: str, chunk_idx: int) -> str:
    return f"{doc_id}#{chunk_idx}"


def node_rows(doc_ids: Sequence[str], texts: Sequence[str], chunks: Sequence[Sequence[Chunk]]) -> pa.Table:
    """The nodes table's rows of documents cut at ``chunks`` (per document, as ``chunk_texts`` cuts it):
    ids ``<doc_id>#<chunk_idx>``, each node's text an exact slice of its document's, hashed."""
    rows: dict[str, list] = {name: [] for name in row_schema("nodes").names}
    for doc_id, text, cuts in zip(doc_ids, texts, chunks, strict=True):
        for index, chunk in enumerate(cuts):
            piece = text[chunk.start : chunk.end]
            rows["node_id"].append(node_id(doc_id, index))
            rows["doc_id"].append(doc_id)
            rows["chunk_idx"].append(index)
            rows["text"].append(piece)
            rows["start"].append(chunk.start)
            rows["end"].append(chunk.end)
            rows["content_hash"].append(content_hash(piece))
    return pa.table(rows, schema=row_schema("nodes"))
