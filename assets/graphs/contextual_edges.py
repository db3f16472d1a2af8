"""Edges between adjacent chunks of a document."""

import pyarrow as pa
from dagster import asset

from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import edges_table


@asset(
    partitions_def=corpus_partitions,
    metadata={"table": "edges", "partition": {"kind": "contextual"}},
)
def contextual_edges(nodes: pa.Table) -> pa.Table:
    """Edges between consecutive chunks of a document, stored in both directions (weight 1)."""
    ordered = nodes.select(["node_id", "doc_id", "chunk_idx"]).sort_by([("doc_id", "ascending"), ("chunk_idx", "ascending")])
    ids, docs = ordered.column("node_id").to_pylist(), ordered.column("doc_id").to_pylist()
    pairs = [(ids[i], ids[i + 1]) for i in range(len(ids) - 1) if docs[i] == docs[i + 1]]
    src = [a for a, b in pairs] + [b for a, b in pairs]
    dst = [b for a, b in pairs] + [a for a, b in pairs]
    return edges_table(src, dst, [1.0] * len(src), "contextual", "chunking")
