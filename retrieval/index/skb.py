"""GRASP's SKBs in the lake: built per corpus and source, loaded for Stage 1, and Stage 1 itself (plan,
link, execute, rescore) as one function the ``skb_plan`` operator and the ``skb_plans`` asset share.

Which SKBs a corpus gets follows its format (``CorpusSpec.skb_sources``): the SQL schema graph for
Spider/BIRD, the extracted 2Wiki KB and its oracle for 2Wiki, the entity graph for anything else.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from graphlake.kernels.plan import skb_builders
from graphlake.kernels.plan.plans import Plan, Schema, check, parse_plan
from graphlake.kernels.plan.rules import entities_plan, risk_level, sql_plan, wiki_plan
from graphlake.kernels.plan.sql import Emit, Linked, compile_sql, link, run_sql
from graphlake.kernels.text.entities import normalise
from graphlake.retrieval.core import Candidates, MethodError, ranked
from graphlake.retrieval.index.kinds import read_models
from graphlake.warehouse.digest import content_hash
from graphlake.warehouse.storage import LakeStorage, StorageError

if TYPE_CHECKING:
    from graphlake.retrieval.index.corpus_indexes import CorpusIndexes

SKB_ARTIFACT = "skb"
VECTORS_ARTIFACT = "skb_vectors"
VECTORS_FILE = "vectors.npz"
WIKI_SOURCES = ("wiki_rules", "wiki_evidence")
PLAN_TOKENS = 320  # a plan of three anchors and four hops takes about 250 tokens; a longer answer is a loop


def build(lake: LakeStorage, corpus: str, source: str, train_corpus: str | None) -> skb_builders.SKB:
    """One source's SKB for a corpus, from the lake's tables; only the oracle reads questions."""
    part = {"corpus": corpus}
    documents, nodes = lake.read("documents", part), lake.read("nodes", part)
    if source == "sql_schema":
        return skb_builders.sql_schema(documents, nodes, lake.read("foreign_keys", part))
    if source == "wiki_rules":
        return skb_builders.wiki_rules(documents, nodes)
    if source == "wiki_evidence":
        return skb_builders.wiki_evidence(documents, nodes, evidences(lake, [corpus, *([train_corpus] if train_corpus else [])]))
    if source == "entities":
        citations = lake.read("edges", part | {"kind": "citation"}) if lake.has("edges", part | {"kind": "citation"}) else None
        spacy = part | {"extractor": "spacy"}
        return skb_builders.entities_skb(documents, nodes, lake.read("entities", spacy), lake.read("mentions", spacy), citations)
    raise ValueError(f"unknown SKB source {source!r}; one of {', '.join(skb_builders.SOURCES)}")


def evidences(lake: LakeStorage, corpora: list[str]) -> list[tuple[str, list]]:
    """(query id, gold evidence triples) of every question of these corpora (2Wiki keeps them in the metadata)."""
    found = []
    for corpus in corpora:
        for row in lake.read("queries", {"corpus": corpus}).to_pylist():
            found.append((row["query_id"], json.loads(row["metadata"] or "{}").get("evidences") or []))
    return found


def coverage(lake: LakeStorage, corpus: str, extracted: skb_builders.SKB) -> dict:
    """The extracted 2Wiki KB's share of the corpus's gold evidence triples, per relation and overall."""
    documents, nodes = lake.read("documents", {"corpus": corpus}), lake.read("nodes", {"corpus": corpus})
    linker = skb_builders.TitleLinker({skb_id: title for skb_id, title, _ in skb_builders.passages(documents, nodes)})
    triples = [tuple(t) for _, ts in evidences(lake, [corpus]) for t in ts if len(t) == 3]
    per = skb_builders.coverage(extracted, triples, linker)
    total = sum(v["triples"] for v in per.values())
    return {"share": round(sum(v["recovered"] for v in per.values()) / total, 4) if total else None, "triples": total, "per_relation": per}


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


class LoadedSKB:
    """One (corpus, source) SKB ready to execute plans: its tables in an in-memory DuckDB, its node
    vectors (name, and document: the ``dense`` index's rows for passage and table nodes), its schema.
    Shared by the requests served at once: each statement runs on a cursor of its own (``cursor``), as
    one DuckDB connection runs one statement at a time and refuses a second."""

    def __init__(self, indexes: CorpusIndexes, source: str) -> None:
        self.corpus, self.source = indexes.corpus, source
        partition = {"corpus": indexes.corpus, "source": source}
        lake = indexes.lake
        try:
            nodes, edges = lake.read("skb_nodes", partition), lake.read("skb_edges", partition)
        except StorageError:
            raise StorageError(f"corpus {indexes.corpus!r} has no {source!r} SKB; materialize skb (sources: {source})") from None
        self._database = duckdb.connect()
        self._database.register("nodes_in", nodes)
        self._database.register("edges_in", edges)
        self._database.execute("CREATE TABLE skb_nodes AS SELECT * FROM nodes_in")
        self._database.execute("CREATE TABLE skb_edges AS SELECT * FROM edges_in")
        self._database.unregister("nodes_in")
        self._database.unregister("edges_in")
        self.ids: list[str] = nodes.column("skb_id").to_pylist()
        self.labels = np.asarray(nodes.column("label").to_pylist(), dtype=object)
        self.names: list[str] = nodes.column("name").to_pylist()
        backed = nodes.column("node_id").to_pylist()
        position = {node_id: row for row, node_id in enumerate(indexes.node_ids)}
        self.node_row = np.array([position.get(n, -1) if n is not None else -1 for n in backed], dtype=np.int64)
        self.by_id = {skb_id: i for i, skb_id in enumerate(self.ids)}
        self.by_label = {label: np.flatnonzero(self.labels == label) for label in set(self.labels.tolist())}
        self._load_vectors(indexes)
        with self.cursor() as con:
            rows = con.execute(
                "SELECT s.label, e.relation, d.label FROM skb_edges e JOIN skb_nodes s ON s.skb_id = e.src JOIN skb_nodes d ON d.skb_id = e.dst GROUP BY ALL"
            ).fetchall()
        self.schema = Schema.of(rows, set(self.labels.tolist()))

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of this thread's own to the SKB's tables (close it: ``with skb.cursor() as con``)."""
        return self._database.cursor()

    def _load_vectors(self, indexes: CorpusIndexes) -> None:
        """The distinct texts' vectors and each SKB node's rows into them, not one gathered copy per
        node and kind: two hundred thousand SKB nodes would hold 600 MB of copies, mostly zeros."""
        folder = indexes.lake.artifact(VECTORS_ARTIFACT, {"corpus": self.corpus})
        for role, made_by in read_models(folder).items():
            indexes.check_model(VECTORS_ARTIFACT, role, made_by)
        stored = load_vectors(folder)
        if "vector" not in stored:
            raise StorageError(f"skb_vectors of corpus {self.corpus!r} are in an older layout; materialize skb_vectors again")
        row_of = {skb_id: i for i, skb_id in enumerate(stored["ids"].tolist())}
        missing = next((skb_id for skb_id in self.ids if skb_id not in row_of), None)
        if missing is not None:
            raise StorageError(f"skb_vectors of corpus {self.corpus!r} lack SKB node {missing!r}; materialize skb_vectors again")
        order = np.fromiter((row_of[skb_id] for skb_id in self.ids), np.int64, len(self.ids))
        self._texts, self._name_row, self._doc_row = stored["vector"], stored["name_row"][order], stored["doc_row"][order]
        self._dense = indexes.dense if (self.node_row >= 0).any() else None

    def name_cosines(self, positions: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The cosines of these SKB nodes' name vectors with ``vector``."""
        return _cosines(self._texts, self._name_row[positions], vector)

    def doc_cosines(self, positions: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """The cosines of these SKB nodes' document vectors with ``vector``: a passage or table node's row
        of the ``dense`` index, else its own text's vector, else 0 (an entity has no document)."""
        found = np.zeros(len(positions), np.float32)
        nodes, docs = self.node_row[positions], self._doc_row[positions]
        backed = nodes >= 0
        if backed.any():
            found[backed] = _cosines(self._dense, nodes[backed], vector)
        own = ~backed & (docs >= 0)
        found[own] = _cosines(self._texts, docs[own], vector)
        return found

    @cached_property
    def label_of_name(self) -> dict[str, str]:
        """Normalised name (and title alias) -> label of the retrievable node so named: how the rules planner types a span."""
        named = {self.names[i]: self.labels[i] for i in np.flatnonzero(self.node_row >= 0)}
        aliases = skb_builders.title_aliases(named)
        found = {normalise(name): label for name, label in named.items()}
        return found | {alias: found[target] for alias, target in aliases.items() if target in found}

    @cached_property
    def position_of_row(self) -> dict[int, int]:
        """SKB position of each ``nodes`` row that is an SKB node."""
        return {int(row): position for position, row in enumerate(self.node_row.tolist()) if row >= 0}

    @cached_property
    def _neighbours(self) -> dict[str, dict[str, list[str]]]:
        """skb_id -> relation -> neighbour names (both directions, by name), for serialisation."""
        found: dict[str, dict[str, list[str]]] = {}
        with self.cursor() as con:
            rows = con.execute(
                "SELECT a, relation, n.name FROM (SELECT src AS a, relation, dst AS b FROM skb_edges UNION SELECT dst, relation, src FROM skb_edges) "
                "JOIN skb_nodes n ON n.skb_id = b ORDER BY a, relation, n.name, b"
            ).fetchall()
        for skb_id, relation, name in rows:
            found.setdefault(skb_id, {}).setdefault(relation, []).append(name)
        return found

    def serialised(self, row: int, text: str, max_neighbours: int = 10, max_field_tokens: int = 300) -> str:
        """A ``nodes`` row as App. B.6 writes a candidate: type, name and text, neighbours by relation."""
        from graphlake.kernels.plan.skb_serialise import serialise

        position = self.position_of_row.get(int(row))
        if position is None:  # a node the SKB does not hold (a later chunk of a document): its text alone
            return serialise("passage", [("text", text)], {}, max_neighbours, max_field_tokens)
        skb_id = self.ids[position]
        fields = [("name", self.names[position]), ("text", text)]
        return serialise(str(self.labels[position]), fields, self._neighbours.get(skb_id, {}), max_neighbours, max_field_tokens)

    def link(self, text_vector: np.ndarray, label: str, mode: str, k: int, tau: float) -> Linked:
        rows = self.by_label.get(label, np.zeros(0, np.int64))
        cosines = (self.name_cosines if mode == "name" else self.doc_cosines)(rows, text_vector)
        kept = link(cosines, k, tau)
        return Linked([self.ids[rows[i]] for i in kept.tolist()], cosines[kept].astype(float).tolist())


def _cosines(matrix: np.ndarray, rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix[rows] @ vector``; for many rows, the whole product indexed, which copies no rows (a
    document-mode anchor is compared with every passage)."""
    if len(rows) * 4 > len(matrix):
        return (matrix @ vector)[rows]
    return matrix[rows] @ vector


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
    from graphlake.retrieval.index.corpus_indexes import CorpusIndexes
    from graphlake.retrieval.queries import gold_by_query, training_source

    train_corpus, split = training_source(indexes.lake.home, indexes.corpus)
    if not indexes.lake.has("queries", {"corpus": train_corpus}):
        return []
    queries = [q for q in indexes.lake.read("queries", {"corpus": train_corpus}).to_pylist() if split is None or q["split"] == split]
    if not queries:
        return []
    train = indexes if train_corpus == indexes.corpus else CorpusIndexes(indexes.lake, train_corpus)
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


def vectors_for(nodes: list[pa.Table], encode, previous: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Name vectors of every SKB node of these tables, and document vectors of those with no ``nodes``
    row (the others reuse ``dense_vectors``), as one row per distinct text: an entity whose name is its
    text, or a title many passages share, is encoded once, and a text the ``previous`` build encoded
    (matched by content hash) not at all. Also returns how many texts were encoded."""
    seen: dict[str, tuple[str, str | None]] = {}
    for table in nodes:
        for skb_id, name, text, node_id in zip(*(table.column(c).to_pylist() for c in ("skb_id", "name", "text", "node_id")), strict=True):
            seen.setdefault(skb_id, (name, text if node_id is None else None))
    ids = sorted(seen)
    row_of: dict[str, int] = {}
    for name, text in (seen[skb_id] for skb_id in ids):
        row_of.setdefault(name, len(row_of))
        if text is not None:
            row_of.setdefault(text, len(row_of))
    texts = list(row_of)
    hashes = [content_hash(text) for text in texts]
    cached = dict(zip(previous["hash"].tolist(), previous["vector"], strict=True)) if previous is not None else {}
    missing = [row for row, digest in enumerate(hashes) if digest not in cached]
    encoded = dict(zip(missing, encode([texts[row] for row in missing]), strict=True))
    vectors = np.stack([encoded[row] if row in encoded else cached[digest] for row, digest in enumerate(hashes)]) if texts else np.zeros((0, 0), np.float32)
    found = {
        "ids": np.asarray(ids),
        "hash": np.asarray(hashes),
        "vector": vectors.astype(np.float32, copy=False),
        "name_row": np.array([row_of[seen[skb_id][0]] for skb_id in ids], dtype=np.int64),
        "doc_row": np.array([row_of[text] if (text := seen[skb_id][1]) is not None else -1 for skb_id in ids], dtype=np.int64),
    }
    return found, len(missing)


def load_vectors(folder: Path) -> dict[str, np.ndarray]:
    with np.load(folder / VECTORS_FILE, allow_pickle=False) as stored:
        return {key: stored[key] for key in stored.files}


def save_vectors(folder: Path, vectors: dict[str, np.ndarray]) -> None:
    np.savez(folder / VECTORS_FILE, **vectors)
