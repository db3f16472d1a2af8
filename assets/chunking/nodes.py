"""Documents -> nodes (the retrieval units), checked to cover every document with exact slices."""

import time
import warnings
from importlib.metadata import version

import pyarrow as pa
from dagster import AssetCheckResult, AssetExecutionContext, AssetIn, PreviewWarning, asset, asset_check

from graphlake.kernels.text.chunking import Chunk, chunk_texts
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.node_cache import NodeCache
from graphlake.warehouse.node_rows import node_rows
from graphlake.warehouse.partitions import corpus_partitions


@asset(partitions_def=corpus_partitions, metadata={"table": "nodes"})
def nodes(context: AssetExecutionContext, lake: LakeResource, documents: pa.Table) -> pa.Table:
    """Chunk every document with its corpus's chunking options; ids are ``<doc_id>#<chunk_idx>``."""
    chunking = lake.registry.get(context.partition_key).effective_chunking
    started = time.perf_counter()
    doc_ids = documents.column("doc_id").to_pylist()
    texts = documents.column("text").to_pylist()
    # a document chunked before, with the same text and options, is not chunked again (an edit chunks one)
    cache = NodeCache(lake.home, "chunks", f"spacy-{version('spacy')}-{chunking.size}-{chunking.overlap}")
    every, chunked = cache.apply(
        texts,
        lambda fresh: chunk_texts(fresh, chunking.size, chunking.overlap),
        lambda chunks: [[c.start, c.end, c.tokens] for c in chunks],
        lambda stored: [Chunk(*c) for c in stored],
    )
    table = node_rows(doc_ids, texts, every)
    context.add_output_metadata(
        {
            "chunk_size": chunking.size or "whole document",
            "chunk_overlap": chunking.overlap,
            "documents": documents.num_rows,
            "documents_chunked": chunked,  # the rest reused
            "multi_chunk_documents": table.column("chunk_idx").to_pylist().count(1),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )
    return table


# Checks on partitioned assets are a Dagster preview feature; it is the only way to check per corpus.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", PreviewWarning)

    @asset_check(
        asset=nodes,
        partitions_def=corpus_partitions,
        additional_ins={"documents": AssetIn("documents")},
        blocking=True,
        description="Every document has nodes numbered 0..n-1, each the exact slice of its text it claims to be.",
    )
    def nodes_cover_documents(nodes: pa.Table, documents: pa.Table) -> AssetCheckResult:
        texts = dict(zip(documents.column("doc_id").to_pylist(), documents.column("text").to_pylist(), strict=True))
        chunks: dict[str, list[int]] = {}
        wrong_slices = []
        for row in nodes.select(["node_id", "doc_id", "chunk_idx", "text", "start", "end"]).to_pylist():
            chunks.setdefault(row["doc_id"], []).append(row["chunk_idx"])
            if texts.get(row["doc_id"], "")[row["start"] : row["end"]] != row["text"]:
                wrong_slices.append(row["node_id"])
        uncovered = [doc_id for doc_id in texts if doc_id not in chunks]
        gaps = [doc_id for doc_id, idx in chunks.items() if sorted(idx) != list(range(len(idx)))]
        unknown = [doc_id for doc_id in chunks if doc_id not in texts]
        problems = {"documents_without_nodes": uncovered, "non_contiguous_chunks": gaps, "unknown_documents": unknown, "wrong_slices": wrong_slices}
        return AssetCheckResult(
            passed=not any(problems.values()),
            metadata={name: len(ids) for name, ids in problems.items()} | {"examples": str({k: v[:3] for k, v in problems.items() if v})},
        )
