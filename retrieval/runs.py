"""Running methods: a corpus's queries through a declared method, one at a time and timed (a run). Ad-hoc
queries go through the API (``graphlake.api``), which keeps the indexes warm."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from graphlake.common.progress import StepProgress
from graphlake.retrieval.core import Op
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.queries import SAMPLE_PARAM, SPLIT_PARAM, select_queries
from graphlake.warehouse.storage import LakeStorage, StorageError


def run_method(
    name: str,
    method: Op,
    params: dict,
    lake: LakeStorage,
    corpus: str,
    split: str | None = None,
    *,
    reuse_pairs: bool = False,
    sample: int | None = None,
    report: Callable[[str], None] | None = None,
) -> tuple[pa.Table, dict]:
    """Run the corpus's queries (one split's, if given; a seeded ``sample`` of them, if given) through
    the method, one at a time, timing each; ``report`` hears the progress."""
    queries = select_queries(lake.read("queries", {"corpus": corpus}).select(["query_id", "text", "split"]), split, sample)
    if split is not None:
        if not queries.num_rows:
            raise StorageError(f"corpus {corpus!r} has no queries in split {split!r}")
        params = {**params, SPLIT_PARAM: split}
    if sample is not None:
        params = {**params, SAMPLE_PARAM: sample}
    indexes = open_index_set(lake, corpus, reuse_pairs)
    node_ids, doc_ids = indexes.snapshot.node_ids, indexes.snapshot.doc_ids()
    warm = new_request(indexes, ["warm up"])
    method.run_batch(warm, indexes)  # load indexes and models outside the timed loop
    notes = dict(warm.notes)
    columns: dict[str, list] = {k: [] for k in ("query_id", "rank", "node_id", "doc_id", "score", "latency_ms")}
    latencies = []
    progress = StepProgress(f"{name} on {corpus}", queries.num_rows, report, unit="queries")
    for query_id, text in zip(queries.column("query_id").to_pylist(), queries.column("text").to_pylist(), strict=True):
        started = time.perf_counter()
        request = new_request(indexes, [text])  # one query as the API answers one: its shared inputs run once
        (candidates,) = method.run_batch(request, indexes)
        latency = (time.perf_counter() - started) * 1000
        notes.update(request.notes)
        latencies.append(latency)
        for rank, (row, score) in enumerate(zip(candidates.rows.tolist(), candidates.scores.tolist(), strict=True), start=1):
            columns["query_id"].append(query_id)
            columns["rank"].append(rank)
            columns["node_id"].append(node_ids[row])
            columns["doc_id"].append(doc_ids[row])
            columns["score"].append(float(score))
            columns["latency_ms"].append(latency)
        progress.advance()
    n = len(columns["rank"])
    table = pa.table({"run_id": [uuid.uuid4().hex] * n, "method": [name] * n, "params": [json.dumps(params, sort_keys=True)] * n, **columns})
    summary = {f"latency_{p}_ms": round(float(np.percentile(latencies, int(p[1:]))), 3) if latencies else 0.0 for p in ("p50", "p95", "p99")}
    summary = {"queries": len(latencies), **summary}
    if indexes.encoders.pair_cache():
        summary |= {"reused_pairs": indexes.encoders.pair_cache().hits, "encoded_pairs": indexes.encoders.pair_cache().misses}
    notes = ([] if latencies else [f"corpus {corpus!r} has no queries to run; graphlake query searches it"]) + list(notes)
    return table, summary | ({"note": "\n".join(notes)} if notes else {})
