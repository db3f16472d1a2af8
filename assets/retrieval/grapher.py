"""GraphER's learned part as an asset: alpha tuned and the GAT / MLP trained on a training corpus's
queries, for use on this corpus (``retrieval/training/grapher.py`` has the method)."""

from dagster import AssetExecutionContext, Config

from graphlake.assets.retrieval.learned import learned_asset
from graphlake.retrieval.models.grapher import DEFAULT_BASE
from graphlake.retrieval.training.grapher import learn
from graphlake.warehouse.storage import LakeStorage


class GraphRankersConfig(Config):
    base: str = DEFAULT_BASE  # the method whose candidates are reranked
    metric_k: int = 10  # tuned for perfect recall at this cutoff, GraphER's headline metric
    networks: list[str] | None = None  # the networks to train (gat, mlp); None: those the declared methods use
    validation_share: float = 0.2  # held out to pick learning rate, weight decay and epochs
    learning_rates: list[float] = [1e-3, 3e-4]
    weight_decays: list[float] = [0.0, 1e-4]
    max_epochs: int = 30
    patience: int = 5  # epochs without a better validation PR@K before a setting stops
    seed: int = 0


def fit(context: AssetExecutionContext, config: GraphRankersConfig, storage: LakeStorage) -> dict:
    """Tuned alpha per propagation ranker and trained GAT / MLP rankers, as an artefact folder."""
    return learn(storage, context.partition_key, config, context.log.info)


graph_rankers = learned_asset("graph_rankers", GraphRankersConfig, fit, ("nodes", "qrels"))
