"""Baseline retrievers (BM25, dense, SPLADE, RRF of BM25 + dense) on the real benchmark sets.

Drives the ``graphlake`` command line exactly as a user would (ingest, then ``eval --json``) and
writes a markdown results file with the date, the machine and the commands. Embeddings are cached
in the lake, so a second run against the same ``GRAPHLAKE_HOME`` only re-runs the queries.
"""

from __future__ import annotations

import datetime as dt
import json

from common import arguments, graphlake, machine

METHODS = "bm25,dense,splade,rrf"
COLUMNS = ("recall@2", "recall@5", "recall@10", "ndcg@10", "mrr")

# corpus name, format, path under the datasets folder, split to report
DATASETS = [
    ("scifact", "beir", "scifact", "test"),
    ("hotpotqa", "hotpotqa-ircot", "hotpotqa/ircot/processed_data/hotpotqa/dev_subsampled.jsonl.gz", "dev"),
    ("2wiki-train", "2wiki", "2wikimultihopqa/migres/data/wikihop_train_preprocess.json.gz", "train"),
    ("2wiki-dev", "2wiki", "2wikimultihopqa/migres/data/wikihop.json.gz", "dev"),
]


def main() -> None:
    args = arguments(__doc__, "baselines.md")
    rows = []
    for corpus, fmt, relative, split in DATASETS:
        graphlake("ingest", fmt, str(args.datasets / relative), "--corpus", corpus)
        for result in json.loads(graphlake("eval", "--corpus", corpus, "--methods", METHODS, "--split", split, "--k", "2,5,10", "--rerun", "--json")):
            rows.append(result)
    lines = [
        "# Baseline retrievers",
        "",
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}",
        "- lake: `$GRAPHLAKE_HOME`; vectors and indexes are cached there, so timings below are of the queries alone",
        f"- command: `.venv/bin/python benchmarks/baselines.py` (runs `graphlake ingest` and `graphlake eval --methods {METHODS} --rerun --json` per set)",
        "- metrics at document level; recall@k as HippoRAG/SPRIG define it (|top-k ∩ gold| / |gold|), nDCG@10 as trec_eval's ndcg_cut;",
        "  QPS = 1000 / mean single-query latency (queries run one at a time, query encoding included, 2-core CPU).",
        "",
        "| corpus | split | method | " + " | ".join(COLUMNS) + " | QPS | p50 ms |",
        "|---|---|---|" + "---:|" * (len(COLUMNS) + 2),
    ]
    for row in rows:
        values = " | ".join(f"{row['metrics'][c]:.4f}" for c in COLUMNS)
        latency = row["latency_ms"]
        lines.append(f"| {row['corpus']} | {row['split']} | {row['method']} | {values} | {1000 / latency['mean']:.1f} | {latency['p50']:.1f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(args.output.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
