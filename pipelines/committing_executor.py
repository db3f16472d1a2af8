"""The executor of every run (the CLI's, the Dagster UI's, a schedule's, the sensor's, a run on Dask):
Dagster's multiprocess or in-process executor, or ``dagster-dask``'s, inside the corpus's writer lock,
committing the corpus's next snapshot once every step has succeeded (``pipelines/runner.py`` runs the
CLI's in-process).

Run config picks the engine, as in the launchpad::

    execution: {config: {multiprocess: {}}}                                  # the default
    execution: {config: {dask: {cluster: {existing: {address: tcp://scheduler:8786}}}}}
    execution: {config: {dask: {cluster: {local: {n_workers: 2}}}}}
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path

from dagster import (
    Executor,
    ExecutorDefinition,
    Field,
    Permissive,
    Selector,
    StringSource,
    multi_or_in_process_executor,
    multiple_process_executor_requirements,
)
from dagster._core.errors import raise_execution_interrupts
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.in_process import InProcessExecutor
from dagster._core.instance.ref import InstanceRef
from dagster._serdes import ConfigurableClassData
from dagster._utils import iterate_with_context

from graphlake.pipelines.staleness import PARTITION_TAG
from graphlake.warehouse.scopes import LAKE_SCOPE
from graphlake.warehouse.storage import LakeStorage
from graphlake.warehouse.write_log import trim_folded

_DEFAULT = multi_or_in_process_executor.config_schema.as_field()
DASK_CONFIG = Field(
    {
        "cluster": Field(
            Selector(
                {
                    "existing": Field({"address": StringSource}, description="A running scheduler, e.g. tcp://scheduler:8786."),
                    "local": Field(Permissive(), description="A distributed.LocalCluster of worker processes; its arguments, e.g. n_workers: 2."),
                }
            ),
            default_value={"local": {}},
        )
    },
    description="Each step a task on a Dask cluster (dagster-dask).",
)
EXECUTION_CONFIG = Field(Selector({**_DEFAULT.config_type.fields, "dask": DASK_CONFIG}), default_value=_DEFAULT.default_value)


def committed(home: Path, plan_context, events: Iterator, stop_at_failure: bool = False) -> Iterator:
    """The run's events, inside its corpus's writer lock; its snapshot committed once all steps succeeded.
    ``stop_at_failure`` (steps in this process, one at a time): no step is launched after one failed."""
    run = plan_context.dagster_run
    corpus = run.tags.get(PARTITION_TAG)
    with LakeStorage(home).writing(corpus or LAKE_SCOPE, f"Dagster run {run.run_id}", announce=plan_context.log.info):
        failed = False
        for event in events:
            failed = failed or event.is_step_failure
            yield event
            if failed and stop_at_failure:  # nothing will be committed: launch no further step (a dead endpoint ends the run now)
                events.close()  # in-process only: other executors' steps run elsewhere, and closing would orphan them
                break
        if not failed:
            snapshots = LakeStorage(home, run.run_id).commit(corpus)
            plan_context.log.info(f"committed snapshot(s) {snapshots}" if snapshots else "nothing new to commit")
            if corpus and (trimmed := trim_folded(home, corpus)):
                plan_context.log.info(f"{trimmed} folded write(s) removed from {corpus!r}'s log")


class CommittingExecutor(Executor):
    def __init__(self, inner: Executor, home: Path) -> None:
        self.inner = inner
        self.home = home

    @property
    def retries(self):
        return self.inner.retries

    @property
    def step_dependency_config(self):
        return self.inner.step_dependency_config

    def execute(self, plan_context, execution_plan) -> Iterator:
        in_process = isinstance(self.inner, InProcessExecutor)
        return committed(self.home, plan_context, self.inner.execute(plan_context, execution_plan), stop_at_failure=in_process)


class CommittingDaskExecutor(Executor):
    """Each step a task on a Dask cluster, run by ``dagster-dask``'s worker function, after the steps it
    reads. Its own executor cannot submit a run of partitioned assets (dask's task parser walks the
    run's named tuples into Dagster records, which refuse iteration), so the arguments travel in a
    ``partial`` that dask leaves whole. Workers rebuild the Definitions from their own
    ``GRAPHLAKE_HOME``: they must see the same lake. Steps on workers capture no compute logs: the
    capture swaps the whole process's stdout and stderr, and a worker runs a sharded step's shards,
    or another step, in its process while that step waits (their output stays in the worker's log)."""

    def __init__(self, cluster: dict, home: Path) -> None:
        self.cluster = cluster
        self.home = home

    @property
    def retries(self):
        return RetryMode.DISABLED

    def execute(self, plan_context, execution_plan) -> Iterator:
        return committed(self.home, plan_context, self._steps(plan_context, execution_plan))

    def _steps(self, plan_context, execution_plan) -> Iterator:
        import dask.distributed
        from dagster_dask.executor import get_dask_resource_requirements

        ((kind, settings),) = self.cluster.items()
        # one thread a worker: Dagster's step execution is not thread-safe
        local = dask.distributed.LocalCluster(**{"threads_per_worker": 1, **(settings or {})}) if kind == "local" else nullcontext(settings["address"])
        instance_ref = _without_log_capture(plan_context.instance.get_ref())
        with local as cluster, dask.distributed.Client(cluster) as client:
            futures = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    task = partial(
                        _step,
                        recon_job=plan_context.reconstructable_job,
                        dagster_run=plan_context.dagster_run,
                        run_config=plan_context.run_config,
                        step_keys=[step.key],
                        instance_ref=instance_ref,
                        known_state=execution_plan.known_state,
                    )
                    after = [futures[key] for step_input in step.step_inputs for key in step_input.dependency_keys]
                    # a key per run: dask answers a key already submitted with that task's result (another corpus's)
                    futures[step.key] = client.submit(task, after, key=f"{plan_context.dagster_run.run_id}/{step.key}", resources=get_dask_resource_requirements(step.tags))
            for _, done in iterate_with_context(raise_execution_interrupts, dask.distributed.as_completed(list(futures.values()), with_results=True)):
                yield from done.events


class _StepEvents:
    """A step's events as one opaque result (dask's sizeof, like its parser, would walk into them)."""

    __slots__ = ("events",)

    def __init__(self, events: list) -> None:
        self.events = events

    def __sizeof__(self) -> int:
        return 64 * 1024


def _without_log_capture(ref: InstanceRef) -> InstanceRef:
    return ref._replace(compute_logs_data=ConfigurableClassData("dagster._core.storage.noop_compute_log_manager", "NoOpComputeLogManager", "{}"))


def _step(after: list, **arguments) -> _StepEvents:
    """One step on a Dask worker, once the steps it reads (``after``) are done."""
    from dagster_dask.executor import query_on_dask_worker

    return _StepEvents(list(query_on_dask_worker(after, **arguments)))


def _executor(init, home: Path) -> Executor:
    config = init.executor_config
    if "dask" in config:
        return CommittingDaskExecutor(config["dask"]["cluster"], home)
    return CommittingExecutor(multi_or_in_process_executor.executor_creation_fn(init), home)


def committing_executor(home: Path) -> ExecutorDefinition:
    """Dagster's default executor, or Dask's by config, committing to the lake at ``home``."""
    return ExecutorDefinition(
        name="committing_executor",
        config_schema=EXECUTION_CONFIG,
        requirements=lambda config: [] if "in_process" in config else multiple_process_executor_requirements(),
        executor_creation_fn=lambda init: _executor(init, Path(home)),
        description="Multiprocess (default), in-process or Dask execution, committing each successful run as the corpus's next snapshot.",
    )
