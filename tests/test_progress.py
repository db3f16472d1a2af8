"""Long steps say how far they are: queries (or nodes) done of the total, the rate, the time left,
in the run's log and on the command line's display (stderr), with --json too, whose stdout stays JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.common.progress import PREFIX, StepProgress


def test_a_step_reports_at_start_every_interval_and_at_the_end():
    now = [0.0]
    lines: list[str] = []
    progress = StepProgress("run_dense on demo", 300, lines.append, unit="queries", every_s=10.0, clock=lambda: now[0])
    for _ in range(299):
        now[0] += 0.125  # 8 queries a second
        progress.advance()
    progress.advance()
    assert lines[0] == f"{PREFIX}run_dense on demo 0/300 queries"
    assert lines[1] == f"{PREFIX}run_dense on demo 80/300 queries (8.0/s, about 28 s left)"  # 10 s in
    assert len(lines) == 5 and lines[-1] == f"{PREFIX}run_dense on demo 300/300 queries in 37 s (8.0/s)"
    StepProgress("run_dense on mine", 0, lines.append, unit="queries").advance(0)  # a corpus without queries
    assert len(lines) == 5  # says nothing
    slow = StepProgress("fastinsight on demo", 10, lines.append, unit="queries", every_s=10.0, clock=lambda: now[0])
    now[0] += 40.0
    slow.advance()
    assert lines[-1] == f"{PREFIX}fastinsight on demo 1/10 queries (40.0 s each, about 6 min 00 s left)"  # never "0.0/s"


def test_eval_shows_each_methods_query_progress_with_json_too(demo_copy):
    shown = CliRunner().invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25", "--rerun"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    total = json.loads(CliRunner().invoke(app, ["sql", "select count(*) as n from queries where corpus = 'demo' and split = 'test'", "--json"]).stdout)[0]["n"]
    assert f"bm25 on demo 0/{total} queries" in shown.stderr and f"bm25 on demo {total}/{total} queries in" in shown.stderr
    as_json = CliRunner().invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25", "--rerun", "--json"], catch_exceptions=False)
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)[0]["method"] == "bm25"  # stdout: the JSON alone
    assert f"bm25 on demo {total}/{total} queries in" in as_json.stderr  # a long eval --json in a log shows how far it is
