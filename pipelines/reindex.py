"""Incremental reindexing: the change sensor and the reindex schedule re-index exactly the declared
corpora whose declaration or raw files changed since their last build, and of each only the steps
its changes reach (``staleness.plan_build``); the fold sensor folds a lake-owned corpus's pending
writes in once they are many or old enough.

A corpus's source fingerprint digests its registry entry and the size and mtime of every raw file.
Every full build of a corpus (these requests, and ``graphlake materialize`` without ``--select``)
carries it as the run tag ``graphlake/source``; a corpus is stale when no successful (or still
pending) run of its partition carries its current fingerprint. So a failed build is tried again at
the next tick, and a build already under way is not requested twice.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from dagster import (
    DagsterInstance,
    DagsterInvalidDefinitionError,
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SkipReason,
    schedule,
    sensor,
)

from graphlake.common.settings import FOLD_AGE_S, FOLD_WRITES, HOME, REINDEX_CRON
from graphlake.pipelines.dagster_home import DEFINITIONS_MODULE, dagster_command, prepare_dagster_home
from graphlake.pipelines.staleness import PARTITION_TAG, SOURCE_TAG, plan_build, source_fingerprint
from graphlake.warehouse.corpora import LAKE_OWNED, CorpusRegistry
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.locks import holder
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.write_log import corpus_log, pending_writes

INDEX_JOB = "index_corpus"
CRON_ENV = REINDEX_CRON.name
COVERING = [DagsterRunStatus.SUCCESS, DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
WAITING = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING]


def stale_corpora(instance: DagsterInstance, registry: CorpusRegistry) -> dict[str, str]:
    """Declared corpora (name -> current fingerprint) that no successful or pending run was built from;
    each is added as a partition if it is not one yet."""
    corpora = registry.all()
    new = sorted(set(corpora) - set(instance.get_dynamic_partitions(corpus_partitions.name)))
    if new:
        instance.add_dynamic_partitions(corpus_partitions.name, new)
    stale = {}
    for name, spec in sorted(corpora.items()):
        current = source_fingerprint(spec)
        if not instance.get_run_records(RunsFilter(tags={PARTITION_TAG: name, SOURCE_TAG: current}, statuses=COVERING), limit=1):
            stale[name] = current
    return stale


@sensor(
    job_name=INDEX_JOB,
    minimum_interval_seconds=300,
    default_status=DefaultSensorStatus.STOPPED,
    description="Adds declared corpora as partitions and reindexes, within minutes, those whose declaration or raw files changed.",
)
def corpus_change_sensor(context: SensorEvaluationContext, lake: LakeResource):
    stale = stale_corpora(context.instance, lake.registry)
    # keyed by fingerprint: Dagster never requests one key twice, so a change is built once
    return [reindex_request(context, lake, name, digest, f"{name}:{digest}") for name, digest in stale.items()]


@sensor(
    job_name=INDEX_JOB,
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.STOPPED,
    description=f"Folds the pending writes of each corpus the lake owns into its tables, graphs and indexes once they number {FOLD_WRITES.name} or the oldest is {FOLD_AGE_S.name} seconds old.",
)
def pending_writes_sensor(context: SensorEvaluationContext, lake: LakeResource):
    requests = []
    for name, spec in sorted(lake.registry.all().items()):
        pending = pending_writes(Path(lake.home), name) if spec.format == LAKE_OWNED else []
        if not pending or not due(Path(lake.home), name, pending):
            continue
        if holder(Path(lake.home), name) is not None or context.instance.get_run_records(RunsFilter(tags={PARTITION_TAG: name}, statuses=WAITING), limit=1):
            continue  # a build of the corpus is under way (it holds the writer lock: a killed one does not) or waits: what it does not fold, a later tick sees
        requests.append(reindex_request(context, lake, name, source_fingerprint(spec), f"{name}:fold:{pending[-1]}"))
    return requests or SkipReason("no corpus the lake owns has writes due to be folded")


def due(home: Path, corpus: str, pending: list[int]) -> bool:
    """Whether ``corpus``'s pending writes are many enough, or the oldest old enough, to fold now; a
    corpus never built folds its first writes at once (until then a search has no index to read)."""
    if len(pending) >= FOLD_WRITES.number() or not LakeStorage(home).has("nodes", {"corpus": corpus}):
        return True
    return time.time() - corpus_log(home, corpus).read(pending[0]).at >= FOLD_AGE_S.number()


def reindex_request(context: SensorEvaluationContext | ScheduleEvaluationContext, lake: LakeResource, corpus: str, digest: str, run_key: str) -> RunRequest:
    """A run of the index job for the corpus, of only the steps its changes reach (``staleness.plan_build``)."""
    repository = context.repository_def
    assert repository is not None, "sensors and schedules are evaluated with their code location"
    keys = set(repository.get_job(INDEX_JOB).asset_layer.selected_asset_keys)
    plan = plan_build(Path(lake.home), lake.registry.get(corpus), repository.asset_graph, keys, context.instance)
    return RunRequest(run_key=run_key, partition_key=corpus, tags={SOURCE_TAG: digest}, asset_selection=sorted(plan))


def reindex_schedule(cron: str | None = None) -> ScheduleDefinition:
    """The schedule at ``cron`` (default ``$GRAPHLAKE_REINDEX_CRON``, else nightly at 02:00 UTC)."""
    cron = cron or REINDEX_CRON.text()
    description = f"Reindexes every corpus whose declaration or raw files changed since its last build (cron from {CRON_ENV})."

    def evaluate(context: ScheduleEvaluationContext, lake: LakeResource):
        stale = stale_corpora(context.instance, lake.registry)
        if not stale:
            return SkipReason("no corpus changed since its last build")
        tick = f"{context.scheduled_execution_time:%Y-%m-%dT%H:%M}" if context.scheduled_execution_time else "now"
        # a key per tick: a build that failed is requested again at the next one
        return [reindex_request(context, lake, name, digest, f"{name}:{digest}@{tick}") for name, digest in stale.items()]

    try:
        return schedule(name="reindex_schedule", cron_schedule=cron, job_name=INDEX_JOB, execution_timezone="UTC", default_status=DefaultScheduleStatus.STOPPED, description=description)(evaluate)
    except DagsterInvalidDefinitionError:
        raise ValueError(f"{CRON_ENV}={cron!r} is not a cron expression of 5 fields (e.g. '0 2 * * *': 02:00 every day)") from None


def switch(home: Path, on: bool) -> None:
    """Start (or stop) the reindex schedule and the change sensor in the lake's Dagster instance, with
    Dagster's own commands (they load the code location, as the daemon will)."""
    env = {**os.environ, HOME.name: str(home), "DAGSTER_HOME": str(prepare_dagster_home(home))}
    verb = "start" if on else "stop"
    for kind, name in (("schedule", "reindex_schedule"), ("sensor", corpus_change_sensor.name), ("sensor", pending_writes_sensor.name)):
        done = subprocess.run([dagster_command(), kind, verb, name, "-m", DEFINITIONS_MODULE], env=env, cwd=env["DAGSTER_HOME"], capture_output=True, text=True)
        if done.returncode != 0 and "already" not in done.stdout + done.stderr:
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise RuntimeError(f"dagster {kind} {verb} {name} failed: {lines[-1] if lines else f'exit {done.returncode}'}")


def switches(home: Path) -> dict[str, tuple[str, str, str]]:
    """The schedule and the sensor: name -> (kind, on/off, when), as the lake's Dagster instance records them."""
    os.environ.setdefault("DAGSTER_HOME", str(prepare_dagster_home(home)))
    with DagsterInstance.get() as instance:
        running = {state.name for state in instance.all_instigator_state() if state.is_running}
    cron = REINDEX_CRON.text()
    return {
        "reindex_schedule": ("schedule", "on" if "reindex_schedule" in running else "off", f"cron '{cron}' (UTC)"),
        corpus_change_sensor.name: ("sensor", "on" if corpus_change_sensor.name in running else "off", "every 5 minutes"),
        pending_writes_sensor.name: ("sensor", "on" if pending_writes_sensor.name in running else "off", f"every 30 s: {FOLD_WRITES.text()} writes or {FOLD_AGE_S.text()} s"),
    }
