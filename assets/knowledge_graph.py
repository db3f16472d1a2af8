"""Knowledge graph: nodes -> triples (spaCy offline, or an LLM) -> logical edges between nodes.

``triples_llm`` sits in its own group, ``llm``, so jobs that must run anywhere (``graphlake demo``,
CI) leave it out with ``AssetSelection.all() - AssetSelection.groups("llm")``: it needs a server at
``$GRAPHLAKE_LLM_BASE_URL`` and fails at once, saying so, without one.
"""

import time

import pyarrow as pa
from dagster import AssetExecutionContext, asset

from graphlake.kernels.llm import LLMOutputError, lake_client
from graphlake.kernels.triples import Triple, llm_triples, spacy_source, spacy_triples
from graphlake.kernels.triples import logical_edges as link_nodes
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import edges_table

LLM_GROUP = "llm"


@asset(
    partitions_def=corpus_partitions,
    group_name="enrichment",
    metadata={"table": "triples", "partition": {"extractor": "spacy"}},
)
def triples_spacy(context: AssetExecutionContext, nodes: pa.Table) -> pa.Table:
    """Subject-verb-object triples from spaCy dependency parses: a knowledge graph with no LLM."""
    started = time.perf_counter()
    node_ids = nodes.column("node_id").to_pylist()
    found = spacy_triples(nodes.column("text").to_pylist())
    context.add_output_metadata(_summary(found) | {"seconds": round(time.perf_counter() - started, 3)})
    return _triples_table(node_ids, found, spacy_source())


@asset(
    partitions_def=corpus_partitions,
    group_name=LLM_GROUP,
    metadata={"table": "triples", "partition": {"extractor": "llm"}},
)
def triples_llm(context: AssetExecutionContext, lake: LakeResource, nodes: pa.Table) -> pa.Table:
    """LLM NER then triple extraction per node; answers are cached in the lake, so a re-run is free."""
    client = lake_client(lake.home)
    node_ids = nodes.column("node_id").to_pylist()
    found: list[list[Triple]] = []
    unparsed = 0
    for node_id, text in zip(node_ids, nodes.column("text").to_pylist(), strict=True):
        try:
            found.append(llm_triples(client, text))
        except LLMOutputError as error:  # one bad answer should not cost the corpus's other calls
            context.log.warning(f"{node_id}: {error}")
            found.append([])
            unparsed += 1
    context.add_output_metadata(_summary(found) | client.stats.as_metadata() | {"model": client.config.model, "unparsed_answers": unparsed})
    return _triples_table(node_ids, found, f"llm:{client.config.model}")


@asset(
    partitions_def=corpus_partitions,
    group_name="graphs",
    metadata={"table": "edges", "partition": {"kind": "logical"}},
)
def logical_edges(triples_spacy: pa.Table) -> pa.Table:
    """Allan-Poe §3.4: node X -> node Y when a triple relates an entity of X to one only Y names."""
    rows = zip(*(triples_spacy.column(c).to_pylist() for c in ("node_id", "subject", "relation", "object")))
    edges = link_nodes(rows)
    return edges_table([e[0] for e in edges], [e[1] for e in edges], [float(e[2]) for e in edges], "logical", "spacy")


def _triples_table(node_ids: list[str], found: list[list[Triple]], source: str) -> pa.Table:
    rows = [(node_id, t) for node_id, triples in zip(node_ids, found, strict=True) for t in triples]
    return pa.table(
        {
            "subject": pa.array([t.subject for _, t in rows], pa.string()),
            "relation": pa.array([t.relation for _, t in rows], pa.string()),
            "object": pa.array([t.object for _, t in rows], pa.string()),
            "node_id": pa.array([node_id for node_id, _ in rows], pa.string()),
            "source": pa.array([source] * len(rows), pa.string()),
        }
    )


def _summary(found: list[list[Triple]]) -> dict[str, int]:
    return {"nodes": len(found), "nodes_with_triples": sum(1 for t in found if t), "triples": sum(len(t) for t in found)}


ASSETS = [triples_spacy, triples_llm, logical_edges]
