"""GraphER's learned part as an asset: alpha tuned and the GAT / MLP trained on a training corpus's
queries, for use on this corpus (``retrieval/training/grapher.py`` has the method)."""

from dagster import AssetExecutionContext, AssetKey, Config, asset

from graphlake.retrieval.learned_kinds import INDEX_KINDS, grapher_reads
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grapher import DEFAULT_BASE
from graphlake.retrieval.training.grapher import learn
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


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


@asset(
    partitions_def=corpus_partitions,
    deps=[AssetKey(name) for name in ("nodes", "qrels", *INDEX_KINDS.index_assets(grapher_reads(load_methods())))],
)
def graph_rankers(context: AssetExecutionContext, config: GraphRankersConfig, lake: LakeResource) -> None:
    """Tuned alpha per propagation ranker and trained GAT / MLP rankers, as an artefact folder."""
    context.add_output_metadata(learn(lake.storage, context.partition_key, config, context.log.info))
