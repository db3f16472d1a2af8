"""GRASP's Stage 3 with the paper's recipe on a GPU: the reranker's data exported from the lake, trained and
evaluated where a GPU is, beside the CPU-trained ``grasp_reranker`` (``benchmarks/results/grasp_gpu.md``).

* ``export`` (beside the lake) writes, per evaluated corpus, what ``grasp_reranker`` learns from (the
  training records of its ``train_corpus``'s training share and the validation share's Stage-2 lists,
  serialised, by the asset's own functions) and the evaluated queries' Stage-2 top 100, serialised, with
  their gold documents; plus the lake's ``reranker`` (the zero-shot base) and, if trained, the CPU
  ``grasp_reranker``, in half precision (a GPU machine has no lake and no packaged model).
* ``train`` (anywhere) fine-tunes the base with the GPU recipe (``RECIPES["gpu"]``: G 24, 512 tokens,
  16 groups per step in one batched pass, 2 epochs, cosine 3e-5, 5 % warm-up) on the device torch sees.
* ``evaluate`` (anywhere) ranks the evaluated lists with base, the GPU-trained and the CPU-trained
  models, each fused with Stage 2 by the (w, k) chosen on validation, and writes the Table 1 rows.

    .venv/bin/python benchmarks/grasp_reranker.py export --folder <dir> --corpus 2wiki-dev   # GRAPHLAKE_HOME=<lake>
    python benchmarks/grasp_reranker.py train --folder <dir>
    python benchmarks/grasp_reranker.py evaluate --folder <dir>
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import export_and_run, graphlake, header
from graphlake.kernels.eval.metrics import bootstrap_interval, evaluate
from graphlake.kernels.plan.fusion import fuse_stage2
from graphlake.kernels.rerank.cross_encoder import TRAINING_FILE, CrossEncoder, Pool, train
from graphlake.retrieval.training.grasp_reranker import RECIPES, final_fusion, validation_hit_at_1

MODELS = ("base", "cpu", "gpu")  # the zero-shot base, grasp_reranker as the lake trained it, this script's
METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


def export(folder: Path, corpus: str, sample: int | None) -> None:
    """The corpus's Stage-3 data from the lake (GRAPHLAKE_HOME), its missing pieces built first."""
    from graphlake.assets.retrieval.grasp import GraspRerankerConfig
    from graphlake.retrieval.evaluation import held_out_split
    from graphlake.retrieval.learned_kinds import open_index_set
    from graphlake.retrieval.methods import load_methods
    from graphlake.retrieval.models.grasp_reranker import MODEL_FOLDER, candidate_texts
    from graphlake.retrieval.queries import gold_by_query, select_queries
    from graphlake.retrieval.training.grasp_reranker import training_data
    from graphlake.warehouse.home import lake_home
    from graphlake.warehouse.storage import LakeStorage

    graphlake("eval", "--corpus", corpus, "--methods", "grasp_fused", "--json")  # grasp_fusion, and the indexes Stage 2 reads
    lake = LakeStorage(lake_home())
    if lake.artifact_written_at("reranker", {}) is None:
        graphlake("materialize", "--corpus", corpus, "--select", "reranker")
    config = GraspRerankerConfig()
    recipe = RECIPES["gpu"]
    data = training_data(lake, corpus, config, recipe.group_size)
    if isinstance(data, str):
        sys.exit(f"{corpus}: nothing to export: {data}")
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{"query": p.query, "positive": p.positive, "negatives": list(p.negatives)} for p in data.pools]), folder / "records.parquet")
    _write_lists(folder / "validation.parquet", [item | {"rows": item["rows"].tolist(), "gold": sorted(item["gold"])} for item in data.validation])

    split = held_out_split(lake, corpus)
    indexes = open_index_set(lake, corpus)
    stage = load_methods(lake.home)["grasp"].inputs[0]  # the Stage 2 that grasp reranks
    gold = gold_by_query(lake.read("qrels", {"corpus": corpus}))
    doc_ids = indexes.snapshot.doc_ids()
    evaluated = []
    for query in select_queries(lake.read("queries", {"corpus": corpus}), split, sample).to_pylist():
        rows = stage.run(query["text"], indexes).rows[: config.depth]
        texts = candidate_texts(indexes.snapshot, indexes.skb, rows, "skb", config.max_neighbours, config.max_field_tokens)
        evaluated.append({"query_id": query["query_id"], "query": query["text"], "texts": texts, "docs": [doc_ids[r] for r in rows.tolist()], "gold": sorted(gold.get(query["query_id"], {}))})
    _write_lists(folder / "evaluated.parquet", evaluated)
    _save_half(CrossEncoder.load(lake.artifact("reranker", {})), folder / "base")
    trained = _cpu_trained(lake, corpus)
    if trained is not None and (trained / MODEL_FOLDER).is_dir():
        _save_half(CrossEncoder.load(trained / MODEL_FOLDER), folder / "cpu")
    cpu_training = json.loads((trained / "grasp_reranker.json").read_text(encoding="utf-8"))["report"].get("training") if trained is not None else None
    meta = {"corpus": corpus, "split": split, "sample": sample, "records": len(data.pools), "validation": len(data.validation), "evaluated": len(evaluated)}
    meta |= {"train_corpus": data.source, "config": config.model_dump(), "cpu_training": cpu_training}
    (folder / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in meta.items() if k != "cpu_training"}, indent=1))


def _save_half(encoder: CrossEncoder, folder: Path, report: dict | None = None) -> None:
    """A transfer copy; ``CrossEncoder.load`` reads it back in full precision."""
    encoder.model.half()
    encoder.save(folder, report)


def _cpu_trained(lake, corpus: str) -> Path | None:
    """The lake's own ``grasp_reranker`` of the corpus (trained on a CPU), when it has one: its row is optional."""
    return lake.artifact("grasp_reranker", {"corpus": corpus}) if lake.artifact_written_at("grasp_reranker", {"corpus": corpus}) else None


def _write_lists(path: Path, rows: list[dict]) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")


def _validation(folder: Path) -> list[dict]:
    return [item | {"rows": np.array(item["rows"], dtype=np.int64), "gold": set(item["gold"])} for item in pq.read_table(folder / "validation.parquet").to_pylist()]


def train_gpu(folder: Path, budget_minutes: float) -> None:
    """Fine-tune the exported base with the GPU recipe; the model and its curve go into ``folder/gpu``."""
    import torch

    torch.set_float32_matmul_precision("high")
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    recipe = RECIPES["gpu"]
    pools = [Pool(r["query"], r["positive"], tuple(r["negatives"]), recipe.group_size) for r in pq.read_table(folder / "records.parquet").to_pylist()]
    model = CrossEncoder.load(folder / "base")
    model.max_tokens = recipe.max_tokens
    started = time.perf_counter()
    report = train(
        model,
        pools,
        validation_hit_at_1(_validation(folder), meta["config"]["validation_depth"]),
        learning_rate=recipe.learning_rate,
        groups_per_step=recipe.groups_per_step,
        epochs=recipe.epochs,
        budget_seconds=budget_minutes * 60,
        validate_every=meta["config"]["validate_every"],
        seed=meta["config"]["seed"],
        schedule=recipe.schedule,
        warmup=recipe.warmup,
        batched=recipe.batched,
    )
    device = torch.cuda.get_device_name() if model.device.type == "cuda" else "CPU"
    _save_half(model, folder / "gpu", {"training": asdict(report) | {"device": device, "minutes": (time.perf_counter() - started) / 60, "recipe": asdict(recipe)}})
    print(json.dumps({"device": device, "steps": report.steps, "best_step": report.best_step, "best": report.best_validation, "initial": report.initial_validation}))


def evaluate_models(folder: Path, output: Path, argv: list[str]) -> None:
    """Table 1's Stage-3 rows on the exported lists: each model's ranking fused with Stage 2 by its validation-chosen (w, k)."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    validation = _validation(folder)
    evaluated = pq.read_table(folder / "evaluated.parquet").to_pylist()
    gold = {item["query_id"]: dict.fromkeys(item["gold"], 1) for item in evaluated if item["gold"]}
    rankings = {"stage 2 (grasp_fused)": {item["query_id"]: item["docs"] for item in evaluated}}
    trainings: dict[str, dict] = {}
    for name in (m for m in MODELS if (folder / m).is_dir()):
        model = CrossEncoder.load(folder / name)  # each with the token budget it was trained with
        setting = final_fusion(model, validation)
        ranked = {}
        for item in evaluated:
            top = np.arange(len(item["docs"]))
            order = np.argsort(-model.score(item["query"], item["texts"]), kind="stable") if len(top) else top
            fused = fuse_stage2(top[order], top, {}, "static", setting).rows
            ranked[item["query_id"]] = [item["docs"][i] for i in fused.tolist()]
        rankings[f"{'grasp_zs' if name == 'base' else 'grasp'} ({name}; w {setting['weight']}, k {setting['constant']})"] = ranked
        trainings[name] = json.loads((folder / name / TRAINING_FILE).read_text(encoding="utf-8"))
    trainings["cpu"] = trainings.get("cpu") or ({"training": meta["cpu_training"]} if meta.get("cpu_training") else {})
    lines = header("GRASP Stage 3 with the paper's recipe on a GPU", "python benchmarks/grasp_reranker.py " + " ".join(argv))
    lines += [
        f"- set: {meta['corpus']} / {meta['split']}, {len(gold)} judged queries" + (f" (seeded sample of {meta['sample']})" if meta["sample"] else ""),
        f"- training: {meta['records']} records from {meta['train_corpus']}'s training share; {meta['validation']} validation queries choose the checkpoint and the fusion",
        "",
        "| model | " + " | ".join(METRICS) + " |",
        "|---|" + "---:|" * len(METRICS),
    ]
    for name, ranked in rankings.items():
        values = evaluate(ranked, gold, list(METRICS))
        cells = []
        for metric in METRICS:
            column = np.array([values[q][metric] for q in sorted(values)])
            low, high = bootstrap_interval(column)
            cells.append(f"{100 * column.mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Training (validation Hit@1 over steps)", ""]
    for name in ("cpu", "gpu"):
        training = trainings.get(name, {}).get("training")
        if training:
            curve = ", ".join(f"{c['step']}: {c['validation']:.3f}" for c in training["curve"])
            lines.append(
                f"- {name}: {training['steps']} steps in {training['seconds'] / 60:.1f} min{' on ' + training['device'] if 'device' in training else ''}; best {training['best_validation']:.3f} at step {training['best_step']} (base {training['initial_validation']:.3f}); curve {curve}"
            )
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    parser, out, fit, _ = export_and_run(
        __doc__, "Stage 3's training data and evaluated lists", "grasp_gpu.md", ("train", "fine-tune with the GPU recipe"), ("evaluate", "Table 1's Stage-3 rows for every model in the folder")
    )
    out.add_argument("--corpus", default="2wiki-dev")
    out.add_argument("--sample", type=int, help="a seeded sample of the evaluated split (graphlake eval --sample)")
    fit.add_argument("--budget-minutes", type=float, default=60.0)
    args = parser.parse_args()
    if args.command == "export":
        export(args.folder, args.corpus, args.sample)
    elif args.command == "train":
        train_gpu(args.folder, args.budget_minutes)
    else:
        evaluate_models(args.folder, args.output, sys.argv[1:])


if __name__ == "__main__":
    main()
