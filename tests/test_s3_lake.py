"""A lake on S3-compatible object storage (``GRAPHLAKE_HOME=s3://lake/...``) against a real server on
loopback (moto's, ``s3_server``): the demo built into it equals the local demo table for table and
answers the README's SQL from a new machine's empty cache; a writer killed -9 leaves the store's
snapshot whole, its lease runs out, and the next run collects what it staged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from crash_corpus import CORPUS, EDITED, SELECTION, TEXTS, write_corpus
from graphlake.cli import app
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.object_store import ObjectStore, cache_for
from graphlake.warehouse.snapshots import KEEP, Snapshot
from lake_checks import differing, of_methods, readme_queries, rows, same

GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))


def environment(url: str, cache: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "GRAPHLAKE_HOME": url, "GRAPHLAKE_CACHE": str(cache), "DAGSTER_HOME": str(cache.parent / f"{cache.name}-dagster"), **more}


def sql_answers(monkeypatch, home: str, cache: Path | None = None) -> list:
    monkeypatch.setenv("GRAPHLAKE_HOME", home)
    if cache is not None:
        monkeypatch.setenv("GRAPHLAKE_CACHE", str(cache))
    answers = []
    for query in readme_queries():
        result = CliRunner().invoke(app, ["sql", query, "--json"], catch_exceptions=False)
        assert result.exit_code == 0, (query, result.output)
        found = [tuple(row.values()) for row in json.loads(result.stdout)]
        # a query without ORDER BY (group by all) may list its rows in any order: compare them as sets
        answers.append(sorted(found, key=lambda row: repr([value for value in row if not isinstance(value, float)])))
    return answers


def test_the_demo_built_into_s3_equals_the_local_demo_and_answers_the_readme_sql(demo_lake, s3_server, tmp_path, monkeypatch):
    url = "s3://lake/graphlake"
    done = subprocess.run([GRAPHLAKE, "demo"], env=environment(url, tmp_path / "cache"), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    store = ObjectStore(url)
    assert store.listing("snapshots/demo") and store.versions("demo")

    elsewhere = tmp_path / "elsewhere"  # a new machine: an empty cache, only the store
    defaults = list(load_methods())  # what the S3 lake switched on; the session's demo lake has every method
    expected, got = of_methods(rows(demo_lake.home, ["demo"]), defaults), rows(cache_for(url, elsewhere), ["demo"])
    assert differing(expected, got) == {}
    assert all(got[table, "demo"] for table in ("documents", "nodes", "edges", "entities", "mentions", "vectors", "runs", "metrics"))

    on_s3, local = sql_answers(monkeypatch, url, elsewhere), sql_answers(monkeypatch, str(demo_lake.home))
    assert same(on_s3, local) and any(on_s3)  # the graph macros among them


def test_a_writer_killed_on_the_s3_lake_leaves_its_snapshot_whole_and_its_lease_runs_out(s3_server, tmp_path):
    url, source = "s3://lake/killed", tmp_path / "raw"
    env = environment(url, tmp_path / "cache", GRAPHLAKE_LEASE_S="15")
    write_corpus(source, TEXTS)
    for args in (("ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS), ("materialize", "--corpus", CORPUS, "--select", SELECTION)):
        done = subprocess.run([GRAPHLAKE, *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    store = ObjectStore(url)
    snapshots, versions = store.listing(f"snapshots/{CORPUS}"), set(store.versions(CORPUS))
    before = rows(cache_for(url, tmp_path / "before"), [CORPUS])

    write_corpus(source, EDITED)
    writer = subprocess.Popen([GRAPHLAKE, "materialize", "--corpus", CORPUS, "--select", SELECTION], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in writer.stdout:  # killed once a few of its versions are on the store
        if f"{CORPUS}: 6/" in line:
            break
    os.killpg(writer.pid, signal.SIGKILL)
    writer.wait(timeout=60)
    lease = json.loads(store.read(f"locks/{CORPUS}.lease"))
    assert lease["pid"] == writer.pid and lease["until"] > time.time()  # the dead writer's, not yet run out
    assert set(store.versions(CORPUS)) > versions  # what it staged went up, uncommitted
    assert store.listing(f"snapshots/{CORPUS}") == snapshots

    # its local flock died with it; its lease on the store runs out (15 s) and the next writer takes it
    following = subprocess.Popen([GRAPHLAKE, "materialize", "--corpus", CORPUS, "--select", SELECTION], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert rows(cache_for(url, tmp_path / "after-kill"), [CORPUS]) == before  # meanwhile, readers see the last commit
    out, err = following.communicate(timeout=600)
    assert following.returncode == 0, err
    assert f"is being written by pid {writer.pid}" in " ".join((out + err).split())  # the console wraps lines
    after = store.listing(f"snapshots/{CORPUS}")
    assert after[-1] == f"{int(snapshots[-1][:8]) + 1:08d}.json" and len(after) <= KEEP + 1  # gc keeps KEEP before it commits
    kept = [Snapshot.from_json(store.read(f"snapshots/{CORPUS}/{name}").decode()) for name in after]
    live = {f"tables/{k}/{e.name}" for s in kept for k, e in s.tables.items()} | {f"artifacts/{k}/{e.name}" for s in kept for k, e in s.artifacts.items()}
    assert set(store.versions(CORPUS)) == live  # the killed run's versions collected
    edited = rows(cache_for(url, tmp_path / "edited"), [CORPUS])
    assert [row[1] for row in edited["documents", CORPUS]] == sorted(EDITED)
