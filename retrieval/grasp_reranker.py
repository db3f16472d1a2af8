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

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphlake.kernels.plan_fusion import ValidationQuery, fuse_stage2, search_static
from graphlake.retrieval.grasp_fusion import TunedFusion, check_disjoint, gold_rows, validation_queries
from graphlake.retrieval.indexes import LakeIndexes
from graphlake.retrieval.methods import Methods, Op, load_methods, needs
from graphlake.warehouse.digest import fingerprint
from graphlake.warehouse.storage import Lake

MODEL_FOLDER = "model"
REPORT_FILE = "grasp_reranker.json"


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


def rerankers(methods: Methods) -> dict[str, Op]:
    """The Stage-2 operators that a declared ``grasp_rerank`` with ``model: grasp`` reranks, by fingerprint."""
    found: dict[str, Op] = {}

    def visit(op: Op) -> None:
        if op.op == "grasp_rerank":
            found.setdefault(stage_key(op.inputs[0]), op.inputs[0])
        for child in op.children():
            visit(child)

    for method in methods.values():
        visit(method)
    return found


def stage_key(op: Op) -> str:
    return fingerprint(op.model_dump(mode="json"))


def reads(methods: Methods) -> frozenset[str]:
    """What mining reads on the training corpus: the Stage-2 inputs' indexes (the fusion's choice is the evaluated corpus's)."""
    return frozenset(name for op in rerankers(methods).values() for child in op.children() for name in needs(child) if name != "grasp_fusion")


@dataclass
class TunedReranker:
    """The fine-tuned cross-encoder (None when nothing could be trained) and the final fusion per model."""

    model: Any
    fusion: dict[str, dict[str, dict]]  # stage key -> "base" | "grasp" -> {weight, constant}
    report: dict = field(default_factory=dict)

    def setting(self, stage: Op, model: str) -> dict:
        return self.fusion.get(stage_key(stage), {}).get(model, {"weight": 0.5, "constant": 60.0})

    def save(self, folder: Path) -> None:
        if self.model is not None:
            self.model.save(folder / MODEL_FOLDER, {k: v for k, v in self.report.items() if k == "training"})
        (folder / REPORT_FILE).write_text(json.dumps({"fusion": self.fusion, "report": self.report}, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> TunedReranker:
        from graphlake.kernels.cross_encoder import CrossEncoder

        saved = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
        model = CrossEncoder.load(folder / MODEL_FOLDER) if (folder / MODEL_FOLDER).is_dir() else None
        return cls(model, saved["fusion"], saved["report"])


def stage_two(stage: Op, fusion: TunedFusion, query: str, indexes: LakeIndexes, depth: int) -> np.ndarray:
    """Stage 2's top ``depth`` rows for ``query`` on the training corpus's indexes. A tuned ``plan_rrf`` fuses
    with the setting chosen for the *evaluated* corpus (the training corpus's own tuning may have seen it)."""
    if stage.op != "plan_rrf" or not stage.mode.startswith("tuned"):
        return stage.run(query, indexes).rows[:depth]
    graph, partner = (child.run(query, indexes) for child in stage.inputs)
    mode, setting = fusion.choice(stage)
    rows, _ = fuse_stage2(graph.rows, partner.rows, graph.meta, mode, setting)
    return rows[:depth]


def candidate_texts(indexes: LakeIndexes, rows: np.ndarray, serialize: str, max_neighbours: int, max_field_tokens: int) -> list[str]:
    """What the reranker reads per candidate: the B.6 serialisation over the corpus's SKB, or ``title + text``."""
    texts = indexes.texts()
    if serialize == "text":
        return [texts[r] for r in rows.tolist()]
    skb = indexes.get("skb")("auto")
    nodes = indexes.nodes().column("text")
    return [skb.serialised(r, nodes[r].as_py(), max_neighbours, max_field_tokens) for r in rows.tolist()]


def learn(lake: Lake, corpus: str, config: Any, log: Callable[[str], None]) -> tuple[TunedReranker, dict]:
    """Mine, train and tune Stage 3 for ``corpus``; the artefact and the metadata to show."""
    from graphlake.kernels.cross_encoder import CrossEncoder, default_device, train
    from graphlake.retrieval.training import Untrained

    started = time.perf_counter()
    methods = load_methods(lake.home)
    stages = rerankers(methods)
    source, validation, learning = validation_queries(lake, corpus, config.validation_share, config.seed)
    recipe = RECIPES[config.recipe if config.recipe != "auto" else ("gpu" if default_device().type == "cuda" else "cpu")]
    if not stages or not learning:
        reason = "no grasp_rerank is declared" if not stages else f"corpus {source!r} has no training queries"
        log(f"grasp_reranker: {reason}; grasp_rerank with model grasp ranks by the base reranker")
        return TunedReranker(None, {}, {"untrained": reason}), {"trained": False, "reason": reason}
    check_disjoint(lake, corpus, source, validation + learning)
    fusion = TunedFusion.load(lake.artifact("grasp_fusion", {"corpus": corpus}))
    indexes = LakeIndexes(lake, source)
    gold = gold_rows(lake, source, indexes)
    base_folder = lake.artifact("reranker", {})
    base_untrained = Untrained.load(base_folder)
    texts = lambda rows: candidate_texts(indexes, rows, "skb", config.max_neighbours, config.max_field_tokens)  # noqa: E731
    report: dict = {"train_corpus": source, "recipe": asdict(recipe), "validation_queries": [q["query_id"] for q in validation]}
    report["training_queries"] = [q["query_id"] for q in learning]
    key, stage = next(iter(stages.items()))  # one model, for the first declared Stage 2 (grasp_fused)
    pools = mine(stage, fusion, learning, indexes, gold, texts, config.depth, config.stored_negatives, recipe.group_size)
    items = [(q, stage_two(stage, fusion, q["text"], indexes, config.depth)) for q in validation]
    shallow = [(q["text"], rows[: config.validation_depth], gold.get(q["query_id"], set())) for q, rows in items]
    serialised = [texts(rows) for _, rows, _ in shallow]

    def hit_at_1(encoder) -> float:
        hits = [bool(len(r)) and int(r[int(np.argmax(encoder.score(q, t)))]) in g for (q, r, g), t in zip(shallow, serialised, strict=True)]
        return float(np.mean(hits)) if hits else 0.0

    def base() -> CrossEncoder:
        """The zero-shot model as ``grasp_rerank`` with ``model: base`` uses it (its own token budget)."""
        return CrossEncoder.initial(recipe.max_tokens, config.seed) if base_untrained else CrossEncoder.load(base_folder)

    base_fusion = _final_fusion(base(), items, gold, texts)
    model = base()
    model.max_tokens = recipe.max_tokens
    log(f"grasp_reranker: {len(pools)} records (one per positive) from {len(learning)} training queries of {source!r}, recipe {recipe}")
    trained = train(
        model,
        pools,
        hit_at_1,
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
    fused = {key: {"base": base_fusion, "grasp": _final_fusion(model, items, gold, texts)}}
    report["training"] = asdict(trained) | {"records": len(pools), "base_untrained": base_untrained is not None}
    summary = {"trained": True, "train_corpus": source, "records": report["training"]["records"], "best_step": report["training"]["best_step"]}
    summary |= {"validation_hit@1": round(report["training"]["best_validation"], 4), "base_hit@1": round(report["training"]["initial_validation"], 4)}
    return TunedReranker(model, fused, report), summary | {"minutes": round((time.perf_counter() - started) / 60, 2)}


def mine(stage: Op, fusion: TunedFusion, queries: list[dict], indexes: LakeIndexes, gold, texts, depth: int, stored: int, group_size: int) -> list:
    """Training records: per query, one :class:`Pool` per gold node in its Stage-2 top ``depth``, holding the
    ``stored`` highest-ranked non-gold nodes of that list as its negatives; queries with no gold or no
    negative in the pool give none."""
    from graphlake.kernels.cross_encoder import Pool

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


def _final_fusion(encoder, items, gold, texts) -> dict:
    """The (w, k) of static RRF between the reranker's ranking (weight w) and Stage 2's, best by validation Hit@1."""
    queries = []
    for query, rows in items:
        order = np.argsort(-encoder.score(query["text"], texts(rows)), kind="stable") if len(rows) else np.zeros(0, np.int64)
        queries.append(ValidationQuery(rows[order], rows, frozenset(gold.get(query["query_id"], ())), True, len(rows), "normal"))
    best, hits = search_static(queries)
    return best | {"grid": hits.tolist(), "queries": len(queries)}
