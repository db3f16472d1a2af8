"""Graph-propagation operators: SPRIG's entity-graph PPR and GraphER's candidate-graph reranking.

``ppr`` walks the corpus-wide entity-passage graph from the query's entities and/or the top
passages of its seed retrievers (SPRIG's Graph, GraphHybrid, GraphDense, GraphRRF are this one
operator with different ``inputs``). ``graph_rerank`` takes one retriever's candidates, links them
by the corpus's proximity (foreign keys, shared entities or chunk adjacency) and re-scores them by
PPR, Graph Cohesive Smoothing, or a trained GAT / its message-passing-free MLP ablation.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from graphlake.kernels.graph.propagation import Walk, gcs, ppr_cg, ppr_power, ppr_push
from graphlake.kernels.graph.seeds import Mixing, Weighting, entity_seed_weights, mix_seeds, passage_seed_weights
from graphlake.kernels.results import SearchParams, allowed_scores, top_k
from graphlake.retrieval.core import Candidates, Count, Input, MethodError, Op, PerQuery, Request, ranked, register, run_inputs_batch, shared_run, unfill
from graphlake.retrieval.models.index_set import LakeIndexSet

Extractor = Literal["spacy", "regex"]
POWER_BATCH = 32  # queries walked at once by power iteration: (graph rows × 32) float64 scores held


@register
class PPR(PerQuery):
    """SPRIG: Personalized PageRank over the entity-passage graph; passages ranked by their score.

    Seeds: the entities found in the query (``query_entities``; each ``df ** -entity_delta``) and
    the top ``seed_k`` passages of each input (``seed_weighting``), mixed by ``mixing``. A query
    with no seed at all seeds from the ``fallback`` retriever's top ``seed_k`` instead (SPRIG's
    BM25 fallback). ``mode: power`` runs ``iterations`` steps (SPRIG: 5); ``push`` runs to
    residual ``epsilon``; ``cg`` solves to relative residual ``epsilon`` (converged, and fastest).
    ``hub_prune_percent`` / ``degree_cap`` are SPRIG-PRUNE at query time.
    """

    INDEXES: ClassVar[frozenset[str]] = frozenset({"cooccurrence"})
    FILTER: ClassVar[Literal["index"]] = "index"  # seeds from filtered inputs; only allowed passages ranked
    op: Literal["ppr"]
    inputs: list[Input] = Field(default_factory=list)
    query_entities: bool = True
    extractor: Extractor = "spacy"
    entity_delta: float = Field(0.5, ge=0)
    seed_k: Count = 5
    seed_weighting: Weighting = "rank"
    mixing: Mixing = "mass"
    alpha: float = Field(0.15, gt=0, lt=1)
    mode: Literal["power", "push", "cg"] = "power"
    iterations: int = Field(5, gt=0)
    epsilon: float = Field(1e-6, gt=0)
    hub_prune_percent: float = Field(0.0, ge=0, lt=100)
    degree_cap: int = Field(0, ge=0)
    fallback: Input | None = Field("bm25", validate_default=True)  # a declared method, by name
    k: Count = 100

    @model_validator(mode="before")
    @classmethod
    def _has_seeds(cls, declared: Any) -> Any:
        """Checked first: a method without seeds is refused before its inputs are resolved."""
        if isinstance(declared, dict) and not declared.get("inputs") and declared.get("query_entities") is False:
            raise ValueError("ppr needs seeds: query_entities, inputs, or both")
        return declared

    def children(self) -> list[Op]:
        return [*self.inputs, *([self.fallback] if self.fallback is not None else [])]

    def graph(self, indexes: LakeIndexSet):
        return indexes.cooccurrence.graph(self.hub_prune_percent, self.degree_cap)

    def seeds(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> np.ndarray:
        """The seed vector over the graph's rows (passages first, then entities) from the query and its
        inputs' candidates; all zeros if none."""
        graph = self.graph(indexes)
        size = graph.walk.size
        if self.query_entities:
            entities = graph.match(indexes.cooccurrence.query_entities(query, self.extractor, request))
        else:
            entities = np.zeros(0, np.int64)
        entity_weights = entity_seed_weights(graph.df(entities), self.entity_delta)
        passages = [c.top(self.seed_k) for c in inputs]
        passage_rows = np.concatenate([c.rows for c in passages]) if passages else np.zeros(0, np.int64)
        passage_weights = np.concatenate([passage_seed_weights(c.scores, self.seed_weighting) for c in passages]) if passages else np.zeros(0)
        seeds = mix_seeds(size, entities, entity_weights, passage_rows, passage_weights, self.mixing)
        if not seeds.any() and self.fallback is not None:
            backup = shared_run(self.fallback, request.of([query]), indexes)[0].top(self.seed_k)
            seeds = mix_seeds(size, entities[:0], entity_weights[:0], backup.rows, passage_seed_weights(backup.scores, self.seed_weighting))
        return seeds

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        """``power``: the batch's walks in one sparse product a step, ``POWER_BATCH`` queries at a time;
        ``push`` and ``cg`` converge per query, one query at a time."""
        if self.mode != "power":
            return super().run_batch(request, indexes)
        graph, queries = self.graph(indexes), request.queries
        if self.query_entities:
            request.mentions(queries, self.extractor)  # the batch's queries read in one pass
        seeds = [self.seeds(query, found, request, indexes) for query, found in zip(queries, run_inputs_batch(self, request, indexes), strict=True)]
        walked = [i for i, vector in enumerate(seeds) if vector.any()]
        found = [Candidates(scores=np.zeros(0), rows=np.zeros(0, np.int64))] * len(queries)
        for start in range(0, len(walked), POWER_BATCH):
            chunk = walked[start : start + POWER_BATCH]
            scores, _ = ppr_power(graph.walk, np.stack([seeds[i] for i in chunk], axis=1), self.alpha, tol=0.0, max_iter=self.iterations)
            for column, i in enumerate(chunk):
                found[i] = self.top_passages(np.ascontiguousarray(scores[: graph.n_passages, column]), request)
        return found

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        graph = self.graph(indexes)
        seeds = self.seeds(query, inputs, request, indexes)
        if not seeds.any():
            return Candidates(scores=np.zeros(0), rows=np.zeros(0, np.int64))
        if self.mode == "push":
            scores = ppr_push(graph.walk, seeds, self.alpha, self.epsilon)
        else:
            scores, _ = ppr_cg(graph.walk, seeds, self.alpha, rtol=self.epsilon)
        return self.top_passages(scores[: graph.n_passages], request)

    def top_passages(self, passages: np.ndarray, request: Request) -> Candidates:
        """The top ``k`` passages a walk reached, of those the request's filter allows. The walk itself
        goes through every passage: a filter selects what is returned, not the graph's structure."""
        scores, rows = allowed_scores(passages[None, :], SearchParams(request.allowed))
        return unfill(*top_k(scores, self.k, rows, positive=True))[0]


Ranker = Literal["ppr", "gcs", "gat", "mlp"]


def candidate_graph(indexes: LakeIndexSet, rows: np.ndarray, proximity: str, extractor: str) -> sp.csr_matrix:
    """Adjacency among the candidate rows: GraphER A.3's weights for ``conceptual``, 1 per linked pair otherwise."""
    if proximity == "conceptual":
        from graphlake.kernels.text.entities import conceptual_weights

        mentions = indexes.get(f"mentions_{extractor}")[rows].tocoo()
        src, dst, weight = conceptual_weights(mentions.row, mentions.col, len(rows), mentions.shape[1])
        return sp.csr_matrix((weight, (src, dst)), shape=(len(rows), len(rows)))
    return indexes.get(proximity)[rows][:, rows].tocsr()


@register
class GraphRerank(PerQuery):
    """GraphER: rerank one retriever's candidates over the graph their proximity edges make.

    ``proximity: auto`` takes the corpus format's (structural for tables, conceptual for multi-hop
    passages, contextual for chunked documents). ``alpha`` unset: the value grid-searched on the
    training corpus (the ``graph_rankers`` asset), as GraphER tunes it; ``gat``/``mlp`` always use
    the trained networks, fed the GCS scores at the tuned alpha. Without training queries, alpha is
    GraphER's fixed default and GCS ranks in place of an untrained network; both are noted.
    """

    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    op: Literal["graph_rerank"]
    inputs: list[Input] = Field(min_length=1, max_length=1)
    ranker: Ranker = "gcs"
    proximity: Literal["auto", "structural", "conceptual", "contextual"] = "auto"
    extractor: Extractor = "spacy"
    alpha: float | None = Field(None, gt=0, lt=1)
    k: Count = 100

    def reads(self) -> frozenset[str]:
        found = {"structural", "contextual", f"mentions_{self.extractor}"}
        if self.alpha is None or self.ranker in ("gat", "mlp"):
            found.add(f"graph_rankers/{self.ranker}" if self.ranker in ("gat", "mlp") else "graph_rankers")
        if self.ranker in ("gat", "mlp"):
            found.add("dense")
        return frozenset(found)

    def candidate_graph(self, base: Candidates, indexes: LakeIndexSet) -> sp.csr_matrix:
        """The adjacency among the base retriever's candidates."""
        proximity = indexes.snapshot.linking.proximity if self.proximity == "auto" else self.proximity
        return candidate_graph(indexes, base.rows, proximity, self.extractor)

    def rerank(self, query: str, base: Candidates, adjacency: sp.csr_matrix, request: Request, indexes: LakeIndexSet, alpha: float | None = None) -> np.ndarray:
        """New scores for the candidates, in their order; ``alpha`` overrides for tuning."""
        seeds = np.asarray(base.scores, dtype=np.float64)
        if self.ranker == "ppr":
            alpha = alpha or self.alpha or self.tuned_alpha("ppr", request, indexes)
            positive = np.maximum(seeds - seeds.min(), 0) + 1e-12  # PPR needs a distribution
            scores, _ = ppr_power(Walk.from_adjacency(adjacency), positive, alpha, tol=1e-9, max_iter=1000)
            return scores
        alpha = alpha or self.alpha or self.tuned_alpha("gcs", request, indexes)
        smoothed, _ = gcs(adjacency, seeds, alpha, tol=1e-9)
        if self.ranker == "gcs":
            return smoothed
        from graphlake.kernels.graph.grapher_networks import score
        from graphlake.retrieval.models.grapher import ranking_graph
        from graphlake.retrieval.models.untrained import Untrained

        model = indexes.graph_rankers.models.get(self.ranker)
        if model is None:
            raise MethodError(f"graph_rerank: no trained {self.ranker} ranker; materialize graph_rankers")
        if isinstance(model, Untrained):
            request.note(f"graph_rerank: no {self.ranker} for corpus {indexes.corpus!r}: {model.reason}")
            return smoothed
        graph = ranking_graph(smoothed, request.dense(query), indexes.dense[base.rows], adjacency)
        return score(model, graph)

    @staticmethod
    def tuned_alpha(ranker: str, request: Request, indexes: LakeIndexSet) -> float:
        """The alpha ``graph_rankers`` holds for the ranker; noted when it is the untuned default."""
        rankers = indexes.graph_rankers
        if rankers.alpha_default:
            request.note(f"graph_rerank: alpha untuned for corpus {indexes.corpus!r}: {rankers.alpha_default}")
        return rankers.alpha[ranker]

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        (base,) = inputs
        if len(base.rows) == 0:
            return base
        return ranked(scores=self.rerank(query, base, self.candidate_graph(base, indexes), request, indexes), rows=base.rows, k=self.k)
