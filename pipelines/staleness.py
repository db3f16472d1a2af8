"""What a full build of a corpus must run, so that a reindex runs only what its changes reach.

When the corpus's files and declaration are those of its last successful incremental build (its
source fingerprint, ``pipelines/reindex.py``; ``graphlake materialize`` without ``--select`` is one),
its raw tables are current, and an asset runs only if it
was never built for the corpus, if an asset it reads changed after a successful run last computed
it, or if a method's declaration changed since its run (``freshness.plan_refresh``); and then so
does everything downstream of it. Otherwise the raw files are read again and everything downstream of them runs (a
write equal to the current version is skipped, so nothing is outdated by a rerun that finds no
change). A plan is one Dagster run, committed whole, like any build.

"Changed" is the lake's: the time of the current version of an asset's table partition or
artefact, which an equal write leaves alone; "computed" is Dagster's record of the asset's last
materialization in a successful run. An asset whose output the lake cannot name in advance
(``skb_plans``) counts its last materialization as its change.
"""

from __future__ import annotations

from pathlib import Path

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, DagsterRunStatus, RunsFilter

from graphlake.pipelines.freshness import plan_refresh
from graphlake.pipelines.reindex import PARTITION_TAG, SOURCE_TAG, source_fingerprint
from graphlake.retrieval.index.kinds import asset_written_at
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.corpora import CorpusSpec
from graphlake.warehouse.storage import Lake, StorageError


def plan_build(home: Path, spec: CorpusSpec, graph, keys: set[AssetKey], instance: DagsterInstance) -> set[AssetKey]:
    """Of a full build's assets (``keys``), those to run on the corpus."""
    corpus = spec.name
    built = instance.get_run_records(
        RunsFilter(tags={PARTITION_TAG: corpus, SOURCE_TAG: source_fingerprint(spec)}, statuses=[DagsterRunStatus.SUCCESS]), limit=1
    )
    if not built:
        return set(keys)
    lake = Lake(home)
    written = {key: _written(lake, instance, corpus, key, graph.get(key).metadata) for key in keys}
    checked = {key: _checked(instance, corpus, key, graph.get(key).partitions_def is not None) for key in keys}
    seeds = {
        key
        for key in keys
        if written[key] is None
        or checked[key] is None
        or any(written.get(parent) is not None and written[parent] > checked[key] for parent in graph.get(key).parent_keys)
    }
    seeds |= {AssetKey(name) for name in plan_refresh(lake, corpus, list(load_methods(home)), home).assets} & keys  # a changed declaration
    stale, todo = set(), list(seeds)
    while todo:
        key = todo.pop()
        if key in stale:
            continue
        stale.add(key)
        todo.extend(child for child in graph.get(key).child_keys if child in keys)
    return stale


def _checked(instance: DagsterInstance, corpus: str, key: AssetKey, partitioned: bool) -> float | None:
    """When a successful run last computed the asset for the corpus, None if none did: a step that
    found its output unchanged left the lake's write time alone, but is as current as its inputs."""
    partitions = [corpus] if partitioned else None
    for record in instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=partitions), limit=5, ascending=False).records:
        run = instance.get_run_by_id(record.run_id)
        if run is not None and run.status == DagsterRunStatus.SUCCESS:
            return record.timestamp
    return None


def _written(lake: Lake, instance: DagsterInstance, corpus: str, key: AssetKey, metadata) -> float | None:
    """When the asset's current output for the corpus was written, None if it has none."""
    name = key.to_user_string()
    if "table" in metadata:
        return lake.written_at(metadata["table"], {"corpus": corpus, **(metadata.get("partition") or {})})
    try:
        return asset_written_at(lake, corpus, name)
    except (KeyError, StorageError):  # no table or index of its name: an artefact (the report), or one named at run time
        found = lake.artifact_written_at(name, {"corpus": corpus})
    if found is not None:
        return found
    records = instance.fetch_materializations(AssetRecordsFilter(asset_key=key, asset_partitions=[corpus]), limit=1, ascending=False).records
    return records[0].timestamp if records else None
