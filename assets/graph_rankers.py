"""GraphER's learned part: alpha for PPR and GCS grid-searched, and the GAT / MLP rankers trained,
on a training corpus's queries, for use on this corpus.

The training queries are the corpus registry's ``train_corpus`` (all its queries: GraphER tunes on
BIRD and evaluates on Spider) or, when none is declared, this corpus's own ``train`` split; never
the queries being evaluated. ``alpha_corpus`` moves the alpha search to another corpus, as GraphER
A.3 does (alpha tuned once on BIRD, fixed everywhere). Candidates come from the same base retriever
and proximity graph the ``graph_rerank`` operator uses, so tuning sees exactly what evaluation will.

Corpora that learn from the same queries with the same config get the same rankers: the artefact
carries a fingerprint of its inputs, and an equal one already in the lake is copied, not retrained.
"""

import hashlib
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
from dagster import AssetExecutionContext, AssetKey, Config, asset

from graphlake.assets.partitions import corpus_partitions
from graphlake.assets.retrieval import LakeIndexes, asset_written_at, load_methods
from graphlake.kernels import encoders
from graphlake.kernels.graph_operators import GraphRerank, TunedRankers, ranking_graph
from graphlake.kernels.propagation import gcs
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.storage import Lake, StorageError

ALPHAS = tuple(round(0.1 * i, 1) for i in range(1, 10))  # GraphER A.3: 0.1 ... 0.9
INPUTS = ("nodes", "queries", "qrels", "bm25_index", "dense_vectors", "structural_edges", "contextual_edges", "mentions_spacy")


class GraphRankersConfig(Config):
    base: str = "grapher_base"  # the method whose candidates are reranked
    metric_k: int = 10  # tuned for perfect recall at this cutoff, GraphER's headline metric
    train_networks: bool = True  # also train the GAT and its MLP ablation
    validation_share: float = 0.2  # held out to pick learning rate, weight decay and epochs
    learning_rates: list[float] = [1e-3, 3e-4]
    weight_decays: list[float] = [0.0, 1e-4]
    max_epochs: int = 30
    patience: int = 5  # epochs without a better validation PR@K before a setting stops
    seed: int = 0


@asset(
    partitions_def=corpus_partitions,
    group_name="retrieval",
    deps=[AssetKey(name) for name in INPUTS if name != "queries"],
)
def graph_rankers(context: AssetExecutionContext, config: GraphRankersConfig, lake: LakeResource) -> None:
    """Tuned alpha per propagation ranker and trained GAT / MLP rankers, as an artefact folder."""
    started = time.perf_counter()
    corpus = context.partition_key
    train_corpus, split = training_queries(lake.home, corpus)
    alpha_corpus, alpha_split = alpha_queries(lake.home, corpus)
    methods, _ = load_methods(lake.home)
    if config.base not in methods:
        raise ValueError(f"graph_rankers: base method {config.base!r} is not declared")
    fingerprint = _fingerprint(lake.lake, [(train_corpus, split), (alpha_corpus, alpha_split)], config)
    same = _artefact_with(lake.lake, fingerprint, prefer=corpus)
    if same is not None:
        source = same.parent.name.removeprefix("corpus=")
        if source != corpus:
            lake.lake.write_artifact("graph_rankers", {"corpus": corpus}, lambda folder: shutil.copytree(same, folder, dirs_exist_ok=True))
        context.log.info(f"graph_rankers: training data and config as for {source!r}; reusing its rankers")
        context.add_output_metadata({"retrained": False, "same_as": source})
        return
    examples = _examples(lake.lake, train_corpus, split, methods, config.base)
    alpha_examples = examples if (alpha_corpus, alpha_split) == (train_corpus, split) else _examples(lake.lake, alpha_corpus, alpha_split, methods, config.base)
    alpha, curves = {}, {}
    for ranker in ("ppr", "gcs"):
        op = GraphRerank(op="graph_rerank", inputs=[config.base], ranker=ranker)
        curves[ranker] = {
            a: mean_perfect_recall(alpha_examples, lambda e, a=a, op=op: op.rerank(e["query"], e["base"], e["adjacency"], e["indexes"], a), config.metric_k)
            for a in ALPHAS
        }
        alpha[ranker] = max(ALPHAS, key=lambda a: (curves[ranker][a], -a))
    base_pr = mean_perfect_recall(alpha_examples, lambda e: e["base"].scores, config.metric_k)
    report = {
        "fingerprint": fingerprint,
        "train_corpus": train_corpus,
        "split": split or "all",
        "alpha_corpus": alpha_corpus,
        "alpha_split": alpha_split or "all",
        "base": config.base,
        "queries": len(examples),
        "alpha_queries": len(alpha_examples),
        f"base_pr@{config.metric_k}": base_pr,
        f"pr@{config.metric_k}_by_alpha": {r: {str(a): v for a, v in c.items()} for r, c in curves.items()},
    }
    models = {}
    if config.train_networks:
        models, report["networks"] = train_networks(examples, alpha["gcs"], config)
    rankers = TunedRankers(alpha, models, report)
    lake.lake.write_artifact("graph_rankers", {"corpus": corpus}, rankers.save)
    context.add_output_metadata(
        {
            "retrained": True,
            "train_corpus": train_corpus,
            "alpha_corpus": alpha_corpus,
            "queries": len(examples),
            "alpha_ppr": alpha["ppr"],
            "alpha_gcs": alpha["gcs"],
            f"base_pr@{config.metric_k}": round(base_pr, 4),
            f"ppr_pr@{config.metric_k}": round(curves["ppr"][alpha["ppr"]], 4),
            f"gcs_pr@{config.metric_k}": round(curves["gcs"][alpha["gcs"]], 4),
            "seconds": round(time.perf_counter() - started, 1),
        }
    )


def training_queries(home, corpus: str) -> tuple[str, str | None]:
    """(corpus whose queries train, split to keep or None for all)."""
    spec = CorpusRegistry(home).get(corpus)
    if spec.train_corpus:
        CorpusRegistry(home).get(spec.train_corpus)  # fails clearly if undeclared
        return spec.train_corpus, None
    return corpus, "train"


def alpha_queries(home, corpus: str) -> tuple[str, str | None]:
    """(corpus whose queries pick alpha, split or None for all): ``alpha_corpus``, else the training queries."""
    spec = CorpusRegistry(home).get(corpus)
    if spec.alpha_corpus:
        CorpusRegistry(home).get(spec.alpha_corpus)
        return spec.alpha_corpus, None
    return training_queries(home, corpus)


def _examples(lake: Lake, corpus: str, split: str | None, methods: dict, base: str) -> list[dict]:
    examples = candidate_examples(lake, corpus, split, methods, base)
    if not examples:
        raise StorageError(
            f"corpus {corpus!r} has no {split + ' ' if split else ''}queries with gold to tune graph rankers on; "
            f"name a training corpus (graphlake ingest ... --train-corpus NAME, or train_corpus: in corpora.yaml)"
        )
    return examples


def _fingerprint(lake: Lake, sources: list[tuple[str, str | None]], config: GraphRankersConfig) -> str:
    """What rankers were learned from: config, the (corpus, split) sources and when their inputs were written."""
    written = {
        corpus: {name: asset_written_at(lake, corpus, name) for name in INPUTS}
        for corpus, _ in sources
    }
    content = {"config": config.model_dump(), "sources": sources, "written": written}
    return hashlib.blake2b(json.dumps(content, sort_keys=True).encode(), digest_size=16).hexdigest()


def _artefact_with(lake: Lake, fingerprint: str, prefer: str) -> Path | None:
    """The current graph_rankers folder (this corpus's first) whose report carries ``fingerprint``."""
    root = lake.home / "artifacts" / "graph_rankers"
    partitions = sorted(root.glob("corpus=*"), key=lambda p: p.name != f"corpus={prefer}")
    for partition in partitions:
        try:
            folder = lake.artifact("graph_rankers", {"corpus": partition.name.removeprefix("corpus=")})
            saved = json.loads((folder / "rankers.json").read_text(encoding="utf-8"))
        except (StorageError, OSError, ValueError):
            continue
        if saved.get("report", {}).get("fingerprint") == fingerprint:
            return folder
    return None


def candidate_examples(lake: Lake, corpus: str, split: str | None, methods: dict, base: str) -> list[dict]:
    """Per training query with gold: its text, base candidates, candidate graph and 0/1 labels."""
    partition = {"corpus": corpus}
    nodes = lake.read("nodes", partition)
    queries = lake.read("queries", partition).to_pylist()
    gold: dict[str, set[str]] = {}
    for row in lake.read("qrels", partition).to_pylist():
        if row["relevance"] > 0:
            gold.setdefault(row["query_id"], set()).add(row["doc_id"])
    doc_ids = np.asarray(nodes.column("doc_id").to_pylist(), dtype=object)
    indexes = LakeIndexes(lake, corpus, nodes.column("node_id").to_pylist())
    op = GraphRerank(op="graph_rerank", inputs=[base], ranker="gcs")
    examples = []
    for query in queries:
        if (split and query["split"] != split) or query["query_id"] not in gold:
            continue
        candidates, adjacency = op.candidate_graph(query["text"], indexes, methods)
        labels = np.fromiter((d in gold[query["query_id"]] for d in doc_ids[candidates.rows]), dtype=bool, count=len(candidates.rows))
        examples.append(
            {"query": query["text"], "base": candidates, "adjacency": adjacency, "labels": labels, "gold": len(gold[query["query_id"]]), "indexes": indexes}
        )
    return examples


def mean_perfect_recall(examples: list[dict], score, k: int) -> float:
    """Mean PR@k: a query counts when every gold document is in its top k (gold outside the candidates never is)."""
    hits = []
    for example in examples:
        order = np.argsort(-np.asarray(score(example)), kind="stable")[:k]
        hits.append(float(example["labels"][order].sum() >= example["gold"]))
    return float(np.mean(hits))


def train_networks(examples: list[dict], alpha: float, config: GraphRankersConfig) -> tuple[dict, dict]:
    """GAT and MLP rankers on GCS scores at the tuned alpha; a seeded share of queries validates."""
    from graphlake.kernels.graph_rankers import train_ranker

    indexes = examples[0]["indexes"]
    vectors = encoders.encode_dense([e["query"] for e in examples])
    graphs = []
    for example, query in zip(examples, vectors, strict=True):
        if not example["labels"].any():
            continue  # no gold among the candidates: nothing to learn from
        smoothed, _ = gcs(example["adjacency"], example["base"].scores, alpha, tol=1e-9)
        graphs.append(ranking_graph(smoothed, query, indexes.dense()[example["base"].rows], example["adjacency"], example["labels"]))
    order = np.random.default_rng(config.seed).permutation(len(graphs))
    cut = max(1, int(len(graphs) * config.validation_share))
    validation, train = [graphs[i] for i in order[:cut]], [graphs[i] for i in order[cut:]]
    models, reports = {}, {}
    for name, message_passing in (("gat", True), ("mlp", False)):
        model, report = train_ranker(
            train,
            validation,
            message_passing=message_passing,
            learning_rates=config.learning_rates,
            weight_decays=config.weight_decays,
            max_epochs=config.max_epochs,
            patience=config.patience,
            metric_k=config.metric_k,
            seed=config.seed,
        )
        models[name], reports[name] = model, asdict(report)
    return models, reports
