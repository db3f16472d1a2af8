"""graphlake's learned fusion: for every declared ``learned_fusion``, a LightGBM lambdarank model over its
inputs' candidates on the corpus's training queries (the ``learned_fusion`` index).

Training queries come from the corpus's ``train_corpus`` (all its queries) or its own ``train`` split,
never from an evaluated query (learning refuses, naming it); a ranker that learns from another corpus reads
the scale-free features only (``models/learned_fusion.py`` says why). A seeded share of them is held out to stop
the boosting early (nDCG@10 on that share); the report records both sets of ids, the rounds kept, the
held-out nDCG@10 of the model beside the RRF fallback's, and each feature's importance (total gain).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphlake.retrieval.core import Candidates, Methods, Op, needs, shared_run
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import learned_fusions, open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.learned_fusion import LearnedRankers, Ranker, candidate_rows, feature_names, features, per_input
from graphlake.retrieval.operators.learned import rrf
from graphlake.retrieval.queries import check_disjoint, gold_by_query, held_out, training_queries
from graphlake.warehouse.storage import LakeStorage, StorageError

CUTOFF = 10  # early stopping and the report's nDCG cut-off
CHUNK = 64  # training queries encoded and run at once


@dataclass(frozen=True)
class Grouped:
    """Candidates of some queries as LightGBM ranks them: features, graded labels, one group per query."""

    features: np.ndarray
    labels: np.ndarray
    groups: list[int]
    query_ids: list[str]


def input_names(methods: Methods, op: Op) -> list[str]:
    """Each input's declared method name where it is one (``in<i>`` otherwise), for the report."""
    named = {id(found): name for name, found in methods.available.items()}
    return [named.get(id(item), f"in{i}") for i, item in enumerate(op.inputs)]


def learn(lake: LakeStorage, corpus: str, config: Any, log: Callable[[str], None]) -> tuple[LearnedRankers, dict]:
    """Train every declared learned fusion for ``corpus``; the artefact and the metadata to show."""
    started = time.perf_counter()
    methods = load_methods(lake.home)
    fusions = learned_fusions(methods)
    source, queries = training_queries(lake, corpus)
    gold = gold_by_query(lake.read("qrels", {"corpus": source}))
    queries = [q for q in queries if q["query_id"] in gold]
    if len(queries) < 2 or not fusions:
        reason = "no learned_fusion is declared" if not fusions else f"corpus {source!r} has fewer than 2 training queries with gold"
        log(f"learned_fusion: {reason}; the fusions fall back to rrf of their inputs")
        return LearnedRankers({}, dict.fromkeys(fusions, reason)), {"trained": False, "reason": reason}
    check_disjoint(lake, corpus, source, queries, "learned_fusion")
    indexes = open_index_set(lake, source)
    runs, failed = input_runs(list(fusions.values()), [q["text"] for q in queries], indexes)
    rankers, untrained, report = {}, {}, {"train_corpus": source, "fusions": {}}
    for name, op in fusions.items():
        error = next((failed[id(item)] for item in op.inputs if id(item) in failed), None)
        if error is not None:  # an input the training corpus cannot run (an oracle SKB it lacks)
            untrained[name] = f"its inputs cannot run on {source!r}: {error}"
            log(f"learned_fusion: {untrained[name]}")
            continue
        found = [[runs[id(item)][i] for item in op.inputs] for i in range(len(queries))]
        ranker, trained = fit(op, queries, found, gold, indexes.snapshot.doc_ids(), config, across_corpora=source != corpus)
        if ranker is None:
            untrained[name] = trained["reason"]
            log(f"learned_fusion: {trained['reason']}; rrf of its inputs")
            continue
        names = input_names(methods, op)
        trained |= {"inputs": names, "importance": _importance(ranker, names), "across_corpora": ranker.across_corpora}
        rankers[name], report["fusions"][name] = ranker, trained
        log(
            f"learned_fusion ({', '.join(names)}): {trained['rounds']} rounds on {len(trained['training_queries'])} queries; "
            f"held-out nDCG@{CUTOFF} {trained['held_out_ndcg']:.3f} (rrf {trained['held_out_ndcg_rrf']:.3f})"
        )
    summary = {"trained": bool(rankers), "train_corpus": source, "training_queries": len(queries), "seconds": round(time.perf_counter() - started, 1)}
    return LearnedRankers(rankers, untrained, report), summary


def fit(op: Op, queries: list[dict], found: list[list], gold: dict[str, dict[str, int]], doc_ids: np.ndarray, config: Any, across_corpora: bool) -> tuple[Ranker | None, dict]:
    """A lambdarank model for ``op`` on these queries (their inputs' candidates ``found``), early-stopped on a
    held-out share, and its report; no model (and the reason) when no query has a relevant candidate.
    ``across_corpora``: the queries are another corpus's, so the model reads the scale-free features only."""
    import lightgbm

    each = per_input(across_corpora)
    stop, learning = held_out(len(queries), config.validation_share, config.seed)
    train_set = _grouped(op, [queries[i] for i in sorted(learning)], [found[i] for i in sorted(learning)], gold, doc_ids, each)
    if not train_set.groups:
        return None, {"reason": "no training query has a relevant document among its candidates"}
    stop_set = _grouped(op, [queries[i] for i in sorted(stop)], [found[i] for i in sorted(stop)], gold, doc_ids, each)
    params = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [CUTOFF],
        "learning_rate": config.learning_rate,
        "num_leaves": config.num_leaves,
        "min_data_in_leaf": config.min_data_in_leaf,
        "seed": config.seed,
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": 2,
        "verbosity": -1,
    }
    train = lightgbm.Dataset(train_set.features, train_set.labels, group=train_set.groups)
    stopping = bool(stop_set.groups)  # no held-out query with a relevant candidate: every round is kept
    valid_sets = [lightgbm.Dataset(stop_set.features, stop_set.labels, group=stop_set.groups, reference=train)] if stopping else []
    callbacks = [lightgbm.early_stopping(config.patience, verbose=False)] if stopping else []
    booster = lightgbm.train(params, train, num_boost_round=config.rounds, valid_sets=valid_sets, callbacks=callbacks)
    if booster.best_iteration > 0:
        booster = lightgbm.Booster(model_str=booster.model_to_string(num_iteration=booster.best_iteration))
    ranker = Ranker(booster, across_corpora)
    held = [queries[i] for i in sorted(stop)]
    held_found = [found[i] for i in sorted(stop)]
    learned = [ranked_docs(ranker, q["text"], f, op.depth, doc_ids) for q, f in zip(held, held_found, strict=True)]
    fallback = [list(dict.fromkeys(doc_ids[rrf(f, op.depth, op.k).rows].tolist())) for f in held_found]
    trained = {
        "training_queries": train_set.query_ids,
        "stopping_queries": [q["query_id"] for q in held],
        "rounds": booster.num_trees(),
        "held_out_ndcg": _mean_ndcg(learned, held, gold),
        "held_out_ndcg_rrf": _mean_ndcg(fallback, held, gold),
    }
    return ranker, trained


def input_runs(fusions: list[Op], texts: list[str], indexes: LakeIndexSet) -> tuple[dict[int, list[Candidates]], dict[int, StorageError]]:
    """Each distinct input's candidates per query, as the operator sees them at query time: a chunk of
    queries at a time, as one request (an input, or an input's input, that several share runs once);
    and the inputs that cannot run here."""
    inputs = {id(item): item for op in fusions for item in op.inputs}
    runs: dict[int, list[Candidates]] = {name: [] for name in inputs}
    failed: dict[int, StorageError] = {}
    for start in range(0, len(texts), CHUNK):
        request = new_request(indexes, texts[start : start + CHUNK])
        for name, item in inputs.items():
            if name in failed:
                continue
            try:
                request.prime(needs(item))
                runs[name] += shared_run(item, request, indexes)
            except StorageError as error:
                failed[name] = error
    return {name: found for name, found in runs.items() if name not in failed}, failed


def _grouped(op: Op, queries: list[dict], found: list[list], gold: dict[str, dict[str, int]], doc_ids: np.ndarray, each: tuple[str, ...]) -> Grouped:
    """The candidates of the queries with at least one relevant among them (the others teach nothing)."""
    blocks, labels, groups, ids = [], [], [], []
    for query, inputs in zip(queries, found, strict=True):
        rows = candidate_rows(inputs, op.depth)
        relevance = gold.get(query["query_id"], {})
        label = np.fromiter((relevance.get(d, 0) for d in doc_ids[rows].tolist()), dtype=np.float32, count=len(rows))
        if not len(rows) or not label.any():
            continue
        blocks.append(features(query["text"], inputs, rows, op.depth, each))
        labels.append(label)
        groups.append(len(rows))
        ids.append(query["query_id"])
    return Grouped(np.vstack(blocks) if blocks else np.zeros((0, 0), np.float32), np.concatenate(labels) if labels else np.zeros(0, np.float32), groups, ids)


def ranked_docs(ranker: Ranker, text: str, found: list, depth: int, doc_ids: np.ndarray) -> list[str]:
    rows = candidate_rows(found, depth)
    if not len(rows):
        return []
    (scores,) = ranker.score([text], [found], [rows], depth)
    return list(dict.fromkeys(doc_ids[rows[np.lexsort((rows, -scores))]].tolist()))


def _mean_ndcg(rankings: list[list[str]], queries: list[dict], gold: dict[str, dict[str, int]]) -> float:
    from graphlake.kernels.eval.metrics import ndcg_at_k

    return float(np.mean([ndcg_at_k(r, gold.get(q["query_id"], {}), CUTOFF) for r, q in zip(rankings, queries, strict=True)])) if queries else 0.0


def _importance(ranker: Ranker, names: list[str]) -> dict[str, float]:
    """Total gain per feature, largest first."""
    gains = ranker.booster.feature_importance("gain")
    columns = feature_names(names, per_input(ranker.across_corpora))
    return {name: round(float(gain), 3) for name, gain in sorted(zip(columns, gains, strict=True), key=lambda item: -item[1])}
