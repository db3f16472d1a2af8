"""GRASP's learned stages as assets: the fusion of every tuned ``plan_rrf`` chosen by the paper's grids on
the training corpus's validation queries (``retrieval/training/grasp_fusion.py``), and the Stage-3 reranker
fine-tuned on its training queries (``retrieval/training/grasp_reranker.py``). The rules planner's plan for every query
(``skb_plans``) is stored too, so plans can be read with ``graphlake sql``."""

import json
import time
from collections import Counter

import pyarrow as pa
from dagster import AssetExecutionContext, AssetKey, Config, MetadataValue, asset

from graphlake.assets.retrieval.learned import learned_asset
from graphlake.kernels.plan.fusion import cell_name
from graphlake.retrieval.index.skb import SKB_ARTIFACT
from graphlake.retrieval.index.skb_stage_one import StageOneSettings as Settings
from graphlake.retrieval.index.skb_stage_one import planned, stage_one
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.training import grasp_reranker as stage3
from graphlake.retrieval.training.grasp_fusion import learn
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.tables import row_schema


class GraspFusionConfig(Config):
    validation_share: float = 0.2  # of the training queries; the rest trains GRASP's reranker
    seed: int = 0


def fit_fusion(context: AssetExecutionContext, config: GraspFusionConfig, storage: LakeStorage) -> dict:
    """Static or dynamic RRF and its weights per tuned fusion, chosen by validation Hit@1 over 1,290,429 settings."""
    tuned, summary = learn(storage, context.partition_key, config, context.log.info)
    storage.write_artifact("grasp_fusion", {"corpus": context.partition_key}, tuned.save)
    return summary | ({"report": MetadataValue.json(tuned.report)} if tuned.report else {})


grasp_fusion = learned_asset("grasp_fusion", GraspFusionConfig, fit_fusion, ("nodes", "queries", "qrels"))


class GraspRerankerConfig(Config):
    recipe: str = "auto"  # cpu | gpu | auto (gpu when torch sees CUDA): retrieval/training/grasp_reranker.RECIPES
    validation_share: float = 0.2  # the same draw as grasp_fusion's: these validate, the rest train
    depth: int = 100  # Stage 2's top this many form the pool
    stored_negatives: int = 30  # hardest non-gold of the pool kept per query
    validation_depth: int = 30  # reranked per validation query when choosing the checkpoint
    validate_every: int = 100
    budget_minutes: float = 45.0
    max_neighbours: int = 10  # per relation in the serialisation (App. B.6)
    max_field_tokens: int = 300
    seed: int = 0


def fit_reranker(context: AssetExecutionContext, config: GraspRerankerConfig, storage: LakeStorage) -> dict:
    """The lake's reranker fine-tuned on serialised Stage-2 candidates of the training queries, with the final fusion's (w, k)."""
    tuned, summary = stage3.learn(storage, context.partition_key, config, context.log.info)
    storage.write_artifact("grasp_reranker", {"corpus": context.partition_key}, tuned.save)
    curve = tuned.report.get("training", {}).get("curve")
    return summary | ({"curve": MetadataValue.json(curve)} if curve else {})


grasp_reranker = learned_asset("grasp_reranker", GraspRerankerConfig, fit_reranker, ("nodes", "queries", "qrels"), also=("reranker", "grasp_fusion"))


class PlansConfig(Config):
    planners: list[str] = ["rules"]  # add "llm" to record the LLM planner's plans (needs GRAPHLAKE_LLM_BASE_URL)
    max_queries: int = 0  # the first this many queries; 0: all


@asset(partitions_def=corpus_partitions, deps=[AssetKey(name) for name in ("queries", "skb", "skb_vectors", "dense_vectors")])
def skb_plans(context: AssetExecutionContext, config: PlansConfig, lake: LakeResource) -> None:
    """Each planner's plan for every query on every SKB of the corpus, validated and executed: the table
    skb_plans (plan JSON, valid, error or the planner's failure, risk level, n_cand, compiled SQL, ms)."""
    corpus = context.partition_key
    indexes = open_index_set(lake.storage, corpus)
    queries = lake.storage.read("queries", {"corpus": corpus}).to_pylist()
    queries = queries[: config.max_queries] if config.max_queries else queries
    summary = {}
    built = json.loads((lake.storage.artifact(SKB_ARTIFACT, {"corpus": corpus}) / "sources.json").read_text())
    for source, planner in ((s, p) for s in built for p in config.planners):
        loaded = indexes.skb(source)
        rows = []
        for query in queries:
            started = time.perf_counter()
            plan, failure = planned(query["text"], loaded, planner, indexes)
            result = stage_one(query["text"], loaded, plan, Settings(), indexes.encoders.dense, failure)
            rows.append(
                {
                    "query_id": query["query_id"],
                    "query": query["text"],
                    "plan": result.plan.model_dump_json(by_alias=True) if result.plan else None,
                    "valid": result.valid,
                    "error": result.error,
                    "risk_level": result.risk_level,
                    "n_cand": result.n_cand,
                    "sql": result.sql(loaded, Settings()),
                    "plan_ms": round((time.perf_counter() - started) * 1000, 3),  # planning included
                }
            )
        lake.storage.write("skb_plans", {"corpus": corpus, "source": source, "planner": planner}, pa.Table.from_pylist(rows, schema=row_schema("skb_plans")))
        cells = Counter(cell_name(row["valid"], row["n_cand"], row["risk_level"]) for row in rows)
        summary[f"{source}/{planner}"] = {"queries": len(rows), "valid": sum(r["valid"] for r in rows), "cells": dict(sorted(cells.items()))}
    context.add_output_metadata({"plans": MetadataValue.json(summary)})
