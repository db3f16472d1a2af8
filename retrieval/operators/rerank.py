"""Cross-encoder operators: Re2 (O_m over a retriever's top), GAR and FastInsight (budgeted, over a corpus graph).

All three use the project's trained cross-encoder (the ``reranker`` index) on ``title + text`` of
each node, the text the other indexes see. A node's [CLS] vector is computed once per query: GAR
and FastInsight re-rank the growing set every batch, and only the new nodes are encoded. Nothing is
kept across queries or methods, so a run's latency is what the method costs, unless the run reuses
the lake's pair cache (``graphlake eval --reuse-pairs``, for sweeps). In a lake with no training
queries the cross-encoder is ``Untrained``, and in one whose cross-encoder reranks its held-out
queries no better than dense retrieval it is not run either: each method returns its first-stage
ranking, noted.

``graph: auto`` takes the corpus's graph for these methods (the corpus's linking, ``warehouse/linking.py``: citations
for the demo, semantic kNN + shared entities for BEIR sets, shared entities for multi-hop passages).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from graphlake.kernels.rerank.adaptive import PairScorer, fastinsight, gar
from graphlake.retrieval.core import Candidates, Count, Input, ModelCalls, Op, PerQuery, Request, Weight, ranked, register
from graphlake.retrieval.index.derived import corpus_graph
from graphlake.retrieval.index.kinds import CORPUS_GRAPH, graph_indexes
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.reranker import held_out_quality
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.operators.vector import Dense

EdgeKind = Literal["citation", "semantic", "conceptual", "structural", "contextual"]


def _scorer(query: str, indexes: LakeIndexSet) -> PairScorer:
    """The cross-encoder for one query: [CLS] vectors of node rows, and its head."""
    return PairScorer(lambda rows: indexes.encoders.pair_features(query, rows), indexes.reranker.head)


def _untrained(request: Request, indexes: LakeIndexSet, instead: str, always: bool) -> bool:
    """Whether the cross-encoder is not to be run: the lake holds no trained one (no training queries
    anywhere), or the trained one reranked its held-out queries no better than dense retrieval did
    (then reranking costs minutes to lose), unless the method says ``always``; noted in one line, with
    what ranks ``instead``."""
    model = indexes.reranker
    if isinstance(model, Untrained):
        request.note(f"no trained cross-encoder: {model.reason}; {instead}")
        return True
    quality = held_out_quality(indexes.lake.artifact("reranker", {}))
    if quality is not None and quality[0] <= quality[1]:
        versus = f"reranks its held-out training queries no better than dense retrieval (nDCG@10 {quality[0]:.3f} against {quality[1]:.3f})"
        if always:
            request.note(f"the lake's cross-encoder {versus}: run anyway (always), this ranking may be worse than its first stage")
            return False
        request.note(f"the lake's cross-encoder {versus}, so it is not run: {instead} (always: true runs it anyway)")
        return True
    return False


@register
class CrossEncoderRerank(PerQuery):
    """O_m: the cross-encoder scores the input's top ``depth`` candidates (Re2: dense top-100)."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"reranker"})
    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k", "depth", "always"})
    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    op: Literal["cross_encoder"]
    inputs: list[Input] = Field(min_length=1, max_length=1)
    depth: ModelCalls = 100
    always: bool = False  # run even where the cross-encoder reranked its held-out queries no better than dense retrieval
    k: Count = 100

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        (base,) = inputs
        rows = base.rows[: self.depth]
        if len(rows) == 0 or _untrained(request, indexes, "cross_encoder returns its input's ranking", self.always):
            return base.top(self.k)
        return ranked(scores=_scorer(query, indexes).scores(rows), rows=rows, k=self.k)

    def first_stage(self) -> Op:
        return self.inputs[0]


class GraphBudgeted(PerQuery):
    """What GAR and FastInsight share: a corpus graph, a batch size and a budget of cross-encoder calls."""

    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k", "batch", "budget", "alpha", "beta", "always"})

    graph: Literal["auto"] | list[EdgeKind] = "auto"
    batch: ModelCalls = 10
    budget: ModelCalls = 100
    always: bool = False  # run even where the cross-encoder reranked its held-out queries no better than dense retrieval
    k: Count = 100

    def reads(self) -> frozenset[str]:
        return self.INDEXES | ({CORPUS_GRAPH} if self.graph == "auto" else graph_indexes(self.graph))

    def corpus_graph(self, indexes: LakeIndexSet):
        return corpus_graph(indexes, tuple(indexes.snapshot.linking.corpus_graph if self.graph == "auto" else self.graph))


@register
class GAR(GraphBudgeted):
    """GAR (MacAvaney et al., 2022): alternate cross-encoder batches from the input ranking and its graph frontier."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"reranker"})
    op: Literal["gar"]
    inputs: list[Input] = Field(min_length=1, max_length=1)

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        (initial,) = inputs
        if _untrained(request, indexes, "gar returns its input's ranking", self.always):
            return initial.top(self.k)
        graph, _ = self.corpus_graph(indexes)
        rows, scores = gar(initial.rows, graph, _scorer(query, indexes), self.batch, self.budget)
        return Candidates(scores=scores[: self.k], rows=rows[: self.k])

    def first_stage(self) -> Op:
        return self.inputs[0]


@register
class FastInsight(GraphBudgeted):
    """FastInsight (Algorithm 1): dense top-``batch``, GRanker, then STeX expansion re-ranked by GRanker to ``budget``."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"dense", "reranker"})
    op: Literal["fastinsight"]
    alpha: float = Field(0.2, ge=0, le=1)
    beta: Weight = 1.0

    def first_stage(self) -> Op:
        return Dense(op="dense", k=self.k)  # its seeds are dense's top ``batch``

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        vector = request.dense(query)
        if _untrained(request, indexes, "fastinsight returns its first stage, the dense ranking", self.always):
            scores = indexes.dense @ vector
            return ranked(scores=scores, rows=np.arange(len(scores)), k=self.k)
        graph, degrees = self.corpus_graph(indexes)
        rows, scores = fastinsight(
            vector,
            indexes.dense,
            graph,
            degrees,
            _scorer(query, indexes),
            batch=self.batch,
            budget=self.budget,
            alpha=self.alpha,
            beta=self.beta,
        )
        return Candidates(scores=scores[: self.k], rows=rows[: self.k])
