"""Entities and mentions found by an LLM, one node at a time (node shards at once on a Dask cluster)."""

import pyarrow as pa
from dagster import AssetExecutionContext, multi_asset

from graphlake.assets.enrichment.entities import NODE_INPUTS, RegexEntityConfig, entity_outs, extract_entities
from graphlake.assets.llm_nodes import ask_every_node
from graphlake.kernels.text.entities import Mention
from graphlake.kernels.text.triples import llm_entities
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


@multi_asset(name="llm_entities", outs=entity_outs("llm"), ins=NODE_INPUTS, partitions_def=corpus_partitions)
def llm_entity_assets(context: AssetExecutionContext, config: RegexEntityConfig, lake: LakeResource, nodes: pa.Table, documents: pa.Table):
    """NER by an LLM (GraphER's prompt, answers cached in the lake), node shards at once on a Dask
    cluster (``assets/llm_nodes.py``); opt-in: needs GRAPHLAKE_LLM_BASE_URL."""
    spent: dict = {}

    def extract(texts: list[str]) -> list[list[Mention]]:
        found, metadata = ask_every_node(context, lake.home, nodes.column("node_id").to_pylist(), texts, llm_entities, "entities_llm")
        spent.update(metadata)
        return [[(name, "LLM") for name in names] for names in found]

    yield from extract_entities(context, "llm", config.link_titles, nodes, documents, extract, lambda: spent)
