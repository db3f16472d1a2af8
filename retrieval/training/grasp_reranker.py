"""GRASP's Stage 3 (§3.3, App. A): a cross-encoder fine-tuned on serialised SKB candidates, and the static
RRF of its ranking with Stage 2's, tuned on validation (the ``grasp_reranker`` index).

Data discipline (spec G5): training records come only from the training share of the ``train_corpus``'s
queries (the 80 % that ``grasp_fusion`` does not validate on; never the evaluated corpus's queries).
Each training query's pool is its Stage-2 top ``depth``, fused with the setting ``grasp_fusion`` chose
for the evaluated corpus; a record holds one positive (a gold node in the pool) and the query's
``stored_negatives`` highest-ranked non-gold nodes, and every visit draws ``group_size - 1`` of them
afresh. The model starts from the lake's ``reranker`` (the zero-shot ``base`` model) and keeps its best
checkpoint by validation Hit@1 on the validation share, whose queries then tune the final fusion for
``base`` and for the fine-tuned model.

Two recipes (``Recipe``): the CPU one (groups of 8, 256 tokens, one forward pass per group) and the
paper's on a GPU (groups of 24, 512 tokens, 16 groups in one batched pass), both with 5 % warm-up and
cosine decay from 3e-5 over 2 epochs or the time budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from graphlake.kernels.plan.fusion import ValidationQuery, fuse_stage2, search_static
from graphlake.retrieval.core import Op
from graphlake.retrieval.learned_kinds import grasp_rerankers, open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grasp_fusion import TunedFusion
from graphlake.retrieval.models.grasp_reranker import TunedReranker, candidate_texts
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.queries import check_disjoint
from graphlake.retrieval.training.grasp_fusion import gold_rows, validation_queries
from graphlake.warehouse.storage import LakeStorage, StorageError


@dataclass(frozen=True)
class Recipe:
    group_size: int
    max_tokens: int
    groups_per_step: int
    batched: bool
    learning_rate: float = 3e-5
    warmup: float = 0.05
    schedule: str = "cosine"
    epochs: int = 2


RECIPES = {"cpu": Recipe(group_size=8, max_tokens=256, groups_per_step=4, batched=False), "gpu": Recipe(group_size=24, max_tokens=512, groups_per_step=16, batched=True)}


def stage_two(stage: Op, fusion: TunedFusion, query: str, indexes: LakeIndexSet, depth: int) -> np.ndarray:
    """Stage 2's top ``depth`` rows for ``query`` on the training corpus's indexes. A tuned ``plan_rrf`` fuses
    with the setting chosen for the *evaluated* corpus (the training corpus's own tuning may have seen it)."""
    if stage.op != "plan_rrf" or not stage.mode.startswith("tuned"):
        return stage.run(query, indexes).rows[:depth]
    graph, partner = (child.run(query, indexes) for child in stage.inputs)
    mode, setting = fusion.choice(stage)
    rows = fuse_stage2(graph.rows, partner.rows, graph.meta, mode, setting).rows
    return rows[:depth]


@dataclass
class TrainingData:
    """What Stage 3 learns from for an evaluated corpus, all of it from its ``train_corpus``: one record per
    positive of the training share, and the validation share's Stage-2 lists with their serialisations."""

    source: str
    key: str  # the Stage 2 whose candidates are reranked (stage_key)
    pools: list  # kernels/cross_encoder.Pool
    validation: list[dict]  # query_id, query, rows (Stage-2 top depth), texts (serialised rows), gold (rows)
    report: dict


def training_data(lake: LakeStorage, corpus: str, config: Any, group_size: int) -> TrainingData | str:
    """Mine the records and the validation lists of ``corpus``'s reranker; why not, when there is nothing to learn."""
    methods = load_methods(lake.home)
    stages = grasp_rerankers(methods)
    source, validation, learning = validation_queries(lake, corpus, config.validation_share, config.seed)
    if not stages or not learning:
        return "no grasp_rerank is declared" if not stages else f"corpus {source!r} has no training queries"
    check_disjoint(lake, corpus, source, validation + learning, "grasp_reranker")
    fusion = TunedFusion.load(lake.artifact("grasp_fusion", {"corpus": corpus}))
    indexes = open_index_set(lake, source)
    gold = gold_rows(lake, source, indexes)
    texts = lambda rows: candidate_texts(indexes.snapshot, indexes.skb, rows, "skb", config.max_neighbours, config.max_field_tokens)  # noqa: E731
    key, stage = next(iter(stages.items()))  # one model, for the first declared Stage 2 (grasp_fused)
    pools = mine(stage, fusion, learning, indexes, gold, texts, config.depth, config.stored_negatives, group_size)
    lists = []
    for query in validation:
        rows = stage_two(stage, fusion, query["text"], indexes, config.depth)
        lists.append({"query_id": query["query_id"], "query": query["text"], "rows": rows, "texts": texts(rows), "gold": gold.get(query["query_id"], set())})
    report = {"train_corpus": source, "validation_queries": [q["query_id"] for q in validation], "training_queries": [q["query_id"] for q in learning]}
    return TrainingData(source, key, pools, lists, report)


def validation_hit_at_1(validation: list[dict], depth: int) -> Callable[[Any], float]:
    """Hit@1 of a cross-encoder reranking each validation query's Stage-2 top ``depth``: the checkpoint's yardstick."""

    def hit_at_1(encoder) -> float:
        hits = []
        for item in validation:
            rows = item["rows"][:depth]
            hits.append(bool(len(rows)) and int(rows[int(np.argmax(encoder.score(item["query"], item["texts"][:depth])))]) in item["gold"])
        return float(np.mean(hits)) if hits else 0.0

    return hit_at_1


def learn(lake: LakeStorage, corpus: str, config: Any, log: Callable[[str], None]) -> tuple[TunedReranker, dict]:
    """Mine, train and tune Stage 3 for ``corpus``; the artefact and the metadata to show."""
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder, default_device, train

    started = time.perf_counter()
    recipe = RECIPES[config.recipe if config.recipe != "auto" else ("gpu" if default_device().type == "cuda" else "cpu")]
    data = training_data(lake, corpus, config, recipe.group_size)
    if isinstance(data, str):
        log(f"grasp_reranker: {data}; grasp_rerank with model grasp ranks by the base reranker")
        return TunedReranker(None, {}, {"untrained": data}), {"trained": False, "reason": data}
    base_folder = lake.artifact("reranker", {})
    base_untrained = Untrained.load(base_folder)

    def base() -> CrossEncoder:
        """The zero-shot model as ``grasp_rerank`` with ``model: base`` uses it (its own token budget)."""
        return CrossEncoder.initial(recipe.max_tokens, config.seed) if base_untrained else CrossEncoder.load(base_folder)

    base_fusion = final_fusion(base(), data.validation)
    model = base()
    model.max_tokens = recipe.max_tokens
    log(f"grasp_reranker: {len(data.pools)} records (one per positive) from {len(data.report['training_queries'])} training queries of {data.source!r}, recipe {recipe}")
    trained = train(
        model,
        data.pools,
        validation_hit_at_1(data.validation, config.validation_depth),
        learning_rate=recipe.learning_rate,
        groups_per_step=recipe.groups_per_step,
        epochs=recipe.epochs,
        budget_seconds=config.budget_minutes * 60,
        validate_every=config.validate_every,
        seed=config.seed,
        schedule=recipe.schedule,
        warmup=recipe.warmup,
        batched=recipe.batched,
    )
    report = data.report | {"recipe": asdict(recipe), "training": asdict(trained) | {"records": len(data.pools), "base_untrained": base_untrained is not None}}
    summary = {"trained": True, "train_corpus": data.source, "records": len(data.pools), "best_step": trained.best_step}
    summary |= {"validation_hit@1": round(trained.best_validation, 4), "base_hit@1": round(trained.initial_validation, 4)}
    summary["minutes"] = round((time.perf_counter() - started) / 60, 2)
    previous = _previous(lake, corpus, data)
    if previous is not None:
        previous_hit = validation_hit_at_1(data.validation, config.validation_depth)(previous.model)
        kept = "previous" if previous_hit > trained.best_validation else "new"
        summary["kept"] = kept
        summary["previous_hit@1"] = round(previous_hit, 4)
        if kept == "previous":  # the same validation queries: the better model stays, its fusion re-tuned on them
            note = f"kept the previous model: validation Hit@1 {previous_hit:.3f} against the new one's {trained.best_validation:.3f}"
            log(f"grasp_reranker: {note}")
            previous.fusion[data.key] = {"base": base_fusion, "grasp": final_fusion(previous.model, data.validation)}
            previous.report = {**previous.report, **data.report, "kept": {"model": "previous", "previous_hit@1": previous_hit, "new_hit@1": trained.best_validation}}
            return previous, summary | {"note": note}
        report["kept"] = {"model": "new", "previous_hit@1": previous_hit, "new_hit@1": trained.best_validation}
    fused = {data.key: {"base": base_fusion, "grasp": final_fusion(model, data.validation)}}
    return TunedReranker(model, fused, report), summary


def _previous(lake: LakeStorage, corpus: str, data: TrainingData) -> TunedReranker | None:
    """The corpus's current fine-tuned Stage-3 model when it reranks the same Stage 2 from the same
    training corpus (so the two can be compared on the same validation queries); None otherwise."""
    try:
        current = TunedReranker.load(lake.artifact("grasp_reranker", {"corpus": corpus}))
    except (StorageError, FileNotFoundError):
        return None
    same = current.report.get("train_corpus") == data.source and data.key in current.fusion
    return current if current.model is not None and same else None


def mine(stage: Op, fusion: TunedFusion, queries: list[dict], indexes: LakeIndexSet, gold, texts, depth: int, stored: int, group_size: int) -> list:
    """Training records: per query, one :class:`Pool` per gold node in its Stage-2 top ``depth``, holding the
    ``stored`` highest-ranked non-gold nodes of that list as its negatives; queries with no gold or no
    negative in the pool give none."""
    from graphlake.kernels.rerank.cross_encoder import Pool

    pools = []
    for query in queries:
        rows = stage_two(stage, fusion, query["text"], indexes, depth)
        is_gold = np.isin(rows, list(gold.get(query["query_id"], ())))
        negatives = rows[~is_gold][:stored]
        if not is_gold.any() or not len(negatives):
            continue
        negative_texts = tuple(texts(negatives))
        pools += [Pool(query["text"], positive, negative_texts, group_size) for positive in texts(rows[is_gold])]
    return pools


def final_fusion(encoder, validation: list[dict]) -> dict:
    """The (w, k) of static RRF between the reranker's ranking (weight w) and Stage 2's, best by validation Hit@1."""
    queries = []
    for item in validation:
        rows = item["rows"]
        order = np.argsort(-encoder.score(item["query"], item["texts"]), kind="stable") if len(rows) else np.zeros(0, np.int64)
        queries.append(ValidationQuery(rows[order], rows, frozenset(item["gold"]), True, len(rows), "normal"))
    best, hits = search_static(queries)
    return best | {"grid": hits.tolist(), "queries": len(queries)}
