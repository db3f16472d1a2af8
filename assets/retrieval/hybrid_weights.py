"""Allan-Poe's path weights (and the KG reward's weight) tuned on the training queries."""

from dagster import AssetExecutionContext

from graphlake.assets.retrieval.learned import learned_asset
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.training.hybrid_weights import tune
from graphlake.warehouse.storage import LakeStorage


def fit(context: AssetExecutionContext, config: None, storage: LakeStorage) -> dict:
    """Allan-Poe's path weights tuned on the training queries (§5.7), for ``weights: tuned_two`` / ``tuned_three``,
    and the KG reward's ``kg_weight: tuned``."""
    tuned = tune(storage, context.partition_key)
    storage.write_artifact("hybrid_weights", {"corpus": context.partition_key}, tuned.save)
    if isinstance(tuned, Untrained):
        return {"note": tuned.reason}
    report = tuned.report
    return {
        "train_corpus": report["source"]["corpus"],
        "queries": report["source"]["queries"],
        "two": str(tuned.two),
        "three": str(tuned.three),
        **{f"ndcg@10_{path}": value for path, value in report["single_ndcg@10"].items()},
        "ndcg@10_two": report["two"]["ndcg@10"][report["two"]["alpha"]],
        "ndcg@10_three": report["three"]["ndcg@10"][report["three"]["alpha"]],
        "kg_weight": "none" if tuned.kg is None else tuned.kg,
    }


hybrid_weights = learned_asset("hybrid_weights", None, fit, ("queries", "qrels"), also=("hybrid_graph_index",))  # no settings: the grids are §5.7's
