"""Stage 3 graphs from entity mentions: the SPRIG entity-passage graph and GraphER's conceptual edges.

Both read the ``mentions`` partition of the extractor named in their config straight from the
lake, so one asset serves spaCy or regex mentions; they declare both mentions assets as deps so a
full build orders them after whichever extractor they read. Each writes its own ``kind`` partition
of ``edges`` with ``source`` = the extractor.
"""

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from dagster import AssetExecutionContext, AssetKey, Config, asset

from graphlake.kernels.text.entities import conceptual_weights, cooccurrence_weights
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import StorageError
from graphlake.warehouse.tables import edges_table

EXTRACTORS = ("spacy", "regex")


MENTION_DEPS = [AssetKey(f"mentions_{extractor}") for extractor in EXTRACTORS]


class CooccurrenceConfig(Config):
    """SPRIG §3.2: ``w(e, n) = tf(e, n) * log(N / df(e)) * df(e) ** -gamma``, then SPRIG-PRUNE."""

    extractor: str = "spacy"
    gamma: float = 0.5  # hub down-weighting exponent; 0 disables it
    hub_prune_percent: float = 0.0  # drop the top x% entities by df (SPRIG's +PRUNE uses 1)
    degree_cap: int = 0  # keep each entity's m heaviest edges; 0 keeps all


class ConceptualConfig(Config):
    """GraphER A.3: ``w(i -> j) = |E(i) & E(j)| / |E(j)|``."""

    extractor: str = "spacy"
    # an entity in df nodes makes df * (df - 1) directed pairs; above this df it links nothing
    # (it still counts in |E(j)|). 0 = no limit, fine for candidate subgraphs, quadratic on corpora.
    max_entity_df: int = 100


def _edge_asset(kind: str):
    """An asset writing the ``kind`` partition of ``edges`` from mentions."""
    return asset(partitions_def=corpus_partitions, deps=MENTION_DEPS, metadata={"table": "edges", "partition": {"kind": kind}})


@_edge_asset("cooccurrence")
def cooccurrence_edges(context: AssetExecutionContext, config: CooccurrenceConfig, lake: LakeResource, nodes: pa.Table) -> pa.Table:
    """The entity-node bipartite graph (src = entity_id, dst = node_id), TF-IDF weighted with hub down-weighting."""
    started = time.perf_counter()
    mentions, node, entity_ids = _mentions(lake, context.partition_key, config.extractor, nodes)
    counts = mentions.column("count").to_numpy()
    rows, weight = cooccurrence_weights(entity_ids.indices.to_numpy(), node, counts, nodes.num_rows, config.gamma, config.hub_prune_percent, config.degree_cap)
    edges = edges_table(mentions.column("entity_id").take(rows), mentions.column("node_id").take(rows), weight, "cooccurrence", config.extractor)
    context.add_output_metadata(
        {
            "extractor": config.extractor,
            "passages_total": nodes.num_rows,
            **_degree_stats(edges, ("entities", "passages")),
            "pruned_or_capped_mentions": mentions.num_rows - len(rows),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )
    return edges


@_edge_asset("conceptual")
def conceptual_edges(context: AssetExecutionContext, config: ConceptualConfig, lake: LakeResource, nodes: pa.Table) -> pa.Table:
    """Directed node-node edges between nodes sharing an entity, weighted by the share of the target's entities."""
    started = time.perf_counter()
    _, node, entity_ids = _mentions(lake, context.partition_key, config.extractor, nodes)
    src, dst, weight = conceptual_weights(node, entity_ids.indices.to_numpy(), nodes.num_rows, len(entity_ids.dictionary), config.max_entity_df)
    node_ids = nodes.column("node_id")
    edges = edges_table(node_ids.take(src), node_ids.take(dst), weight, "conceptual", config.extractor)
    context.add_output_metadata(
        {
            "extractor": config.extractor,
            "max_entity_df": config.max_entity_df,
            **_degree_stats(edges, ("src_nodes", "dst_nodes")),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )
    return edges


def _mentions(lake: LakeResource, corpus: str, extractor: str, nodes: pa.Table) -> tuple[pa.Table, np.ndarray, pa.DictionaryArray]:
    """The extractor's mentions and, per row, the position of its node in ``nodes`` and its entity's code."""
    if extractor not in EXTRACTORS:
        raise ValueError(f"corpus {corpus!r}: unknown extractor {extractor!r}; choose one of {EXTRACTORS}")
    try:
        mentions = lake.storage.read("mentions", {"corpus": corpus, "extractor": extractor})
    except StorageError as error:
        raise StorageError(f"corpus {corpus!r} has no {extractor} mentions; materialize mentions_{extractor} first ({error})") from error
    position = pc.index_in(mentions.column("node_id"), value_set=nodes.column("node_id").combine_chunks())
    if position.null_count:
        unknown = mentions.column("node_id").filter(pc.is_null(position)).unique().to_pylist()[:3]
        raise ValueError(f"corpus {corpus!r}: {extractor} mentions name nodes not in `nodes` (e.g. {unknown}); rebuild mentions_{extractor}")
    return mentions, position.to_numpy(), mentions.column("entity_id").combine_chunks().dictionary_encode()


def _degree_stats(edges: pa.Table, sides: tuple[str, str]) -> dict:
    """Edge count, then per side the nodes with an edge and their p95 degree (SPRIG Table A.4's Degp95)."""
    stats = {"edges": edges.num_rows}
    for column, side in zip(("src", "dst"), sides):
        degree = edges.column(column).value_counts().field("counts").to_numpy() if edges.num_rows else np.zeros(0)
        stats[side] = len(degree)
        stats[f"p95_degree_{side}"] = round(float(np.percentile(degree, 95)), 2) if len(degree) else 0.0
    return stats
