"""GRASP on the lake's substitutes for STaRK: the paper's Table 1 / Table 2 / Figure 2 / Figure A2 analogues.

Sets: Spider dev (tuned and trained on BIRD), BIRD dev (on Spider), 2Wiki dev (on 2Wiki train), the last
with the KB extracted from passages (``wiki_rules``) and with the gold-evidence oracle (``wiki_evidence``).
Per method: Hit@1, Hit@5, R@5, R@20, PR@10, MRR with 95 % bootstrap CIs, the paired difference to ``rrf``
(10,000 resamples, seed 0), latency p50/p95 one query at a time; then the plans' validity, the extracted
KB's coverage of the gold evidence, the chosen fusion settings, the (bucket, risk) cells, the static
(w, k) surface and its flatness, and the grid search's time over 500 validation queries (G4).
``--stage3`` adds the reranker rows (``grasp_zs``, ``grasp``) on 2Wiki dev; they train a cross-encoder
for up to ``grasp_reranker``'s budget and score 100 serialised pairs per query.
"""

from __future__ import annotations

import json
import time

import numpy as np
import yaml
from common import WIKI_DEV, WIKI_TRAIN, arguments, graphlake, header, table

from graphlake.kernels.metrics import bootstrap_interval, paired_bootstrap
from graphlake.warehouse.home import lake_home
from graphlake.warehouse.storage import Lake

CORPORA = {  # corpus: format, path under the datasets folder, its evaluated split, train_corpus
    "bird": ("bird", "bird", "dev", "spider"),
    "spider": ("spider", "spider", "dev", "bird"),
    "2wiki-train": ("2wiki", WIKI_TRAIN, "train", None),
    "2wiki-dev": ("2wiki", WIKI_DEV, "dev", "2wiki-train"),
}
SETS = ("spider", "bird", "2wiki-dev")
METHODS = ("bm25", "dense", "rrf", "grasp_graph", "grasp_fused", "grasp_static", "grasp_dynamic", "grasp_target", "grasp_dense_partner")
STAGE3 = ("grasp_zs", "grasp")
ORACLE = "_oracle"  # these methods over wiki_evidence, declared in the lake's methods.yaml
METRICS = ("hit@1", "hit@5", "recall@5", "recall@20", "pr@10", "mrr")
SHOWN = {"hit@1": "H@1", "hit@5": "H@5", "recall@5": "R@5", "recall@20": "R@20", "pr@10": "PR@10", "mrr": "MRR"}


def oracle_methods() -> dict:
    """The Stage 1-2 methods again with the oracle SKB, as a lake's methods.yaml adds them."""
    graph = {"op": "skb_plan", "planner": "rules", "source": "wiki_evidence", "k": 100}
    fused = lambda mode, partner="rrf": {"op": "plan_rrf", "inputs": [f"grasp_graph{ORACLE}", partner], "mode": mode, "k": 100}  # noqa: E731
    return {
        f"grasp_graph{ORACLE}": graph | {"emit": "path"},
        f"grasp_target{ORACLE}": graph | {"emit": "target"},
        f"grasp_fused{ORACLE}": fused("tuned"),
        f"grasp_static{ORACLE}": fused("tuned_static"),
        f"grasp_dynamic{ORACLE}": fused("tuned_dynamic"),
        f"grasp_dense_partner{ORACLE}": fused("tuned", "dense"),
    }


def per_query(lake: Lake, corpus: str, method: str, split: str) -> dict[str, dict[str, float]]:
    """metric -> query id -> value of the stored evaluation."""
    rows = lake.read("query_metrics", {"corpus": corpus, "method": method}).to_pylist()
    found: dict[str, dict[str, float]] = {}
    for row in rows:
        name = f"{row['metric']}@{row['k']}" if row["k"] else row["metric"]
        if row["split"] == split and name in METRICS:
            found.setdefault(name, {})[row["query_id"]] = row["value"]
    return found


def method_rows(lake: Lake, corpus: str, split: str, methods: list[str], latency: dict[str, dict]) -> list[str]:
    baseline = per_query(lake, corpus, "rrf", split)
    rows = []
    for method in methods:
        values = per_query(lake, corpus, method, split)
        cells = []
        for metric in METRICS:
            v = np.array([values[metric][q] for q in sorted(values[metric])])
            low, high = bootstrap_interval(v)
            cells.append(f"{100 * v.mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]")
        deltas = []
        for metric in ("hit@1", "recall@20"):
            ids = sorted(baseline[metric])
            c = paired_bootstrap([baseline[metric][q] for q in ids], [values[metric][q] for q in ids])
            deltas.append("baseline" if method == "rrf" else f"{100 * c['difference']:+.1f} [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}]")
        lat = latency.get(method, {})
        rows.append(f"| {corpus} | {method} | " + " | ".join(cells) + f" | {' | '.join(deltas)} | {lat.get('p50', float('nan')):.0f} | {lat.get('p95', float('nan')):.0f} |")
    return rows


def evaluate(corpus: str, split: str, methods: list[str]) -> dict[str, dict]:
    report = json.loads(graphlake("eval", "--corpus", corpus, "--methods", ",".join(methods), "--split", split, "--k", "1,5,10,20", "--json"))
    return {r["method"]: r["latency_ms"] for r in report}


def artifact_json(lake: Lake, name: str, corpus: str, file: str) -> dict:
    return json.loads((lake.artifact(name, {"corpus": corpus}) / file).read_text(encoding="utf-8"))


def fusion_lines(lake: Lake, corpus: str, heatmaps) -> list[str]:
    """Chosen settings, Table 2 analogue, (bucket, risk) cells and the flatness of the static surface, per tuned fusion."""
    saved = artifact_json(lake, "grasp_fusion", corpus, "fusion.json")
    report = saved["report"]
    lines = []
    for number, (key, fusion) in enumerate(report["fusions"].items()):
        hits = np.array(fusion["static_grid"]["hits"])
        flat = float(np.mean(hits >= hits.max() - 0.01 * fusion["queries"]))
        t2 = fusion["table2"]
        chosen = saved["choices"][key]
        lines.append(
            f"| {corpus} | {key[:8]} | {fusion['queries']} | {chosen['mode']} | static w {fusion['static']['weight']}, k {fusion['static']['constant']} "
            f"| dynamic k {fusion['dynamic']['constant']}, w_bucket {fusion['dynamic']['w_bucket']}, m_risk {fusion['dynamic']['m_risk']} "
            f"| {100 * t2['static']['hit@1']:.1f} / {100 * t2['static']['recall@20']:.1f} | {100 * t2['dynamic']['hit@1']:.1f} / {100 * t2['dynamic']['recall@20']:.1f} "
            f"| {100 * fusion['partner_hits'] / fusion['queries']:.1f} | {100 * flat:.0f} % | {fusion['grid_seconds']:.2f} | {json.dumps(fusion['cells'])} |"
        )
        heatmaps.append((f"{corpus}-{number}", hits, fusion["queries"]))
    return lines


def plan_lines(lake: Lake, corpus: str) -> list[str]:
    lines = []
    for source in artifact_json(lake, "skb", corpus, "sources.json"):
        if not lake.has("skb_plans", {"corpus": corpus, "source": source, "planner": "rules"}):
            continue
        plans = lake.read("skb_plans", {"corpus": corpus, "source": source, "planner": "rules"}).to_pylist()
        valid = [p for p in plans if p["valid"]]
        empty = sum(p["n_cand"] == 0 for p in valid)
        ms = np.array([p["plan_ms"] for p in plans])
        lines.append(f"| {corpus} | {source} | rules | {len(valid)}/{len(plans)} | {empty} | {np.median([p['n_cand'] for p in valid]) if valid else 0:.0f} | {np.percentile(ms, 50):.1f} | {np.percentile(ms, 95):.1f} |")
    return lines


def grid_timing(lake: Lake) -> str:
    """G4: the whole grid over 500 validation-style queries (BIRD questions through grasp_graph and rrf)."""
    from graphlake.kernels.plan_fusion import ValidationQuery, search_grid
    from graphlake.retrieval.indexes import LakeIndexes
    from graphlake.retrieval.methods import load_methods

    methods = load_methods(lake.home)
    indexes = LakeIndexes(lake, "bird")
    queries = lake.read("queries", {"corpus": "bird"}).to_pylist()
    picked = np.random.default_rng(0).choice(len(queries), 500, replace=False)
    items = []
    for i in picked.tolist():
        graph, partner = methods["grasp_graph"].run(queries[i]["text"], indexes), methods["rrf"].run(queries[i]["text"], indexes)
        items.append(ValidationQuery(graph.rows, partner.rows, frozenset({0}), graph.meta["valid"], graph.meta["n_cand"], graph.meta["risk_level"]))
    started = time.perf_counter()
    found = search_grid(items)
    seconds = time.perf_counter() - started
    return f"- G4: the full grid ({found.settings['static']} static + {found.settings['dynamic']:,} dynamic settings) over 500 BIRD questions: **{seconds:.2f} s** (gate ≤ 120 s)"


def coverage_lines(lake: Lake, corpus: str) -> list[str]:
    coverage = artifact_json(lake, "skb", corpus, "sources.json")["wiki_rules"]["coverage"]
    lines = [f"| {corpus} | all | {coverage['triples']} | {100 * coverage['share']:.1f} % |"]
    lines += [f"| {corpus} | {relation} | {v['triples']} | {100 * v['share']:.1f} % |" for relation, v in coverage["per_relation"].items()]
    return lines


def save_heatmaps(heatmaps, folder) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from graphlake.kernels.plan_fusion import STATIC_CONSTANTS, STATIC_WEIGHTS

    names = []
    for name, hits, queries in heatmaps:
        figure, axis = plt.subplots(figsize=(6, 5))
        image = axis.imshow(100 * hits / queries, aspect="auto", origin="lower", cmap="viridis")
        axis.set_xticks(range(len(STATIC_CONSTANTS)), [str(c) for c in STATIC_CONSTANTS])
        axis.set_yticks(range(0, len(STATIC_WEIGHTS), 2), [f"{w:.1f}" for w in STATIC_WEIGHTS[::2]])
        axis.set_xlabel("RRF constant k")
        axis.set_ylabel("graph weight w")
        axis.set_title(f"validation Hit@1 (%), static RRF: {name}")
        figure.colorbar(image)
        path = folder / f"grasp_static_{name}.png"
        figure.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(figure)
        names.append(path.name)
    return names


def main() -> None:
    args = arguments(__doc__, "grasp.md", lambda p: p.add_argument("--stage3", action="store_true"))
    for corpus, (fmt, relative, _, train) in CORPORA.items():
        graphlake("ingest", fmt, str(args.datasets / relative), "--corpus", corpus, *(["--train-corpus", train] if train else []))
    home = lake_home()
    override = home / "methods.yaml"
    declared = (yaml.safe_load(override.read_text()) if override.is_file() else None) or {}
    override.write_text(yaml.safe_dump(declared | oracle_methods(), sort_keys=False))
    lake = Lake(home)
    for corpus in ("bird", "spider", "2wiki-train"):  # training corpora need their own indexes before anyone learns from them
        graphlake("eval", "--corpus", corpus, "--methods", "rrf,grasp_graph", "--split", CORPORA[corpus][2], "--json")
    lines = header("GRASP on Spider, BIRD and 2Wiki (plan-guided retrieval over the lake's own SKBs)", ".venv/bin/python benchmarks/grasp.py" + (" --stage3" if args.stage3 else ""))
    lines += [
        "- document-level metrics in %, 95 % bootstrap CIs; Δ = paired difference to `rrf` (10,000 resamples, seed 0); latency one query at a time on this CPU",
        "- planner: rules (the paper's is an LLM); partner: `rrf` (BM25 + dense) for mFAR; encoder MiniLM for Qwen3-Embedding / SapBERT",
        "- Spider is tuned on BIRD's questions and BIRD on Spider's (GraphER's convention), 2Wiki dev on 2Wiki train (100 validation of 500)",
        "- `_oracle` rows read `wiki_evidence`, built from the gold evidence of the questions: an upper bound, not a result",
    ]
    lines += table("Table 1 analogue", ["set", "method", *(SHOWN[m] for m in METRICS), "ΔH@1 vs rrf", "ΔR@20 vs rrf", "p50 ms", "p95 ms"])
    heatmaps: list = []
    fusion: list[str] = []
    plans: list[str] = []
    for corpus in SETS:
        split = CORPORA[corpus][2]
        methods = list(METHODS) + ([f"{m}{ORACLE}" for m in METHODS if m.startswith("grasp")] if corpus.startswith("2wiki") else [])
        methods += list(STAGE3) if args.stage3 and corpus == "2wiki-dev" else []
        latency = evaluate(corpus, split, methods)
        graphlake("materialize", "--corpus", corpus, "--select", "skb_plans")
        lines += method_rows(lake, corpus, split, methods, latency)
        fusion += fusion_lines(lake, corpus, heatmaps)
        plans += plan_lines(lake, corpus)
    lines += table("Plans (rules planner): validity, empty results, median n_cand, planning + execution ms", ["set", "SKB", "planner", "valid", "valid but empty", "median n_cand", "p50 ms", "p95 ms"])
    lines += plans
    lines += table(
        "Table 2 / Figure 2 analogues: the fusion chosen on validation (H@1 / R@20 in %), the partner alone, the share of the static (w, k) grid within 1 H@1 point of its best, grid seconds, (bucket|risk) cells",
        ["set", "fusion", "queries", "mode", "best static", "best dynamic", "static H@1 / R@20", "dynamic H@1 / R@20", "partner H@1", "flat share", "grid s", "cells"],
    )
    lines += fusion
    lines += table("Coverage of the gold evidence by the extracted 2Wiki KB (wiki_rules)", ["set", "relation", "triples", "recovered"])
    lines += coverage_lines(lake, "2wiki-dev")
    lines += ["", grid_timing(lake)]
    images = save_heatmaps(heatmaps, args.output.parent)
    lines += ["", "Static (w, k) surfaces (Figure A2 analogue): " + ", ".join(f"`{name}`" for name in images)]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(args.output.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
