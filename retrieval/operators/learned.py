"""graphlake's own method: a learning-to-rank model over the signals of the five papers' operators.

``learned_fusion`` runs its inputs (each a declared method: BM25, dense, SPLADE, Allan-Poe's fused
hybrid graph, SPRIG's PPR, GraphER's graph-context score, GRASP's plan and its fusion, ...), takes the
union of their top ``depth`` candidates, describes every candidate by each input's rank and scores
(missing where the input did not retrieve it; ``models/learned_fusion.py`` has the features), and orders
them by the LightGBM ranker the ``learned_fusion`` index trained on the corpus's training queries.
Without one (a corpus without training queries) it is reciprocal-rank fusion of the same inputs, and
says so in ``notes``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from graphlake.retrieval.core import Candidates, Count, Input, Op, Request, from_dict, register, run_inputs_batch
from graphlake.retrieval.index.corpus_indexes import CorpusIndexes
from graphlake.retrieval.models.learned_fusion import candidate_rows, key

RRF_CONSTANT = 60.0  # the fallback's, the usual constant (Cormack et al.)


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

    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    op: Literal["learned_fusion"]
    inputs: list[Input] = Field(min_length=2)
    depth: Count = 100  # each input's top this many form the candidates
    k: Count = 100

    def reads(self) -> frozenset[str]:
        return frozenset({f"learned_fusion/{key(self)}"})  # a part per declaration: changing the inputs retrains

    def run_batch(self, request: Request, indexes: CorpusIndexes) -> list[Candidates]:
        """Each query's candidates ordered by the trained model (the batch's in one prediction), or fused
        by RRF where none was trained."""
        found = run_inputs_batch(self, request, indexes)
        model = indexes.memo(("learned_fusion ranker", self.canonical()), lambda: indexes.learned_fusion.ranker(self))
        if model is None:
            request.note(f"learned_fusion: no ranker trained for corpus {indexes.corpus!r} ({indexes.learned_fusion.why(self)}); rrf of its inputs")
            return [rrf(inputs, self.depth, self.k) for inputs in found]
        rows = [candidate_rows(inputs, self.depth) for inputs in found]
        ordered = []
        for chosen, scores in zip(rows, model.score(request.queries, found, rows, self.depth), strict=True):
            order = np.lexsort((chosen, -scores))[: self.k]
            ordered.append(Candidates(chosen[order], scores[order]))
        return ordered
