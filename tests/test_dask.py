"""The same Definitions on Dask: two corpora materialized by ``graphlake`` processes whose every step is a
task on a real ``distributed.LocalCluster`` of two worker processes (``GRAPHLAKE_DASK``), one corpus's
encoding cut into shards that both workers run (``common/shards.py``), table for table the same rows
as an in-process build, and committed as snapshots like any run."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crash_corpus import EDITED, METHODS, SELECTION, TEXTS, write_corpus
from graphlake.api import GraphLake
from graphlake.common.shards import SHARD_ENV
from graphlake.kernels.text.encoders import DENSE_MODEL
from graphlake.warehouse.snapshots import Snapshots
from lake_checks import differing, rows

distributed = pytest.importorskip("distributed")

GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))
CORPORA = {"harbour": TEXTS, "harbour_edited": EDITED}
RUN_S = 300  # a run takes about 40 s here; past this it is stuck


def build(home: Path, sources: Path, dask: str | None) -> None:
    """Ingest and materialize every corpus, the corpora at once (each holds only its own lock)."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    env.pop("GRAPHLAKE_DASK", None)
    if dask:
        env["GRAPHLAKE_DASK"] = dask
    for corpus in CORPORA:  # declaring corpora writes the one corpora.yaml: one after the other
        ingest = [GRAPHLAKE, "ingest", "jsonl", str(sources / corpus / "docs.jsonl"), "--queries", str(sources / corpus / "queries.jsonl"), "--corpus", corpus]
        done = subprocess.run(ingest, env=env, capture_output=True, text=True, timeout=RUN_S)
        assert done.returncode == 0, done.stderr
    runs = [subprocess.Popen([GRAPHLAKE, "materialize", "--corpus", corpus, "--select", SELECTION], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for corpus in CORPORA]
    for run in runs:
        _, stderr = run.communicate(timeout=RUN_S)
        assert run.returncode == 0, stderr


def test_two_corpora_on_a_two_worker_cluster_equal_an_in_process_build(tmp_path, monkeypatch):
    sources = tmp_path / "raw"
    for corpus, texts in CORPORA.items():
        write_corpus(sources / corpus, texts)
    local, on_dask = tmp_path / "local", tmp_path / "dask"
    # six nodes a corpus: three shards of its encoding, here one after the other, on Dask spread over the
    # workers; the same shards, so the same batches: equal vectors even in reduced precision
    monkeypatch.setenv(SHARD_ENV, "2")
    build(local, sources, dask=None)

    # the workers rebuild the Definitions from their own environment: they must name the same lake
    monkeypatch.setenv("GRAPHLAKE_HOME", str(on_dask))
    monkeypatch.setenv("DAGSTER_HOME", str(on_dask / "dagster"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.run(faulthandler.dump_traceback_later, RUN_S - 60)  # a stuck worker prints its threads' stacks
        with distributed.get_task_stream(client) as stream:
            build(on_dask, sources, dask=cluster.scheduler_address)
        tasks = stream.data
        workers = set(client.scheduler_info()["workers"])
        client.run(faulthandler.cancel_dump_traceback_later)

    steps, shards = {}, {}  # run id -> its steps; corpus -> the workers that encoded its shards
    for task in tasks:
        if task["key"].startswith(f"{DENSE_MODEL}-"):
            corpus = next(c for c in sorted(CORPORA, key=len, reverse=True) if task["key"].startswith(f"{DENSE_MODEL}-{c}-"))
            shards.setdefault(corpus, []).append(task["worker"])
            continue
        run, step = task["key"].split("/", 1)
        steps.setdefault(run, set()).add(step)
    assert len(steps) == 4, steps  # each corpus's ingest and materialize
    built = [run for run in steps.values() if {"raw_corpus", "nodes", "dense_vectors", "bm25_index", "dense_hnsw_index", "run_rrf"} <= run]
    assert len(built) == 2, steps  # one whole run a corpus, each step its own task
    assert {task["worker"] for task in tasks} == workers and len(workers) == 2  # both workers took steps
    assert sorted(shards) == sorted(CORPORA) and all(len(found) == 3 for found in shards.values()), shards
    assert any(set(found) == workers for found in shards.values()), shards  # one corpus encoded on both workers

    expected, got = rows(local, CORPORA), rows(on_dask, CORPORA)
    assert differing(expected, got) == {}
    # steps on workers capture no compute logs (the capture swaps a shared process's stdout and stderr)
    assert list((local / "dagster" / "storage").glob("*/compute_logs/*")) and not list((on_dask / "dagster" / "storage").glob("*/compute_logs/*"))
    assert sum(map(len, got.values())) > 0 and all(got[table, corpus] for table in ("documents", "nodes", "vectors", "runs") for corpus in CORPORA)
    for corpus in CORPORA:
        assert Snapshots(on_dask).current(corpus).number == Snapshots(local).current(corpus).number  # committed like any run
        for method in METHODS:
            monkeypatch.setenv("GRAPHLAKE_HOME", str(local))
            by_local = GraphLake(local).search(corpus, method, "storm warnings on the pier", 3).hits
            monkeypatch.setenv("GRAPHLAKE_HOME", str(on_dask))
            assert GraphLake(on_dask).search(corpus, method, "storm warnings on the pier", 3).hits == by_local, (corpus, method)
