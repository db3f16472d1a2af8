"""The cross-encoder the pipeline trains for itself (no pretrained one can be had offline): the
``reranker`` index.

One model for the whole lake, fine-tuned from the packaged all-MiniLM-L6-v2 weights on the
``train``-split queries of the chosen corpora (all declared corpora by default), never on any other
split. Each gold document of a training query gives a group (multi-hop questions have two or more):
its best node (by dense score, for chunked documents) against hard negatives mined from the
project's BM25 and dense retrievers (their top ``mine_depth`` minus every gold document). A seeded
share of the training queries is held out: the model kept is the one with the best nDCG@10 when
reranking their dense top ``validation_depth``, and the report sets that against dense retrieval on
the same queries.

Training is skipped when the training queries and their corpora's nodes are those the current model
was trained on (and the config too, when a run sets it), so reindexing a corpus or declaring another
does not retrain for nothing; a new model never replaces a better one (:func:`learn`). A lake with fewer
than two training queries stores an ``Untrained`` marker instead: the methods that rerank with the
model then return their first-stage ranking, and say so.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from graphlake.common.progress import StepProgress
from graphlake.kernels.eval.metrics import ndcg_at_k
from graphlake.retrieval.core import Methods
from graphlake.retrieval.learned_kinds import INDEX_KINDS, open_index_set, reranker_reads
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.reranker import load_reranker
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.queries import TRAIN_SPLIT, gold_by_query, has_train_queries, held_out
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.digest import fingerprint
from graphlake.warehouse.storage import LakeStorage, StorageError

if TYPE_CHECKING:
    from graphlake.kernels.rerank.cross_encoder import Group


@dataclass(frozen=True)
class TrainingQuery:
    corpus: str
    query_id: str
    text: str
    gold: frozenset[str]  # relevant doc ids


def learn(store: LakeStorage, config: Any, log: Callable[[str], None], explicit: bool = True) -> dict:
    """Train the lake's cross-encoder (or keep the current one); the summary to show.

    The current model is kept, untouched, while its training data (the training queries and their
    corpora's nodes) is unchanged, and also when only the config differs unless this run sets the
    config (``explicit``): materializing another corpus with the asset's defaults must not retrain
    the demo's model. A new model replaces the current one only if it ranks the same held-out
    queries at least as well; otherwise the current one is kept, re-recorded for the new data."""
    corpora = config.corpora or [name for name in CorpusRegistry(store.home).all() if has_train_queries(store, name)]
    queries = training_queries(store, corpora, config.max_queries_per_corpus, config.seed)
    if len(queries) < 2:
        untrained = Untrained(f"the lake has {len(queries)} train-split queries with gold ({', '.join(corpora) or 'no corpus has any'}); the cross-encoder needs 2 or more")
        store.write_artifact("reranker", {}, untrained.save)
        return {"retrained": False, "note": f"not trained: {untrained.reason}; the methods that rerank with it return their first-stage ranking"}
    data_digest, config_digest = _fingerprint(store, queries), fingerprint(config.model_dump())
    current = reranker_report(store)
    if current and current.get("data_fingerprint") == data_digest and (current.get("config_fingerprint") == config_digest or not explicit):
        log("reranker: training data unchanged; keeping the current model")
        return {"retrained": False, **headline(current)}
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder, reranked_ndcg, train

    data = mine(store, corpora, queries, config)
    encoder = CrossEncoder.initial(config.max_tokens, config.seed)
    planned = max(1, config.epochs * math.ceil(len(data.groups) / config.groups_per_step))
    # a lake-wide model trains for minutes: it says so before it starts, then how far it is
    log(
        f"reranker: training the lake's cross-encoder on {len(data.learn)} training queries of {', '.join(corpora)} ({len(data.groups)} groups, {planned} steps, at most {config.budget_minutes:g} min)"
    )
    progress = StepProgress(f"training the lake's cross-encoder (at most {config.budget_minutes:g} min)", planned, log, unit="steps")
    report = train(
        encoder,
        data.groups,
        lambda model: reranked_ndcg(model, data.validation),
        learning_rate=config.learning_rate,
        groups_per_step=config.groups_per_step,
        epochs=config.epochs,
        budget_seconds=config.budget_minutes * 60,
        validate_every=config.validate_every,
        seed=config.seed,
        advance=progress.advance,
    )
    summary = {
        "data_fingerprint": data_digest,
        "config_fingerprint": config_digest,
        "corpora": corpora,
        **data.summary(corpora),
        "config": config.model_dump(),
        "training": asdict(report),
    }
    previous = _previous_model(store, current)
    if previous is not None:
        kept = reranked_ndcg(previous, data.validation)
        if kept > report.best_validation:  # the same held-out queries: the better model stays
            note = f"kept the previous cross-encoder: it reranks the {len(data.validation)} held-out training queries at nDCG@10 {kept:.3f}, the newly trained one at {report.best_validation:.3f}"
            log(f"reranker: {note}")
            summary["kept"] = {"model": "previous", "previous_ndcg@10": kept, "new_ndcg@10": report.best_validation}
            summary["training"] = {**current["training"], "best_validation": kept}
            store.write_artifact("reranker", {}, lambda folder: previous.save(folder, summary))
            return {"retrained": False, "note": note, **headline(summary)}
        summary["kept"] = {"model": "new", "previous_ndcg@10": kept, "new_ndcg@10": report.best_validation}
    store.write_artifact("reranker", {}, lambda folder: encoder.save(folder, summary))
    return {"retrained": True, **headline(summary), **({"kept": "new"} if previous is not None else {}), "curve": report.curve}


def _previous_model(store: LakeStorage, current: dict | None):
    """The lake's current trained cross-encoder, None when there is none (or an ``Untrained`` marker)."""
    if not current or "training" not in current:
        return None
    model = load_reranker(store.artifact("reranker", {}))
    return None if isinstance(model, Untrained) else model


@dataclass(frozen=True)
class TrainingData:
    """What training reads: groups from the learning queries, dense top lists of the held-out ones."""

    learn: list[TrainingQuery]
    held_out: list[TrainingQuery]
    groups: list[Group]
    validation: list[dict]  # validation_item per held-out query
    seconds: float  # spent mining

    def summary(self, corpora: list[str]) -> dict:
        return {
            "training_queries": {c: sum(q.corpus == c for q in self.learn) for c in corpora},
            "validation_queries": {c: sum(q.corpus == c for q in self.held_out) for c in corpora},
            "validation_dense_ndcg@10": float(np.mean([item["dense_ndcg"] for item in self.validation])),
            "mining_seconds": self.seconds,
        }


def mine(store: LakeStorage, corpora: list[str], queries: list[TrainingQuery], config: Any) -> TrainingData:
    """Hold out a seeded share of ``queries``, mine the rest's groups and the held-out queries' dense lists."""
    started = time.perf_counter()
    validate, learn_on = held_out(len(queries), config.validation_share, config.seed)
    held, learning = [queries[i] for i in validate], [queries[i] for i in learn_on]
    methods = load_methods(store.home)
    indexes = {corpus: _indexes(store, corpus, methods, config.miners) for corpus in corpora}
    groups = [g for q in learning for g in training_groups(q, indexes[q.corpus], methods, config)]
    validation = [validation_item(q, indexes[q.corpus], methods, config.validation_depth) for q in held]
    return TrainingData(learning, held, groups, validation, time.perf_counter() - started)


def headline(summary: dict) -> dict:
    training = summary["training"]
    return {
        "groups": training["groups"],
        "steps": training["steps"],
        "train_seconds": round(training["seconds"], 1),
        "validation_ndcg@10": round(training["best_validation"], 4),
        "validation_ndcg@10_untrained": round(training["initial_validation"], 4),
        "validation_dense_ndcg@10": round(summary["validation_dense_ndcg@10"], 4),
    }


def training_queries(lake: LakeStorage, corpora: list[str], max_per_corpus: int, seed: int) -> list[TrainingQuery]:
    """Every train-split query with relevant gold of each corpus, sampled down to ``max_per_corpus`` (seeded)."""
    found = []
    for corpus in corpora:
        partition = {"corpus": corpus}
        gold = gold_by_query(lake.read("qrels", partition))
        rows = [r for r in lake.read("queries", partition).to_pylist() if r["split"] == TRAIN_SPLIT and r["query_id"] in gold]
        if max_per_corpus and len(rows) > max_per_corpus:
            keep = np.sort(np.random.default_rng(seed).choice(len(rows), max_per_corpus, replace=False))
            rows = [rows[i] for i in keep]
        found += [TrainingQuery(corpus, r["query_id"], r["text"], frozenset(gold[r["query_id"]])) for r in rows]
    return found


def _indexes(lake: LakeStorage, corpus: str, methods: Methods, miners: list[str]) -> LakeIndexSet:
    """A training corpus's indexes; the miners need theirs built."""
    kinds = sorted(reranker_reads(methods, miners))
    missing = [INDEX_KINDS.kind(name).assets[-1] for name in kinds if INDEX_KINDS.kind(name).stored.written_at(lake, corpus) is None]
    if missing:
        raise StorageError(
            f"reranker: training corpus {corpus!r} lacks {' and '.join(missing)}; "
            f"run: graphlake materialize --corpus {corpus} --select '{' or '.join('key:' + m for m in INDEX_KINDS.index_assets(kinds))}'"
        )
    return open_index_set(lake, corpus)


def training_groups(query: TrainingQuery, indexes: LakeIndexSet, methods: Methods, config: Any) -> list[Group]:
    """One group per gold document in the corpus: its best node against the miners' best non-gold nodes
    (round-robin, no repeats; the same negatives for every gold document of the query)."""
    from graphlake.kernels.rerank.cross_encoder import Group

    texts, docs = indexes.snapshot.texts(), indexes.snapshot.doc_ids()
    dense = indexes.dense @ indexes.encoders.dense([query.text])[0]
    positives = []
    for doc in sorted(query.gold):
        rows = np.flatnonzero(docs == doc)
        if rows.size:
            positives.append(int(rows[np.argmax(dense[rows])]))
    if not positives:
        return []
    ranked_lists = []
    for miner in config.miners:
        rows = methods[miner].run(query.text, indexes).rows[: config.mine_depth]
        ranked_lists.append([int(r) for r in rows if docs[r] not in query.gold])
    negatives: list[int] = []
    for position in range(config.mine_depth):
        for rows in ranked_lists:
            if position < len(rows) and rows[position] not in negatives and len(negatives) < config.negatives:
                negatives.append(rows[position])
    if not negatives:
        return []
    return [Group(query.text, texts[positive], tuple(texts[r] for r in negatives)) for positive in positives]


def validation_item(query: TrainingQuery, indexes: LakeIndexSet, methods: Methods, depth: int) -> dict:
    """A held-out query's dense top ``depth`` (node texts and doc ids) and dense's own nDCG@10 on it."""
    rows = methods["dense"].run(query.text, indexes).rows[:depth] if "dense" in methods.available else np.zeros(0, int)
    docs = [indexes.snapshot.doc_ids()[r] for r in rows]
    gold = {doc: 1 for doc in query.gold}
    return {
        "query": query.text,
        "texts": [indexes.snapshot.texts()[r] for r in rows],
        "docs": docs,
        "gold": gold,
        "dense_ndcg": ndcg_at_k(list(dict.fromkeys(docs)), gold, 10),
    }


def _fingerprint(lake: LakeStorage, queries: list[TrainingQuery]) -> str:
    """What a model was trained from: the query ids, texts and gold, and when each corpus's nodes were written."""
    corpora = sorted({q.corpus for q in queries})
    return fingerprint(
        {
            "queries": sorted((q.corpus, q.query_id, q.text, sorted(q.gold)) for q in queries),
            "nodes": {c: lake.written_at("nodes", {"corpus": c}) for c in corpora},
        }
    )


def reranker_report(lake: LakeStorage) -> dict | None:
    """The current model's training report (``training.json``), None before the first training."""
    from graphlake.kernels.rerank.cross_encoder import TRAINING_FILE

    try:
        folder = lake.artifact("reranker", {})
    except StorageError:
        return None
    path = folder / TRAINING_FILE
    return json.loads(path.read_text()) if path.is_file() else None
