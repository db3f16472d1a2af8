"""A newcomer's own corpus: failures are one clear line, a bad ingest declares nothing, and ``forget``
removes every trace of a corpus."""

from __future__ import annotations

import json
from pathlib import Path

from dagster import DagsterInstance
from typer.testing import CliRunner

from graphlake.pipelines.cli import app
from graphlake.warehouse.catalog import Catalog


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)


def write_docs(path: Path, broken: bool = False) -> Path:
    lines = [json.dumps({"id": "a", "title": "Alpha", "text": "Alpha whales sing in the bay."}), json.dumps({"id": "b", "title": "Beta", "text": "Beta kelp grows."})]
    if broken:
        lines[1] = lines[1].replace('", "text"', '" "text"')  # a comma missing at line 2
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_failures_are_one_line_naming_the_file_or_the_step(lake, tmp_path):
    good = write_docs(tmp_path / "docs.jsonl")
    assert invoke("ingest", "jsonl", str(good), "--corpus", "mine").exit_code == 0
    declared = (lake / "corpora.yaml").read_bytes()

    bad = invoke("ingest", "jsonl", str(write_docs(tmp_path / "bad.jsonl", broken=True)), "--corpus", "other")
    assert bad.exit_code == 1 and len(bad.stderr.splitlines()) <= 3, bad.stderr
    assert f"{tmp_path / 'bad.jsonl'}:2: malformed JSON" in bad.stderr
    assert (lake / "corpora.yaml").read_bytes() == declared  # nothing declared, nothing run

    unknown = invoke("materialize", "--corpus", "nope")
    assert unknown.exit_code == 1 and len(unknown.stderr.splitlines()) <= 3 and "corpus 'nope' is not declared" in unknown.stderr

    write_docs(good, broken=True)  # the declared corpus's file goes bad: the failure is inside a Dagster step
    step = invoke("materialize", "--corpus", "mine", "--select", "key:documents")
    assert step.exit_code == 1 and len(step.stderr.splitlines()) <= 3, step.stderr
    assert f"raw_corpus (corpus 'mine'): {good}:2: malformed JSON" in step.stderr and "Error:" not in step.stderr
    verbose = invoke("--verbose", "materialize", "--corpus", "mine", "--select", "key:documents")
    assert verbose.exit_code == 1 and "Traceback" in verbose.stderr and len(verbose.stderr.splitlines()) > 10


def test_forget_removes_every_trace_of_a_corpus(lake, tmp_path):
    assert invoke("ingest", "jsonl", str(write_docs(tmp_path / "docs.jsonl")), "--corpus", "mine").exit_code == 0
    assert invoke("materialize", "--corpus", "mine", "--select", "key:bm25_index or key:contextual_edges").exit_code == 0
    with DagsterInstance.get() as instance:  # each CLI run belongs to the job named for its command
        runs = [(run.job_name, run.tags["graphlake/command"], run.tags["graphlake/corpus"]) for run in instance.get_runs()]
    assert sorted(runs) == [("index_corpus", "materialize", "mine"), ("ingest_corpus", "ingest", "mine")]
    traces = lambda: sorted(str(p.relative_to(lake)) for p in lake.rglob("corpus=mine"))  # noqa: E731
    assert any(t.startswith("tables/nodes") for t in traces()) and any(t.startswith("artifacts/bm25") for t in traces())

    kept = invoke("forget", "mine", input="n\n")
    assert kept.exit_code == 1 and traces()  # not confirmed: nothing removed
    assert invoke("forget", "mine", "--yes").exit_code == 0
    assert traces() == []
    assert "mine" not in {c["name"] for c in json.loads(invoke("corpora", "--json").stdout)}
    with DagsterInstance.get() as instance:
        assert not instance.has_dynamic_partition("corpus", "mine")
    with Catalog(lake).reader() as con:
        assert con.execute("SELECT count(*) FROM nodes WHERE corpus = 'mine'").fetchall() == [(0,)]
    assert invoke("forget", "mine", "--yes").exit_code == 1  # gone: nothing left to forget
