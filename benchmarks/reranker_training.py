"""The reranker's recipe with more compute: does a longer fine-tune beat dense where the CPU budget does not?

The ``reranker`` asset trains within 45 minutes on a 2-core CPU (about one epoch). This script runs the
same recipe, on the same mined data, for longer and on a GPU when one is lent:

* ``export`` (beside the lake) mines what the asset would, with the asset's own functions, into a
  folder of Parquet files, plus a half-precision copy of the starting weights (a GPU machine has no
  packaged model). Only train-split queries are in it; no evaluated query is.
* ``train`` (anywhere) fine-tunes from that folder on the device torch sees and writes the throughput
  and the held-out curve; ``--save`` keeps the model (half precision, with its tokenizer), which
  ``benchmarks/gpu_fastinsight.py`` evaluates as Re2, GAR and FastInsight's reranker on the test sets.

    .venv/bin/python benchmarks/reranker_training.py export --folder <dir>      # GRAPHLAKE_HOME=<lake>
    python benchmarks/reranker_training.py train --folder <dir> --output <results.md> --save <model folder>
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from common import TRAINING, export_and_run, header, prepare_lake
from graphlake.kernels.rerank.cross_encoder import CrossEncoder, Group, reranked_ndcg, train

DEPTH = 100  # the held-out queries are scored on their dense top 100, as Re2 reranks
WEIGHTS = "initial"


def export(folder: Path, datasets: Path, negatives: int, validation_depth: int) -> None:
    """Mine the asset's groups and held-out lists into ``folder`` (the lake built first where it lacks anything)."""
    from transformers import AutoModel, AutoTokenizer

    from graphlake.assets.retrieval.reranker import RerankerConfig
    from graphlake.kernels.text.encoders import dense_model_path
    from graphlake.retrieval.training.reranker import mine, training_queries
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import LakeStorage

    prepare_lake(datasets)
    folder.mkdir(parents=True, exist_ok=True)
    store = LakeStorage(lake_home())
    corpora = list(TRAINING)  # the asset's order, as benchmarks/fastinsight.py trains it
    config = RerankerConfig(corpora=corpora, negatives=negatives, validation_depth=validation_depth)
    data = mine(store, corpora, training_queries(store, corpora, 0, config.seed), config)
    pq.write_table(
        pa.table(
            {
                "query": [g.query for g in data.groups],
                "positive": [g.positive for g in data.groups],
                "negatives": [list(g.negatives) for g in data.groups],
            }
        ),
        folder / "groups.parquet",
        compression="zstd",
    )
    pq.write_table(
        pa.table({name: [item[name] for item in data.validation] for name in ("query", "texts", "docs", "dense_ndcg")} | {"gold": [sorted(item["gold"]) for item in data.validation]}),
        folder / "validation.parquet",
        compression="zstd",
    )
    model = AutoModel.from_pretrained(str(dense_model_path()), local_files_only=True).half()
    model.save_pretrained(str(folder / WEIGHTS))
    AutoTokenizer.from_pretrained(str(dense_model_path()), local_files_only=True).save_pretrained(str(folder / WEIGHTS))
    meta = {"training": data.summary(corpora), "config": config.model_dump(), "groups": len(data.groups)}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    print(json.dumps(meta, indent=2))


def train_and_report(args: argparse.Namespace) -> None:
    """Fine-tune from ``args.folder`` on the device torch sees; the throughput and the held-out curve."""
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
        f"- data: {len(groups)} groups, {args.negatives} hard negatives each, max_tokens {args.max_tokens}; held-out: {len(validation)} train-split queries, dense top-{len(validation[0]['texts'])}",
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
    ]
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    if args.save:
        encoder.model.half()  # a transfer copy; CrossEncoder.load reads it back in full precision
        encoder.save(args.save, {"training": asdict(report)})


def main() -> None:
    parser, out, fit = export_and_run(__doc__, "the mined training data", "reranker_training.md", ("train", "fine-tune from an export on the device torch sees"))
    out.add_argument("--negatives", type=int, default=15, help="hard negatives mined per group (train may use fewer)")
    out.add_argument("--validation-depth", type=int, default=DEPTH)
    fit.add_argument("--negatives", type=int, default=15)
    fit.add_argument("--max-tokens", type=int, default=256)
    fit.add_argument("--epochs", type=int, default=4)
    fit.add_argument("--groups-per-step", type=int, default=8)
    fit.add_argument("--learning-rate", type=float, default=5e-5)
    fit.add_argument("--budget-minutes", type=float, default=4.5)
    fit.add_argument("--validate-every", type=int, default=50)
    fit.add_argument("--save", type=Path, help="also save the model here (half precision, with its tokenizer)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.datasets, args.negatives, args.validation_depth)
    else:
        import sys

        args.argv = sys.argv[2:]
        train_and_report(args)


if __name__ == "__main__":
    main()
