"""Evaluation of stored runs: node rankings collapsed to documents, scored against the gold per split.

Metrics follow the papers' definitions (``kernels/eval/metrics.py``); Topological Recall joins them once
the corpus graph is built. ``held_out_split`` is the split a corpus is reported on by default.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graphlake.kernels.eval.metrics import GRAPH_METRICS, METRICS_AT_K, evaluate
from graphlake.kernels.eval.topological_recall import TR_CUTOFFS, DocumentGraph, topological_values
from graphlake.retrieval.core import Methods
from graphlake.retrieval.index.derived import corpus_graph
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.queries import SAMPLE_PARAM, SPLIT_PARAM, gold_by_query, select_queries
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.storage import LakeStorage, StorageError
from graphlake.warehouse.tables import row_schema

CUTOFFS = (1, 2, 5, 10, 20, 100)
METRIC_NAMES = [f"{m}@{k}" for m in METRICS_AT_K for k in CUTOFFS] + ["mrr"]
HELD_OUT_SPLITS = ("test", "dev")  # what a corpus is reported on when no split is named, first found


def held_out_split(lake: LakeStorage, corpus: str) -> str:
    """The corpus's held-out split: ``test``, else ``dev``; an error naming the splits it has otherwise."""
    splits = set(lake.read("queries", {"corpus": corpus}).column("split").to_pylist())
    if not splits:
        raise StorageError(f"corpus {corpus!r} has no queries to evaluate on; ingest it with --queries (graphlake query searches it as it is)")
    found = next((split for split in HELD_OUT_SPLITS if split in splits), None)
    if found is None:
        raise StorageError(f"corpus {corpus!r} has no test or dev queries (its splits: {', '.join(sorted(map(str, splits)))}); name one with --split")
    return found


def first_stage_gap(lake: LakeStorage, corpus: str, name: str, methods: Methods) -> str | None:
    """A note when the corpus's stored evaluation shows the reranking method ``name`` not beating its first
    stage (nDCG@10 on the held-out split); None when it does, or when nothing stored on this corpus tells:
    no queries with gold, or no switched-on method with an evaluation that ranks as the first stage does."""
    first = methods[name].first_stage()
    if first is None:
        return None
    try:
        split = held_out_split(lake, corpus)
    except StorageError:
        return None
    own = _stored_ndcg(lake, corpus, name, split)
    stages = [(other, _stored_ndcg(lake, corpus, other, split)) for other in methods if other != name and methods[other] == first]
    stage, value = next(((other, value) for other, value in stages if value is not None), (None, None))
    if own is None or value is None or own > value:
        return None
    return f"{name} does not beat its first stage {stage} on the {split} queries of {corpus!r} (nDCG@10 {own:.3f} against {value:.3f})"


def _stored_ndcg(lake: LakeStorage, corpus: str, method: str, split: str) -> float | None:
    partition = {"corpus": corpus, "method": method}
    if not lake.has("metrics", partition):
        return None
    rows = lake.read("metrics", partition).to_pylist()
    return next((row["value"] for row in rows if row["split"] == split and row["metric"] == "ndcg" and row["k"] == 10 and row["queries"]), None)


def document_rankings(runs: pa.Table) -> dict[str, list[tuple[str, float]]]:
    """Per query, documents in order of their best node, each with that node's score."""
    rankings: dict[str, dict[str, float]] = {}
    ordered = runs.select(["query_id", "rank", "doc_id", "score"]).sort_by([("query_id", "ascending"), ("rank", "ascending")])
    columns = (ordered.column(name).to_pylist() for name in ("query_id", "doc_id", "score"))
    for query_id, doc_id, score in zip(*columns, strict=True):
        rankings.setdefault(query_id, {}).setdefault(doc_id, score)
    return {query_id: list(documents.items()) for query_id, documents in rankings.items()}


def evaluate_run(runs: pa.Table, queries: pa.Table, qrels: pa.Table, documents: DocumentGraph | None = None) -> tuple[pa.Table, pa.Table]:
    """Metrics per split (means) and per query, over the queries of each split that have gold;
    Topological Recall too when the corpus graph is given. No gold: empty tables of the same columns."""
    rankings = {query_id: [doc for doc, _ in ranking] for query_id, ranking in document_rankings(runs).items()}
    run_id = runs.column("run_id")[0].as_py() if runs.num_rows else ""
    method = runs.column("method")[0].as_py() if runs.num_rows else ""
    splits = dict(zip(queries.column("query_id").to_pylist(), queries.column("split").to_pylist(), strict=True))
    gold: dict[str, dict[str, dict[str, int]]] = {}
    for query_id, relevance in gold_by_query(qrels, positive=False).items():
        gold.setdefault(splits.get(query_id) or "all", {})[query_id] = relevance
    names = METRIC_NAMES + ([f"{m}@{k}" for m in GRAPH_METRICS for k in TR_CUTOFFS] if documents else [])
    summary, per_query = [], []
    for split, split_gold in sorted(gold.items()):
        values = evaluate(rankings, split_gold, METRIC_NAMES)
        if documents:
            for query_id, extra in topological_values(rankings, split_gold, documents).items():
                values[query_id] |= extra
        for name in names:
            metric, _, k = name.partition("@")
            column = [v[name] for v in values.values()]
            summary.append({"split": split, "metric": metric, "k": int(k) if k else None, "value": float(np.mean(column)) if column else 0.0, "queries": len(column)})
            per_query += [{"split": split, "query_id": q, "metric": metric, "k": int(k) if k else None, "value": v[name]} for q, v in values.items()]
    common = {"run_id": run_id, "method": method}
    schema = {name: pa.schema([("method", pa.string()), *row_schema(name)]) for name in ("metrics", "query_metrics")}
    metrics = pa.Table.from_pylist([{**common, **row} for row in summary], schema["metrics"])
    query_metrics = pa.Table.from_pylist([{**common, **row} for row in per_query], schema["query_metrics"])
    return metrics, query_metrics


def metrics_from_run(lake: LakeStorage, corpus: str, method: str, split: str, names: list[str]) -> dict[str, float]:
    """Means over the split's judged queries of metrics (``name@k``) computed from the stored run, as
    ``evaluate_run`` computes them: for cutoffs the stored evaluation does not keep."""
    partition = {"corpus": corpus}
    queries = lake.read("queries", partition)
    in_split = {q for q, s in zip(queries.column("query_id").to_pylist(), queries.column("split").to_pylist(), strict=True) if s == split}
    gold = {q: relevance for q, relevance in gold_by_query(lake.read("qrels", partition), positive=False).items() if q in in_split}
    runs = lake.read("runs", {**partition, "method": method})
    rankings = {query_id: [doc for doc, _ in ranking] for query_id, ranking in document_rankings(runs).items()}
    values = evaluate(rankings, gold, names)
    return {name: float(np.mean([v[name] for v in values.values()])) if values else 0.0 for name in names}


def evaluate_stored(lake: LakeStorage, corpus: str, name: str) -> tuple[pa.Table, pa.Table]:
    """Metrics of the method's stored run on the corpus, over the split it ran (every split if it ran all)."""
    partition = {"corpus": corpus}
    runs = lake.read("runs", {**partition, "method": name})
    queries, qrels = lake.read("queries", partition), lake.read("qrels", partition)
    params = json.loads(runs.column("params")[0].as_py()) if runs.num_rows else {}
    split, sample = params.get(SPLIT_PARAM), params.get(SAMPLE_PARAM)
    if split is not None or sample is not None:  # a run of one split (or a sample) says nothing about the other queries
        queries = select_queries(queries, split, sample)
        qrels = qrels.filter(pc.is_in(qrels.column("query_id"), queries.column("query_id")))
    return evaluate_run(runs, queries, qrels, document_graph(lake, corpus))


def document_graph(lake: LakeStorage, corpus: str) -> DocumentGraph | None:
    """The corpus graph over documents, for Topological Recall; None until all its edge kinds are built."""
    if not corpus_graph_built(lake, corpus):
        return None
    indexes = open_index_set(lake, corpus)
    adjacency, _ = corpus_graph(indexes, indexes.snapshot.linking.corpus_graph)
    return DocumentGraph.from_nodes(adjacency, list(indexes.snapshot.doc_ids()))


def corpus_graph_built(lake: LakeStorage, corpus: str) -> bool:
    """Whether every edge kind of the corpus graph (Topological Recall's graph) is in the lake."""
    kinds = CorpusRegistry(lake.home).get(corpus).effective_linking.corpus_graph
    return all(lake.has("edges", {"corpus": corpus, "kind": kind}) for kind in kinds)
