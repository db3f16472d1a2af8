"""The lake's cross-encoder as an asset, fine-tuned on the training queries of the lake's corpora
(``retrieval/training/reranker.py`` has the method). The defaults fit a 45-minute budget on a 2-core CPU (a
few thousand groups, about one epoch); a GPU gets through more epochs in the same budget."""

from dagster import AssetExecutionContext, Config, MetadataValue

from graphlake.assets.retrieval.learned import learned_asset
from graphlake.retrieval.learned_kinds import RERANKER_MINERS
from graphlake.retrieval.training.reranker import learn
from graphlake.warehouse.storage import LakeStorage


class RerankerConfig(Config):
    corpora: list[str] = []  # whose train-split queries teach; empty: every declared corpus that has some
    negatives: int = 7  # hard negatives per group
    mine_depth: int = 30  # negatives come from each miner's top this many
    miners: list[str] = list(RERANKER_MINERS)  # methods (retrieval/methods.yaml) that mine them
    max_queries_per_corpus: int = 0  # a seeded sample of each corpus's train queries; 0: all
    validation_share: float = 0.05
    validation_depth: int = 30  # reranking depth of the held-out queries' dense ranking
    learning_rate: float = 1e-4
    groups_per_step: int = 4
    epochs: int = 2
    budget_minutes: float = 45.0  # training stops here even mid-epoch and anneals to it; the best checkpoint is kept
    validate_every: int = 100
    max_tokens: int = 192  # query + passage, in training and in use
    seed: int = 0


def fit(context: AssetExecutionContext, config: RerankerConfig, storage: LakeStorage) -> dict:
    """A cross-encoder fine-tuned on the lake's training queries, stored with its curve and validation."""
    explicit = "reranker" in (context.run.run_config.get("ops") or {})  # a run that sets this config asks for it
    summary = learn(storage, config, context.log.info, explicit)
    if "curve" in summary:
        summary["curve"] = MetadataValue.json(summary["curve"])
    return summary


reranker = learned_asset("reranker", RerankerConfig, fit, ("nodes", "queries", "qrels"), per_corpus=False)
