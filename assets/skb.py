"""GRASP's knowledge bases as assets: the SKBs a corpus gets (``skb``), their node vectors (``skb_vectors``)
and the rules planner's plan for every query (``skb_plans``), so plans can be read with ``graphlake sql``.
``retrieval/index/skb.py`` has the method; ``wiki_evidence`` is an oracle (built from gold evidence)."""

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.common.progress import StepProgress
from graphlake.kernels.plan.fusion import cell_name
from graphlake.kernels.plan.skb_builders import ORACLE_SOURCES
from graphlake.assets.vectors import EMBEDDING_CACHE, encoding_model
from graphlake.retrieval.index.kinds import MODELS_FILE, read_models
from graphlake.retrieval.index.lake import LakeIndexes
from graphlake.retrieval.index.skb import SKB_ARTIFACT, VECTORS_ARTIFACT, build, coverage, load_vectors, planned, save_vectors, stage_one, vectors_for
from graphlake.retrieval.index.skb import StageOneSettings as Settings
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.models import encode_dense, made_before_identities
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.tables import row_schema

PROGRESS_SLICE = 1024  # texts encoded between two progress reports of skb_vectors


class SKBConfig(Config):
    sources: list[str] | None = None  # None: the corpus's (CorpusSpec.skb_sources)


@asset(
    partitions_def=corpus_partitions,
    group_name="graphs",
    deps=[AssetKey(name) for name in ("documents", "nodes", "foreign_keys", "queries", "entities_spacy", "mentions_spacy", "citation_edges")],
)
def skb(context: AssetExecutionContext, config: SKBConfig, lake: LakeResource) -> None:
    """Typed nodes and relations per source (tables skb_nodes, skb_edges); for 2Wiki the extracted KB's coverage of the gold evidence."""
    corpus = context.partition_key
    spec = lake.registry.get(corpus)
    sources = config.sources or list(spec.skb_sources)
    summary: dict = {}
    for source in sources:
        started = time.perf_counter()
        built = build(lake.lake, corpus, source, spec.train_corpus)
        nodes, edges = built.tables()
        lake.lake.write("skb_nodes", {"corpus": corpus, "source": source}, nodes)
        lake.lake.write("skb_edges", {"corpus": corpus, "source": source}, edges)
        summary[source] = {
            "oracle": source in ORACLE_SOURCES,
            "nodes": dict(sorted(_counts(nodes.column("label")).items())),
            "edges": dict(sorted(_counts(edges.column("relation")).items())),
            "seconds": round(time.perf_counter() - started, 2),
        }
        if source == "wiki_rules":
            summary[source]["coverage"] = coverage(lake.lake, corpus, built)
    lake.lake.write_artifact(SKB_ARTIFACT, {"corpus": corpus}, lambda folder: (folder / "sources.json").write_text(json.dumps(summary, indent=1)))
    context.add_output_metadata({"sources": MetadataValue.json(summary), **{f"{s}/edges": sum(v["edges"].values()) for s, v in summary.items()}})


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    counts = column.value_counts().to_pylist()
    return {c["values"]: c["counts"] for c in counts}


@asset(partitions_def=corpus_partitions, group_name="vectors", deps=[AssetKey("skb"), AssetKey("dense_vectors")])
def skb_vectors(context: AssetExecutionContext, lake: LakeResource) -> None:
    """MiniLM vectors of every SKB node's name, and of the text of nodes with no ``nodes`` row (passages and
    tables reuse dense_vectors): what anchors are linked against. Each distinct text is encoded once, and
    only if the previous build did not encode it."""
    corpus = context.partition_key
    sources = json.loads((lake.lake.artifact(SKB_ARTIFACT, {"corpus": corpus}) / "sources.json").read_text())
    spec, made_by = encoding_model(lake, corpus, "dense")
    previous = _previous_vectors(lake, corpus, made_by)

    def encode(texts: list[str]) -> np.ndarray:  # in slices, so that a long encoding reports progress
        progress = StepProgress("SKB encoding", len(texts), context.log.info, unit="texts")
        parts = []
        for start in range(0, len(texts), PROGRESS_SLICE):
            parts.append(encode_dense(spec, texts[start : start + PROGRESS_SLICE], cache=lake.lake.home / EMBEDDING_CACHE))
            progress.advance(len(parts[-1]))
        return np.concatenate(parts) if parts else encode_dense(spec, [])

    def fill(folder: Path) -> None:
        save_vectors(folder, vectors)
        (folder / MODELS_FILE).write_text(json.dumps({"dense": made_by}), encoding="utf-8")

    vectors, encoded = vectors_for([lake.lake.read("skb_nodes", {"corpus": corpus, "source": s}) for s in sources], encode, previous)
    lake.lake.write_artifact(VECTORS_ARTIFACT, {"corpus": corpus}, fill)
    context.add_output_metadata({"nodes": len(vectors["ids"]), "texts": len(vectors["hash"]), "encoded": encoded, "reused": len(vectors["hash"]) - encoded})


def _previous_vectors(lake: LakeResource, corpus: str, made_by: dict[str, str]) -> dict | None:
    """The last build's vectors, if the same model made them (an older build that did not record its
    model: the packaged one) and they are in the layout that caches by content hash."""
    if lake.lake.artifact_written_at(VECTORS_ARTIFACT, {"corpus": corpus}) is None:
        return None
    folder = lake.lake.artifact(VECTORS_ARTIFACT, {"corpus": corpus})
    if read_models(folder).get("dense", made_before_identities("dense")) != made_by:
        return None
    stored = load_vectors(folder)
    return stored if "hash" in stored else None


class PlansConfig(Config):
    planners: list[str] = ["rules"]  # add "llm" to record the LLM planner's plans (needs GRAPHLAKE_LLM_BASE_URL)
    max_queries: int = 0  # the first this many queries; 0: all


@asset(partitions_def=corpus_partitions, group_name="retrieval", deps=[AssetKey(name) for name in ("queries", "skb", "skb_vectors", "dense_vectors")])
def skb_plans(context: AssetExecutionContext, config: PlansConfig, lake: LakeResource) -> None:
    """Each planner's plan for every query on every SKB of the corpus, validated and executed: the table
    skb_plans (plan JSON, valid, error or the planner's failure, risk level, n_cand, compiled SQL, ms)."""
    corpus = context.partition_key
    indexes = LakeIndexes(lake.lake, corpus)
    queries = lake.lake.read("queries", {"corpus": corpus}).to_pylist()
    queries = queries[: config.max_queries] if config.max_queries else queries
    summary = {}
    built = json.loads((lake.lake.artifact(SKB_ARTIFACT, {"corpus": corpus}) / "sources.json").read_text())
    for source, planner in ((s, p) for s in built for p in config.planners):
        loaded = indexes.skb(source)
        rows = []
        for query in queries:
            started = time.perf_counter()
            plan, failure = planned(query["text"], loaded, planner, indexes)
            result = stage_one(query["text"], loaded, plan, Settings(), indexes.dense_encoder(), failure)
            rows.append(
                {
                    "query_id": query["query_id"],
                    "query": query["text"],
                    "plan": result.plan.model_dump_json(by_alias=True) if result.plan else None,
                    "valid": result.valid,
                    "error": result.error,
                    "risk_level": result.risk_level,
                    "n_cand": result.n_cand,
                    "sql": result.sql,
                    "plan_ms": round((time.perf_counter() - started) * 1000, 3),  # planning included
                }
            )
        lake.lake.write("skb_plans", {"corpus": corpus, "source": source, "planner": planner}, pa.Table.from_pylist(rows, schema=row_schema("skb_plans")))
        cells = Counter(cell_name(row["valid"], row["n_cand"], row["risk_level"]) for row in rows)
        summary[f"{source}/{planner}"] = {"queries": len(rows), "valid": sum(r["valid"] for r in rows), "cells": dict(sorted(cells.items()))}
    context.add_output_metadata({"plans": MetadataValue.json(summary)})
