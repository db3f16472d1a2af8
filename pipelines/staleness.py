"""What a full build of a corpus must run, so that a reindex runs only what its changes reach.

An asset runs only if it was never built for the corpus, if an asset it reads changed after a
successful run last computed it, if a method's declaration changed since its run
(``freshness.plan_refresh``), or if it is a raw table (documents, queries, gold, keys) whose files now
read differently from its current version; and then so does everything downstream of it. When the
corpus's files or declaration differ from those of its last successful incremental build (its source
fingerprint, ``pipelines/reindex.py``; ``graphlake materialize`` without ``--select`` is one), the
planner reads them to find which raw tables changed, and the ingest step runs (once more in the run:
reading is cheap next to what it spares); an edited document reaches what documents reach, an added
query only the runs, their evaluation and what plans queries. A corpus never built incrementally is
built whole. A plan is one Dagster run, committed whole, like any build.

"Changed" is the lake's: the time of the current version of an asset's table partition or
artefact, which an equal write leaves alone; "computed" is Dagster's record of the asset's last
materialization in a successful run. An asset whose output the lake cannot name in advance
(``skb_plans``) counts its last materialization as its change.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

from graphlake.assets.ingest.raw_corpus import RAW_TABLES
from graphlake.pipelines.freshness import plan_refresh
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.queries import has_train_queries
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusSpec
from graphlake.warehouse.io_manager import output_written_at
from graphlake.warehouse.readers.base import IngestError
from graphlake.warehouse.storage import LakeStorage, StorageError
from graphlake.warehouse.write_log import pending_writes

QUERY_TABLES = ("runs", "metrics", "query_metrics")  # what a method's run and evaluation assets write
QUERY_ASSETS = ("skb_plans",)  # what plans each query, in tables named at run time
SOURCE_TAG = "graphlake/source"  # on a full build's run: the source fingerprint it was built from
PARTITION_TAG = "dagster/partition"


def source_fingerprint(spec: CorpusSpec) -> str:
    """The corpus's declaration and its raw files' sizes and times; a lake-owned corpus's log is no raw
    file (its writes are folded by count and age: ``pipelines/reindex.py``'s fold sensor)."""
    digest = hashlib.blake2b(spec.model_dump_json().encode(), digest_size=16)
    for root in filter(None, (spec.path if spec.format != LAKE_OWNED else None, spec.queries, spec.qrels)):
        root_path = Path(root)
        files = sorted(root_path.rglob("*")) if root_path.is_dir() else [root_path]
        for path in files:
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path}\x1f{stat.st_size}\x1f{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def plan_build(home: Path, spec: CorpusSpec, graph, keys: set[AssetKey], instance: DagsterInstance) -> set[AssetKey]:
    """Of a full build's assets (``keys``), those to run on the corpus."""
    corpus = spec.name
    built = RunsFilter(tags={PARTITION_TAG: corpus, SOURCE_TAG: source_fingerprint(spec)}, statuses=[DagsterRunStatus.SUCCESS])
    if not instance.get_run_records(built, limit=1):
        ever = RunsFilter(tags={PARTITION_TAG: corpus}, statuses=[DagsterRunStatus.SUCCESS])
        if not any(SOURCE_TAG in record.dagster_run.tags for record in instance.get_run_records(ever, limit=100)):
            return set(keys)
        raw = {AssetKey(name) for name in RAW_TABLES} & keys
        changed = changed_raw_tables(home, spec)
        return raw | _stale(home, corpus, graph, keys, instance, {AssetKey(name) for name in changed} & keys)
    if spec.format == LAKE_OWNED and pending_writes(home, corpus):  # writes to fold: the ingest step reads them, and what they change runs
        changed = {AssetKey(name) for name in changed_raw_tables(home, spec)} & keys
        return ({AssetKey(name) for name in RAW_TABLES} & keys) | _stale(home, corpus, graph, keys, instance, changed)
    return _stale(home, corpus, graph, keys, instance, set())


def changed_raw_tables(home: Path, spec: CorpusSpec) -> list[str]:
    """The raw tables whose current version the corpus's files, read now, would change."""
    try:
        ingested, lake = spec.read(), LakeStorage(home)
    except IngestError:  # the run's ingest step reports it, as any build's would
        return list(RAW_TABLES)
    return [name for name in RAW_TABLES if not lake.holds(name, {"corpus": spec.name}, getattr(ingested, name))]


def _stale(home: Path, corpus: str, graph, keys: set[AssetKey], instance: DagsterInstance, changed: set[AssetKey]) -> set[AssetKey]:
    """``changed`` and the assets the lake's records show out of date, with everything of ``keys`` downstream of them."""
    lake = LakeStorage(home)
    written = {key: _written(lake, instance, corpus, key, graph.get(key).metadata) for key in keys}
    checked = {key: _checked(instance, corpus, key, graph.get(key).partitions_def is not None) for key in keys}
    seeds = changed | {
        key for key in keys if written[key] is None or checked[key] is None or any(written.get(parent) is not None and written[parent] > checked[key] for parent in graph.get(key).parent_keys)
    }
    seeds |= {AssetKey(name) for name in plan_refresh(lake, corpus, list(load_methods(home)), home).assets} & keys  # a changed declaration
    queries_stay = AssetKey("queries") not in changed
    # no queries, none coming: the runs, their evaluations and the plans are empty and stay so, whatever else
    # changed, and so does what reads only them (the report)
    no_queries = queries_stay and lake.rows("queries", {"corpus": corpus}) == 0
    stale, todo = set(), list(seeds)
    while todo:
        key = todo.pop()
        if key in stale:
            continue
        if no_queries and written[key] is not None and (graph.get(key).metadata.get("table") in QUERY_TABLES or key.to_user_string() in QUERY_ASSETS):
            continue
        if key not in seeds and queries_stay and _learns_elsewhere(home, lake, corpus, key.to_user_string()):
            continue
        stale.add(key)
        todo.extend(child for child in graph.get(key).child_keys if child in keys)
    return stale


def _learns_elsewhere(home: Path, lake: LakeStorage, corpus: str, asset: str) -> bool:
    """Whether ``asset`` builds a learned index of ``corpus`` that what changed on it cannot change: one that
    learns only from other corpora (their changes reach it through ``plan_refresh``), or from this corpus
    while it has no training queries (it holds its untrained defaults)."""
    kind = INDEX_KINDS.learned_kind_of(asset)
    if kind is None:
        return False
    return corpus not in kind.fitting.sources(home, corpus) or not has_train_queries(lake, corpus)


def _checked(instance: DagsterInstance, corpus: str, key: AssetKey, partitioned: bool) -> float | None:
    """When a successful run last computed the asset for the corpus, None if none did: a step that
    found its output unchanged left the lake's write time alone, but is as current as its inputs."""
    partitions = [corpus] if partitioned else None
    for record in instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=partitions), limit=5, ascending=False).records:
        run = instance.get_run_by_id(record.run_id)
        if run is not None and run.status == DagsterRunStatus.SUCCESS:
            return record.timestamp
    return None


def _written(lake: LakeStorage, instance: DagsterInstance, corpus: str, key: AssetKey, metadata) -> float | None:
    """When the asset's current output for the corpus was written, None if it has none."""
    name = key.to_user_string()
    if "table" in metadata:
        return output_written_at(lake, metadata, corpus)
    try:
        return INDEX_KINDS.asset_written_at(lake, corpus, name)
    except (KeyError, StorageError):  # no table or index of its name: an artefact (the report), or one named at run time
        found = lake.artifact_written_at(name, {"corpus": corpus})
    if found is not None:
        return found
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[corpus]), limit=1, ascending=False).records
    return records[0].timestamp if records else None
