"""Allan-Poe's logical edges: node X -> node Y when a triple relates an entity of X to one only Y names."""

import pyarrow as pa
from dagster import asset

from graphlake.kernels.text.triples import logical_edges as link_nodes
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import edges_table


@asset(
    partitions_def=corpus_partitions,
    metadata={"table": "edges", "partition": {"kind": "logical"}},
)
def logical_edges(triples_spacy: pa.Table) -> pa.Table:
    """Allan-Poe §3.4: node X -> node Y when a triple relates an entity of X to one only Y names."""
    rows = zip(*(triples_spacy.column(c).to_pylist() for c in ("node_id", "subject", "relation", "object")), strict=True)
    edges = link_nodes(rows)
    return edges_table([e[0] for e in edges], [e[1] for e in edges], [float(e[2]) for e in edges], "logical", "spacy")
