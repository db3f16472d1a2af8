"""Allan-Poe's path weights (and the KG reward's weight) tuned on the training queries."""

from dagster import AssetExecutionContext, AssetKey, asset

from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.training.hybrid_weights import tune
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


@asset(
    partitions_def=corpus_partitions,
    deps=[AssetKey(name) for name in ("queries", "qrels", "hybrid_graph_index", *INDEX_KINDS.index_assets({"dense", "splade", "bm25"}))],
)
def hybrid_weights(context: AssetExecutionContext, lake: LakeResource) -> None:
    """Allan-Poe's path weights tuned on the training queries (§5.7), for ``weights: tuned_two`` / ``tuned_three``,
    and the KG reward's ``kg_weight: tuned``."""
    tuned = tune(lake.storage, context.partition_key)
    lake.storage.write_artifact("hybrid_weights", {"corpus": context.partition_key}, tuned.save)
    if isinstance(tuned, Untrained):
        context.add_output_metadata({"note": tuned.reason})
        return
    report = tuned.report
    context.add_output_metadata(
        {
            "train_corpus": report["source"]["corpus"],
            "queries": report["source"]["queries"],
            "two": str(tuned.two),
            "three": str(tuned.three),
            **{f"ndcg@10_{path}": value for path, value in report["single_ndcg@10"].items()},
            "ndcg@10_two": report["two"]["ndcg@10"][report["two"]["alpha"]],
            "ndcg@10_three": report["three"]["ndcg@10"][report["three"]["alpha"]],
            "kg_weight": "none" if tuned.kg is None else tuned.kg,
        }
    )
