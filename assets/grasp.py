"""GRASP's learned Stage 2 as an asset: the fusion of every tuned ``plan_rrf`` chosen by the paper's grids
on the training corpus's validation queries (``retrieval/grasp_fusion.py`` has the method)."""

from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.retrieval.grasp_fusion import learn, reads
from graphlake.retrieval.indexes import index_assets
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class GraspFusionConfig(Config):
    validation_share: float = 0.2  # of the training queries; the rest trains GRASP's reranker
    seed: int = 0


@asset(
    partitions_def=corpus_partitions,
    group_name="retrieval",
    deps=[AssetKey(name) for name in ("nodes", "queries", "qrels", *index_assets(reads(load_methods())))],
)
def grasp_fusion(context: AssetExecutionContext, config: GraspFusionConfig, lake: LakeResource) -> None:
    """Static or dynamic RRF and its weights per tuned fusion, chosen by validation Hit@1 over 1,290,429 settings."""
    tuned, summary = learn(lake.lake, context.partition_key, config, context.log.info)
    lake.lake.write_artifact("grasp_fusion", {"corpus": context.partition_key}, tuned.save)
    context.add_output_metadata(summary | ({"report": MetadataValue.json(tuned.report)} if tuned.report else {}))
