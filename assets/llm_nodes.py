"""One LLM question per node of a corpus, in shards (``common/shards.py``: tasks of their own on a
Dask cluster, so a corpus's calls run on every worker at once; each worker's client reads the lake's
environment, ``GRAPHLAKE_LLM_*``, and shares its answer cache, one file per answer).

One unreadable answer should not cost the other calls: the node gets no answer, the failure is
logged with its node id and counted against the asset's ``FailureBudget``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import TypeVar

from dagster import AssetExecutionContext

from graphlake.assets.failure_budget import FailureBudget
from graphlake.common.llm import LLMClient, LLMOutputError, LLMStats, lake_client
from graphlake.common.progress import StepProgress
from graphlake.common.shards import map_shards

T = TypeVar("T")
_SPENT = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")  # what each answer adds to LLMStats


def _ask_shard(home: Path, ask: Callable[[LLMClient, str], list[T]], texts: list[str]) -> list[tuple[list[T], str | None, dict]]:
    """Each text's answer ([] on failure), the failure's message, and what the call spent."""
    client = lake_client(home)
    answers = []
    for text in texts:
        before = asdict(client.stats)
        try:
            answer, failure = ask(client, text), None
        except LLMOutputError as error:
            answer, failure = [], str(error)
        answers.append((answer, failure, {key: getattr(client.stats, key) - before[key] for key in _SPENT}))
    return answers


def ask_every_node(context: AssetExecutionContext, home: Path, node_ids: list[str], texts: list[str], ask: Callable[[LLMClient, str], list[T]], what: str) -> tuple[list[list[T]], dict]:
    """``ask`` (a module-level function, so a Dask worker can run it) of every text; the answers in
    order, and the metadata to record: the model, what the calls spent, the failures, the shards."""
    corpus = context.partition_key
    client = lake_client(home)  # here first: no server configured fails the step before any shard
    progress = StepProgress(f"{what} on {corpus}", len(texts), context.log.info, unit="nodes")
    found, sharded = map_shards(partial(_ask_shard, Path(home), ask), texts, progress.advance, name=f"{what}-{corpus}")
    budget = FailureBudget(f"LLM answers for {what} (corpus {corpus!r})", len(node_ids))
    stats = LLMStats(price_per_1k_tokens=client.stats.price_per_1k_tokens)
    for node_id, (_, failure, spent) in zip(node_ids, found, strict=True):
        for key, value in spent.items():
            setattr(stats, key, getattr(stats, key) + value)
        if failure is not None:
            context.log.warning(f"{node_id}: {failure}")
            budget.failed(node_id, failure)
    return [answer for answer, _, _ in found], {"model": client.config.model} | stats.as_metadata() | budget.check() | sharded.as_metadata()
