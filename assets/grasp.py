"""GRASP's learned stages as assets: the fusion of every tuned ``plan_rrf`` chosen by the paper's grids on
the training corpus's validation queries (``retrieval/training/grasp_fusion.py``), and the Stage-3 reranker
fine-tuned on its training queries (``retrieval/training/grasp_reranker.py``)."""

from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.retrieval.index.kinds import index_assets
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.training import grasp_reranker as stage3
from graphlake.retrieval.learned_kinds import grasp_fusion_reads, grasp_reranker_reads
from graphlake.retrieval.training.grasp_fusion import learn
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class GraspFusionConfig(Config):
    validation_share: float = 0.2  # of the training queries; the rest trains GRASP's reranker
    seed: int = 0


@asset(
    partitions_def=corpus_partitions,
    group_name="retrieval",
    deps=[AssetKey(name) for name in ("nodes", "queries", "qrels", *index_assets(grasp_fusion_reads(load_methods())))],
)
def grasp_fusion(context: AssetExecutionContext, config: GraspFusionConfig, lake: LakeResource) -> None:
    """Static or dynamic RRF and its weights per tuned fusion, chosen by validation Hit@1 over 1,290,429 settings."""
    tuned, summary = learn(lake.lake, context.partition_key, config, context.log.info)
    lake.lake.write_artifact("grasp_fusion", {"corpus": context.partition_key}, tuned.save)
    context.add_output_metadata(summary | ({"report": MetadataValue.json(tuned.report)} if tuned.report else {}))


class GraspRerankerConfig(Config):
    recipe: str = "auto"  # cpu | gpu | auto (gpu when torch sees CUDA): retrieval/training/grasp_reranker.RECIPES
    validation_share: float = 0.2  # the same draw as grasp_fusion's: these validate, the rest train
    depth: int = 100  # Stage 2's top this many form the pool
    stored_negatives: int = 30  # hardest non-gold of the pool kept per query
    validation_depth: int = 30  # reranked per validation query when choosing the checkpoint
    validate_every: int = 100
    budget_minutes: float = 45.0
    max_neighbours: int = 10  # per relation in the serialisation (App. B.6)
    max_field_tokens: int = 300
    seed: int = 0


@asset(
    partitions_def=corpus_partitions,
    group_name="retrieval",
    deps=[AssetKey(name) for name in ("nodes", "queries", "qrels", "reranker", "grasp_fusion", *index_assets(grasp_reranker_reads(load_methods())))],
)
def grasp_reranker(context: AssetExecutionContext, config: GraspRerankerConfig, lake: LakeResource) -> None:
    """The lake's reranker fine-tuned on serialised Stage-2 candidates of the training queries, with the final fusion's (w, k)."""
    tuned, summary = stage3.learn(lake.lake, context.partition_key, config, context.log.info)
    lake.lake.write_artifact("grasp_reranker", {"corpus": context.partition_key}, tuned.save)
    curve = tuned.report.get("training", {}).get("curve")
    context.add_output_metadata(summary | ({"curve": MetadataValue.json(curve)} if curve else {}))
