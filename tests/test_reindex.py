"""Incremental reindexing: the schedule and the sensor request builds for exactly the corpora whose
declaration or raw files changed since their last build, and ``graphlake schedule`` switches both.

The requested runs are executed for real, in-process and with the request's tags, on the ingest
stage only (the index job's whole selection would take minutes and change nothing of what is
tested: which corpora are requested)."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from dagster import AssetKey, AssetSelection, DagsterInstance, build_schedule_context, build_sensor_context
from typer.testing import CliRunner

from conftest import materialize_committed
from graphlake.cli import app
from graphlake.pipelines.definitions import build_definitions
from graphlake.pipelines.reindex import CRON_ENV, corpus_change_sensor, reindex_schedule
from graphlake.pipelines.staleness import SOURCE_TAG
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.io_manager import LakeResource

INGEST = AssetSelection.groups("ingest")


def declare(home: Path, name: str, texts: list[str]) -> Path:
    path = home.parent / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": f"{name}{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts)))
    CorpusRegistry(home).add(CorpusSpec(name=name, format="jsonl", path=str(path)))
    return path


def build(home: Path, instance: DagsterInstance, requests) -> None:
    """Execute each request as the daemon would: its partition, its tags."""
    defs = build_definitions(home)
    for request in requests:
        result = materialize_committed(home, defs.assets, instance=instance, resources=defs.resources, partition_key=request.partition_key, selection=INGEST, tags=request.tags)
        assert result.success


def test_the_schedule_requests_only_the_corpus_that_changed_since_its_last_build(tmp_path):
    home = tmp_path / "lake"
    home.mkdir()
    declare(home, "alpha", ["The lighthouse keeper logged storms."])
    beta = declare(home, "beta", ["Tidal charts were redrawn."])
    repository = build_definitions(home).get_repository_def()
    schedule = repository.get_schedule_def("reindex_schedule")  # the one in the Definitions the UI and daemon load
    lake = LakeResource(home=str(home))
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:  # a schedule needs one it can reopen
        at = lambda hour: build_schedule_context(instance=instance, resources={"lake": lake}, repository_def=repository, scheduled_execution_time=dt.datetime(2026, 11, 25, hour, tzinfo=dt.UTC))  # noqa: E731
        first = schedule.evaluate_tick(at(2)).run_requests
        assert sorted(r.partition_key for r in first) == ["alpha", "beta", "demo"] and all(r.tags[SOURCE_TAG] for r in first)  # never built
        build(home, instance, first)
        quiet = schedule.evaluate_tick(at(3))
        assert quiet.run_requests in (None, []) and "no corpus changed" in (quiet.skip_message or "")
        beta.write_text(beta.read_text() + json.dumps({"id": "beta9", "title": "", "text": "A new pier opened."}) + "\n")
        second = schedule.evaluate_tick(at(4)).run_requests
        assert [r.partition_key for r in second] == ["beta"] and second[0].tags[SOURCE_TAG] != next(r for r in first if r.partition_key == "beta").tags[SOURCE_TAG]
        # the sensor sees the same change, keyed so that Dagster requests it once
        sensed = corpus_change_sensor(build_sensor_context(instance=instance, resources={"lake": lake}, repository_def=repository))
        assert [(r.partition_key, r.run_key) for r in sensed] == [("beta", f"beta:{second[0].tags[SOURCE_TAG]}")]
        # each request names the steps to run (the plan; its exact steps are tested on real builds in test_edits_propagate)
        job = set(repository.get_job("index_corpus").asset_layer.selected_asset_keys)
        assert set(first[0].asset_selection) == job and sensed[0].asset_selection == second[0].asset_selection
        assert AssetKey("documents") in second[0].asset_selection and set(second[0].asset_selection) <= job
        build(home, instance, second)
        assert schedule.evaluate_tick(at(5)).run_requests in (None, [])


def test_the_cron_comes_from_the_environment_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.setenv(CRON_ENV, "30 3 * * 1")
    assert reindex_schedule().cron_schedule == "30 3 * * 1"
    monkeypatch.setenv(CRON_ENV, "nightly")
    try:
        reindex_schedule()
    except ValueError as error:
        assert f"{CRON_ENV}='nightly' is not a cron expression" in str(error)
    else:
        raise AssertionError("a bad cron was accepted")


def test_graphlake_schedule_turns_the_schedule_and_the_sensor_on_and_off(lake):
    def states() -> dict[str, str]:
        shown = CliRunner().invoke(app, ["schedule", "status"], catch_exceptions=False)
        assert shown.exit_code == 0, shown.output
        rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in shown.stdout.splitlines() if line.count("│") == 5]
        return {row[0]: row[2] for row in rows if row[0] in ("reindex_schedule", "corpus_change_sensor")}

    assert states() == {"reindex_schedule": "off", "corpus_change_sensor": "off"}
    assert CliRunner().invoke(app, ["schedule", "on"], catch_exceptions=False).exit_code == 0
    assert states() == {"reindex_schedule": "on", "corpus_change_sensor": "on"}
    assert "0 2 * * *" in CliRunner().invoke(app, ["schedule"], catch_exceptions=False).stdout
    assert CliRunner().invoke(app, ["schedule", "off"], catch_exceptions=False).exit_code == 0
    assert states() == {"reindex_schedule": "off", "corpus_change_sensor": "off"}
    assert os.environ["GRAPHLAKE_HOME"] == str(lake)
