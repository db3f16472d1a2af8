"""graphlake's own learned stage as an asset: a LightGBM ranker per declared ``learned_fusion``, trained on
the training corpus's queries over its inputs' candidates (``retrieval/training/learned_fusion.py``)."""

from dagster import AssetExecutionContext, Config, MetadataValue

from graphlake.assets.retrieval.learned import learned_asset
from graphlake.retrieval.training.learned_fusion import learn
from graphlake.warehouse.storage import LakeStorage


class LearnedFusionConfig(Config):
    validation_share: float = 0.2  # of the training queries, held out to stop the boosting
    seed: int = 0
    rounds: int = 500  # at most; early stopping keeps the best on the held-out share
    patience: int = 50  # rounds without a better held-out nDCG@10 before stopping
    learning_rate: float = 0.05
    num_leaves: int = 15
    min_data_in_leaf: int = 20


def fit(context: AssetExecutionContext, config: LearnedFusionConfig, storage: LakeStorage) -> dict:
    """A lambdarank model over the first stages' candidates per learned fusion, early-stopped on held-out training queries."""
    rankers, summary = learn(storage, context.partition_key, config, context.log.info)
    storage.write_artifact("learned_fusion", {"corpus": context.partition_key}, rankers.save)
    importance = {name: fusion["importance"] for name, fusion in rankers.report.get("fusions", {}).items()}
    return summary | ({"report": MetadataValue.json(rankers.report), "importance": MetadataValue.json(importance)} if rankers.report.get("fusions") else {})


learned_fusion = learned_asset("learned_fusion", LearnedFusionConfig, fit, ("nodes", "queries", "qrels"))
