"""GRASP's Stage 1 at query time (plan, link, execute, rescore) over a corpus's loaded SKB
(``skb.py``), as one function the ``skb_plan`` operator and the ``skb_plans`` asset share: the rules
planner for the SKB's kind, or the ``llm`` planner (App. B's prompt, with worked examples verified on
the training corpus)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graphlake.kernels.plan.match import execute
from graphlake.kernels.plan.plans import Plan, check, parse_plan
from graphlake.kernels.plan.rules import entities_plan, risk_level, sql_plan, wiki_plan
from graphlake.kernels.plan.sql import Emit, Linked, compile_sql
from graphlake.kernels.text.entities import normalise
from graphlake.retrieval.core import Candidates, MethodError, ranked
from graphlake.retrieval.index.derived import SKB
from graphlake.retrieval.index.index_set import Derived, IndexSet, sibling
from graphlake.retrieval.index.skb import WIKI_SOURCES, LoadedSKB
from graphlake.warehouse.storage import StorageError

Mentions = Callable[[list[str]], list[list[tuple[str, str]]]]  # texts -> each one's spaCy (name, type) mentions
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
    bindings: dict[str, Linked] | None = None  # each anchor's, once the plan was linked

    @property
    def meta(self) -> dict:
        return {"valid": self.valid, "n_cand": self.n_cand, "risk_level": self.risk_level}

    def sql(self, skb: LoadedSKB, settings: StageOneSettings) -> str:
        """The plan as one SQL query over the lake's ``skb_nodes`` and ``skb_edges`` (``compile_sql``),
        which a user can run to see what Stage 1 matched; "" for a plan that was never linked."""
        if self.plan is None or self.bindings is None:
            return ""
        return compile_sql(self.plan, self.bindings, skb.corpus, skb.source, settings.emit, settings.max_rows)


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


def rules_plans(questions: list[str], skb: LoadedSKB, mentions: Mentions | None = None) -> list[Plan]:
    """The rules planner's plans for this SKB's kind (``kernels/plan/rules.py``); the entities' planner
    reads the questions' spaCy mentions in one pass (``mentions``: a request's, which other operators share)."""
    if skb.source in WIKI_SOURCES:
        return [wiki_plan(question, skb.schema, lambda span: skb.label_of_name.get(normalise(span))) for question in questions]
    if skb.source == "sql_schema":
        return [sql_plan(question) for question in questions]
    if mentions is None:
        from graphlake.kernels.text.entities import spacy_entities as mentions
    return [entities_plan(question, entities, skb.schema) for question, entities in zip(questions, mentions(questions), strict=True)]


def kind(source: str) -> str:
    """Which planner guidance an SKB source gets."""
    return "wiki" if source in WIKI_SOURCES else "sql" if source == "sql_schema" else "entities"


class LLMPlanner:
    """The ``llm`` planner: App. B's prompt over this SKB's schema, with up to ``examples`` worked examples
    from the training corpus whose rules plan put a gold node in its top 10 (the paper verified its Prime
    examples so), answered under the plan's JSON schema through the lake's LLM client (cached)."""

    def __init__(self, indexes: IndexSet, skb: LoadedSKB, examples: int = 19, scan: int = 200) -> None:
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


def verified_examples(indexes: IndexSet, source: str, limit: int, scan: int) -> list[tuple[str, Plan]]:
    """Training questions (seeded order, at most ``scan`` tried) whose rules plan ranks a gold node in its top 10."""
    from graphlake.retrieval.queries import gold_by_query, training_source

    train_corpus, split = training_source(indexes.lake.home, indexes.corpus)
    if not indexes.lake.has("queries", {"corpus": train_corpus}):
        return []
    queries = [q for q in indexes.lake.read("queries", {"corpus": train_corpus}).to_pylist() if split is None or q["split"] == split]
    if not queries:
        return []
    train = indexes if train_corpus == indexes.corpus else sibling(indexes, train_corpus)
    try:
        skb = train.skb(source)
    except StorageError:
        return []
    gold = gold_by_query(indexes.lake.read("qrels", {"corpus": train_corpus}))
    doc_ids = train.snapshot.doc_ids()
    found = []
    for position in np.random.default_rng(0).permutation(len(queries))[:scan].tolist():
        query = queries[position]
        result = stage_one(query["text"], skb, None, StageOneSettings(k=10), train.encoders.dense)
        if result.valid and any(doc_ids[r] in gold.get(query["query_id"], {}) for r in result.candidates.rows.tolist()):
            found.append((query["text"], result.plan))
            if len(found) == limit:
                break
    return found


LLM_PLANNER: Derived[LLMPlanner] = Derived("llm_planner", lambda indexes, source: LLMPlanner(indexes, indexes.derived(SKB, source)))
"""(source): GRASP's LLM planner over that SKB."""


def planned(question: str, skb: LoadedSKB, planner: str, indexes: IndexSet) -> tuple[Plan | None, str | None]:
    """(plan, failure) by ``planner``: None, None for ``rules`` (``stage_one`` plans those itself)."""
    if planner == "rules":
        return None, None
    return indexes.derived(LLM_PLANNER, skb.source)(question)


def stage_one(question: str, skb: LoadedSKB, plan: Plan | str | dict | None, settings: StageOneSettings, encode, failure: str | None = None, allowed: np.ndarray | None = None) -> Stage1:
    """One query's Stage 1 (``stage_one_batch`` of one)."""
    return stage_one_batch([question], skb, [plan], settings, encode, [failure], allowed)[0]


def stage_one_batch(
    questions: list[str],
    skb: LoadedSKB,
    plans: list[Plan | str | dict | None],
    settings: StageOneSettings,
    encode,
    failures: list[str | None] | None = None,
    allowed: np.ndarray | None = None,
    mentions: Mentions | None = None,
) -> list[Stage1]:
    """Validate, link, execute and rescore each question's plan, the batch's work done together: spaCy
    reads every question the rules planner plans in one pass, the encoder every anchor and relevance text
    in one call, the linker the anchors of a label in one product, the matcher each plan shape in one
    kernel call (``kernels/plan/match.py``). An invalid plan (or a planner's ``failure``) gives no
    candidates and ``no_trade``; ``allowed`` (a bool per node row, a request's filter) keeps its nodes
    only. A plan None is the rules planner's, whose ``risk_level`` is then set from what execution found."""
    failures = failures or [None] * len(questions)
    empty = Candidates(scores=np.zeros(0, np.float32), rows=np.zeros(0, np.int64))
    results: list[Stage1 | None] = [None] * len(questions)
    from_rules = [plan is None and failure is None for plan, failure in zip(plans, failures, strict=True)]
    ruled = iter(rules_plans([q for q, rules in zip(questions, from_rules, strict=True) if rules], skb, mentions))
    checked: dict[int, Plan] = {}
    for number, (plan, failure) in enumerate(zip(plans, failures, strict=True)):
        if failure is not None:
            results[number] = Stage1(empty, None, False, failure, "no_trade", 0)
            continue
        if from_rules[number]:
            plan = next(ruled)
        elif not isinstance(plan, Plan):
            plan, error = parse_plan(plan)
            if plan is None:
                results[number] = Stage1(empty, None, False, error, "no_trade", 0)
                continue
        problems = check(plan, skb.schema)
        if problems:
            results[number] = Stage1(empty, plan, False, "; ".join(problems), "no_trade", 0)
        else:
            checked[number] = plan
    texts = {number: [a.text for a in plan.anchors] + ([plan.target.relevance_text] if settings.rescore and plan.target.relevance_text else []) for number, plan in checked.items()}
    first, flat = {}, []  # where each plan's texts start among the batch's, encoded in one call
    for number in checked:
        first[number] = len(flat)
        flat += texts[number]
    vectors = encode(flat) if flat else None
    anchors = [(number, anchor) for number, plan in checked.items() for anchor in plan.anchors]
    rows_of = [first[number] + position for number, plan in checked.items() for position in range(len(plan.anchors))]
    limits = {"name": (settings.name_k, settings.name_tau), "doc": (settings.doc_k, settings.doc_tau)}
    linked = skb.link(vectors[rows_of] if anchors else np.zeros((0, 0), np.float32), [(a.label, a.match_mode) for _, a in anchors], limits)
    bindings: dict[int, dict[str, Linked]] = {number: {} for number in checked}
    for (number, anchor), found in zip(anchors, linked, strict=True):
        bindings[number][anchor.var] = found
    bound = [(checked[number], {var: (np.array([skb.by_id[i] for i in b.ids], np.int64), np.array(b.scores, np.float64)) for var, b in bindings[number].items()}) for number in checked]
    matched = execute(skb.adjacency, bound, settings.emit, settings.max_rows, settings.timeout_s)
    for number, found in zip(checked, matched, strict=True):
        plan = checked[number]
        if isinstance(found, str):
            results[number] = Stage1(empty, plan, False, found, "no_trade", 0, bindings[number])
            continue
        positions, scores = found
        rows = skb.node_row[positions]
        keep = rows >= 0  # only passage / table nodes are retrievable
        if allowed is not None:
            keep[keep] &= allowed[rows[keep]]
        rows, scores, positions = rows[keep], scores[keep], positions[keep]
        if len(texts[number]) > len(plan.anchors) and len(rows):
            scores = scores + skb.doc_cosines(positions, vectors[first[number] + len(plan.anchors)])
        best = max((max(b.scores) for b in bindings[number].values() if b.scores), default=0.0)
        risk = risk_level(best, len(rows)) if from_rules[number] else plan.risk_level
        if from_rules[number]:
            plan = plan.model_copy(update={"risk_level": risk})
        results[number] = Stage1(ranked(scores=scores, rows=rows, k=settings.k), plan, True, None, risk, int(len(rows)), bindings[number])
    return results
