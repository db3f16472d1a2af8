"""graphlake's own method: a learning-to-rank model over the signals of the five papers' operators.

``learned_fusion`` runs its inputs (each a declared method: BM25, dense, SPLADE, Allan-Poe's fused
hybrid graph, SPRIG's PPR, GraphER's graph-context score, GRASP's plan and its fusion, ...), takes the
union of their top ``depth`` candidates, describes every candidate by each input's score, rank and gap
to that input's best (missing where the input did not retrieve it) and by what the inputs tell of the
query (GRASP's plan: valid, candidate count, risk level), and orders them by the LightGBM ranker the
``learned_fusion`` index trained on the corpus's training queries. Without one (a corpus without
training queries) it is reciprocal-rank fusion of the same inputs, and says so in ``notes``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from graphlake.kernels.plan.plans import RISK_LEVELS
from graphlake.retrieval.core import Candidates, Input, Op, from_dict, register, run_inputs, run_inputs_batch
from graphlake.retrieval.index.lake import LakeIndexes

RRF_CONSTANT = 60.0  # the fallback's, the usual constant (Cormack et al.)
PER_INPUT = ("score", "rank", "gap")  # features each input gives a candidate
PER_CANDIDATE = ("retrieved_by", "best_rank")
PER_QUERY = ("query_words", "plan_valid", "plan_candidates", "plan_risk")


def feature_names(inputs: list[str]) -> list[str]:
    """Column names of :func:`features`, each input's prefixed with its label (a method's name)."""
    return [f"{label}_{name}" for label in inputs for name in PER_INPUT] + list(PER_CANDIDATE) + list(PER_QUERY)


def candidate_rows(found: list[Candidates], depth: int) -> np.ndarray:
    """The union of the inputs' top ``depth`` rows, in order of first appearance (input by input)."""
    return np.fromiter(dict.fromkeys(r for c in found for r in c.rows[:depth].tolist()), dtype=np.int64)


def features(query: str, found: list[Candidates], rows: np.ndarray, depth: int) -> np.ndarray:
    """One row per candidate: per input score, rank (1 = best) and best score minus this score, NaN where
    the input did not retrieve it in its top ``depth``; how many inputs did and the best rank among them;
    the query's length in words and GRASP's plan metadata from whichever input carries it."""
    position = {row: i for i, row in enumerate(rows.tolist())}
    out = np.full((len(rows), len(found) * len(PER_INPUT) + len(PER_CANDIDATE) + len(PER_QUERY)), np.nan, np.float32)
    for j, candidates in enumerate(found):
        top_rows, top_scores = candidates.rows[:depth], np.asarray(candidates.scores[:depth], np.float64)
        at = np.fromiter((position[r] for r in top_rows.tolist()), dtype=np.int64, count=len(top_rows))
        out[at, 3 * j] = top_scores
        out[at, 3 * j + 1] = np.arange(1, len(at) + 1)
        out[at, 3 * j + 2] = top_scores[0] - top_scores if len(at) else 0
    ranks = out[:, 1 : 3 * len(found) : 3]
    column = 3 * len(found)
    out[:, column] = np.sum(~np.isnan(ranks), axis=1)
    out[:, column + 1] = np.nanmin(ranks, axis=1) if len(rows) else 0
    plan = next((c.meta for c in found if "n_cand" in c.meta), None)
    out[:, column + 2] = len(query.split())
    if plan is not None:
        out[:, column + 3] = float(bool(plan.get("valid", False)))
        out[:, column + 4] = float(plan.get("n_cand", 0))
        out[:, column + 5] = float(RISK_LEVELS.index(plan["risk_level"])) if plan.get("risk_level") in RISK_LEVELS else np.nan
    return out


def rrf(found: list[Candidates], depth: int, k: int) -> Candidates:
    """The fallback: reciprocal-rank fusion of the inputs' top ``depth``."""
    fused: dict[int, float] = {}
    for candidates in found:
        for rank, row in enumerate(candidates.rows[:depth].tolist(), start=1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (RRF_CONSTANT + rank)
    return from_dict(fused, k)


@register
class LearnedFusion(Op):
    """A LightGBM lambdarank model over the inputs' candidates (see the module's docstring)."""

    op: Literal["learned_fusion"]
    inputs: list[Input] = Field(min_length=2)
    depth: int = Field(100, gt=0)  # each input's top this many form the candidates
    k: int = Field(100, gt=0)

    def indexes(self) -> frozenset[str]:
        from graphlake.retrieval.models.learned_fusion import key

        return frozenset({f"learned_fusion/{key(self)}"})  # a part per declaration: changing the inputs retrains

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        return self.order(query, run_inputs(self, query, indexes), indexes)

    def run_batch(self, queries: list[str], indexes: LakeIndexes) -> list[Candidates]:
        return [self.order(query, found, indexes) for query, found in zip(queries, run_inputs_batch(self, queries, indexes), strict=True)]

    def order(self, query: str, found: list[Candidates], indexes: LakeIndexes) -> Candidates:
        """The candidates ordered by the trained model, or fused by RRF where none was trained."""
        model = indexes.get("learned_fusion").ranker(self)
        if model is None:
            indexes.note(f"learned_fusion: no ranker trained for corpus {indexes.corpus!r} ({indexes.get('learned_fusion').why(self)}); rrf of its inputs")
            return rrf(found, self.depth, self.k)
        rows = candidate_rows(found, self.depth)
        if not len(rows):
            return Candidates(rows, np.zeros(0, np.float64))
        scores = model.predict(features(query, found, rows, self.depth))
        order = np.lexsort((rows, -scores))[: self.k]
        return Candidates(rows[order], scores[order].astype(np.float64))
