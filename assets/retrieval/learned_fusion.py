"""graphlake's own learned stage as an asset: a LightGBM ranker per declared ``learned_fusion``, trained on
the training corpus's queries over its inputs' candidates (``retrieval/training/learned_fusion.py``)."""

from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.retrieval.learned_kinds import INDEX_KINDS, learned_fusion_reads
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.training.learned_fusion import learn
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class LearnedFusionConfig(Config):
    validation_share: float = 0.2  # of the training queries, held out to stop the boosting
    seed: int = 0
    rounds: int = 500  # at most; early stopping keeps the best on the held-out share
    patience: int = 50  # rounds without a better held-out nDCG@10 before stopping
    learning_rate: float = 0.05
    num_leaves: int = 15
    min_data_in_leaf: int = 20


@asset(
    partitions_def=corpus_partitions,
    deps=[AssetKey(name) for name in ("nodes", "queries", "qrels", *INDEX_KINDS.index_assets(learned_fusion_reads(load_methods())))],
)
def learned_fusion(context: AssetExecutionContext, config: LearnedFusionConfig, lake: LakeResource) -> None:
    """A lambdarank model over the first stages' candidates per learned fusion, early-stopped on held-out training queries."""
    rankers, summary = learn(lake.storage, context.partition_key, config, context.log.info)
    lake.storage.write_artifact("learned_fusion", {"corpus": context.partition_key}, rankers.save)
    importance = {name: fusion["importance"] for name, fusion in rankers.report.get("fusions", {}).items()}
    context.add_output_metadata(summary | ({"report": MetadataValue.json(rankers.report), "importance": MetadataValue.json(importance)} if rankers.report.get("fusions") else {}))
