"""Knowledge graph: nodes -> triples (spaCy offline, or an LLM) -> logical edges between nodes.
``triples_spacy`` comes out of the one spaCy pass that also finds the entities (``assets/entities.py``).

``triples_llm`` sits in its own group, ``llm``, so jobs that must run anywhere (``graphlake demo``,
CI) leave it out with ``AssetSelection.all() - AssetSelection.groups("llm")``: it needs a server at
``$GRAPHLAKE_LLM_BASE_URL`` and fails at once, saying so, without one.
"""

import json

import pyarrow as pa
from dagster import AssetExecutionContext, asset

from graphlake.assets.llm_nodes import ask_every_node
from graphlake.kernels.text.triples import Triple, evidence_triples, llm_triples
from graphlake.kernels.text.triples import logical_edges as link_nodes
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import edges_table

LLM_GROUP = "llm"


@asset(
    partitions_def=corpus_partitions,
    group_name=LLM_GROUP,
    metadata={"table": "triples", "partition": {"extractor": "llm"}},
)
def triples_llm(context: AssetExecutionContext, lake: LakeResource, nodes: pa.Table) -> pa.Table:
    """LLM NER then triple extraction per node, node shards at once on a Dask cluster
    (``assets/llm_nodes.py``); answers are cached in the lake, so a re-run is free."""
    node_ids = nodes.column("node_id").to_pylist()
    found, metadata = ask_every_node(context, lake.home, node_ids, nodes.column("text").to_pylist(), llm_triples, "triples_llm")
    context.add_output_metadata(triples_summary(found) | metadata)
    return triples_table(node_ids, found, f"llm:{metadata['model']}")


@asset(
    partitions_def=corpus_partitions,
    group_name="enrichment",
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
    return _rows_table(rows, "evidence")


@asset(
    partitions_def=corpus_partitions,
    group_name="graphs",
    metadata={"table": "edges", "partition": {"kind": "logical"}},
)
def logical_edges(triples_spacy: pa.Table) -> pa.Table:
    """Allan-Poe §3.4: node X -> node Y when a triple relates an entity of X to one only Y names."""
    rows = zip(*(triples_spacy.column(c).to_pylist() for c in ("node_id", "subject", "relation", "object")), strict=True)
    edges = link_nodes(rows)
    return edges_table([e[0] for e in edges], [e[1] for e in edges], [float(e[2]) for e in edges], "logical", "spacy")


def triples_table(node_ids: list[str], found: list[list[Triple]], source: str) -> pa.Table:
    return _rows_table([(node_id, t.subject, t.relation, t.object) for node_id, triples in zip(node_ids, found, strict=True) for t in triples], source)


def _rows_table(rows: list[tuple[str, str, str, str]], source: str) -> pa.Table:
    """(node_id, subject, relation, object) rows as the ``triples`` table."""
    columns = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    names = ("node_id", "subject", "relation", "object")
    return pa.table({**{name: pa.array(list(column), pa.string()) for name, column in zip(names, columns, strict=True)}, "source": pa.array([source] * len(rows), pa.string())})


def triples_summary(found: list[list[Triple]]) -> dict[str, int]:
    return {"nodes": len(found), "nodes_with_triples": sum(1 for t in found if t), "triples": sum(len(t) for t in found)}


ASSETS = [triples_llm, triples_evidence, logical_edges]  # triples_spacy: one output of spaCy's pass, assets/entities.py
