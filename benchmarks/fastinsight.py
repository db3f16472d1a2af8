"""FastInsight against Re2, GAR, Vector and BM25 on the real sets, through the ``graphlake`` CLI.

The reranker is the lake's own (the ``reranker`` asset, trained on the SciFact train split, the 2Wiki
train file and the HotpotQA HippoRAG train file). Main table: capped R@10 and nDCG@10 (FastInsight
4.3.1) with 95% bootstrap intervals, Topological Recall, and query processing time, on SciFact test,
HotpotQA dev 500 and 2Wiki dev. Curves on 2Wiki dev (the cheapest to rerank), each with a plot beside
the results file: TR and R@10 against the budget b_max for the three budgeted methods (the paper's
Figure 6), FastInsight's sensitivity to alpha and beta (Figure 7), and R@10 against QPT (Figure 4).

Scores come from runs that share the lake's pair cache (``graphlake eval --reuse-pairs``): each
(query, node) pair is encoded once for all methods and sweep variants, which is what makes the
tables affordable on 2 cores, and the script can stop and resume (finished runs stay in the lake).
Query processing time is measured apart, cold (no cache), one query at a time on a seeded sample,
the methods interleaved query by query so that they share the machine's drift.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from common import (
    ALPHAS,
    BETAS,
    BUDGETED,
    BUDGETS,
    CURVE_SET,
    EVALUATED,
    QPT_QUERIES,
    TRAINING,
    arguments,
    graphlake,
    header,
    prepare_lake,
    table,
    timing_sample,
)
from graphlake.kernels.eval.metrics import bootstrap_interval, paired_bootstrap
from graphlake.kernels.rerank.cross_encoder import TRAINING_FILE
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage

METHODS = ("vector", "bm25", "re2", "gar", "fastinsight")
SWEEPS = {"alpha": (ALPHAS, "fastinsight_alpha"), "beta": (BETAS, "fastinsight_beta")}


def evaluate(corpus: str, methods: list[str], split: str, cutoffs: str = "10,100") -> dict[str, dict]:
    report = json.loads(graphlake("eval", "--corpus", corpus, "--methods", ",".join(methods), "--split", split, "--k", cutoffs, "--reuse-pairs", "--json"))
    return {row["method"]: row for row in report}


def cold_qpt(corpus: str, split: str, names: list[str]) -> dict[str, np.ndarray]:
    """Milliseconds per query of each method, cold: no pair cache, one query at a time, as a user's search.

    The methods take turns on each query, in an order that rotates from query to query: a 2-core
    machine drifts by 10-20% over minutes, and timing one method's whole sample after another's
    would measure the drift as a difference between methods.
    """
    methods, sample, indexes = timing_sample(corpus, split)
    for name in names:
        methods[name].run("warm up", indexes)
    timings: dict[str, list[float]] = {name: [] for name in names}
    for i, text in enumerate(sample):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            started = time.perf_counter()
            methods[name].run(text, indexes)
            timings[name].append((time.perf_counter() - started) * 1000)
    return {name: np.array(elapsed) for name, elapsed in timings.items()}


def per_query(corpus: str, method: str, split: str, metric: str, k: int) -> np.ndarray:
    rows = json.loads(
        graphlake(
            "sql",
            f"SELECT value FROM query_metrics WHERE corpus = '{corpus}' AND method = '{method}' AND split = '{split}' AND metric = '{metric}' AND k = {k} ORDER BY query_id",
            "--json",
        )
    )
    return np.array([row["value"] for row in rows])


def variant(prefix: str, value: float) -> str:
    """A method name for a parameter value (method names are Dagster names: no dots)."""
    return f"{prefix}{value}".replace(".", "_")


def declare_variants() -> dict[str, dict]:
    """Budget and sensitivity variants of the three methods, written to the lake's methods.yaml."""
    variants: dict[str, dict] = {}
    for b in BUDGETS:
        variants[f"re2_b{b}"] = {"op": "cross_encoder", "inputs": ["vector"], "depth": b, "k": b}
        variants[f"gar_b{b}"] = {"op": "gar", "inputs": ["vector"], "graph": "auto", "batch": 10, "budget": b, "k": b}
        variants[f"fastinsight_b{b}"] = {"op": "fastinsight", "graph": "auto", "batch": 10, "budget": b, "k": b}
    for a in ALPHAS:
        variants[variant("fastinsight_alpha", a)] = {"op": "fastinsight", "graph": "auto", "alpha": a}
    for beta in BETAS:
        variants[variant("fastinsight_beta", beta)] = {"op": "fastinsight", "graph": "auto", "beta": beta}
    path = lake_home() / "methods.yaml"
    declared = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
    path.write_text(yaml.safe_dump({**declared, **variants}, sort_keys=False), encoding="utf-8")
    return variants


def main_rows(corpus: str, split: str) -> list[str]:
    report = evaluate(corpus, list(METHODS), split)
    rows = []
    for method in METHODS:
        cells = []
        for metric in ("capped_recall", "ndcg"):
            values = per_query(corpus, method, split, metric, 10)
            low, high = bootstrap_interval(values)
            cells.append(f"{100 * values.mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]")
        metrics = report[method]["metrics"]
        tr = f"{100 * metrics['tr@10']:.1f}" if "tr@10" in metrics else "–"
        rows.append(f"| {corpus} | {method} | {cells[0]} | {cells[1]} | {tr} |")
    return rows


def paired_rows(corpus: str, split: str) -> list[str]:
    rows = []
    for baseline in ("re2", "gar"):
        for metric in ("capped_recall@10", "ndcg@10"):
            c = json.loads(graphlake("compare", "--corpus", corpus, "--baseline", baseline, "--method", "fastinsight", "--metric", metric, "--split", split, "--json"))
            rows.append(f"| {corpus} | fastinsight − {baseline} | {metric} | {100 * c['difference']:+.1f} [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}] | {c['p_value']:.3f} |")
    return rows


def budget_rows(corpus: str, split: str, output: Path) -> tuple[list[str], dict[str, dict]]:
    """TR, MissTR and R@10 against b_max for the three budgeted methods (the paper's Figure 6), with its plot."""
    budgeted = evaluate(corpus, [f"{m}_b{b}" for m in BUDGETED for b in BUDGETS], split)
    lines = table(f"Budget curves on {corpus} {split} (TR over every retrieved node, i.e. at b_max)", ["method", "b_max", "TR", "MissTR", "R@10"])
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for method in BUDGETED:
        points = [budgeted[f"{method}_b{b}"]["metrics"] for b in BUDGETS]
        for b, m in zip(BUDGETS, points, strict=True):
            lines.append(f"| {method} | {b} | {100 * m['tr@100']:.1f} | {100 * m['misstr@100']:.1f} | {100 * m['capped_recall@10']:.1f} |")
        left.plot(BUDGETS, [m["tr@100"] for m in points], marker="o", label=method)
        right.plot(BUDGETS, [m["capped_recall@10"] for m in points], marker="o", label=method)
    left.set(xlabel="budget b_max", ylabel="Topological Recall", title=f"TR vs budget ({corpus})")
    right.set(xlabel="budget b_max", ylabel="capped R@10", title=f"R@10 vs budget ({corpus})")
    left.legend(), right.legend()
    figure.tight_layout()
    figure.savefig(output.with_name("fastinsight_budget.png"), dpi=120)
    return lines, budgeted


def sensitivity_rows(corpus: str, split: str, output: Path) -> list[str]:
    """FastInsight's R@10 against alpha and beta (the paper's Figure 7), with its plot."""
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    lines = table(f"FastInsight sensitivity on {corpus} {split} (b_max 100; the other parameter at its default)", ["parameter", "value", "R@10", "nDCG@10"])
    for axis, (parameter, (values, prefix)) in zip(axes, SWEEPS.items(), strict=True):
        report = evaluate(corpus, [variant(prefix, v) for v in values], split, "10")
        recall = [report[variant(prefix, v)]["metrics"]["capped_recall@10"] for v in values]
        for v, r in zip(values, recall, strict=True):
            lines.append(f"| {parameter} | {v} | {100 * r:.1f} | {100 * report[variant(prefix, v)]['metrics']['ndcg@10']:.1f} |")
        axis.plot([str(v) for v in values], recall, marker="o")
        axis.set(xlabel=parameter, ylabel="capped R@10", title=f"FastInsight R@10 vs {parameter} ({corpus})")
    figure.tight_layout()
    figure.savefig(output.with_name("fastinsight_sensitivity.png"), dpi=120)
    return lines


def qpt_rows(corpus: str, split: str) -> tuple[list[str], list[str]]:
    """QPT per method, and FastInsight's paired per-query difference to Re2 and GAR (same queries, interleaved)."""
    qpt = cold_qpt(corpus, split, list(METHODS))
    rows = [f"| {corpus} | {m} | {np.percentile(qpt[m], 50):.0f} | {np.percentile(qpt[m], 95):.0f} | {qpt[m].mean():.0f} |" for m in METHODS]
    paired = []
    for baseline in ("re2", "gar"):
        c = paired_bootstrap(qpt[baseline], qpt["fastinsight"])
        share = 100 * c["difference"] / qpt[baseline].mean()
        paired.append(f"| {corpus} | fastinsight − {baseline} | {c['difference']:+.0f} [{c['low']:+.0f}, {c['high']:+.0f}] | {share:+.1f}% | {c['p_value']:.3f} |")
    return rows, paired


def budget_qpt_rows(corpus: str, split: str, budgeted: dict[str, dict], output: Path) -> list[str]:
    """R@10 against cold QPT over the budget variants (the paper's Figure 4), with its plot."""
    qpt = cold_qpt(corpus, split, list(budgeted))
    lines = table(f"Budget variants on {corpus} {split}: cold QPT", ["method", "b_max", "QPT mean ms", "R@10"])
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(5, 4))
    for method in BUDGETED:
        mean_qpt = [float(qpt[f"{method}_b{b}"].mean()) for b in BUDGETS]
        recall = [budgeted[f"{method}_b{b}"]["metrics"]["capped_recall@10"] for b in BUDGETS]
        lines += [f"| {method} | {b} | {q:.0f} | {100 * r:.1f} |" for b, q, r in zip(BUDGETS, mean_qpt, recall, strict=True)]
        axis.plot(mean_qpt, recall, marker="o", label=method)
    axis.set(xlabel="mean query processing time (ms, 2-core CPU)", ylabel="capped R@10", title=f"QPT vs R@10 ({corpus})")
    axis.legend()
    figure.tight_layout()
    figure.savefig(output.with_name("fastinsight_qpt.png"), dpi=120)
    return lines


def pyplot():
    """matplotlib without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def reranker_lines() -> list[str]:
    saved = json.loads((LakeStorage(lake_home()).artifact("reranker", {}) / TRAINING_FILE).read_text())
    training = saved["training"]
    return [
        "",
        "## The reranker",
        "",
        f"- trained on: {saved['training_queries']} train-split queries (validation: {saved['validation_queries']})",
        f"- {training['groups']} groups, {training['steps']} steps in {training['seconds'] / 60:.1f} min (budget {saved['config']['budget_minutes']} min), "
        f"lr {saved['config']['learning_rate']}, {saved['config']['negatives']} hard negatives per group (one group per gold document) from BM25 and dense",
        f"- held-out nDCG@10 reranking the dense top-{saved['config']['validation_depth']}: before {training['initial_validation']:.3f}, "
        f"best {training['best_validation']:.3f} (dense alone {saved['validation_dense_ndcg@10']:.3f})",
    ]


def main() -> None:
    sets = ",".join(EVALUATED)
    args = arguments(__doc__, "fastinsight.md", lambda p: p.add_argument("--sets", default=sets, help=f"evaluated sets among {sets}"))
    unknown = [name for name in args.sets.split(",") if name not in EVALUATED]
    if unknown:
        sys.exit(f"--sets: unknown {', '.join(unknown)}; choose among {sets}")
    evaluated = {corpus: EVALUATED[corpus] for corpus in args.sets.split(",")}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    prepare_lake(args.datasets)
    with tempfile.TemporaryDirectory() as folder:  # the three training sets only, whatever else the lake holds
        config = Path(folder) / "reranker.yaml"
        config.write_text(yaml.safe_dump({"ops": {"reranker": {"config": {"corpora": list(TRAINING)}}}}), encoding="utf-8")
        graphlake("materialize", "--corpus", "scifact", "--select", "key:reranker", "--config", str(config))
    declare_variants()
    command = ".venv/bin/python benchmarks/fastinsight.py" + ("" if args.sets == sets else f" --sets {args.sets}")
    lines = header("FastInsight, Re2, GAR on the real sets", command)
    lines.append("- capped R@10 and nDCG@10 in %, 95% bootstrap interval over queries; TR@10 over the corpus graph;")
    lines.append("- QPT = latency of the whole method per query (query encoding included), cold (no pair cache), one query at a time,")
    lines.append(f"  on a seeded sample of {QPT_QUERIES} queries per set, the methods taking turns on each query, 2-core CPU")
    lines += reranker_lines()

    def save(more: list[str]) -> None:
        """Each finished section goes to the results file at once: the whole run takes hours."""
        lines.extend(more)
        args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # every evaluation first (they may share the machine), then every timing on a quiet one
    save(table("Retrieval (b_max 100, BATCH 10, alpha 0.2, beta 1)", ["corpus", "method", "R@10", "nDCG@10", "TR@10"]))
    for corpus, split in evaluated.items():
        save(main_rows(corpus, split))
    save(table("FastInsight against Re2 and GAR, paired bootstrap", ["corpus", "difference", "metric", "Δ [95% CI]", "p"]))
    for corpus, split in evaluated.items():
        save(paired_rows(corpus, split))
    budget, budgeted = budget_rows(CURVE_SET, EVALUATED[CURVE_SET], args.output)
    save(budget)
    save(sensitivity_rows(CURVE_SET, EVALUATED[CURVE_SET], args.output))
    timed = {corpus: qpt_rows(corpus, split) for corpus, split in evaluated.items()}
    save(table("Query processing time at b_max 100 (ms, cold)", ["corpus", "method", "p50", "p95", "mean"]))
    save([row for rows, _ in timed.values() for row in rows])
    save(table("FastInsight's QPT against Re2 and GAR, paired over the same queries", ["corpus", "difference", "ms per query [95% CI]", "relative", "p"]))
    save([row for _, paired in timed.values() for row in paired])
    save(budget_qpt_rows(CURVE_SET, EVALUATED[CURVE_SET], budgeted, args.output))
    print(args.output.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
