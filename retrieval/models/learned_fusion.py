"""graphlake's learned fusion as stored (the ``learned_fusion`` index): one LightGBM ranker per declared
``learned_fusion`` operator, keyed by its inputs, trained by ``retrieval/training/learned_fusion.py``; and
the features it ranks a query's candidates by.

Which features a ranker uses depends on where it learned. Every input gives a candidate its rank and its
score scaled to the input's list (1 at the top, 0 at the depth-th): both mean the same on any corpus. A
ranker trained on the corpus's own training split also reads the raw score and its gap to the best; one
trained on another corpus (``train_corpus``) does not, because raw scales do not carry across corpora
(BM25's grows with the corpus's statistics; on Spider, a ranker trained on BIRD's raw GRASP scores lost
7 points of PR@10 to Allan-Poe, benchmarks/results/learned_fusion.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphlake.common.optional_imports import import_without
from graphlake.kernels.fusion import rrf_term
from graphlake.kernels.partners import DENSE, FAMILIES, SIGNALS, TITLES, NodeEntities, NodeTitles, anchors_of, dense_signals, entity_signals, title_signals
from graphlake.kernels.plan.plans import RISK_LEVELS
from graphlake.retrieval.core import min_max
from graphlake.warehouse.digest import fingerprint
from graphlake.warehouse.storage import StorageError

if TYPE_CHECKING:
    import lightgbm

    from graphlake.retrieval.core import Candidates, Op, Request
    from graphlake.retrieval.index.index_set import IndexSet

REPORT_FILE = "learned_fusion.json"
FEATURES_VERSION = 6  # of the features below: part of the key, so a ranker trained on older ones is retrained
SCALE_FREE = ("rank", "scaled")  # what each input gives a candidate, on any corpus
IN_CORPUS = (*SCALE_FREE, "score", "gap")  # ... and where the ranker learned on the evaluated corpus itself
PER_CANDIDATE = ("retrieved_by", "in_top3", "in_top10", "best_rank")
PER_QUERY = ("query_words", "plan_valid", "plan_candidates", "plan_risk")


def key(op: Op) -> str:
    """What identifies a learned fusion: its inputs as declared, its depth and the partner signals it reads
    (``k`` only cuts the list)."""
    declared = {"inputs": [item.model_dump(mode="json") for item in op.inputs], "depth": op.depth, "features": FEATURES_VERSION}
    return fingerprint(declared | ({"partners": op.partners, "anchors": op.anchors} if op.partners else {}))


def per_input(across_corpora: bool) -> tuple[str, ...]:
    """What each input gives a candidate for a ranker trained on another corpus, or on this one."""
    return SCALE_FREE if across_corpora else IN_CORPUS


def feature_names(inputs: list[str], each: tuple[str, ...]) -> list[str]:
    """Column names of :func:`features`, each input's prefixed with its label (a method's name)."""
    return [f"{label}_{name}" for label in inputs for name in each] + list(PER_CANDIDATE) + list(PER_QUERY) + list(SIGNALS)


@dataclass(frozen=True)
class Partners:
    """What the partner signals (``kernels/partners.py``) read for one query, for the declared families
    and number of anchors: each node's document (a code per node row: a candidate is never partnered
    with its own document), the corpus's dense vectors and the query's (dense), the nodes' titles and
    the query as they are normalised (titles), the nodes' entities and the query's entity columns
    (entities; None and empty on a corpus without cooccurrence edges). What a family not declared
    reads is None."""

    families: tuple[str, ...]
    anchors: int
    documents: np.ndarray
    vectors: np.ndarray | None = None
    query: np.ndarray | None = None
    titles: NodeTitles | None = None
    query_text: str = ""  # normalised as the titles are
    entities: NodeEntities | None = None
    query_columns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def partners_of(indexes: IndexSet, request: Request, families: Sequence[str] = tuple(FAMILIES), anchors: int = 3) -> list[Partners]:
    """The :class:`Partners` of each of the request's queries: only what the declared ``families`` read
    is loaded, and the queries' entities are found in one pass for the request."""
    from graphlake.kernels.text.entities import normalise
    from graphlake.retrieval.index.derived import NODE_ENTITIES, NODE_TITLES

    documents = indexes.snapshot.node_documents()
    titles = indexes.derived(NODE_TITLES) if "titles" in families else None
    entities = indexes.derived(NODE_ENTITIES) if "entities" in families else None
    columns: list[list[int]] = [[] for _ in request.queries]
    if entities is not None:
        edges = indexes.get("cooccurrence")
        request.mentions(list(request.queries), edges.extractor)  # one NER pass over the request's queries
        norms = [edges.query_entities(query, edges.extractor, request) for query in request.queries]
        columns = [[entities.columns[n] for n in found if n in entities.columns] for found in norms]
    dense = "dense" in families
    return [
        Partners(
            tuple(families),
            anchors,
            documents,
            indexes.dense if dense else None,
            request.dense(query) if dense else None,
            titles,
            normalise(query) if titles is not None else "",
            entities,
            np.asarray(found, np.int64),
        )
        for query, found in zip(request.queries, columns, strict=True)
    ]


def candidate_rows(found: list[Candidates], depth: int) -> np.ndarray:
    """The union of the inputs' top ``depth`` rows, in order of first appearance (input by input)."""
    return np.fromiter(dict.fromkeys(r for c in found for r in c.rows[:depth].tolist()), dtype=np.int64)


def features(query: str, found: list[Candidates], rows: np.ndarray, depth: int, each: tuple[str, ...], partners: Partners | None = None) -> np.ndarray:
    """One row per candidate: the ``each`` features of every input, NaN where the input did not retrieve
    the candidate in its top ``depth``; how many inputs did, how many ranked it in their top 3 and top 10,
    and its best rank among them; the query's length in words and GRASP's plan metadata from whichever
    input carries it; and the declared partner signals (``kernels/partners.py``) beside the anchors, the
    candidates the inputs' reciprocal-rank fusion puts first; NaN where not declared or without ``partners``. (Anchors taken
    from a first pass of the model instead ranked HotpotQA dev no better: R@5 0.940 against 0.941.)"""
    position = {row: i for i, row in enumerate(rows.tolist())}
    width = len(each)
    out = np.full((len(rows), len(found) * width + len(PER_CANDIDATE) + len(PER_QUERY) + len(SIGNALS)), np.nan, np.float32)
    ranks = np.full((len(rows), len(found)), np.inf)
    for j, candidates in enumerate(found):
        scores = np.asarray(candidates.scores[:depth], np.float64)
        at = np.fromiter((position[r] for r in candidates.rows[:depth].tolist()), dtype=np.int64, count=len(scores))
        ranks[at, j] = np.arange(1, len(at) + 1)
        values = {
            "rank": ranks[at, j],
            "scaled": min_max(scores),
            "score": scores,
            "gap": scores[0] - scores if len(scores) else scores,
        }
        for i, name in enumerate(each):
            out[at, j * width + i] = values[name]
    column = len(found) * width
    out[:, column] = np.sum(np.isfinite(ranks), axis=1)
    out[:, column + 1] = np.sum(ranks <= 3, axis=1)
    out[:, column + 2] = np.sum(ranks <= 10, axis=1)
    out[:, column + 3] = ranks.min(axis=1) if len(found) else np.nan
    out[:, column + 4] = len(query.split())
    plan = next((c.meta for c in found if "n_cand" in c.meta), None)
    if plan is not None:
        out[:, column + 5] = float(bool(plan.get("valid", False)))
        out[:, column + 6] = float(plan.get("n_cand", 0))
        out[:, column + 7] = float(RISK_LEVELS.index(plan["risk_level"])) if plan.get("risk_level") in RISK_LEVELS else np.nan
    if partners is not None and len(rows):
        column += len(PER_CANDIDATE) + len(PER_QUERY)
        documents = partners.documents[rows]
        anchors, read = anchors_of(rrf_term(ranks).sum(axis=1), documents, partners.anchors), set(partners.families)
        if "dense" in read:
            out[:, column : column + len(DENSE)] = dense_signals(partners.vectors[rows], partners.query, documents, anchors)
        column += len(DENSE)
        if "titles" in read:
            out[:, column : column + len(TITLES)] = title_signals(partners.titles, rows, documents, anchors, partners.query_text)
        if "entities" in read and partners.entities is not None:
            out[:, column + len(TITLES) :] = entity_signals(partners.entities, rows, documents, anchors, partners.query_columns)
    return out


@dataclass(frozen=True)
class Ranker:
    """One trained LightGBM model and the features it learned from (``across_corpora``: the scale-free
    ones; ``partners``: with the partner signals, kept where they beat the model without them beyond
    noise on the training queries, ``retrieval/training/learned_fusion.py``)."""

    booster: lightgbm.Booster
    across_corpora: bool
    partners: bool = False

    def score(self, queries: list[str], found: list[list[Candidates]], rows: list[np.ndarray], depth: int, partners: Callable[[], list[Partners]]) -> list[np.ndarray]:
        """Per query, the model's score of each of its candidate ``rows`` given its inputs' candidates
        (``found``): the batch's feature rows in one prediction, as a row's score is its own.
        ``partners``: what the partner signals read, asked only by a model that learned from them."""
        each, read = per_input(self.across_corpora), partners() if self.partners else [None] * len(queries)
        tables = [features(query, inputs, chosen, depth, each, partnered) for query, inputs, chosen, partnered in zip(queries, found, rows, read, strict=True)]
        table = np.concatenate(tables) if tables else np.zeros((0, 0), np.float32)
        scores = np.asarray(self.booster.predict(table, num_threads=1), dtype=np.float64) if len(table) else np.zeros(0)
        return np.split(scores, np.cumsum([len(chosen) for chosen in rows])[:-1])


@dataclass
class LearnedRankers:
    """The rankers of a corpus by :func:`key`, why any declared fusion has none, and the training report
    (training query ids, folds, rounds, out-of-fold nDCG@10 with and without partner signals, importances)."""

    rankers: dict[str, Ranker]
    untrained: dict[str, str] = field(default_factory=dict)
    report: dict = field(default_factory=dict)

    def ranker(self, op: Op) -> Ranker | None:
        """The trained ranker of ``op``; None where it could not be trained (:meth:`why` says why)."""
        name = key(op)
        if name in self.rankers:
            return self.rankers[name]
        if name in self.untrained:
            return None
        raise StorageError("learned_fusion holds no ranker for this operator (its declaration is new or changed: inputs, depth, partners or anchors); materialize learned_fusion again")

    def why(self, op: Op) -> str:
        return self.untrained.get(key(op), "trained")

    def held(self) -> set[str]:
        return set(self.rankers) | set(self.untrained)

    def save(self, folder: Path) -> None:
        for name, ranker in self.rankers.items():
            ranker.booster.save_model(str(folder / f"{name}.txt"))
        rankers = {name: {"across_corpora": r.across_corpora, "partners": r.partners} for name, r in sorted(self.rankers.items())}
        saved = {"features": FEATURES_VERSION, "rankers": rankers, "untrained": self.untrained, "report": self.report}
        (folder / REPORT_FILE).write_text(json.dumps(saved, indent=1), encoding="utf-8")

    @staticmethod
    def held_in(folder: Path) -> set[str]:
        """``load(folder).held()`` from the report alone: a rebuild's plan asks this, and LightGBM takes a second to import."""
        saved = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
        return set(saved["rankers"]) | set(saved["untrained"]) if saved.get("features") == FEATURES_VERSION else set()

    @classmethod
    def load(cls, folder: Path) -> LearnedRankers:
        lightgbm = import_without("lightgbm", ("sklearn", "pandas", "dask"))  # a Booster needs none of them

        saved = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
        if saved.get("features") != FEATURES_VERSION:  # rankers of older features: none is current, all are retrained
            return cls({})
        rankers = {name: Ranker(lightgbm.Booster(model_file=str(folder / f"{name}.txt")), kept["across_corpora"], kept["partners"]) for name, kept in saved["rankers"].items()}
        return cls(rankers, saved["untrained"], saved["report"])
