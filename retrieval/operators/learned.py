"""graphlake's own method: a learning-to-rank model over the signals of the five papers' operators.

``learned_fusion`` runs its inputs (each a declared method: BM25, dense, SPLADE, Allan-Poe's fused
hybrid graph, SPRIG's PPR, GraphER's graph-context score, GRASP's plan and its fusion, ...), takes the
union of their top ``depth`` candidates, describes every candidate by each input's rank and scores
(missing where the input did not retrieve it; ``models/learned_fusion.py`` has the features) and by the
declared ``partners`` signals, read beside the ``anchors`` candidates the inputs put first
(``kernels/partners.py``: what a multi-hop question's later hop shares with its first), and orders
them by the LightGBM ranker the ``learned_fusion`` index trained on the corpus's training queries.
Without one (a corpus without training queries) it is reciprocal-rank fusion of the same inputs, and
says so in ``notes``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from graphlake.kernels.fusion import reciprocal_rank
from graphlake.kernels.partners import FAMILIES, FAMILY_READS
from graphlake.retrieval.core import Candidates, Count, Input, Op, Request, masked, ranked, register, run_inputs_batch
from graphlake.retrieval.index.derived import LEARNED_RANKER
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.learned_fusion import candidate_rows, key, partners_of


def rrf(found: list[Candidates], depth: int, k: int) -> Candidates:
    """The fallback: reciprocal-rank fusion of the inputs' top ``depth``."""
    scores, rows = reciprocal_rank([candidates.rows[:depth] for candidates in found])
    return Candidates(scores=scores[:k], rows=rows[:k])


@register
class LearnedFusion(Op):
    """A LightGBM lambdarank model over the inputs' candidates (see the module's docstring)."""

    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    op: Literal["learned_fusion"]
    inputs: list[Input] = Field(min_length=2)
    depth: Count = 100  # each input's top this many form the candidates
    k: Count = 100
    partners: list[Literal["dense", "titles", "entities"]] = Field(default_factory=lambda: list(FAMILIES))  # the partner signals it may learn from ([]: none)
    anchors: Count = Field(3, le=20)  # the documents ranked first, beside which the partner signals read every candidate

    @field_validator("partners")
    @classmethod
    def _canonical(cls, families: list[str]) -> list[str]:
        """In :data:`FAMILIES`' order, each once: the same signals declared in any order are one ranker."""
        return [family for family in FAMILIES if family in families]

    def partner_reads(self) -> frozenset[str]:
        """The index kinds its declared partner signals read (the titles read the nodes themselves)."""
        return frozenset(kind for family in self.partners for kind in FAMILY_READS[family])

    def reads(self) -> frozenset[str]:
        return frozenset({f"learned_fusion/{key(self)}"}) | self.partner_reads()  # a part per declaration: changing the inputs retrains

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        """Each query's candidates ordered by the trained model (the batch's in one prediction), or fused
        by RRF where none was trained."""
        # an input that searches every row may return a node the request masks (a document written since):
        # dropped before it can be a candidate, or an anchor the others are read beside
        found = [[masked(candidates, request.allowed) for candidates in inputs] for inputs in run_inputs_batch(self, request, indexes)]
        model = indexes.derived(LEARNED_RANKER, self)
        if model is None:
            request.note(f"learned_fusion: no ranker trained for corpus {indexes.corpus!r} ({indexes.learned_fusion.why(self)}); rrf of its inputs")
            return [rrf(inputs, self.depth, self.k) for inputs in found]
        rows = [candidate_rows(inputs, self.depth) for inputs in found]
        scores = model.score(request.queries, found, rows, self.depth, lambda: partners_of(indexes, request, self.partners, self.anchors))
        return [ranked(scores=scored, rows=chosen, k=self.k) for chosen, scored in zip(rows, scores, strict=True)]
