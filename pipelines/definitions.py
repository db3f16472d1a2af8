"""The code location: every asset, its resources, the jobs, the reindex sensor and schedule, and the committing executor."""

from pathlib import Path

from dagster import AssetSelection, Definitions, JobDefinition, define_asset_job, load_assets_from_package_module

from graphlake.assets import chunking, enrichment, graphs, indexes, ingest, llm, retrieval, vectors
from graphlake.assets.chunking.nodes import nodes_cover_documents
from graphlake.assets.edge_checks import edge_checks, mentions_match_df
from graphlake.assets.method_runs import method_assets
from graphlake.assets.report import report_asset
from graphlake.pipelines.committing_executor import committing_executor
from graphlake.pipelines.reindex import INDEX_JOB, corpus_change_sensor, pending_writes_sensor, reindex_schedule
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.io_manager import LakeIOManager, LakeResource

# one subpackage of assets/ a stage, its group (the UI's stage) given here, as its package's name; per lake,
# the methods' run and evaluation assets and the report come from factories (assets/method_runs.py, report.py)
STAGES = (ingest, chunking, enrichment, graphs, vectors, indexes, retrieval, llm)
STATIC_ASSETS = [asset for stage in STAGES for asset in load_assets_from_package_module(stage, group_name=stage.__name__.rpartition(".")[2])]
EDGE_ASSETS = [a for a in STATIC_ASSETS if any(meta.get("table") == "edges" for meta in a.metadata_by_key.values())]
CHECKS = [
    nodes_cover_documents,
    *edge_checks(EDGE_ASSETS),
    *(mentions_match_df(f"mentions_{extractor}") for extractor in ("spacy", "regex", "llm")),
]

INGEST_JOB, EVALUATE_JOB = "ingest_corpus", "evaluate"


def default_selection(home: Path) -> AssetSelection:
    """What a corpus build runs: every asset but the LLM-backed ones (they need a server,
    GRAPHLAKE_LLM_BASE_URL: opt-in) and the indexes and trained models that only methods the lake
    has not switched on read."""
    return AssetSelection.all() - AssetSelection.groups("llm") - AssetSelection.assets(*INDEX_KINDS.unread_index_assets(load_methods(home)))


def index_corpus(home: Path):
    return define_asset_job(INDEX_JOB, selection=default_selection(home), description="Everything graphlake builds for one corpus, from raw files to evaluated runs.")


ingest_corpus = define_asset_job(INGEST_JOB, selection=AssetSelection.groups("ingest", "chunking"), description="Read a corpus's raw files and chunk them (graphlake ingest).")
evaluate = define_asset_job(
    EVALUATE_JOB,
    selection=AssetSelection.groups("retrieval", "evaluation"),
    description="Run and evaluate methods, after what they read (graphlake eval runs the part a request needs).",
)


def resources(home: Path) -> dict:
    return {"lake": LakeResource(home=str(home)), "io_manager": LakeIOManager(home=str(home))}


def build_definitions(home: Path) -> Definitions:
    """Definitions for the lake at ``home``; its methods.yaml may add run/evaluate assets."""
    return Definitions(
        assets=[*STATIC_ASSETS, *method_assets(home), report_asset(home)],
        asset_checks=CHECKS,
        resources=resources(home),
        jobs=[index_corpus(home), ingest_corpus, evaluate],
        sensors=[corpus_change_sensor, pending_writes_sensor],
        schedules=[reindex_schedule()],
        executor=committing_executor(home),
    )


def job_of_every_asset(name: str) -> JobDefinition:
    """A job named ``name`` of every asset, for the lake ``GRAPHLAKE_HOME`` names when it is called: what
    a CLI run on Dask reconstructs in each worker (``dagster.build_reconstructable_job``); the run's
    asset selection narrows it."""
    defs = build_definitions(lake_home())
    return Definitions(
        assets=list(defs.assets), asset_checks=defs.asset_checks, resources=defs.resources, jobs=[define_asset_job(name, selection=AssetSelection.all())], executor=defs.executor
    ).resolve_job_def(name)


defs = build_definitions(lake_home())
