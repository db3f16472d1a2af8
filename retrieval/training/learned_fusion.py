"""graphlake's learned fusion: for every declared ``learned_fusion``, a LightGBM lambdarank model over its
inputs' candidates on the corpus's training queries (the ``learned_fusion`` index).

Training queries come from the corpus's ``train_corpus`` (all its queries) or its own ``train`` split,
never from an evaluated query (learning refuses, naming it); a ranker that learns from another corpus reads
the scale-free features only (``models/learned_fusion.py`` says why). Cross-validation over them chooses
the rounds and whether the partner signals are kept (:func:`fit`); the report records the query ids, the
rounds, the out-of-fold nDCG@10 with and without the partner signals beside the RRF fallback's, and each
feature's importance (total gain).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from graphlake.kernels.eval.metrics import ndcg_at_k, paired_bootstrap
from graphlake.kernels.partners import SIGNALS
from graphlake.retrieval.core import Candidates, Methods, Op, needs, ranked, shared_run
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import learned_fusions, open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.learned_fusion import LearnedRankers, Partners, Ranker, candidate_rows, feature_names, features, partners_of, per_input
from graphlake.retrieval.operators.learned import rrf
from graphlake.retrieval.queries import check_disjoint, gold_by_query, training_queries
from graphlake.warehouse.storage import LakeStorage, StorageError

if TYPE_CHECKING:
    import lightgbm

CUTOFF = 10  # the cross-validation's and the report's nDCG cut-off
CHUNK = 64  # training queries encoded and run at once


@dataclass(frozen=True)
class Grouped:
    """Candidates of some queries as LightGBM ranks them: features, graded labels, one group per query
    (``positions``: each group's query among those given)."""

    features: np.ndarray
    labels: np.ndarray
    groups: list[int]
    query_ids: list[str]
    positions: list[int]


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
    across_corpora = source != corpus
    families = sorted({family for op in fusions.values() for family in op.partners})
    partners = partner_runs([q["text"] for q in queries], indexes, families) if families else [None] * len(queries)
    rankers, untrained, report = {}, {}, {"train_corpus": source, "fusions": {}}
    for name, op in fusions.items():
        error = next((failed[id(item)] for item in op.inputs if id(item) in failed), None)
        if error is not None:  # an input the training corpus cannot run (an oracle SKB it lacks)
            untrained[name] = f"its inputs cannot run on {source!r}: {error}"
            log(f"learned_fusion: {untrained[name]}")
            continue
        found = [[runs[id(item)][i] for item in op.inputs] for i in range(len(queries))]
        ranker, trained = fit(op, queries, found, declared_partners(partners, op), gold, indexes.snapshot.doc_ids(), config, across_corpora)
        if ranker is None:
            untrained[name] = trained["reason"]
            log(f"learned_fusion: {trained['reason']}; rrf of its inputs")
            continue
        names = input_names(methods, op)
        trained |= {"inputs": names, "importance": _importance(ranker, names), "across_corpora": ranker.across_corpora}
        rankers[name], report["fusions"][name] = ranker, trained
        signals = trained["partner_signals"]
        log(
            f"learned_fusion ({', '.join(names)}): {trained['rounds']} rounds on {len(trained['training_queries'])} queries; "
            f"out-of-fold nDCG@{CUTOFF} {trained['out_of_fold_ndcg'] or 0:.3f} (rrf {trained['ndcg_rrf']:.3f}); partner signals "
            f"{'kept' if signals['kept'] else 'not kept'}: {signals['gain'][0]:+.4f} [{signals['gain'][1]:+.4f}, {signals['gain'][2]:+.4f}]"
        )
    summary = {"trained": bool(rankers), "train_corpus": source, "training_queries": len(queries), "seconds": round(time.perf_counter() - started, 1)}
    return LearnedRankers(rankers, untrained, report), summary


def fit(
    op: Op, queries: list[dict], found: list[list], partners: list[Partners], gold: dict[str, dict[str, int]], doc_ids: np.ndarray, config: Any, across_corpora: bool
) -> tuple[Ranker | None, dict]:
    """A lambdarank model for ``op`` on these queries (their inputs' candidates ``found``, what their
    partner signals read, None where it reads none) and its report; no model (and the reason) when no
    query has a relevant candidate. ``across_corpora``: the queries are another corpus's, so the model
    reads the scale-free features only; its partner signals are kept by the same rule (HotpotQA dev,
    trained on HotpotQA's train corpus: R@5 0.849 without them, 0.940 with them).

    The rounds are chosen by cross-validation over the queries (``config.folds`` seeded folds, the best
    mean nDCG@10), then the model learns from every query: a held-out share for early stopping cost a
    fifth of HotpotQA's 100 training queries and stopped on the noise of the other twenty (3 rounds). The
    same folds give each query an out-of-fold ranking by the model with the partner signals and by the
    model without them; the partner signals are kept only when their paired gain in nDCG@10 is beyond
    noise (the lower end of its 95 % interval above 0), as the dense tuner keeps its encoder. The
    out-of-fold nDCG is optimistic: the same folds chose the rounds."""
    grouped = _grouped(op, queries, found, partners, gold, doc_ids, per_input(across_corpora))
    if not grouped.groups:
        return None, {"reason": "no training query has a relevant document among its candidates"}
    folds = _folds(grouped, config)
    declared = bool(getattr(op, "partners", ()))
    without = _cross_validated(_without_partners(grouped), folds, config)
    with_partners = _cross_validated(grouped, folds, config) if declared else without
    judged = [queries[i] for i in grouped.positions]
    ndcg = lambda rankings: [ndcg_at_k(ranking, gold[q["query_id"]], CUTOFF) for ranking, q in zip(rankings, judged, strict=True)]  # noqa: E731
    candidates = [candidate_rows(found[i], op.depth) for i in grouped.positions]
    with_ndcg, without_ndcg = (ndcg([_documents(rows, s, doc_ids) for rows, s in zip(candidates, v.scores, strict=True)]) if folds else [] for v in (with_partners, without))
    gain = paired_bootstrap(without_ndcg, with_ndcg, seed=config.seed) if folds and declared else {"difference": 0.0, "low": 0.0, "high": 0.0}
    kept = gain["low"] > 0
    chosen = with_partners if kept else without
    booster = _train(grouped if kept else _without_partners(grouped), chosen.rounds, config)
    trained = {
        "training_queries": grouped.query_ids,
        "folds": len(folds),
        "rounds": booster.num_trees(),
        "out_of_fold_ndcg": float(np.mean(with_ndcg if kept else without_ndcg)) if folds else None,
        "ndcg_rrf": _mean_ndcg([_rrf_docs(op, found[i], doc_ids) for i in grouped.positions], judged, gold),
        "partner_signals": {
            "kept": kept,
            "ndcg_with": float(np.mean(with_ndcg)) if folds else None,
            "ndcg_without": float(np.mean(without_ndcg)) if folds else None,
            "gain": [round(gain[k], 4) for k in ("difference", "low", "high")],
        },
    }
    return Ranker(booster, across_corpora, kept), trained


@dataclass(frozen=True)
class CrossValidated:
    """What the folds say of one feature set: the best number of rounds and each query's candidates scored
    by the model of the folds without it."""

    rounds: int
    scores: list[np.ndarray]


def _params(config: Any) -> dict:
    return {
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


def _folds(grouped: Grouped, config: Any) -> list[np.ndarray]:
    """Seeded folds of the grouped queries (positions into ``grouped.groups``); none with fewer than two queries."""
    count = min(config.folds, len(grouped.groups))
    return [] if count < 2 else np.array_split(np.random.default_rng(config.seed).permutation(len(grouped.groups)), count)


def _cross_validated(grouped: Grouped, folds: list[np.ndarray], config: Any) -> CrossValidated:
    """The rounds of the best mean out-of-fold nDCG@10 (early-stopped after ``config.patience`` rounds
    without a better one), and each query's candidates scored by the model of the folds without it.
    Without folds, every round (``config.rounds``) and no scores."""
    import lightgbm

    if not folds:
        return CrossValidated(config.rounds, [])
    starts = np.concatenate([[0], np.cumsum(grouped.groups)])
    rows = lambda queries: np.concatenate([np.arange(starts[q], starts[q + 1]) for q in sorted(queries)])  # noqa: E731
    splits = [(rows(set(range(len(grouped.groups))) - set(fold.tolist())), rows(fold.tolist())) for fold in folds]
    data = lightgbm.Dataset(grouped.features, grouped.labels, group=grouped.groups, free_raw_data=False)
    found = lightgbm.cv(_params(config), data, num_boost_round=config.rounds, folds=splits, callbacks=[lightgbm.early_stopping(config.patience, verbose=False)], return_cvbooster=True)
    rounds = int(np.argmax(found[f"valid ndcg@{CUTOFF}-mean"])) + 1
    scores: list[np.ndarray] = [np.zeros(0)] * len(grouped.groups)
    for fold, booster in zip(folds, found["cvbooster"].boosters, strict=True):
        for query in fold.tolist():
            scores[query] = booster.predict(grouped.features[starts[query] : starts[query + 1]], num_iteration=rounds, num_threads=1)
    return CrossValidated(rounds, scores)


def _train(grouped: Grouped, rounds: int, config: Any) -> lightgbm.Booster:
    import lightgbm

    return lightgbm.train(_params(config), lightgbm.Dataset(grouped.features, grouped.labels, group=grouped.groups), num_boost_round=rounds)


def _without_partners(grouped: Grouped) -> Grouped:
    """The same candidates with the partner signals missing, as a model without them sees them."""
    table = grouped.features.copy()
    table[:, -len(SIGNALS) :] = np.nan
    return replace(grouped, features=table)


def _rrf_docs(op: Op, found: list, doc_ids: np.ndarray) -> list[str]:
    return list(dict.fromkeys(doc_ids[rrf(found, op.depth, op.k).rows].tolist()))


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


def declared_partners(partners: list[Partners | None], op: Op) -> list[Partners | None]:
    """``partner_runs``'s answers for the families and anchors ``op`` declares (None where it reads none)."""
    return [replace(p, families=tuple(op.partners), anchors=op.anchors) if p is not None and op.partners else None for p in partners]


def partner_runs(texts: list[str], indexes: LakeIndexSet, families: list[str]) -> list[Partners]:
    """What the partner signals of ``families`` read for each query, a chunk of queries at once."""
    out: list[Partners] = []
    for start in range(0, len(texts), CHUNK):
        request = new_request(indexes, texts[start : start + CHUNK])
        request.prime(frozenset({"dense"} & set(families)))
        out += partners_of(indexes, request, families)
    return out


def _grouped(op: Op, queries: list[dict], found: list[list], partners: list[Partners], gold: dict[str, dict[str, int]], doc_ids: np.ndarray, each: tuple[str, ...]) -> Grouped:
    """The candidates of the queries with at least one relevant among them (the others teach nothing)."""
    blocks, labels, groups, ids, positions = [], [], [], [], []
    for position, (query, inputs, partnered) in enumerate(zip(queries, found, partners, strict=True)):
        rows = candidate_rows(inputs, op.depth)
        relevance = gold.get(query["query_id"], {})
        label = np.fromiter((relevance.get(d, 0) for d in doc_ids[rows].tolist()), dtype=np.float32, count=len(rows))
        if not len(rows) or not label.any():
            continue
        blocks.append(features(query["text"], inputs, rows, op.depth, each, partnered))
        labels.append(label)
        groups.append(len(rows))
        ids.append(query["query_id"])
        positions.append(position)
    table = np.vstack(blocks) if blocks else np.zeros((0, 0), np.float32)
    return Grouped(table, np.concatenate(labels) if labels else np.zeros(0, np.float32), groups, ids, positions)


def ranked_docs(ranker: Ranker, text: str, found: list, partners: Partners, depth: int, doc_ids: np.ndarray) -> list[str]:
    """One query's documents as ``ranker`` serves them, from its inputs' candidates ``found``."""
    rows = candidate_rows(found, depth)
    if not len(rows):
        return []
    (scores,) = ranker.score([text], [found], [rows], depth, lambda: [partners])
    return _documents(rows, scores, doc_ids)


def _documents(rows: np.ndarray, scores: np.ndarray, doc_ids: np.ndarray) -> list[str]:
    """The documents of ``rows`` in the order serving ranks them by ``scores`` (ties to the lower row),
    so that the fold rule judges the ranking a search returns."""
    return list(dict.fromkeys(doc_ids[ranked(scores=scores, rows=rows, k=len(rows)).rows].tolist()))


def _mean_ndcg(rankings: list[list[str]], queries: list[dict], gold: dict[str, dict[str, int]]) -> float:
    return float(np.mean([ndcg_at_k(r, gold.get(q["query_id"], {}), CUTOFF) for r, q in zip(rankings, queries, strict=True)])) if queries else 0.0


def _importance(ranker: Ranker, names: list[str]) -> dict[str, float]:
    """Total gain per feature, largest first."""
    gains = ranker.booster.feature_importance("gain")
    columns = feature_names(names, per_input(ranker.across_corpora))
    return {name: round(float(gain), 3) for name, gain in sorted(zip(columns, gains, strict=True), key=lambda item: -item[1])}
