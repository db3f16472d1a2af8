"""What ``graphlake eval`` reports: metrics of stored runs, read back from the catalog."""

from __future__ import annotations

from pathlib import Path

from graphlake.kernels.metrics import METRICS_AT_K
from graphlake.warehouse.catalog import Catalog


def evaluation_report(home: Path, corpus: str, methods: list[str], split: str, cutoffs: list[int]) -> list[dict]:
    """One object per method: metrics at the cutoffs (``name@k``, plus ``mrr``) and latency percentiles."""
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
            metrics = {f"{m}@{k}": values[(m, k)] for m in METRICS_AT_K for k in cutoffs if (m, k) in values}
            metrics["mrr"] = values[("mrr", None)]
            p50, p95 = con.execute(
                """SELECT quantile_cont(latency_ms, 0.5), quantile_cont(latency_ms, 0.95) FROM (
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
                    "latency_ms": {"p50": p50 or 0.0, "p95": p95 or 0.0},
                }
            )
    return report
