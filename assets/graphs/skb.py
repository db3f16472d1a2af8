"""GRASP's structured knowledge bases (SKBs) of a corpus; ``retrieval/index/skb.py`` has the method, and
``wiki_evidence`` is an oracle (built from gold evidence)."""

import json
import time
from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.kernels.plan.match import Adjacency
from graphlake.kernels.plan.skb_builders import ORACLE_SOURCES
from graphlake.retrieval.index.skb import SKB_ARTIFACT, adjacency_file, build, coverage
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class SKBConfig(Config):
    sources: list[str] | None = None  # None: the corpus's (its linking, warehouse/linking.py)


@asset(
    partitions_def=corpus_partitions,
    deps=[AssetKey(name) for name in ("documents", "nodes", "foreign_keys", "queries", "entities_spacy", "mentions_spacy", "citation_edges")],
)
def skb(context: AssetExecutionContext, config: SKBConfig, lake: LakeResource) -> None:
    """Typed nodes and relations per source (tables skb_nodes, skb_edges), and each source's adjacency as
    the plans read it (CSR per relation, both directions); for 2Wiki the extracted KB's coverage of the gold evidence."""
    corpus = context.partition_key
    spec = lake.registry.get(corpus)
    sources = config.sources or list(spec.effective_linking.skb_sources)
    summary: dict = {}
    adjacencies = {}
    for source in sources:
        started = time.perf_counter()
        built = build(lake.storage, corpus, source, spec.train_corpus)
        nodes, edges = built.tables()
        lake.storage.write("skb_nodes", {"corpus": corpus, "source": source}, nodes)
        lake.storage.write("skb_edges", {"corpus": corpus, "source": source}, edges)
        adjacencies[source] = Adjacency.of(nodes, edges)
        summary[source] = {
            "oracle": source in ORACLE_SOURCES,
            "nodes": dict(sorted(_counts(nodes.column("label")).items())),
            "edges": dict(sorted(_counts(edges.column("relation")).items())),
            "seconds": round(time.perf_counter() - started, 2),
        }
        if source == "wiki_rules":
            summary[source]["coverage"] = coverage(lake.storage, corpus, built)

    def write(folder: Path) -> None:
        (folder / "sources.json").write_text(json.dumps(summary, indent=1))
        for source, adjacency in adjacencies.items():
            adjacency.save(folder / adjacency_file(source))

    lake.storage.write_artifact(SKB_ARTIFACT, {"corpus": corpus}, write)
    context.add_output_metadata({"sources": MetadataValue.json(summary), **{f"{s}/edges": sum(v["edges"].values()) for s, v in summary.items()}})


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    counts = column.value_counts().to_pylist()
    return {c["values"]: c["counts"] for c in counts}
