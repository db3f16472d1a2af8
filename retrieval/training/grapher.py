"""GraphER's learned part: alpha for PPR and GCS grid-searched, and the GAT / MLP rankers trained, on
a training corpus's queries, for use on another corpus (the ``graph_rankers`` index).

The training queries are the corpus registry's ``train_corpus`` (all its queries: GraphER tunes on
BIRD and evaluates on Spider) or, when none is declared, this corpus's own ``train`` split; never
the queries being evaluated. ``alpha_corpus`` moves the alpha search to another corpus, as GraphER
A.3 does (alpha tuned once on BIRD, fixed everywhere). Candidates come from the same base retriever
and proximity graph the ``graph_rerank`` operator uses, so tuning sees exactly what evaluation will.
Only the networks asked for are trained (``networks``; by default those the declared methods use).
A corpus with no training queries of its own and none declared (a user's own documents) gets
``DEFAULT_ALPHA`` and ``Untrained`` networks: its GAT / MLP methods rank by GCS, and say so.

Corpora that learn from the same queries with the same config get the same rankers: the artefact
carries a fingerprint of its inputs, and an equal one already in the lake is copied, not retrained.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from graphlake.kernels.graph.propagation import gcs
from graphlake.retrieval.core import Methods, needs, shared_run
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import INDEX_KINDS, grapher_reads, open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grapher import DEFAULT_ALPHA, NETWORKS, TunedRankers, ranking_graph
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.operators.propagation import GraphRerank
from graphlake.retrieval.queries import alpha_source, gold_by_query, held_out, training_source
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.digest import fingerprint
from graphlake.warehouse.storage import LakeStorage, StorageError

ALPHAS = tuple(round(0.1 * i, 1) for i in range(1, 10))  # GraphER A.3: 0.1 ... 0.9


def networks_used(methods: Methods) -> list[str]:
    """The networks some declared method reranks with."""
    parts = {name.partition("/")[2] for op in methods.values() for name in needs(op) if name.startswith("graph_rankers/")}
    return [name for name in NETWORKS if name in parts]


def learn(lake: LakeStorage, corpus: str, config: Any, log: Callable[[str], None]) -> dict:
    """Tune alpha and train the asked-for networks for ``corpus`` (or copy equal rankers); the summary to show."""
    started = time.perf_counter()
    train_corpus, split = training_source(lake.home, corpus)
    alpha_corpus, alpha_split = alpha_source(lake.home, corpus)
    methods = load_methods(lake.home)
    if config.base not in methods.available:
        raise ValueError(f"graph_rankers: base method {config.base!r} is not declared")
    networks = networks_used(methods) if config.networks is None else [n for n in NETWORKS if n in config.networks]
    inputs = ["nodes", "queries", "qrels", *(INDEX_KINDS.kind(name).assets[-1] for name in sorted(grapher_reads(methods, config.base)))]
    content = {"config": {**config.model_dump(), "networks": networks}, "sources": [(train_corpus, split), (alpha_corpus, alpha_split)]}
    content["written"] = {source: {name: INDEX_KINDS.asset_written_at(lake, source, name) for name in inputs} for source in (train_corpus, alpha_corpus)}
    digest = fingerprint(content)
    source, same = _rankers_with(lake, digest, prefer=corpus)
    if same is not None:
        if source != corpus:
            lake.write_artifact("graph_rankers", {"corpus": corpus}, lambda folder: shutil.copytree(same, folder, dirs_exist_ok=True))
        log(f"graph_rankers: training data and config as for {source!r}; reusing its rankers")
        return {"retrained": False, "same_as": source}
    examples = _examples(lake, train_corpus, split, methods, config.base)
    alpha_examples = examples if (alpha_corpus, alpha_split) == (train_corpus, split) else _examples(lake, alpha_corpus, alpha_split, methods, config.base)
    report: dict[str, Any] = {
        "fingerprint": digest,
        "train_corpus": train_corpus,
        "split": split or "all",
        "alpha_corpus": alpha_corpus,
        "alpha_split": alpha_split or "all",
        "base": config.base,
        "queries": len(examples),
        "alpha_queries": len(alpha_examples),
    }
    summary: dict[str, Any] = {"retrained": True, "train_corpus": train_corpus, "alpha_corpus": alpha_corpus, "queries": len(examples)}
    notes = []
    if alpha_examples:
        alpha, curves = tune_alpha(alpha_examples, methods, config)
        alpha_default = None
        base_pr = mean_perfect_recall(alpha_examples, lambda e: e["base"].scores, config.metric_k)
        summary |= {f"{r}_pr@{config.metric_k}": round(v, 4) for r, v in (("base", base_pr), *((r, curves[r][alpha[r]]) for r in ("ppr", "gcs")))}
        report[f"base_pr@{config.metric_k}"] = base_pr
        report[f"pr@{config.metric_k}_by_alpha"] = {r: {str(a): v for a, v in c.items()} for r, c in curves.items()}
    else:
        alpha = dict(DEFAULT_ALPHA)
        alpha_default = f"{_nothing_to_learn(alpha_corpus, alpha_split)}; GraphER's alpha fixed from BIRD train, ppr {alpha['ppr']}, gcs {alpha['gcs']}"
        notes.append(f"alpha untuned: {alpha_default}")
    summary |= {"alpha_ppr": alpha["ppr"], "alpha_gcs": alpha["gcs"]}
    models: dict[str, Any] = {}
    if networks and examples:
        models, report["networks"] = train_networks(examples, alpha["gcs"], config, networks)
    elif networks:
        untrained = Untrained(f"{_nothing_to_learn(train_corpus, split)}; GCS at alpha {alpha['gcs']} ranks in its place")
        models = {name: untrained for name in networks}
        notes.append(f"{' and '.join(networks)} not trained: {untrained.reason}")
    lake.write_artifact("graph_rankers", {"corpus": corpus}, TunedRankers(alpha, models, report, alpha_default).save)
    summary["networks"] = ", ".join(name for name, model in models.items() if not isinstance(model, Untrained)) or "none"
    return {**summary, **({"note": "\n".join(notes)} if notes else {}), "seconds": round(time.perf_counter() - started, 1)}


def tune_alpha(examples: list[dict], methods: Methods, config: Any) -> tuple[dict[str, float], dict[str, dict[float, float]]]:
    """GraphER A.3: per propagation ranker, the alpha of the grid with the best mean PR@k (ties: the smaller)."""
    alpha, curves = {}, {}
    for ranker in ("ppr", "gcs"):
        op = GraphRerank(op="graph_rerank", inputs=[methods[config.base]], ranker=ranker)
        curves[ranker] = {
            a: mean_perfect_recall(examples, lambda e, a=a, op=op: op.rerank(e["query"], e["base"], e["adjacency"], new_request(e["indexes"], [e["query"]]), e["indexes"], a), config.metric_k)
            for a in ALPHAS
        }
        alpha[ranker] = max(ALPHAS, key=lambda a: (curves[ranker][a], -a))
    return alpha, curves


def _nothing_to_learn(corpus: str, split: str | None) -> str:
    return f"corpus {corpus!r} has no {split + '-split ' if split else ''}queries with gold"


def _examples(lake: LakeStorage, corpus: str, split: str | None, methods: Methods, base: str) -> list[dict]:
    """The training examples; none only for the corpus's own train split (a declared training corpus must have queries)."""
    examples = candidate_examples(lake, corpus, split, methods, base)
    if not examples and split is None:
        raise StorageError(f"{_nothing_to_learn(corpus, split)} to tune graph rankers on, though it is declared a training corpus; ingest its queries")
    return examples


def _rankers_with(lake: LakeStorage, digest: str, prefer: str) -> tuple[str | None, Path | None]:
    """(corpus, folder) of the current graph_rankers (this corpus's first) whose report carries the
    fingerprint ``digest``; (None, None) when no declared corpus has them."""
    for corpus in sorted(CorpusRegistry(lake.home).all(), key=lambda name: name != prefer):
        try:
            folder = lake.artifact("graph_rankers", {"corpus": corpus})
            saved = json.loads((folder / "rankers.json").read_text(encoding="utf-8"))
        except (StorageError, OSError, ValueError):
            continue
        if saved.get("report", {}).get("fingerprint") == digest:
            return corpus, folder
    return None, None


def candidate_examples(lake: LakeStorage, corpus: str, split: str | None, methods: Methods, base: str) -> list[dict]:
    """Per training query with gold: its text, base candidates, candidate graph and 0/1 labels."""
    partition = {"corpus": corpus}
    queries = lake.read("queries", partition).to_pylist()
    gold = gold_by_query(lake.read("qrels", partition))
    indexes = open_index_set(lake, corpus)
    doc_ids = indexes.snapshot.doc_ids()
    op = GraphRerank(op="graph_rerank", inputs=[methods[base]], ranker="gcs")
    queries = [query for query in queries if (not split or query["split"] == split) and query["query_id"] in gold]
    examples = []
    for query, candidates in zip(queries, shared_run(op.inputs[0], new_request(indexes, [query["text"] for query in queries]), indexes), strict=True):
        adjacency = op.candidate_graph(candidates, indexes)
        labels = np.fromiter((d in gold[query["query_id"]] for d in doc_ids[candidates.rows]), dtype=bool, count=len(candidates.rows))
        examples.append({"query": query["text"], "base": candidates, "adjacency": adjacency, "labels": labels, "gold": len(gold[query["query_id"]]), "indexes": indexes})
    return examples


def mean_perfect_recall(examples: list[dict], score, k: int) -> float:
    """Mean PR@k: a query counts when every gold document is in its top k (gold outside the candidates never is)."""
    hits = []
    for example in examples:
        order = np.argsort(-np.asarray(score(example)), kind="stable")[:k]
        hits.append(float(example["labels"][order].sum() >= example["gold"]))
    return float(np.mean(hits))


def train_networks(examples: list[dict], alpha: float, config: Any, networks: list[str]) -> tuple[dict, dict]:
    """The asked-for networks on GCS scores at the tuned alpha; a seeded share of queries validates."""
    from graphlake.kernels.graph.grapher_networks import train_ranker

    indexes = examples[0]["indexes"]
    vectors = indexes.encoders.dense([e["query"] for e in examples])
    graphs = []
    for example, query in zip(examples, vectors, strict=True):
        if not example["labels"].any():
            continue  # no gold among the candidates: nothing to learn from
        smoothed, _ = gcs(example["adjacency"], example["base"].scores, alpha, tol=1e-9)
        graphs.append(ranking_graph(smoothed, query, indexes.dense[example["base"].rows], example["adjacency"], example["labels"]))
    validate, learn_on = held_out(len(graphs), config.validation_share, config.seed)
    validation, train = [graphs[i] for i in validate], [graphs[i] for i in learn_on]
    models, reports = {}, {}
    for name in networks:
        model, report = train_ranker(
            train,
            validation,
            message_passing=name == "gat",
            learning_rates=config.learning_rates,
            weight_decays=config.weight_decays,
            max_epochs=config.max_epochs,
            patience=config.patience,
            metric_k=config.metric_k,
            seed=config.seed,
        )
        models[name], reports[name] = model, asdict(report)
    return models, reports
