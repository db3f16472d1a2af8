"""The executor of runs launched from the Dagster UI, a schedule or the sensor: Dagster's own
(multiprocess, or in-process by config) inside the corpus's writer lock, committing the corpus's
next snapshot once every step has succeeded, so such a run is as consistent as a CLI run
(``pipelines/runner.py``, whose in-process runs do the same around the job)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from dagster import Executor, ExecutorDefinition, multi_or_in_process_executor

from graphlake.pipelines.reindex import PARTITION_TAG
from graphlake.warehouse.snapshots import LAKE_SCOPE
from graphlake.warehouse.storage import Lake


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
        run = plan_context.dagster_run
        corpus = run.tags.get(PARTITION_TAG)
        scope = corpus or LAKE_SCOPE
        with Lake(self.home).writing(scope, f"Dagster run {run.run_id}", announce=plan_context.log.info):
            failed = False
            for event in self.inner.execute(plan_context, execution_plan):
                failed = failed or event.is_step_failure
                yield event
            if not failed:
                committed = Lake(self.home, run.run_id).commit(corpus)
                plan_context.log.info(f"committed snapshot(s) {committed}" if committed else "nothing new to commit")


def committing_executor(home: Path) -> ExecutorDefinition:
    """Dagster's default executor, committing to the lake at ``home``."""
    return ExecutorDefinition(
        name="committing_executor",
        config_schema=multi_or_in_process_executor.config_schema,
        requirements=multi_or_in_process_executor.get_requirements,
        executor_creation_fn=lambda init: CommittingExecutor(multi_or_in_process_executor.executor_creation_fn(init), Path(home)),
        description="Dagster's multiprocess / in-process executor, committing each successful run as the corpus's next snapshot.",
    )
