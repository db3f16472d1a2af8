"""graphlake's own learned stage as an asset: a LightGBM ranker per declared ``learned_fusion``, trained on
the training corpus's queries over its inputs' candidates (``retrieval/training/learned_fusion.py``)."""

from dagster import AssetExecutionContext, Config, MetadataValue

from graphlake.assets.retrieval.learned import learned_asset
from graphlake.retrieval.training.learned_fusion import learn
from graphlake.warehouse.storage import LakeStorage


class LearnedFusionConfig(Config):
    folds: int = 5  # of the training queries, by which the rounds and the partner signals are chosen
    seed: int = 0
    rounds: int = 500  # at most; the folds' best mean nDCG@10 chooses how many
    patience: int = 50  # rounds without a better mean out-of-fold nDCG@10 before stopping
    learning_rate: float = 0.05
    num_leaves: int = 15
    min_data_in_leaf: int = 20


def fit(context: AssetExecutionContext, config: LearnedFusionConfig, storage: LakeStorage) -> dict:
    """A lambdarank model over the first stages' candidates per learned fusion, its rounds and partner signals chosen by cross-validation."""
    rankers, summary = learn(storage, context.partition_key, config, context.log.info)
    storage.write_artifact("learned_fusion", {"corpus": context.partition_key}, rankers.save)
    importance = {name: fusion["importance"] for name, fusion in rankers.report.get("fusions", {}).items()}
    return summary | ({"report": MetadataValue.json(rankers.report), "importance": MetadataValue.json(importance)} if rankers.report.get("fusions") else {})


learned_fusion = learned_asset("learned_fusion", LearnedFusionConfig, fit, ("nodes", "queries", "qrels"))
