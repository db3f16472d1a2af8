"""The dense vectors of the SKB texts GRASP links a plan's anchors with, by the corpus's dense model."""

import json
from pathlib import Path

import numpy as np
from dagster import AssetExecutionContext, AssetKey, asset

from graphlake.assets.vectors.encoders import EMBEDDING_CACHE, encoding_model
from graphlake.common.progress import StepProgress
from graphlake.retrieval.index.encoders import encode_dense
from graphlake.retrieval.index.kinds import MODELS_FILE, read_models
from graphlake.retrieval.index.skb import SKB_ARTIFACT, VECTORS_ARTIFACT, load_vectors, save_vectors, vectors_for
from graphlake.warehouse.encoder_specs import made_before_identities, same_weights
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions

PROGRESS_SLICE = 1024  # texts encoded between two progress reports of skb_vectors


@asset(partitions_def=corpus_partitions, deps=[AssetKey("skb"), AssetKey("dense_vectors")])
def skb_vectors(context: AssetExecutionContext, lake: LakeResource) -> None:
    """MiniLM vectors of every SKB node's name, and of the text of nodes with no ``nodes`` row (passages and
    tables reuse dense_vectors): what anchors are linked against. Each distinct text is encoded once, and
    only if the previous build did not encode it."""
    corpus = context.partition_key
    sources = json.loads((lake.storage.artifact(SKB_ARTIFACT, {"corpus": corpus}) / "sources.json").read_text())
    spec, made_by = encoding_model(lake, corpus, "dense")
    previous = _previous_vectors(lake, corpus, made_by)

    def encode(texts: list[str]) -> np.ndarray:  # in slices, so that a long encoding reports progress
        progress = StepProgress("SKB encoding", len(texts), context.log.info, unit="texts")
        parts = []
        for start in range(0, len(texts), PROGRESS_SLICE):
            parts.append(encode_dense(spec, texts[start : start + PROGRESS_SLICE], cache=lake.storage.home / EMBEDDING_CACHE))
            progress.advance(len(parts[-1]))
        return np.concatenate(parts) if parts else encode_dense(spec, [])

    def fill(folder: Path) -> None:
        save_vectors(folder, vectors)
        (folder / MODELS_FILE).write_text(json.dumps({"dense": made_by}), encoding="utf-8")

    vectors, encoded = vectors_for([lake.storage.read("skb_nodes", {"corpus": corpus, "source": s}) for s in sources], encode, previous)
    lake.storage.write_artifact(VECTORS_ARTIFACT, {"corpus": corpus}, fill)
    context.add_output_metadata({"nodes": len(vectors["ids"]), "texts": len(vectors["hash"]), "encoded": encoded, "reused": len(vectors["hash"]) - encoded})


def _previous_vectors(lake: LakeResource, corpus: str, made_by: dict[str, str]) -> dict | None:
    """The last build's vectors, if the same model made them (an older build that did not record its
    model: the packaged one) and they are in the layout that caches by content hash."""
    if lake.storage.artifact_written_at(VECTORS_ARTIFACT, {"corpus": corpus}) is None:
        return None
    folder = lake.storage.artifact(VECTORS_ARTIFACT, {"corpus": corpus})
    if not same_weights(read_models(folder).get("dense", made_before_identities("dense")), made_by):
        return None
    stored = load_vectors(folder)
    return stored if "hash" in stored else None
