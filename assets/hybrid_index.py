"""Allan-Poe's hybrid graph index as an asset: one graph over the corpus's dense, SPLADE and BM25
vectors that every ``hybrid_graph`` method searches with its own weights (``kernels/hybrid_graph.py``)."""

import json
from pathlib import Path
from typing import Literal

from dagster import AssetExecutionContext, AssetKey, Config, asset

from graphlake.kernels.hybrid_graph import BuildConfig, build
from graphlake.kernels.hybrid_vectors import PATHS, Queries
from graphlake.retrieval.indexes import NODE_IDS_FILE, LakeIndexes, hybrid_vectors, index_assets
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class HybridIndexConfig(Config):
    knn_k: int = 64  # k-NN graph degree before pruning (the authors' code)
    degree: int = 32  # semantic edges per node, fixed
    keyword_degree: int = 8  # recycled keyword edges kept per node (the code's 8 slots)
    layout: Literal["paper", "code"] = "code"  # code's: higher recall on SciFact for every weighting
    entry: Literal["largest_norm", "smallest_norm"] = "largest_norm"
    entry_points: int = 32
    device: Literal["cpu", "numpy", "cuda"] = "cpu"  # cpu: numba; cuda: cupy (the gpu extra); numpy: the cupy code on the CPU


@asset(
    partitions_def=corpus_partitions,
    group_name="indexes",
    deps=[AssetKey(name) for name in index_assets({"dense", "splade", "bm25"})],
)
def hybrid_graph_index(context: AssetExecutionContext, config: HybridIndexConfig, lake: LakeResource) -> None:
    """The hybrid graph (semantic and keyword edges, entry points, per-path calibration), as an artefact folder."""
    indexes = LakeIndexes(lake.lake, context.partition_key)
    vectors = hybrid_vectors(indexes)
    nodes = Queries(vectors.dense, vectors.sparse, indexes.get("bm25").token_counts(indexes.texts()))
    graph = build(vectors, nodes, BuildConfig(**config.model_dump()))

    def fill(folder: Path) -> None:
        graph.save(folder)
        (folder / NODE_IDS_FILE).write_text(json.dumps(indexes.node_ids), encoding="utf-8")

    lake.lake.write_artifact("hybrid_graph", {"corpus": context.partition_key}, fill)
    keyword = (graph.keyword >= 0).sum(axis=1)
    context.add_output_metadata(
        {
            "nodes": len(vectors),
            **{f"{step}_seconds": value for step, value in graph.build["seconds"].items()},
            **{f"{kind}_edge_bytes": size for kind, size in graph.edge_bytes().items()},
            "keyword_degree_mean": round(float(keyword.mean()), 2) if len(keyword) else 0.0,
            "keyword_degree_max": int(keyword.max()) if len(keyword) else 0,
            **{f"scale_{path}": round(float(scale), 6) for path, scale in zip(PATHS, graph.scales, strict=True)},
        }
    )
