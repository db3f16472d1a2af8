"""Commands that measure: evaluate methods, compare two runs, print a run for trec_eval."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from graphlake.cli.app import app, console, errors, fail, run_plan
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import LakeStorage, StorageError


@app.command(name="eval")
def evaluate(
    corpus: Annotated[str, typer.Option(help="Corpus to evaluate on.")],
    methods: Annotated[str, typer.Option(help="Comma-separated method names (retrieval/methods.yaml).")] = "bm25,dense",
    split: Annotated[str | None, typer.Option(help="Query split to report (default: the held-out one, test, else dev).")] = None,
    k: Annotated[str, typer.Option(help="Comma-separated cutoffs to report.")] = "1,2,5,10",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per method.")] = False,
    sample: Annotated[int | None, typer.Option(min=1, help="Run a seeded sample of this many of the split's queries (a slow method on a CPU); the metrics cover those.")] = None,
    rerun: Annotated[bool, typer.Option("--rerun", help="Run the queries again even if stored runs are current (fresh timings).")] = False,
    reuse_pairs: Annotated[bool, typer.Option("--reuse-pairs", help="Cross-encoder vectors from the lake's pair cache, shared by methods and sessions; the runs' timings are then no QPT.")] = False,
) -> None:
    """Materialize what is missing for these methods on the corpus (and on the corpora their learned
    indexes learn from), then print their metrics."""
    from graphlake.pipelines.freshness import plan_refresh
    from graphlake.retrieval.core import method_asset_names
    from graphlake.retrieval.evaluation import held_out_split
    from graphlake.retrieval.reports import evaluation_report

    home = lake_home()
    names = [m.strip() for m in methods.split(",") if m.strip()]
    try:
        cutoffs = _cutoffs(k)
        CorpusRegistry(home).get(corpus)
        if split is None and LakeStorage(home).has("queries", {"corpus": corpus}):
            split = held_out_split(LakeStorage(home), corpus)
        refresh = plan_refresh(LakeStorage(home), corpus, names, home, split, sample=sample)
    except (KeyError, ValueError, StorageError) as error:
        fail(str(error))
    if rerun:
        refresh.add(corpus, [asset for name in names for asset in method_asset_names(name)])
    runs = [method_asset_names(name)[0] for name in names if method_asset_names(name)[0] in refresh.assets]
    # only the reported split's queries: a cross-encoder is slow
    refresh.ops |= {run: {"config": {"split": split, "sample": sample, "reuse_pairs": reuse_pairs}} for run in runs}
    if not refresh.order():
        errors.print(f"{corpus}: up to date: the stored runs of {', '.join(names)} are current", highlight=False, soft_wrap=True)
    run_plan(refresh, "eval")
    if reuse_pairs and runs:
        errors.print("note: these runs read cached cross-encoder vectors, so their latencies are not query processing times")
    split = split or held_out_split(LakeStorage(home), corpus)  # a corpus ingested just now
    report = evaluation_report(home, corpus, names, split, cutoffs)
    if as_json:
        print(json.dumps(report))
        return
    _print_report(report, f"{corpus} / {split}")


def _cutoffs(k: str) -> list[int]:
    """``--k``: positive whole numbers, any of them (those the evaluation does not keep are computed from the runs)."""
    try:
        cutoffs = [int(c) for c in k.split(",") if c.strip()]
    except ValueError:
        cutoffs = []
    if not cutoffs or min(cutoffs) <= 0:
        raise ValueError(f"--k takes comma-separated positive whole numbers, got {k!r}")
    return cutoffs


def _print_report(report: list[dict], title: str) -> None:
    table = Table("metric", *(row["method"] for row in report), title=title)
    shown = [name for name in (report[0]["metrics"] if report else {}) if not name.startswith(("capped_recall", "pr@"))]
    for name in shown:
        table.add_row(name, *(f"{row['metrics'][name]:.4f}" for row in report))
    for percentile in ("p50", "p95"):
        table.add_row(f"latency {percentile} ms", *(f"{row['latency_ms'][percentile]:.1f}" for row in report))
    console.print(table)


@app.command(name="compare")
def compare_methods(
    corpus: Annotated[str, typer.Option(help="Corpus both runs are on.")],
    baseline: Annotated[str, typer.Option(help="The method to compare against.")],
    method: Annotated[str, typer.Option(help="The method being compared.")],
    metric: Annotated[str, typer.Option(help="Metric, e.g. ndcg@10 or mrr.")] = "ndcg@10",
    split: Annotated[str | None, typer.Option(help="Query split (default: the held-out one, test, else dev).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Paired bootstrap confidence interval of the per-query difference between two evaluated runs."""
    from graphlake.retrieval.evaluation import held_out_split
    from graphlake.retrieval.reports import compare

    try:
        split = split or held_out_split(LakeStorage(lake_home()), corpus)
        result = compare(lake_home(), corpus, baseline, method, metric, split)
    except ValueError as error:
        fail(str(error))
    if as_json:
        print(json.dumps(result))
        return
    console.print(
        f"{method} - {baseline} on {metric} ({corpus}/{split}, {result['queries']} queries): "
        f"{result['difference']:+.4f} [95% CI {result['low']:+.4f}, {result['high']:+.4f}], p = {result['p_value']:.4f}"
    )


@app.command()
def trec(
    corpus: Annotated[str, typer.Option(help="Corpus of the run.")],
    method: Annotated[str, typer.Option(help="Method of the run.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of {query_id, doc_id, rank, score, tag} instead.")] = False,
) -> None:
    """Print a stored run as a TREC run file (``qid Q0 doc rank score tag``, document level), e.g. for trec_eval."""
    from graphlake.retrieval.reports import trec_run

    try:
        rows = trec_run(lake_home(), corpus, method)
    except ValueError as error:
        fail(str(error))
    if as_json:
        print(json.dumps(rows))
        return
    print("\n".join(f"{r['query_id']} Q0 {r['doc_id']} {r['rank']} {r['score']:.6f} {r['tag']}" for r in rows))
