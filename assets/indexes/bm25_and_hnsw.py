"""The BM25 index and the dense HNSW index of a corpus's nodes."""

import time
from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, Config, asset

from graphlake.assets.vectors.encoders import encoding_model
from graphlake.retrieval.index.kinds import write_index
from graphlake.retrieval.index.tables import dense_matrix, retrieval_texts
from graphlake.warehouse.encoder_specs import dimension
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class BM25Config(Config):
    k1: float = 0.9
    b: float = 0.4


class HNSWConfig(Config):
    m: int = 32
    ef_construction: int = 200


@asset(partitions_def=corpus_partitions)
def bm25_index(context: AssetExecutionContext, config: BM25Config, lake: LakeResource, nodes: pa.Table, documents: pa.Table) -> None:
    """BM25 (Lucene formula, Porter stemming, English stopwords) over the nodes, as an artefact folder."""
    from graphlake.kernels.text.bm25 import BM25Index

    started = time.perf_counter()
    index = BM25Index.build(retrieval_texts(nodes, documents), k1=config.k1, b=config.b)
    node_ids = nodes.column("node_id").to_pylist()

    folder = write_index(lake.storage, "bm25", context.partition_key, node_ids, index.save)
    context.add_output_metadata({"nodes": len(node_ids), "k1": config.k1, "b": config.b, "build_seconds": round(time.perf_counter() - started, 2), **_size(folder)})


@asset(partitions_def=corpus_partitions)
def dense_hnsw_index(context: AssetExecutionContext, config: HNSWConfig, lake: LakeResource, dense_vectors: pa.Table) -> None:
    """faiss HNSW (inner product) over the dense vectors."""
    import faiss

    started = time.perf_counter()
    spec, made_by = encoding_model(lake, context.partition_key, "dense")
    matrix = dense_matrix(dense_vectors, dimension(spec) or 0)
    index = faiss.IndexHNSWFlat(matrix.shape[1], config.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = config.ef_construction
    index.add(matrix)
    node_ids = dense_vectors.column("node_id").to_pylist()

    def fill(folder: Path) -> None:
        faiss.write_index(index, str(folder / "hnsw.faiss"))

    folder = write_index(lake.storage, "dense_hnsw", context.partition_key, node_ids, fill, {"dense": made_by})
    context.add_output_metadata({"nodes": len(node_ids), "m": config.m, "build_seconds": round(time.perf_counter() - started, 2), **_size(folder)})


def _size(folder: Path) -> dict[str, int]:
    return {"index_bytes": sum(p.stat().st_size for p in folder.iterdir() if p.is_file())}
