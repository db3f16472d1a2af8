"""What ``graphlake eval``, ``compare``, ``trec`` and the demo report: stored runs and metrics, read back from the lake."""

from __future__ import annotations

from pathlib import Path

from graphlake.kernels.eval.metrics import GRAPH_METRICS, METRICS_AT_K, paired_bootstrap, parse_metric, random_ndcg_at_k
from graphlake.retrieval.evaluation import document_rankings, metrics_from_run
from graphlake.retrieval.queries import gold_by_query
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.storage import LakeStorage


def evaluation_report(home: Path, corpus: str, methods: list[str], split: str, cutoffs: list[int]) -> list[dict]:
    """One object per method: metrics at the cutoffs (``name@k``, plus ``mrr``; ``tr``/``misstr`` at 10 and 100
    where the corpus graph exists) and latency percentiles. A cutoff the stored evaluation does not
    keep is computed from the stored run."""
    report = []
    with Catalog(home).reader() as con:
        for method in methods:
            rows = con.execute(
                "SELECT metric, k, value FROM metrics WHERE corpus = $c AND method = $m AND split = $s",
                {"c": corpus, "m": method, "s": split},
            ).fetchall()
            values = {(metric, k): value for metric, k, value in rows}
            if not values:
                raise ValueError(f"no metrics for method {method!r} on split {split!r} of corpus {corpus!r}")
            missing = [f"{m}@{k}" for m in METRICS_AT_K for k in cutoffs if (m, k) not in values]
            computed = metrics_from_run(LakeStorage(home), corpus, method, split, missing) if missing else {}
            metrics = {f"{m}@{k}": values[(m, k)] if (m, k) in values else computed[f"{m}@{k}"] for m in (*METRICS_AT_K, *GRAPH_METRICS) for k in cutoffs if (m, k) in values or f"{m}@{k}" in computed}
            metrics["mrr"] = values[("mrr", None)]
            p50, p95, mean = con.execute(
                """SELECT quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95), avg(latency_ms) FROM (
                       SELECT r.query_id, any_value(r.latency_ms) AS latency_ms FROM runs r
                       JOIN queries q ON q.corpus = r.corpus AND q.query_id = r.query_id
                       WHERE r.corpus = $c AND r.method = $m AND q.split = $s GROUP BY r.query_id)""",
                {"c": corpus, "m": method, "s": split},
            ).fetchone()
            report.append(
                {
                    "corpus": corpus,
                    "split": split,
                    "method": method,
                    "metrics": metrics,
                    "latency_ms": {"p50": p50 or 0.0, "p95": p95 or 0.0, "mean": mean or 0.0},
                }
            )
    return report


def typical_latency(home: Path) -> dict[str, tuple[float, str]]:
    """Per method that has a run in the lake: the median query latency (ms) of its largest corpus's run, and that corpus."""
    with Catalog(home).reader() as con:
        rows = con.execute(
            """SELECT method, corpus, ms, n FROM (
                   SELECT method, corpus, median(latency_ms) AS ms, count(*) AS n FROM runs WHERE rank = 1 GROUP BY method, corpus)
               QUALIFY row_number() OVER (PARTITION BY method ORDER BY n DESC, corpus) = 1"""
        ).fetchall()
    return {method: (float(ms), corpus) for method, corpus, ms, _ in rows}


def random_floor(home: Path, corpus: str, split: str, k: int = 10) -> dict[str, float]:
    """Expected ``ndcg@k`` and ``recall@k`` of a random document ranking over the split's judged queries."""
    with Catalog(home).reader() as con:
        [(documents,)] = con.execute("SELECT count(*) FROM documents WHERE corpus = $c", {"c": corpus}).fetchall()
        qrels = con.sql("SELECT query_id, doc_id, relevance FROM qrels WHERE corpus = $c AND split = $s", params={"c": corpus, "s": split}).to_arrow_table()
    gold = gold_by_query(qrels)
    if not gold or not documents:
        raise ValueError(f"no judged queries in split {split!r} of corpus {corpus!r}")
    ndcg = sum(random_ndcg_at_k(g, documents, k) for g in gold.values()) / len(gold)
    return {f"ndcg@{k}": ndcg, f"recall@{k}": min(k, documents) / documents}


def compare(home: Path, corpus: str, baseline: str, system: str, metric: str, split: str) -> dict:
    """Paired bootstrap of ``system`` against ``baseline`` on one metric, over the queries both ran."""
    name, k = parse_metric(metric)
    with Catalog(home).reader() as con:
        rows = con.execute(
            """SELECT a.value, b.value FROM query_metrics a JOIN query_metrics b USING (corpus, split, query_id, metric, k)
               WHERE corpus = $c AND split = $s AND metric = $m AND k IS NOT DISTINCT FROM $k AND a.method = $a AND b.method = $b
               ORDER BY query_id""",
            {"c": corpus, "s": split, "m": name, "k": k, "a": baseline, "b": system},
        ).fetchall()
    if not rows:
        raise ValueError(f"no per-query {metric} for both {baseline!r} and {system!r} on split {split!r} of {corpus!r}")
    result = paired_bootstrap([a for a, _ in rows], [b for _, b in rows])
    return {"corpus": corpus, "split": split, "metric": metric, "baseline": baseline, "method": system, **result}


def trec_run(home: Path, corpus: str, method: str) -> list[dict]:
    """The run at document level, a document ranked by its best node: one ``{query_id, doc_id, rank, score,
    tag}`` per line of a TREC run file (``qid Q0 doc rank score tag``), the score as that file prints it."""
    lake = LakeStorage(home)
    partition = {"corpus": corpus, "method": method}
    if not lake.has("runs", partition):
        raise ValueError(f"no run of method {method!r} on corpus {corpus!r}; run `graphlake eval` first")
    rankings = document_rankings(lake.read("runs", partition))
    return [
        {"query_id": query_id, "doc_id": doc, "rank": rank, "score": float(f"{score:.6f}"), "tag": f"graphlake-{method}"}
        for query_id, ranking in sorted(rankings.items())
        for rank, (doc, score) in enumerate(ranking, start=1)
    ]
