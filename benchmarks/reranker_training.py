"""The reranker's recipe with more compute: does a longer fine-tune beat dense where the CPU budget does not?

The ``reranker`` asset trains within 45 minutes on a 2-core CPU (about one epoch). This script runs the
same recipe, on the same mined data, for longer and on a GPU when one is lent:

* ``export`` (beside the lake) mines what the asset would, with the asset's own functions, and adds the
  dense top-100 of each evaluated set's test queries (Re2's input) with the node texts it needs, into a
  folder of Parquet files, plus a half-precision copy of the starting weights (a GPU machine has no
  packaged model). Only train-split queries teach; test queries are only scored.
* ``train`` (anywhere) fine-tunes from that folder on the device torch sees and writes the throughput,
  the held-out curve and, per evaluated set, nDCG@10 and capped R@10 of dense alone and of its top 100
  reranked by the model (Re2), both computed here by the same metric functions.

    .venv/bin/python benchmarks/reranker_training.py export --folder <dir>      # GRAPHLAKE_HOME=<lake>
    python benchmarks/reranker_training.py train --folder <dir> --output <results.md>
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from common import ROOT, header

from graphlake.kernels.cross_encoder import CrossEncoder, Group, reranked_ndcg, train
from graphlake.kernels.metrics import capped_recall_at_k, ndcg_at_k

EVALUATED = {"scifact": "test", "2wiki-dev": "dev", "hotpotqa": "dev"}
TRAINING = ["scifact", "2wiki-train", "hotpotqa-train"]  # the asset's order, as in benchmarks/fastinsight.py
DEPTH = 100  # Re2 reranks the dense top 100
WEIGHTS = "initial"


def export(folder: Path, negatives: int, validation_depth: int) -> None:
    """Mine the asset's groups and held-out lists, and the evaluated sets' dense top-100, into ``folder``."""
    from transformers import AutoModel, AutoTokenizer

    from graphlake.assets.reranker import RerankerConfig, mine, training_queries
    from graphlake.assets.retrieval import LakeIndexes, load_methods
    from graphlake.kernels.encoders import dense_model_path
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import Lake

    folder.mkdir(parents=True, exist_ok=True)
    store = Lake(lake_home())
    config = RerankerConfig(corpora=TRAINING, negatives=negatives, validation_depth=validation_depth)
    data = mine(store, TRAINING, training_queries(store, TRAINING, 0, config.seed), config)
    pq.write_table(
        pa.table({
            "query": [g.query for g in data.groups],
            "positive": [g.positive for g in data.groups],
            "negatives": [list(g.negatives) for g in data.groups],
        }),
        folder / "groups.parquet",
        compression="zstd",
    )
    pq.write_table(
        pa.table({name: [item[name] for item in data.validation] for name in ("query", "texts", "docs", "dense_ndcg")}
                 | {"gold": [sorted(item["gold"]) for item in data.validation]}),
        folder / "validation.parquet",
        compression="zstd",
    )
    methods, _ = load_methods(store.home)
    for corpus, split in EVALUATED.items():
        indexes = LakeIndexes(store, corpus, store.read("nodes", {"corpus": corpus}).column("node_id").to_pylist())
        gold: dict[str, list[str]] = {}
        for row in store.read("qrels", {"corpus": corpus}).to_pylist():
            if row["relevance"] > 0:
                gold.setdefault(row["query_id"], []).append(row["doc_id"])
        queries = [q for q in store.read("queries", {"corpus": corpus}).to_pylist() if q["split"] == split and q["query_id"] in gold]
        pq.write_table(
            pa.table({
                "query": [q["text"] for q in queries],
                "rows": [methods["vector"].run(q["text"], indexes, methods).rows[:DEPTH].tolist() for q in queries],
                "gold": [sorted(gold[q["query_id"]]) for q in queries],
            }),
            folder / f"eval_{corpus}.parquet",
            compression="zstd",
        )
        pq.write_table(pa.table({"text": indexes.texts(), "doc_id": indexes.doc_ids().tolist()}), folder / f"nodes_{corpus}.parquet", compression="zstd")
    model = AutoModel.from_pretrained(str(dense_model_path()), local_files_only=True).half()
    model.save_pretrained(str(folder / WEIGHTS))
    AutoTokenizer.from_pretrained(str(dense_model_path()), local_files_only=True).save_pretrained(str(folder / WEIGHTS))
    meta = {"training": data.summary(TRAINING), "config": config.model_dump(), "groups": len(data.groups), "evaluated": EVALUATED}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    print(json.dumps(meta, indent=2))


def train_and_score(args: argparse.Namespace) -> None:
    """Fine-tune from ``args.folder`` on the device torch sees; throughput, curve and Re2 vs dense per set."""
    torch.set_float32_matmul_precision("high")  # TF32 on a GPU; no effect on a CPU
    folder = args.folder
    table = pq.read_table(folder / "groups.parquet").to_pylist()
    groups = [Group(g["query"], g["positive"], tuple(g["negatives"][: args.negatives])) for g in table]
    validation = [item | {"gold": dict.fromkeys(item["gold"], 1)} for item in pq.read_table(folder / "validation.parquet").to_pylist()]
    encoder = CrossEncoder.initial(args.max_tokens, seed=0, weights=folder / WEIGHTS)
    report = train(
        encoder,
        groups,
        lambda model: reranked_ndcg(model, validation),
        learning_rate=args.learning_rate,
        groups_per_step=args.groups_per_step,
        epochs=args.epochs,
        budget_seconds=args.budget_minutes * 60,
        validate_every=args.validate_every,
    )
    device = torch.cuda.get_device_name() if encoder.device.type == "cuda" else "CPU"
    lines = header("Reranker training with more compute", "python benchmarks/reranker_training.py train " + " ".join(args.argv))
    lines += [
        f"- device: {device}",
        f"- data: {len(groups)} groups, {args.negatives} hard negatives each, max_tokens {args.max_tokens}; "
        f"held-out: {len(validation)} train-split queries, dense top-{len(validation[0]['texts'])}",
        f"- {report.steps} steps of {args.groups_per_step} groups in {report.seconds:.0f} s "
        f"({report.steps * args.groups_per_step / report.seconds:.1f} groups/s, validation included), lr {args.learning_rate}",
        f"- held-out nDCG@10: untrained {report.initial_validation:.3f}, best {report.best_validation:.3f} at step {report.best_step}, "
        f"dense alone {np.mean([item['dense_ndcg'] for item in validation]):.3f}",
        "",
        "## Curve",
        "",
        "| step | seconds | loss | held-out nDCG@10 |",
        "|---:|---:|---:|---:|",
        *(f"| {c['step']} | {c['seconds']:.0f} | {c['loss'] if c['loss'] is None else round(c['loss'], 3)} | {c['validation']:.4f} |" for c in report.curve),
        "",
        f"## Re2 (dense top-{DEPTH} reranked by the model) against dense, test queries",
        "",
        "| set | queries | dense nDCG@10 | Re2 nDCG@10 | dense R@10 | Re2 R@10 | Re2 seconds |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for corpus, split in json.loads((folder / "meta.json").read_text())["evaluated"].items():
        lines.append(score_set(encoder, folder, corpus, split))
        print(lines[-1], flush=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    if args.save:
        encoder.model.half().save_pretrained(str(args.save))  # half precision, no tokenizer (the packaged one): a transfer copy
        (args.save / "training.json").write_text(json.dumps({"max_tokens": args.max_tokens, "training": asdict(report)}, indent=2))


def score_set(encoder: CrossEncoder, folder: Path, corpus: str, split: str) -> str:
    nodes = pq.read_table(folder / f"nodes_{corpus}.parquet")
    texts, docs = nodes.column("text").to_pylist(), nodes.column("doc_id").to_pylist()
    started = time.perf_counter()
    metrics = {name: [] for name in ("dense_ndcg", "re2_ndcg", "dense_recall", "re2_recall")}
    items = pq.read_table(folder / f"eval_{corpus}.parquet").to_pylist()
    for item in items:
        gold, rows = dict.fromkeys(item["gold"], 1), item["rows"]
        dense = list(dict.fromkeys(docs[r] for r in rows))
        order = np.argsort(-encoder.score(item["query"], [texts[r] for r in rows]), kind="stable")
        reranked = list(dict.fromkeys(docs[rows[i]] for i in order))
        metrics["dense_ndcg"].append(ndcg_at_k(dense, gold, 10))
        metrics["re2_ndcg"].append(ndcg_at_k(reranked, gold, 10))
        metrics["dense_recall"].append(capped_recall_at_k(dense, gold, 10))
        metrics["re2_recall"].append(capped_recall_at_k(reranked, gold, 10))
    m = {name: 100 * float(np.mean(values)) for name, values in metrics.items()}
    return (
        f"| {corpus} {split} | {len(items)} | {m['dense_ndcg']:.1f} | {m['re2_ndcg']:.1f} | {m['dense_recall']:.1f} | {m['re2_recall']:.1f} "
        f"| {time.perf_counter() - started:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    out = commands.add_parser("export", help="mine the training data and Re2 inputs from the lake (GRAPHLAKE_HOME)")
    out.add_argument("--folder", type=Path, required=True)
    out.add_argument("--negatives", type=int, default=15, help="hard negatives mined per group (train may use fewer)")
    out.add_argument("--validation-depth", type=int, default=DEPTH)
    fit = commands.add_parser("train", help="fine-tune from an export on the device torch sees")
    fit.add_argument("--folder", type=Path, required=True)
    fit.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "reranker_training.md")
    fit.add_argument("--negatives", type=int, default=7)
    fit.add_argument("--max-tokens", type=int, default=256)
    fit.add_argument("--epochs", type=int, default=4)
    fit.add_argument("--groups-per-step", type=int, default=8)
    fit.add_argument("--learning-rate", type=float, default=5e-5)
    fit.add_argument("--budget-minutes", type=float, default=6.0)
    fit.add_argument("--validate-every", type=int, default=100)
    fit.add_argument("--save", type=Path, help="also save the weights here, half precision, without the tokenizer (a transfer copy)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.negatives, args.validation_depth)
    else:
        import sys

        args.argv = sys.argv[2:]
        train_and_score(args)


if __name__ == "__main__":
    main()
