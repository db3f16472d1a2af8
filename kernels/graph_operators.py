"""Graph-propagation operators: SPRIG's entity-graph PPR and GraphER's candidate-graph reranking.

``ppr`` walks the corpus-wide entity-passage graph from the query's entities and/or the top
passages of its seed retrievers (SPRIG's Graph, GraphHybrid, GraphDense, GraphRRF are this one
operator with different ``inputs``). ``graph_rerank`` takes one retriever's candidates, links them
by the corpus's proximity (foreign keys, shared entities or chunk adjacency) and re-scores them by
PPR, Graph Cohesive Smoothing, or a trained GAT / its message-passing-free MLP ablation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from graphlake.kernels.operator_base import Candidates, Indexes, Input, MethodError, Op, ranked, run_inputs
from graphlake.kernels.propagation import Walk, gcs, ppr_cg, ppr_power, ppr_push
from graphlake.kernels.seeds import Mixing, Weighting, entity_seed_weights, mix_seeds, passage_seed_weights

Extractor = Literal["spacy", "regex"]


class PPR(Op):
    """SPRIG: Personalized PageRank over the entity-passage graph; passages ranked by their score.

    Seeds: the entities found in the query (``query_entities``; each ``df ** -entity_delta``) and
    the top ``seed_k`` passages of each input (``seed_weighting``), mixed by ``mixing``. A query
    with no seed at all seeds from the ``fallback`` retriever's top ``seed_k`` instead (SPRIG's
    BM25 fallback). ``mode: power`` runs ``iterations`` steps (SPRIG: 5); ``push`` runs to
    residual ``epsilon``; ``cg`` solves to relative residual ``epsilon`` (converged, and fastest). ``hub_prune_percent`` / ``degree_cap`` are SPRIG-PRUNE at query time.
    """

    INDEXES = frozenset({"cooccurrence"})
    op: Literal["ppr"]
    inputs: list[Input] = Field(default_factory=list)
    query_entities: bool = True
    extractor: Extractor = "spacy"
    entity_delta: float = Field(0.5, ge=0)
    seed_k: int = Field(5, gt=0)
    seed_weighting: Weighting = "rank"
    mixing: Mixing = "mass"
    alpha: float = Field(0.15, gt=0, lt=1)
    mode: Literal["power", "push", "cg"] = "power"
    iterations: int = Field(5, gt=0)
    epsilon: float = Field(1e-6, gt=0)
    hub_prune_percent: float = Field(0.0, ge=0, lt=100)
    degree_cap: int = Field(0, ge=0)
    fallback: Input | None = "bm25"
    k: int = Field(100, gt=0)

    @model_validator(mode="after")
    def _has_seeds(self) -> PPR:
        if not self.inputs and not self.query_entities:
            raise ValueError("ppr needs seeds: query_entities, inputs, or both")
        return self

    def children(self) -> list:
        return [*self.inputs, *([self.fallback] if self.fallback is not None else [])]

    def seeds(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> np.ndarray:
        """The seed vector over the graph's rows (passages first, then entities); all zeros if none."""
        graph = indexes.entity_graph(self.hub_prune_percent, self.degree_cap)
        size = graph.walk.size
        entities = graph.match(indexes.query_entities(query, self.extractor)) if self.query_entities else np.zeros(0, np.int64)
        entity_weights = entity_seed_weights(graph.df(entities), self.entity_delta)
        passages = [c.top(self.seed_k) for c in run_inputs(self.inputs, query, indexes, methods)]
        passage_rows = np.concatenate([c.rows for c in passages]) if passages else np.zeros(0, np.int64)
        passage_weights = np.concatenate([passage_seed_weights(c.scores, self.seed_weighting) for c in passages]) if passages else np.zeros(0)
        seeds = mix_seeds(size, entities, entity_weights, passage_rows, passage_weights, self.mixing)
        if not seeds.any() and self.fallback is not None:
            (backup,) = run_inputs([self.fallback], query, indexes, methods)
            backup = backup.top(self.seed_k)
            seeds = mix_seeds(size, entities[:0], entity_weights[:0], backup.rows, passage_seed_weights(backup.scores, self.seed_weighting))
        return seeds

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        graph = indexes.entity_graph(self.hub_prune_percent, self.degree_cap)
        seeds = self.seeds(query, indexes, methods)
        if not seeds.any():
            return Candidates(np.zeros(0, np.int64), np.zeros(0))
        if self.mode == "push":
            scores = ppr_push(graph.walk, seeds, self.alpha, self.epsilon)
        elif self.mode == "cg":
            scores, _ = ppr_cg(graph.walk, seeds, self.alpha, rtol=self.epsilon)
        else:
            scores, _ = ppr_power(graph.walk, seeds, self.alpha, tol=0.0, max_iter=self.iterations)
        passages = scores[: graph.n_passages]
        rows = np.flatnonzero(passages > 0)
        return ranked(rows, passages[rows], self.k)


Ranker = Literal["ppr", "gcs", "gat", "mlp"]


@dataclass
class TunedRankers:
    """What GraphER learns on a training corpus: alpha per propagation ranker, and the trained networks."""

    alpha: dict[str, float]
    models: dict[str, Any] = field(default_factory=dict)  # "gat" / "mlp" -> graph_rankers.GraphRanker
    report: dict = field(default_factory=dict)

    def save(self, folder: Path) -> None:
        from graphlake.kernels.graph_rankers import save_ranker

        (folder / "rankers.json").write_text(json.dumps({"alpha": self.alpha, "report": self.report}, indent=2), encoding="utf-8")
        for name, model in self.models.items():
            save_ranker(model, folder / name)

    @classmethod
    def load(cls, folder: Path) -> TunedRankers:
        from graphlake.kernels.graph_rankers import load_ranker

        saved = json.loads((folder / "rankers.json").read_text(encoding="utf-8"))
        models = {name: load_ranker(folder / name) for name in ("gat", "mlp") if (folder / name).is_dir()}
        return cls(saved["alpha"], models, saved["report"])


class GraphRerank(Op):
    """GraphER: rerank one retriever's candidates over the graph their proximity edges make.

    ``proximity: auto`` takes the corpus format's (structural for tables, conceptual for multi-hop
    passages, contextual for chunked documents). ``alpha`` unset: the value grid-searched on the
    training corpus (the ``graph_rankers`` asset), as GraphER tunes it; ``gat``/``mlp`` always use
    the trained networks, fed the GCS scores at the tuned alpha.
    """

    op: Literal["graph_rerank"]
    inputs: list[Input] = Field(min_length=1, max_length=1)
    ranker: Ranker = "gcs"
    proximity: Literal["auto", "structural", "conceptual", "contextual"] = "auto"
    extractor: Extractor = "spacy"
    alpha: float | None = Field(None, gt=0, lt=1)
    k: int = Field(100, gt=0)

    def indexes(self) -> frozenset[str]:
        found = {"structural", "contextual", f"mentions_{self.extractor}"}
        if self.alpha is None or self.ranker in ("gat", "mlp"):
            found.add("graph_rankers")
        if self.ranker in ("gat", "mlp"):
            found.add("dense")
        return frozenset(found)

    def candidate_graph(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> tuple[Candidates, sp.csr_matrix]:
        """The base retriever's candidates and the adjacency among them."""
        (base,) = run_inputs(self.inputs, query, indexes, methods)
        proximity = indexes.proximity() if self.proximity == "auto" else self.proximity
        return base, indexes.candidate_graph(base.rows, proximity, self.extractor)

    def rerank(self, query: str, base: Candidates, adjacency: sp.csr_matrix, indexes: Indexes, alpha: float | None = None) -> np.ndarray:
        """New scores for the candidates, in their order; ``alpha`` overrides for tuning."""
        seeds = np.asarray(base.scores, dtype=np.float64)
        if self.ranker == "ppr":
            alpha = alpha or self.alpha or indexes.tuned_rankers().alpha["ppr"]
            positive = np.maximum(seeds - seeds.min(), 0) + 1e-12  # PPR needs a distribution
            scores, _ = ppr_power(Walk.from_adjacency(adjacency), positive, alpha, tol=1e-9, max_iter=1000)
            return scores
        alpha = alpha or self.alpha or indexes.tuned_rankers().alpha["gcs"]
        smoothed, _ = gcs(adjacency, seeds, alpha, tol=1e-9)
        if self.ranker == "gcs":
            return smoothed
        from graphlake.kernels.graph_rankers import score

        model = indexes.tuned_rankers().models.get(self.ranker)
        if model is None:
            raise MethodError(f"graph_rerank: no trained {self.ranker} ranker; materialize graph_rankers")
        graph = ranking_graph(smoothed, indexes.encode_dense(query), indexes.dense()[base.rows], adjacency)
        return score(model, graph)

    def run(self, query: str, indexes: Indexes, methods: Mapping[str, Any]) -> Candidates:
        base, adjacency = self.candidate_graph(query, indexes, methods)
        if len(base.rows) == 0:
            return base
        return ranked(base.rows, self.rerank(query, base, adjacency, indexes), self.k)


def ranking_graph(seed_scores: np.ndarray, query: np.ndarray, nodes: np.ndarray, adjacency: sp.spmatrix, labels: np.ndarray | None = None):
    """The GAT's input for one query: GCS scores, embeddings and the candidate edges."""
    from graphlake.kernels.graph_rankers import RankingGraph

    edges = sp.coo_matrix(adjacency)
    return RankingGraph(seed_scores, query, nodes, edges.row.astype(np.int64), edges.col.astype(np.int64), labels)
