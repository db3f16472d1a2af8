"""Knowledge-graph triples found by an LLM per node; spaCy's come out of the enrichment stage's one pass."""

import pyarrow as pa
from dagster import AssetExecutionContext, asset

from graphlake.assets.llm_nodes import ask_every_node
from graphlake.kernels.text.triples import llm_triples
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import triples_summary, triples_table


@asset(
    partitions_def=corpus_partitions,
    metadata={"table": "triples", "partition": {"extractor": "llm"}},
)
def triples_llm(context: AssetExecutionContext, lake: LakeResource, nodes: pa.Table) -> pa.Table:
    """LLM NER then triple extraction per node, node shards at once on a Dask cluster
    (``assets/llm_nodes.py``); answers are cached in the lake, so a re-run is free."""
    node_ids = nodes.column("node_id").to_pylist()
    found, metadata = ask_every_node(context, lake.home, node_ids, nodes.column("text").to_pylist(), llm_triples, "triples_llm")
    context.add_output_metadata(triples_summary(found) | metadata)
    return triples_table(node_ids, found, f"llm:{metadata['model']}")
