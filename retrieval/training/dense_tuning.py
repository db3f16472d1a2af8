"""The lake tunes its own dense encoder on a corpus's training queries, and keeps it only if it ranks
held-out training queries better than the encoder it started from (the rule the cross-encoder follows).

Learning: each training query with one of its gold passages and BM25's best-ranked passage outside its
gold documents (a hard negative), under sentence-transformers' MultipleNegativesRankingLoss: every other
pair's passages in the batch are in-batch negatives. Judging: a seeded share of the training queries is
held out; each is ranked over a pool of its BM25 top passages and its gold passages by both encoders,
and the tuned encoder is kept only when its gain in nDCG@10 over those queries is beyond noise: the paired
bootstrap interval of the per-query differences lies above 0 (the rule the learned composition follows).
Otherwise the encoder the lake started from stays, with the vectors it made: a change must earn its cost
(every passage encoded again).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from graphlake.kernels.eval.metrics import evaluate, paired_bootstrap
from graphlake.retrieval.core import unfill
from graphlake.retrieval.index.tables import retrieval_texts
from graphlake.retrieval.queries import check_disjoint, gold_by_query, held_out, training_queries
from graphlake.warehouse.storage import LakeStorage

METRIC = "ndcg@10"


@dataclass(frozen=True)
class TuningSettings:
    epochs: int = 1
    learning_rate: float = 2e-5
    batch_size: int = 16  # pairs a step: each query's in-batch negatives are the other pairs' passages
    validation_share: float = 0.2  # of the training queries, held out to judge the tuned encoder
    pool: int = 30  # BM25's top passages a held-out query is ranked over (with its gold)
    seed: int = 0


@dataclass(frozen=True)
class TrainingSet:
    source: str  # the corpus whose training queries these are
    texts: list[str]  # its passages (``title text``), in node order
    doc_ids: list[str]  # each passage's document
    queries: list[dict]  # training queries with gold
    gold: dict[str, dict[str, int]]

    def fingerprint(self, base_revision: str, settings: TuningSettings) -> str:
        """What the tuning depends on: the base encoder, the settings, the queries, their gold and the passages."""
        digest = hashlib.sha256(json.dumps([base_revision, asdict(settings), [(q["query_id"], q["text"]) for q in self.queries], self.gold], sort_keys=True).encode())
        for text in self.texts:
            digest.update(text.encode())
        return digest.hexdigest()[:16]


def training_set(lake: LakeStorage, corpus: str) -> TrainingSet:
    """The training queries ``corpus`` learns from (its train split, or its ``train_corpus``'s), refused
    if any is one it is evaluated on."""
    source, rows = training_queries(lake, corpus)
    gold = gold_by_query(lake.read("qrels", {"corpus": source}))
    rows = [row for row in rows if gold.get(row["query_id"])]
    check_disjoint(lake, corpus, source, rows, "dense tuning")
    nodes, documents = lake.read("nodes", {"corpus": source}), lake.read("documents", {"corpus": source})
    return TrainingSet(source, retrieval_texts(nodes, documents), nodes.column("doc_id").to_pylist(), rows, {row["query_id"]: gold[row["query_id"]] for row in rows})


def tune(data: TrainingSet, base: Path, settings: TuningSettings, target: Path, log: Callable[[str], None]) -> dict:
    """Tune the encoder in ``base`` on ``data``; write it to ``target`` only if it is kept. The decision,
    with both encoders' held-out nDCG@10 and what the tuning saw, is returned."""
    from graphlake.kernels.text.bm25 import BM25Index

    if len(data.queries) < 2:
        return {"kept": "base", "said": f"corpus {data.source!r} has {len(data.queries)} training queries with gold, too few to tune the dense encoder and judge it on: the untuned one stays"}
    bm25 = BM25Index.build(data.texts)
    ranked = [found.rows for found in unfill(*bm25.search([q["text"] for q in data.queries], min(len(data.texts), max(settings.pool, 10))))]
    judge, learn = held_out(len(data.queries), settings.validation_share, settings.seed)
    pairs = [pair for i in learn for pair in _pairs(data, i, ranked[i])]
    started = time.perf_counter()
    base_model, tuned_model = _load(base), _load(base)
    losses = _train(tuned_model, pairs, settings, log)
    seconds = time.perf_counter() - started
    judged = [data.queries[i] for i in judge]
    pools = {q["query_id"]: _pool(data, i, ranked[i], settings.pool) for q, i in zip(judged, judge, strict=True)}
    base_scores, tuned_scores = (_held_out_ndcg(model, data, judged, pools) for model in (base_model, tuned_model))
    base_score, tuned_score = float(np.mean(base_scores)), float(np.mean(tuned_scores))
    gain = paired_bootstrap(base_scores, tuned_scores, seed=settings.seed)
    kept = "tuned" if gain["low"] > 0 else "base"  # better beyond noise, or not worth encoding every passage again
    said = (
        f"dense encoder tuned on {len(learn)} training queries of {data.source!r} ({len(pairs)} pairs, {seconds:.0f} s): held-out nDCG@10 "
        f"{tuned_score:.4f} tuned against {base_score:.4f} untuned on {len(judge)} queries, difference {gain['difference']:+.4f} "
        f"[{gain['low']:+.4f}, {gain['high']:+.4f}] (paired 95 % interval); kept the {kept} encoder" + ("" if kept == "tuned" else " (a gain must lie above 0)")
    )
    log(said)
    if kept == "tuned":
        tuned_model.save(str(target))
    return {
        "kept": kept,
        "said": said,
        "held_out": {
            "queries": len(judge),
            "metric": METRIC,
            "tuned": round(tuned_score, 6),
            "untuned": round(base_score, 6),
            "difference": round(gain["difference"], 6),
            "low": round(gain["low"], 6),
            "high": round(gain["high"], 6),
        },
        "training": {"source": data.source, "queries": len(learn), "pairs": len(pairs), "seconds": round(seconds, 1), "last_loss": losses[-1] if losses else None},
    }


def _pairs(data: TrainingSet, i: int, ranked: np.ndarray) -> list[tuple[str, str, str]]:
    """(query, gold passage, hard negative) for each gold document BM25 ranks a passage of (its best),
    else its first passage; the negative is BM25's best passage outside the gold documents."""
    query, gold = data.queries[i], data.gold[data.queries[i]["query_id"]]
    negative = next((int(r) for r in ranked if data.doc_ids[r] not in gold), None)
    if negative is None:
        return []
    chosen: dict[str, int] = {}  # gold document -> the passage paired with the query
    for row in [*map(int, ranked), *range(len(data.doc_ids))]:
        if data.doc_ids[row] in gold:
            chosen.setdefault(data.doc_ids[row], row)
    return [(query["text"], data.texts[row], data.texts[negative]) for row in chosen.values()]


def _pool(data: TrainingSet, i: int, ranked: np.ndarray, size: int) -> list[int]:
    """The passages a held-out query is ranked over: BM25's top ``size`` and every passage of its gold documents."""
    gold = data.gold[data.queries[i]["query_id"]]
    return sorted({int(r) for r in ranked[:size]} | {row for row, doc in enumerate(data.doc_ids) if doc in gold})


def _load(folder: Path):
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()
    return SentenceTransformer(str(folder), device="cpu", local_files_only=True)


def _train(model, pairs: list[tuple[str, str, str]], settings: TuningSettings, log: Callable[[str], None]) -> list[float]:
    """The loss of each step, training ``model`` in place."""
    import torch
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from graphlake.common.progress import StepProgress

    torch.manual_seed(settings.seed)
    loss = MultipleNegativesRankingLoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate)
    model.train()
    losses = []
    order = np.random.default_rng(settings.seed)
    progress = StepProgress("tuning the dense encoder", settings.epochs * -(-len(pairs) // settings.batch_size), log, unit="steps")
    for _ in range(settings.epochs):
        shuffled = [pairs[i] for i in order.permutation(len(pairs))]
        for start in range(0, len(shuffled), settings.batch_size):
            batch = shuffled[start : start + settings.batch_size]
            features = [model.preprocess([row[column] for row in batch]) for column in range(3)]
            value = loss(features, None)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            losses.append(round(float(value.detach()), 4))
            progress.advance()
    model.eval()
    return losses


def _held_out_ndcg(model, data: TrainingSet, judged: list[dict], pools: dict[str, list[int]]) -> list[float]:
    """nDCG@10 of each of the ``judged`` queries, ranked by ``model`` over its pool (a document scores its best passage)."""
    rows = sorted({r for pool in pools.values() for r in pool})
    passages = dict(zip(rows, model.encode([data.texts[r] for r in rows], normalize_embeddings=True, convert_to_numpy=True), strict=True))
    queries = model.encode([q["text"] for q in judged], normalize_embeddings=True, convert_to_numpy=True)
    rankings = {}
    for query, vector in zip(judged, queries, strict=True):
        best: dict[str, float] = {}
        for r in pools[query["query_id"]]:
            score = float(passages[r] @ vector)
            best[data.doc_ids[r]] = max(score, best.get(data.doc_ids[r], -np.inf))
        rankings[query["query_id"]] = sorted(best, key=lambda doc: -best[doc])
    per_query = evaluate(rankings, {q["query_id"]: data.gold[q["query_id"]] for q in judged}, [METRIC])
    return [per_query.get(q["query_id"], {}).get(METRIC, 0.0) for q in judged]
