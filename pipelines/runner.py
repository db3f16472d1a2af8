"""Materialize a corpus's assets in-process on the persistent Dagster instance, with progress.

Runs started here show in the Dagster UI's history exactly like runs launched from it. A run holds
its corpus's writer lock from start to commit, first collects what earlier failed or killed runs
left, and commits its versions as the corpus's next snapshot only if every step succeeded.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from dagster import (
    AssetSelection,
    BetaWarning,
    DagsterError,
    DagsterEventType,
    DagsterInstance,
    DagsterInvalidConfigError,
    RunsFilter,
    build_reconstructable_job,
    execute_job,
)
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from graphlake.common.progress import PREFIX
from graphlake.common.settings import DASK
from graphlake.common.suggest import did_you_mean
from graphlake.pipelines.dagster_home import DEFINITIONS_MODULE, prepare_dagster_home
from graphlake.pipelines.definitions import EVALUATE_JOB, INGEST_JOB, build_definitions, default_selection
from graphlake.pipelines.reindex import INDEX_JOB
from graphlake.pipelines.staleness import PARTITION_TAG, SOURCE_TAG, plan_build, source_fingerprint
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.home import ENV_VAR, HomeError, require_writable
from graphlake.warehouse.io_manager import output_written_at
from graphlake.warehouse.locks import writer_lock
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.scopes import LAKE_SCOPE, LockedError
from graphlake.warehouse.storage import LakeStorage

PROGRESS_TAG = "graphlake/progress"
DASK_ENV = DASK.name
NOTE = "note"  # the metadata an asset explains itself in: what it skipped, what default stood in (lines)
# the job a CLI command's run belongs to (each is a job of the code location too, pipelines/definitions.py)
JOBS = {"demo": INDEX_JOB, "materialize": INDEX_JOB, "query": INDEX_JOB, "ingest": INGEST_JOB, "eval": EVALUATE_JOB}


def console_logs(verbose: bool) -> dict:
    """Dagster's own console log: silent but for the run's end unless verbose (a failure is reported
    by the CLI in one line, its traceback with --verbose)."""
    return {"loggers": {"console": {"config": {"log_level": "WARNING" if verbose else "CRITICAL"}}}}


class MaterializeError(RuntimeError):
    """A run failed; the message is the underlying error (file, line, id), not Dagster's wrapper, and
    names the step and the corpus; ``trace`` is the underlying traceback."""

    def __init__(self, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.trace = trace


class RunConfigError(MaterializeError):
    """The run config does not fit the selected assets' config schemas; nothing ran."""


def materialize_corpus(
    home: Path,
    corpus: str,
    selection: AssetSelection | str | list[str] | None,
    console: Console,
    run_config: dict | None = None,
    verbose: bool = False,
    command: str = "materialize",
    declare: CorpusSpec | None = None,
    incremental: bool = False,
) -> dict[str, str]:
    """Materialize the selection on the corpus in one run of the job named for the CLI command
    (``JOBS``), so the UI's run history shows what launched it; the notes assets left in their
    metadata (what they skipped, what default stood in), by asset. ``declare``: (re)declare the
    corpus as this spec for the run, keeping the declaration only if the run succeeds.
    ``incremental`` (a build, a reindex): of the selection, run only what the changes since the
    last incremental build reach (``pipelines/staleness.py``), and record this build's source."""
    if declare is None:  # an undeclared corpus is named before its lock is taken (and left behind)
        _declared(home, corpus)
    with _writing(home, corpus, command, console), CorpusRegistry(home).declaring(declare) if declare else nullcontext():
        return _materialize(home, corpus, selection, console, run_config, verbose, command, incremental)


@contextmanager
def _partitions_remembered(instance: DagsterInstance) -> Iterator[None]:
    """While a build runs, a corpus partition known to exist is not looked up again. Dagster asks about
    nine times a step (1.4 s of a one-file edit's 60 steps, each a SQLite query); the corpus's writer
    lock, held for the whole build, keeps its partition from being deleted meanwhile."""
    ask = instance.has_dynamic_partition
    known: set[tuple[str, str]] = set()

    def has(partitions_def_name: str, partition_key: str) -> bool:
        if (partitions_def_name, partition_key) not in known and ask(partitions_def_name, partition_key):
            known.add((partitions_def_name, partition_key))
        return (partitions_def_name, partition_key) in known

    instance.has_dynamic_partition = has  # type: ignore[method-assign]
    try:
        yield
    finally:
        del instance.has_dynamic_partition


def _declared(home: Path, corpus: str) -> CorpusSpec:
    try:
        return CorpusRegistry(home).get(corpus)
    except (KeyError, ValueError) as error:
        raise MaterializeError(str(error)) from None


def _materialize(home: Path, corpus: str, selection, console: Console, run_config: dict | None, verbose: bool, command: str, incremental: bool) -> dict[str, str]:
    spec = _declared(home, corpus)
    built_from = {SOURCE_TAG: source_fingerprint(spec)} if incremental else {}  # the reindexing's record
    os.environ["DAGSTER_HOME"] = str(prepare_dagster_home(home))
    defs = build_definitions(home)
    assets = list(defs.assets)
    with DagsterInstance.get() as instance, _partitions_remembered(instance):
        if not instance.has_dynamic_partition(corpus_partitions.name, corpus):
            instance.add_dynamic_partitions(corpus_partitions.name, [corpus])
        selected = _resolve_selection(selection, home)
        try:
            keys = selected.resolve(assets)
        except DagsterError:
            keys = set()
        if not keys or (isinstance(selection, str) and _unknown_words(selection, assets)):
            raise MaterializeError(_unknown_assets(selection, assets))
        if isinstance(selection, list):  # a freshness plan: what it names, and whatever upstream of it the corpus lacks
            keys |= _missing_upstream(keys, assets, LakeStorage(home), corpus)
        if incremental:
            every = len(keys)
            keys = plan_build(home, spec, defs.resolve_asset_graph(), set(keys), instance)
            if keys:  # a multi-asset runs whole: one stale output (spaCy's triples) takes its siblings along
                keys = AssetSelection.assets(*keys).required_multi_asset_neighbors().resolve(assets)
            if not keys:
                console.print(f"{corpus}: up to date: nothing changed since its last build", highlight=False)
                return {}
            if len(keys) < every:
                console.print(f"{corpus}: {len(keys)} of {every} steps to run; the rest is current", highlight=False)
        by_key = {key: definition for definition in assets for key in definition.keys}
        # lake-wide assets (the reranker) take no partition; a run of only those must not name one
        partitioned = any(by_key[key].partitions_def is not None for key in keys)
        lake_wide = any(by_key[key].partitions_def is None for key in keys)  # they stage in the lake-wide scope: hold it too
        with writer_lock(home, LAKE_SCOPE, f"graphlake {command}") if lake_wide else nullcontext(), _RunProgress(instance, console, f"{corpus}:", len(keys)) as progress:
            try:
                tags = {"graphlake/launched_by": "cli", "graphlake/command": command, "graphlake/corpus": corpus, **progress.tags, **built_from}
                run_config = {**(run_config or {}), **console_logs(verbose)}
                cluster = dask_cluster()
                engine = {"dask": {"cluster": cluster}} if cluster is not None else {"in_process": {}}
                # execute_job, not execute_in_process: the latter keeps every step's output in memory
                # until the run ends, so the build's memory grew with its step count. The executor commits
                # (pipelines/committing_executor.py); the job is rebuilt for the lake, here and in Dask workers.
                os.environ[ENV_VAR] = str(home)
                result = execute_job(
                    build_reconstructable_job(DEFINITIONS_MODULE, "job_of_every_asset", reconstructable_kwargs={"name": JOBS[command]}),
                    instance,
                    run_config={**run_config, "execution": {"config": engine}},
                    tags={**tags, PARTITION_TAG: corpus} if partitioned else tags,
                    asset_selection=list(keys),
                )
            except DagsterInvalidConfigError as error:
                raise RunConfigError("; ".join(e.message for e in error.errors) or str(error)) from None
    if not result.success:
        failures = result.get_step_failure_events()
        interrupted = any("DagsterExecutionInterruptedError" in f"{f.step_failure_data.error.cls_name} {f.step_failure_data.error.message}" for f in failures)
        if interrupted or (not failures and any("interrupted" in (event.message or "") for event in result.all_events if event.is_run_failure)):  # Ctrl-C
            raise MaterializeError(f"interrupted: the run on corpus {corpus!r} committed nothing; the corpus is as it was")
        if not failures:
            raise MaterializeError(f"run {result.run_id} failed on corpus {corpus!r}")
        raise _root_cause(failures[0], corpus)
    notes = {}
    metadata = {}
    for event in result.get_asset_materialization_events():
        values = {name: value.value for name, value in event.step_materialization_data.materialization.metadata.items()}
        metadata[event.asset_key.to_user_string()] = values
        if NOTE in values:
            notes[event.asset_key.to_user_string()] = values[NOTE]
    for line in build_summary(metadata):
        console.print(f"{corpus}: {line}", highlight=False, soft_wrap=True)
    return notes


def build_summary(metadata: dict[str, dict]) -> list[str]:
    """What a build changed, from its assets' metadata, in a few lines: documents and nodes added,
    changed and removed; nodes encoded; indexes updated in place or rebuilt; methods re-run."""
    lines = []
    for table in ("documents", "nodes"):
        found = metadata.get(table, {})
        if any(found.get(f"rows_{change}") for change in ("added", "changed", "removed")):  # a build that changed none says nothing of them
            lines.append(f"{table}: {found['rows_added']} added, {found['rows_changed']} changed, {found['rows_removed']} removed")
    encoded = {asset: found for asset, found in metadata.items() if "encoded" in found and "reused" in found}
    if encoded:
        lines.append("nodes through a model: " + ", ".join(f"{found['encoded']} by {asset} ({found['reused']} reused)" for asset, found in encoded.items()))
    words = {"incremental": "updated in place", "unchanged": "unchanged", "build": "built", "rebuild": "rebuilt"}
    indexes = {asset: found["mode"] for asset, found in metadata.items() if found.get("mode") in words}
    if indexes:
        lines.append("indexes: " + ", ".join(f"{asset} {words[mode]}" for asset, mode in indexes.items()))
    runs = sorted(asset.removeprefix("run_") for asset, found in metadata.items() if asset.startswith("run_") and found.get("queries"))
    if runs:
        lines.append(f"methods re-run ({len(runs)}): {', '.join(runs)}")
    return lines


def dask_cluster() -> dict | None:
    """The Dask cluster ``GRAPHLAKE_DASK`` names, as dagster-dask's ``cluster`` config: a scheduler's
    address, or ``local`` for a local cluster of worker processes; None (unset): run in-process."""
    value = DASK.text() or ""
    if not value:
        return None
    if value == "local":
        return {"local": {}}
    if "://" not in value:
        raise MaterializeError(f"{DASK_ENV}={value!r} is neither a scheduler address (tcp://host:8786) nor 'local'")
    return {"existing": {"address": value}}


@contextmanager
def _writing(home: Path, corpus: str, command: str, console: Console) -> Iterator[None]:
    """The corpus's writer lock for the run, after collecting what failed or killed runs left."""
    try:
        require_writable(home, f"`graphlake {command}` on corpus {corpus!r} builds what is missing or stale and")
        with LakeStorage(home).writing(corpus, f"graphlake {command}", announce=lambda line: console.print(line, highlight=False)):
            yield
    except (LockedError, HomeError) as error:
        raise MaterializeError(str(error)) from None


def forget_partition(home: Path, corpus: str) -> None:
    """Drop the corpus from the instance's dynamic partitions (its past runs stay in the history)."""
    os.environ["DAGSTER_HOME"] = str(prepare_dagster_home(home))
    with DagsterInstance.get() as instance:
        if instance.has_dynamic_partition(corpus_partitions.name, corpus):
            instance.delete_dynamic_partition(corpus_partitions.name, corpus)


def _resolve_selection(selection: AssetSelection | str | list[str] | None, home: Path) -> AssetSelection:
    """The lake's default build (``default_selection``) by default; LLM-backed assets run only when a selection names them. A
    selection that takes one output of a multi-asset (``+key:conceptual_edges`` reaches
    ``mentions_spacy``, built together with ``entities_spacy``) takes its siblings too: Dagster
    cannot run part of one. A list names the assets exactly, with those siblings."""
    if selection is None:
        return default_selection(home)
    if isinstance(selection, AssetSelection):
        return selection
    if isinstance(selection, list):
        return AssetSelection.assets(*selection).required_multi_asset_neighbors()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BetaWarning)  # raised by Dagster's own parser for `group:`, not the user's doing
            chosen = AssetSelection.from_string(selection)
    except DagsterError as error:
        raise MaterializeError(f"invalid asset selection {selection!r}: write e.g. 'nodes+' or 'key:bm25_index or key:dense_vectors'") from error
    return (chosen if "llm" in selection else chosen - AssetSelection.groups("llm")).required_multi_asset_neighbors()


def _missing_upstream(keys: set, assets, lake: LakeStorage, corpus: str) -> set:
    """The corpus's assets upstream of ``keys`` that it has never materialized (with the multi-assets'
    other outputs), so that a plan naming an index also builds the mentions or triples it reads."""
    by_key = {key: definition for definition in assets for key in definition.keys}
    upstream = (AssetSelection.assets(*keys).upstream() - AssetSelection.groups("llm")).resolve(assets) - keys  # LLM assets run only when named
    missing = {key for key in upstream if by_key[key].partitions_def is not None and not _materialized(by_key[key], key, lake, corpus)}
    return AssetSelection.assets(*missing).required_multi_asset_neighbors().resolve(assets) if missing else set()


def _materialized(definition, key, lake: LakeStorage, corpus: str) -> bool:
    """Whether the corpus has a committed output of the asset: the table partition its metadata names,
    else the stored output of the index kind it builds; an asset that declares neither counts as present."""
    metadata = definition.specs_by_key[key].metadata
    if "table" in metadata:
        return output_written_at(lake, metadata, corpus) is not None
    kinds = [kind for kind in INDEX_KINDS.values() if kind.stored is not None and kind.assets[-1] == key.to_user_string()]
    return all(kind.stored.written_at(lake, corpus) is not None for kind in kinds)


def _asset_names(assets) -> set[str]:
    return {key.to_user_string() for definition in assets for key in definition.keys}


def _unknown_words(text: str, assets) -> list[str]:
    """The asset names (bare or ``key:``, not a group's or a wildcard) a selection string names that the lake lacks."""
    names = _asset_names(assets)
    words = re.findall(r"(?:^|[\s(+])(?:key:)?([A-Za-z_]\w*)(?=[\s)+]|$)", text)
    return [word for word in dict.fromkeys(words) if word not in names and word not in ("or", "and", "not")]


def _unknown_assets(selection, assets) -> str:
    """One line for a selection that names assets the lake does not have (with the closest names), or matches none."""
    names = _asset_names(assets)
    text = " ".join(selection) if isinstance(selection, list) else str(selection)
    found = "; ".join(f"no asset {word!r}{did_you_mean(word, names)}" for word in _unknown_words(text, assets))
    return f"invalid asset selection {text!r}: {found or 'it matches no asset of this lake'}"


def _root_cause(event, corpus: str) -> MaterializeError:
    """The error the failed step's code raised, under Dagster's wrappers, as the project wrote it:
    without the exception's class name (and not what that error was raised from)."""
    error = event.step_failure_data.error
    while error.cause is not None and error.cls_name.startswith("Dagster"):
        error = error.cause
    message = error.message.strip()
    prefix = f"{error.cls_name}: "
    message = message.split(prefix, 1)[1] if prefix in message.split("\n", 1)[0] else message
    return MaterializeError(f"{event.step_key} (corpus {corpus!r}): {message}", "Traceback (most recent call last):\n" + "".join(error.stack) + error.message)


class _RunProgress:
    """A progress bar over the run's materializations, read from the instance's event log; where the
    console is no terminal (a log file, CI), one line per materialized asset instead, the steps'
    progress lines, and a line naming the running step whenever eight seconds passed without one.

    Dagster's in-process events do not pass through Python logging, so a thread polls the
    event log of the run tagged with this bar's token.
    """

    POLL_SECONDS = 0.25
    QUIET_SECONDS = 8.0  # on a log, a line at least this often while a step runs (polling adds up to a second)

    def __init__(self, instance: DagsterInstance, console: Console, label: str, total: int) -> None:
        self.instance = instance
        self.token = uuid.uuid4().hex
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} assets"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,  # a log file gets one line per asset instead (_update)
        )
        self.task = self.progress.add_task(label, total=total)
        self.label = label
        self.total = total
        self._started = time.time()  # event log timestamps are epoch seconds
        self._printed = 0  # materializations already announced as lines
        self._cursor: str | None = None  # the run's log read so far, for steps' progress lines
        self._step_progress = ""
        self._run_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._said = time.monotonic()  # when the last line was printed (on a log)

    def _say(self, line: str) -> None:
        self.progress.console.print(line, highlight=False)
        self._said = time.monotonic()

    @property
    def tags(self) -> dict[str, str]:
        return {PROGRESS_TAG: self.token}

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_SECONDS):
            self._update()

    def _update(self) -> None:
        if self._run_id is None:
            runs = self.instance.get_runs(RunsFilter(tags=self.tags), limit=1)
            self._run_id = runs[0].run_id if runs else None
        if self._run_id is None:
            return
        done = self.instance.all_logs(self._run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        started = self.instance.all_logs(self._run_id, of_type=DagsterEventType.STEP_START)
        step = started[-1].dagster_event.step_key if started else ""
        self._read_step_progress()
        self.progress.update(self.task, completed=len(done), description=f"{self.label} {step} {self._step_progress}".rstrip())
        if not self.progress.console.is_terminal:
            for count, record in enumerate(done[self._printed :], start=self._printed + 1):
                asset = record.dagster_event.asset_key.to_user_string()
                seconds = record.timestamp - self._started
                self._say(f"{self.label} {count}/{self.total} {asset} ({seconds:.0f} s)")
            self._printed = len(done)
            if started and time.monotonic() - self._said >= self.QUIET_SECONDS:  # a long step between its own lines
                since = time.time() - started[-1].timestamp
                self._say(f"{self.label} {step} running for {since:.0f} s ({len(done)}/{self.total} assets done)")

    def _read_step_progress(self) -> None:
        """The latest progress line a long step logged (common/progress.py); on a log file, each one."""
        while True:
            page = self.instance.get_records_for_run(self._run_id, cursor=self._cursor, limit=1000)
            self._cursor = page.cursor
            for record in page.records:
                message = record.event_log_entry.user_message or ""
                if record.event_log_entry.dagster_event is None and message.startswith(PREFIX):
                    self._step_progress = message.removeprefix(PREFIX)
                    if not self.progress.console.is_terminal:
                        self._say(f"{self.label} {self._step_progress}")
            if not page.has_more:
                return

    def __enter__(self) -> _RunProgress:
        self.progress.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._update()
        self.progress.stop()
