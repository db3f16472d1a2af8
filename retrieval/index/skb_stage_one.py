"""GRASP's Stage 1 at query time (plan, link, execute, rescore) over a corpus's loaded SKB
(``skb.py``), as one function the ``skb_plan`` operator and the ``skb_plans`` asset share: the rules
planner for the SKB's kind, or the ``llm`` planner (App. B's prompt, with worked examples verified on
the training corpus)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from graphlake.kernels.plan.plans import Plan, check, parse_plan
from graphlake.kernels.plan.rules import entities_plan, risk_level, sql_plan, wiki_plan
from graphlake.kernels.plan.sql import Emit, compile_sql, run_sql
from graphlake.kernels.text.entities import normalise
from graphlake.retrieval.core import Candidates, MethodError, ranked
from graphlake.retrieval.index.corpus_indexes import CorpusIndexes
from graphlake.retrieval.index.skb import WIKI_SOURCES, LoadedSKB
from graphlake.warehouse.storage import StorageError

PLAN_TOKENS = 320  # a plan of three anchors and four hops takes about 250 tokens; a longer answer is a loop


@dataclass
class Stage1:
    """Stage 1's result for one query: the candidates (node rows) and what Stage 2 and the plans table read."""

    candidates: Candidates
    plan: Plan | None
    valid: bool
    error: str | None
    risk_level: str
    n_cand: int
    sql: str
    ms: float

    @property
    def meta(self) -> dict:
        return {"valid": self.valid, "n_cand": self.n_cand, "risk_level": self.risk_level}


@dataclass(frozen=True)
class StageOneSettings:
    """Stage 1's parameters (App. A's linking defaults)."""

    emit: Emit = "path"
    name_k: int = 5
    name_tau: float = 0.95
    doc_k: int = 10
    doc_tau: float = 0.90
    rescore: bool = True
    max_rows: int = 100_000
    timeout_s: float = 10.0
    k: int = 100


def rules_plan(question: str, skb: LoadedSKB) -> Plan:
    """The rules planner for this SKB's kind (``kernels/plan/rules.py``)."""
    if skb.source in WIKI_SOURCES:
        return wiki_plan(question, skb.schema, lambda span: skb.label_of_name.get(normalise(span)))
    if skb.source == "sql_schema":
        return sql_plan(question)
    from graphlake.kernels.text.entities import spacy_entities

    return entities_plan(question, spacy_entities([question])[0], skb.schema)


def kind(source: str) -> str:
    """Which planner guidance an SKB source gets."""
    return "wiki" if source in WIKI_SOURCES else "sql" if source == "sql_schema" else "entities"


class LLMPlanner:
    """The ``llm`` planner: App. B's prompt over this SKB's schema, with up to ``examples`` worked examples
    from the training corpus whose rules plan put a gold node in its top 10 (the paper verified its Prime
    examples so), answered under the plan's JSON schema through the lake's LLM client (cached)."""

    def __init__(self, indexes: CorpusIndexes, skb: LoadedSKB, examples: int = 19, scan: int = 200) -> None:
        from graphlake.common.llm import LAKE_CACHE, LLMClient, LLMConfig, LLMUnavailable
        from graphlake.kernels.plan.prompt import system_prompt

        try:
            self.client = LLMClient(LLMConfig.from_env(max_tokens=PLAN_TOKENS), indexes.lake.home / LAKE_CACHE)
        except LLMUnavailable as error:
            raise MethodError(f"the llm planner needs an LLM server: {error}") from None
        self.examples = verified_examples(indexes, skb.source, examples, scan)
        self.system = system_prompt(skb.schema, kind(skb.source), self.examples)

    def __call__(self, question: str) -> tuple[Plan | None, str | None]:
        """The model's plan, or None and why it gave none (an unreadable answer is the model's failure, recorded)."""
        from graphlake.common.llm import LLMOutputError, LLMUnavailable
        from graphlake.kernels.plan.prompt import user_prompt

        try:
            return self.client.structured(user_prompt(question), Plan, system=self.system), None
        except LLMUnavailable:
            raise
        except LLMOutputError as error:
            return None, f"the LLM's plan is unusable: {error}"


def verified_examples(indexes: CorpusIndexes, source: str, limit: int, scan: int) -> list[tuple[str, Plan]]:
    """Training questions (seeded order, at most ``scan`` tried) whose rules plan ranks a gold node in its top 10."""
    from graphlake.retrieval.queries import gold_by_query, training_source

    train_corpus, split = training_source(indexes.lake.home, indexes.corpus)
    if not indexes.lake.has("queries", {"corpus": train_corpus}):
        return []
    queries = [q for q in indexes.lake.read("queries", {"corpus": train_corpus}).to_pylist() if split is None or q["split"] == split]
    if not queries:
        return []
    train = indexes if train_corpus == indexes.corpus else indexes.of_corpus(train_corpus)
    try:
        skb = train.skb(source)
    except StorageError:
        return []
    gold = gold_by_query(indexes.lake.read("qrels", {"corpus": train_corpus}))
    doc_ids = train.doc_ids()
    found = []
    for position in np.random.default_rng(0).permutation(len(queries))[:scan].tolist():
        query = queries[position]
        result = stage_one(query["text"], skb, None, StageOneSettings(k=10), train.dense_encoder())
        if result.valid and any(doc_ids[r] in gold.get(query["query_id"], {}) for r in result.candidates.rows.tolist()):
            found.append((query["text"], result.plan))
            if len(found) == limit:
                break
    return found


def planned(question: str, skb: LoadedSKB, planner: str, indexes: CorpusIndexes) -> tuple[Plan | None, str | None]:
    """(plan, failure) by ``planner``: None, None for ``rules`` (``stage_one`` plans those itself)."""
    if planner == "rules":
        return None, None
    return indexes.memo(("llm_planner", skb.source), lambda: LLMPlanner(indexes, skb))(question)


def stage_one(
    question: str, skb: LoadedSKB, plan: Plan | str | dict | None, settings: StageOneSettings, encode, failure: str | None = None, allowed: np.ndarray | None = None
) -> Stage1:
    """Validate, link, execute and rescore one plan; an invalid plan (or a planner's ``failure``) gives no
    candidates and ``no_trade``; ``allowed`` (a bool per node row, a request's filter) keeps its nodes only. ``plan`` None: the rules planner's, whose ``risk_level`` is then set
    from what execution found."""
    started = time.perf_counter()
    empty = Candidates(np.zeros(0, np.int64), np.zeros(0, np.float32))
    if failure is not None:
        return Stage1(empty, None, False, failure, "no_trade", 0, "", _ms(started))
    from_rules = plan is None
    if from_rules:
        plan = rules_plan(question, skb)
    elif not isinstance(plan, Plan):
        plan, error = parse_plan(plan)
        if plan is None:
            return Stage1(empty, None, False, error, "no_trade", 0, "", _ms(started))
    problems = check(plan, skb.schema)
    if problems:
        return Stage1(empty, plan, False, "; ".join(problems), "no_trade", 0, "", _ms(started))
    texts = [anchor.text for anchor in plan.anchors] + ([plan.target.relevance_text] if settings.rescore and plan.target.relevance_text else [])
    vectors = encode(texts)
    bindings = {}
    for anchor, vector in zip(plan.anchors, vectors, strict=False):
        k, tau = (settings.name_k, settings.name_tau) if anchor.match_mode == "name" else (settings.doc_k, settings.doc_tau)
        bindings[anchor.var] = skb.link(vector, anchor.label, anchor.match_mode, k, tau)
    sql = compile_sql(plan, bindings, skb.corpus, skb.source, settings.emit, settings.max_rows)
    try:
        with skb.cursor() as con:
            found = run_sql(con, sql, settings.timeout_s)
    except TimeoutError as error:
        return Stage1(empty, plan, False, str(error), "no_trade", 0, sql, _ms(started))
    positions = np.fromiter((skb.by_id[skb_id] for skb_id, _ in found), np.int64, len(found))
    scores = np.fromiter((score for _, score in found), np.float64, len(found))
    rows = skb.node_row[positions] if len(found) else np.zeros(0, np.int64)
    keep = rows >= 0  # only passage / table nodes are retrievable
    if allowed is not None:
        keep[keep] &= allowed[rows[keep]]
    rows, scores, positions = rows[keep], scores[keep], positions[keep]
    if len(texts) > len(plan.anchors) and len(rows):
        scores = scores + skb.doc_cosines(positions, vectors[-1])
    best = max((max(b.scores) for b in bindings.values() if b.scores), default=0.0)
    risk = risk_level(best, len(rows)) if from_rules else plan.risk_level
    if from_rules:
        plan = plan.model_copy(update={"risk_level": risk})
    return Stage1(ranked(rows, scores, settings.k), plan, True, None, risk, int(len(rows)), sql, _ms(started))


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
