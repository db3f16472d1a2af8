"""ORACLE evidence triples: the gold triples of a corpus's own questions, on the nodes that name them."""

import json

import pyarrow as pa
from dagster import AssetExecutionContext, asset

from graphlake.kernels.text.triples import evidence_triples
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import triple_rows_table


@asset(
    partitions_def=corpus_partitions,
    metadata={"table": "triples", "partition": {"extractor": "evidence"}},
)
def triples_evidence(context: AssetExecutionContext, queries: pa.Table, nodes: pa.Table, documents: pa.Table) -> pa.Table:
    """ORACLE: the gold evidence triples of the corpus's own questions (2Wiki's ``evidences``) on the nodes
    whose title names either end. Built from the evaluated questions' answers' paths, it bounds what a
    knowledge graph could give; it is never a method's real result. Empty for a corpus without evidences."""
    titles = dict(zip(*(documents.column(c).to_pylist() for c in ("doc_id", "title")), strict=True))
    node_titles = {node_id: titles.get(doc_id) or "" for node_id, doc_id in zip(*(nodes.column(c).to_pylist() for c in ("node_id", "doc_id")), strict=True)}
    evidences = [t for m in queries.column("metadata").to_pylist() for t in (json.loads(m) if m else {}).get("evidences", [])]
    rows = evidence_triples(evidences, node_titles)
    named = {(s, r, o) for _, s, r, o in rows}
    distinct = {tuple(t) for t in evidences if isinstance(t, list)}
    context.add_output_metadata({"oracle": True, "evidence_triples": len(distinct), "triples_on_nodes": len(named), "nodes_with_triples": len({r[0] for r in rows})})
    return triple_rows_table(rows, "evidence")
