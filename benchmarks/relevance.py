"""How well a hit's ``relevance`` (``api/relevance.py``) is calibrated, per method and corpus: the
expected calibration error of the relevance of the top-10 hits (10 equal-width bins), its Brier score,
and what ``min_relevance=0.5`` keeps of the top 10 (precision: the share of kept hits that are relevant;
recall: the share of the top 10's relevant hits kept).

Honest by cross-fitting: the evaluated queries are split in two seeded halves, each half's hits scored
by the calibration fitted on the other half's stored run, as the lake fits it on all of them. Hits are
the stored runs' ranked nodes (a node is relevant when its document is in the query's gold). The lakes
are read only; build the runs first. SciFact test and HotpotQA dev, in a lake of their own (GRAPHLAKE_HOME=LAKE):

    graphlake ingest beir DATASETS/scifact --corpus scifact
    graphlake eval --corpus scifact --methods DEFAULT --split test
    graphlake ingest hipporag DATASETS/hotpotqa/hipporag/data --corpus hotpotqa-train
    graphlake ingest hotpotqa-ircot DATASETS/hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz --corpus hotpotqa --train-corpus hotpotqa-train
    graphlake eval --corpus hotpotqa --methods DEFAULT --split dev

(DEFAULT: the methods below; 6.5 and 5 minutes on 2 cores.) Then:

    .venv/bin/python benchmarks/relevance.py --lake LAKE:CORPUS [--lake LAKE:CORPUS ...] [--methods bm25,dense,...] [--output ...]
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np

from common import ROOT, header, table
from graphlake.api.relevance import fitted
from graphlake.retrieval.queries import gold_by_query
from graphlake.warehouse.storage import LakeStorage

DEFAULT_METHODS = "bm25,dense,dense_hnsw,splade,rrf,graph_rrf,grapher_gcs,ap_three,grasp_fused,graphlake_ltr"
TOP, BINS, SEED = 10, 10, 0


def measure(lake: LakeStorage, corpus: str, method: str) -> dict | str:
    partition = {"corpus": corpus}
    runs, queries, qrels = lake.read("runs", {**partition, "method": method}), lake.read("queries", partition), lake.read("qrels", partition)
    evaluated = sorted({q for q, s in zip(queries.column("query_id").to_pylist(), queries.column("split").to_pylist(), strict=True) if s != "train"})
    gold = {q: {d for d, g in relevance.items() if g > 0} for q, relevance in gold_by_query(qrels, positive=False).items()}
    judged = [q for q in evaluated if gold.get(q) and q in set(runs.column("query_id").to_pylist())]
    halves = np.random.default_rng(SEED).permutation(len(judged)) % 2
    predicted, labels = [], []
    for half in (0, 1):
        fit_on = {q for q, h in zip(judged, halves, strict=True) if h != half}
        scored = {q for q, h in zip(judged, halves, strict=True) if h == half}
        calibration = fitted(runs.filter(np.isin(runs.column("query_id").to_pylist(), sorted(fit_on))), queries, qrels)
        if isinstance(calibration, str):
            return f"no calibration on half the queries: {calibration}"
        top = [row for row in runs.to_pylist() if row["query_id"] in scored and row["rank"] <= TOP]
        predicted += calibration(np.array([row["score"] for row in top])).tolist()
        labels += [float(row["doc_id"] in gold[row["query_id"]]) for row in top]
    p, y = np.asarray(predicted), np.asarray(labels)
    bins = np.minimum((p * BINS).astype(int), BINS - 1)
    ece = sum(abs(p[bins == b].mean() - y[bins == b].mean()) * (bins == b).mean() for b in range(BINS) if (bins == b).any())
    kept = p >= 0.5
    return {
        "queries": len(judged),
        "hits": len(p),
        "ece": float(ece),
        "brier": float(np.mean((p - y) ** 2)),
        "base": float(y.mean()),
        "kept": float(kept.mean()),
        "precision": float(y[kept].mean()) if kept.any() else float("nan"),
        "recall": float(y[kept].sum() / y.sum()) if y.sum() else float("nan"),
    }


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", action="append", required=True, help="LAKE:CORPUS, a built lake and one of its corpora with stored runs")
    parser.add_argument("--methods", default=DEFAULT_METHODS)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "relevance.md")
    args = parser.parse_args()
    shown = [f"LAKE:{given.rpartition(':')[2]}" if given in args.lake else given for given in sys.argv[1:]]  # no path of this machine in the results
    lines = header("Relevance calibration: reliability and what min_relevance=0.5 keeps", "benchmarks/relevance.py " + shlex.join(shown))
    lines += [
        f"- per method and corpus, the stored run's top {TOP} nodes of each evaluated (non-train) judged query; relevance by the",
        "  isotonic calibration fitted on the other half of the queries (two seeded halves); ECE over 10 equal-width bins",
    ]
    lines += table("Reliability", ["corpus", "method", "queries", "hits", "relevant share", "ECE", "Brier", "kept by 0.5", "precision of kept", "recall of kept"])
    for given in args.lake:
        home, _, corpus = given.rpartition(":")
        lake = LakeStorage(Path(home))
        for method in args.methods.split(","):
            found = measure(lake, corpus, method) if lake.has("runs", {"corpus": corpus, "method": method}) else "no stored run"
            if isinstance(found, str):
                lines.append(f"| {corpus} | {method} | | | | | | | | {found} |")
                continue
            lines.append(
                f"| {corpus} | {method} | {found['queries']} | {found['hits']} | {found['base']:.3f} | {found['ece']:.3f} | {found['brier']:.3f} "
                f"| {found['kept']:.3f} | {found['precision']:.3f} | {found['recall']:.3f} |"
            )
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
