"""Stage 4, retrieval and evaluation: one run asset and one evaluation asset per declared method.

Methods come from ``retrieval/methods.yaml`` (plus ``$GRAPHLAKE_HOME/methods.yaml``); adding a
method there adds its assets, no code needed. What a run reads follows from its operators' indexes
(``retrieval/index/kinds.py``), so rebuilding an index makes the runs that read it stale.
"""

import json
from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, AssetKey, AssetOut, AssetsDefinition, Config, Output, asset, multi_asset

from graphlake.retrieval.core import Methods, method_asset_names, needs, uses_llm
from graphlake.retrieval.evaluation import evaluate_stored
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.runs import run_method
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions


class RunConfig(Config):
    split: str | None = None  # run only this split's queries (``graphlake eval --split``); None: every query
    sample: int | None = None  # run a seeded sample of that many of them (``graphlake eval --sample``)
    reuse_pairs: bool = False  # cross-encoder vectors from the lake's pair cache (warehouse/pair_cache.py); timings then are no QPT


def method_assets(home: Path) -> list[AssetsDefinition]:
    methods = load_methods(home)
    return [definition for name in methods for definition in _assets_for(name, methods)]


def _assets_for(name: str, methods: Methods) -> list[AssetsDefinition]:
    method, params = methods[name], methods.params(name)
    run_name, metrics_name, query_metrics_name = method_asset_names(name)
    index_deps = [AssetKey(asset) for asset in INDEX_KINDS.index_assets({index.partition("/")[0] for index in needs(method)})]
    llm = uses_llm(method)  # needs a server: opt-in, like the other LLM assets

    @asset(
        name=run_name,
        partitions_def=corpus_partitions,
        group_name="llm" if llm else "retrieval",
        deps=[AssetKey("nodes"), AssetKey("queries"), *index_deps],
        metadata={"table": "runs", "partition": {"method": name}},
        description=f"Top-k of every query by method {name!r}: {json.dumps(params)}",
    )
    def run_asset(context: AssetExecutionContext, config: RunConfig, lake: LakeResource) -> pa.Table:
        table, summary = run_method(name, method, params, lake.storage, context.partition_key, split=config.split, sample=config.sample, reuse_pairs=config.reuse_pairs, report=context.log.info)
        context.add_output_metadata(summary)
        return table

    @multi_asset(
        name=f"evaluate_{name}",
        outs={
            metrics_name: AssetOut(metadata={"table": "metrics", "partition": {"method": name}}),
            query_metrics_name: AssetOut(metadata={"table": "query_metrics", "partition": {"method": name}}),
        },
        partitions_def=corpus_partitions,
        group_name="llm" if llm else "evaluation",
        deps=[AssetKey(run_name), AssetKey("queries"), AssetKey("qrels")],
    )
    def evaluate_asset(context: AssetExecutionContext, lake: LakeResource):
        metrics, query_metrics = evaluate_stored(lake.storage, context.partition_key, name)
        headline = {f"{row['split']}/{row['metric']}{'@' + str(row['k']) if row['k'] else ''}": round(row["value"], 4) for row in metrics.to_pylist() if row["k"] in (None, 10)}
        if not metrics.num_rows:
            headline["note"] = f"nothing to evaluate: corpus {context.partition_key!r} has no queries with gold (qrels) in the run"
        yield Output(metrics, metrics_name, metadata=headline)
        yield Output(query_metrics, query_metrics_name)

    return [run_asset, evaluate_asset]
