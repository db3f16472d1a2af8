"""Allan-Poe's operators (``O_vs`` over the fused vectors): the hybrid graph index searched with any
path weights, the exact fused scorer it is measured against, and the separate-then-fuse baseline.

Weights are per path (``dense``, ``sparse`` = SPLADE, ``lexical`` = BM25) and multiply each path's
calibration (``calibrate: false`` gives raw scales, where BM25 and SPLADE drown the cosine), so 1/1/1
means the three paths count alike: a node's nearest neighbour scores about 1 on each. With no dense
weight, a node no sparse path scores is not returned (as ``splade`` and ``bm25`` return none).

``keywords`` requires words in every returned node (§4.2.2, §5.4): a list of words, each reduced to
the BM25 index's tokens, or ``idf_top1``, the query's rarest corpus token (a stand-in for the keywords
the paper's simulated users named).

``weights: tuned_two`` / ``tuned_three`` read the weights the ``hybrid_weights`` index tuned on the
training queries (§5.7): dense + SPLADE, or all three paths.

``kg: true`` adds the knowledge-graph part (§4.2.3) over the index's KG (``kernels/hybrid/kg.py``):
the query's entities (spaCy NER, matched to the KG's entity names, a title's short form read as the
title) are hop 0; every node within ``kg_hops`` of them on the relation graph earns
``kg_weight / max(hop, 1)``, and the walk also enters at the nodes holding a query entity and follows
logical edges (``kg_edges: false`` keeps only the entry and the reward, the paper's §5.6.3 ablation).
A query naming no KG entity is ranked exactly as without ``kg``.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphlake.kernels.hybrid.vectors import HybridParams, Queries
from graphlake.retrieval.core import MAX_CANDIDATES, MAX_KEYWORDS, Candidates, Count, ExactBelow, Keyword, PerQuery, Request, Weight, from_dict, ranked, register, shared_run, unfill
from graphlake.retrieval.index.derived import TITLE_ALIASES, hybrid_vectors
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.models.untrained import Untrained
from graphlake.retrieval.operators.vector import BM25, DenseHNSW, Splade

FILTERED_POOL_POWER = 0.75  # a filtered walk's pool: candidates / (allowed share) ** this
SCAN_NODES_PER_SLOT = 3  # scoring a node exactly costs about a third of a pool slot walked (CPU, 95k nodes)
DEFAULT_KG_WEIGHT = 0.5  # the spec's stand-in where no kg_weight could be tuned


class PathWeights(BaseModel):
    """How much each path counts, in calibrated units."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    dense: Weight = 1.0
    sparse: Weight = 1.0
    lexical: Weight = 1.0

    @model_validator(mode="after")
    def _some(self) -> PathWeights:
        if not (self.dense or self.sparse or self.lexical):
            raise ValueError("at least one path needs a weight above 0")
        return self

    def vector(self) -> np.ndarray:
        return np.array([self.dense, self.sparse, self.lexical], dtype=np.float64)


class Hybrid(PerQuery):
    """What the fused-vector operators share: weights, calibration, and the query on the three paths."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"hybrid_graph", "dense", "splade", "bm25"})
    QUERY_TIME: ClassVar[frozenset[str]] = frozenset({"k", "weights", "keywords", "kg_weight", "candidates", "depth", "filter_exact_below"})  # any path weights, no rebuild
    FILTER: ClassVar[Literal["index"]] = "index"
    weights: PathWeights | Literal["tuned_two", "tuned_three"] = PathWeights()
    calibrate: bool = True
    keywords: Literal["none", "idf_top1"] | Annotated[list[Keyword], Field(min_length=1, max_length=MAX_KEYWORDS)] = "none"
    kg: bool = False
    kg_weight: Weight | Literal["tuned"] = "tuned"  # calibrated units; tuned on the training queries, else 0.5
    kg_hops: int = Field(3, ge=0)  # hybrid_kg.HOPS (not imported here: it would load spaCy for every query)
    kg_edges: bool = True
    k: Count = 100

    def reads(self) -> frozenset[str]:
        tuned = isinstance(self.weights, str) or (self.kg and self.kg_weight == "tuned")
        return self.INDEXES | ({"hybrid_weights"} if tuned else set())

    def scaled(self, request: Request, indexes: LakeIndexSet) -> np.ndarray:
        """The weights times the index's calibration (unless ``calibrate`` is off)."""
        weights = self.vector(request, indexes)
        return weights * indexes.hybrid_graph.graph.scales if self.calibrate else weights

    def vector(self, request: Request, indexes: LakeIndexSet) -> np.ndarray:
        """The path weights: declared, or tuned (1/1/1, noted, where the corpus had nothing to tune on)."""
        if not isinstance(self.weights, str):
            return self.weights.vector()
        tuned = indexes.hybrid_weights
        if isinstance(tuned, Untrained):
            request.note(f"{self.op}: no tuned weights ({tuned.reason})")
            return np.ones(3)
        return np.array(tuned.two if self.weights == "tuned_two" else tuned.three, dtype=np.float64)

    def kg_query(self, query: str, request: Request, indexes: LakeIndexSet):
        """The query's entity hops and reward weight (a ``KGQuery``); ``None`` without ``kg``, or when the
        query names no KG entity. spaCy and numba load here, so a query without ``kg`` never loads them."""
        if not self.kg:
            return None
        from graphlake.kernels.hybrid.vectors import KGQuery

        graph = indexes.hybrid_graph.graph.kg
        if graph is None:
            request.note(f"{self.op}: the hybrid graph was built with kg: none, so there is no KG reward")
            return None
        aliases = indexes.derived(TITLE_ALIASES)
        seeds = graph.query_entities([query], aliases)[0]
        if len(seeds) == 0:
            request.note(f"{self.op}: a query named no entity of the knowledge graph, so it was ranked without the KG")
            return None
        return KGQuery(graph.hops(seeds, self.kg_hops), self.reward_weight(request, indexes), self.kg_hops, self.kg_edges)

    def reward_weight(self, request: Request, indexes: LakeIndexSet) -> float:
        if self.kg_weight != "tuned":
            return float(self.kg_weight)
        tuned = indexes.hybrid_weights
        weight = None if isinstance(tuned, Untrained) else tuned.kg
        if weight is None:
            request.note(f"{self.op}: no tuned kg_weight ({tuned.reason if isinstance(tuned, Untrained) else 'the training corpus has no KG'}); {DEFAULT_KG_WEIGHT} stands in")
            return DEFAULT_KG_WEIGHT
        return weight

    @staticmethod
    def kg_reward(kg, indexes: LakeIndexSet, rows: np.ndarray) -> np.ndarray:
        """The KG reward of ``rows`` (0 without a KG query)."""
        if kg is None:
            return np.zeros(len(rows))
        from graphlake.kernels.hybrid.kg import reward

        return reward(indexes.hybrid_graph.graph.kg.node_hops(kg.entity_hops)[rows], kg.weight)

    def dense_weight(self, request: Request, indexes: LakeIndexSet) -> float:
        return float(self.vector(request, indexes)[0])

    @staticmethod
    def encode(queries: list[str], request: Request, indexes: LakeIndexSet) -> Queries:
        """The queries on the three paths, as the kernels take a batch."""
        dense = np.stack([request.dense(query) for query in queries])
        return Queries(dense, sp.vstack([request.splade(query) for query in queries], format="csr"), indexes.bm25.token_counts(queries))

    def required(self, query: str, request: Request, indexes: LakeIndexSet) -> np.ndarray | None:
        """The BM25 token ids every returned node must hold (``None``: no constraint). A listed word the
        corpus never uses leaves no node to return."""
        if self.keywords == "none":
            return None
        vectors = hybrid_vectors(indexes)
        if self.keywords == "idf_top1":
            token = vectors.rarest(indexes.bm25.token_counts([query]).indices)
            if token is None:
                request.note(f"{self.op}: a query has no word of the corpus, so idf_top1 requires no keyword")
                return None
            return np.array([token])
        counts = indexes.bm25.token_counts(self.keywords)
        missing = [word for word, row in zip(self.keywords, counts, strict=True) if row.nnz == 0]
        if missing:
            request.note(f"{self.op}: no node holds the required keyword(s) {', '.join(missing)}")
        return np.unique(counts.indices) if not missing else np.full(1, -1)

    def keep(self, rows: np.ndarray, scores: np.ndarray, request: Request, indexes: LakeIndexSet) -> Candidates:
        """Without a dense weight, only nodes some sparse path scores."""
        if not self.dense_weight(request, indexes):
            positive = scores > 0
            rows, scores = rows[positive], scores[positive]
        return Candidates(scores=scores, rows=rows.astype(np.int64))

    @staticmethod
    def holders(required: np.ndarray, indexes: LakeIndexSet) -> np.ndarray:
        """The rows holding every required token (none for an unknown word, marked −1)."""
        return np.zeros(0, np.int64) if (required < 0).any() else hybrid_vectors(indexes).containing(required)

    def eligible(self, required: np.ndarray | None, request: Request, indexes: LakeIndexSet) -> np.ndarray | None:
        """The rows a query may return: those holding its required keywords and allowed by the request's
        filter (None: every row)."""
        rows = None if required is None else self.holders(required, indexes)
        allowed = request.allowed
        if allowed is None:
            return rows
        return allowed.rows if rows is None else rows[allowed.keep(rows)]


@register
class HybridGraphSearch(Hybrid):
    """Allan-Poe (Algorithm 2): best-first search of the hybrid graph with a pool of ``candidates``."""

    op: Literal["hybrid_graph"]
    candidates: Count = 128
    keyword_exact_below: ExactBelow = 2000  # fewer nodes hold the required keywords: score them exactly
    filter_exact_below: ExactBelow | None = None  # fewer nodes pass the request's filter: score them exactly (None: when cheaper)

    def filtered_pool(self, fraction: float) -> int:
        """The pool of a walk that keeps a ``fraction`` of the nodes: ``candidates`` divided by the share to
        the power 0.75. Measured at 95k nodes (benchmarks/results/filters.md): recall@10 against the exact
        filtered ranking is 0.987 at 50 % and 0.995 or more from 10 % down to 2 %, where dividing by the
        share itself costs 1.3-2.4x the walk for at most 0.005 more."""
        return min(math.ceil(max(self.candidates, self.k) / max(fraction, 1e-9) ** FILTERED_POOL_POWER), MAX_CANDIDATES)

    def scan_below(self, pool: int) -> int:
        """Fewer allowed nodes than this are scored exactly: ``filter_exact_below`` if set, else as many as
        a walk with this pool costs (a node scanned costs about a third of a pool slot walked: at 95k nodes
        the scan is quicker at 2 % allowed, the walk at 5 %)."""
        return self.filter_exact_below if self.filter_exact_below is not None else SCAN_NODES_PER_SLOT * pool

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        """The batch's walks in one call of the index's searcher (its CPU or its CUDA kernel); a query whose
        required keywords or filter few nodes pass scores those nodes exactly instead. A filtered walk
        keeps only allowed nodes, with a pool the larger the fewer the filter allows, so that it finds as
        good ones (the walk goes through every node: the keyword edges' way of keeping a constrained
        search connected)."""
        queries, scaled, allowed = request.queries, self.scaled(request, indexes), request.allowed
        pool = self.candidates if allowed is None else self.filtered_pool(allowed.fraction)
        found: list[Candidates | None] = [None] * len(queries)
        walked, required, kg = [], [], []
        for i, query in enumerate(queries):
            needed, reward = self.required(query, request, indexes), self.kg_query(query, request, indexes)
            eligible = self.eligible(needed, request, indexes)
            if eligible is not None:
                keywords = needed is not None and len(eligible) < self.keyword_exact_below
                if keywords or (allowed is not None and len(eligible) < self.scan_below(pool)):
                    what = "holding the required keywords" if needed is not None else ""
                    what += (" and " if what else "") + ("the filter allows" if allowed is not None else "")
                    why = "keyword_exact_below" if keywords else "filter_exact_below" if self.filter_exact_below is not None else f"a scan costs less than a walk with a pool of {pool:,}"
                    request.note(f"{self.op}: the {len(eligible):,} nodes {what} were scored exactly (fewer than {why})")
                    scores = hybrid_vectors(indexes).fused(self.encode([query], request, indexes), scaled, eligible)[0] + self.kg_reward(reward, indexes, eligible)
                    top = ranked(scores=scores, rows=eligible, k=self.k)
                    found[i] = self.keep(top.rows, top.scores, request, indexes)
                    continue
                if needed is not None:
                    request.note(f"{self.op}: the graph walk kept only nodes holding the required keywords")
            walked.append(i), required.append(needed), kg.append(reward)
        if walked:
            encoded, searcher = self.encode([queries[i] for i in walked], request, indexes), indexes.hybrid_graph
            if allowed is None and searcher.device != "cpu":
                request.note(f"{self.op}: the hybrid graph was searched by its {searcher.device} kernel")
            if searcher.fallback:
                request.note(f"{self.op}: {searcher.fallback}")
            params = HybridParams(allowed, weights=scaled, pool=pool, required=required, kg=kg)
            for i, walk in zip(walked, unfill(*searcher.search(encoded, self.k, params)), strict=True):
                found[i] = self.keep(walk.rows, walk.scores, request, indexes)
        return found


@register
class FusedExact(Hybrid):
    """Brute force over the fused vectors: every node scored; the oracle the graph search is measured against."""

    op: Literal["fused_exact"]

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        encoded = self.encode([query], request, indexes)
        rows = self.eligible(self.required(query, request, indexes), request, indexes)
        scores = hybrid_vectors(indexes).fused(encoded, self.scaled(request, indexes), rows)[0]
        rows = np.arange(len(scores)) if rows is None else rows
        top = ranked(scores=scores + self.kg_reward(self.kg_query(query, request, indexes), indexes, rows), rows=rows, k=self.k)
        return self.keep(top.rows, top.scores, request, indexes)


@register
class Multipath(Hybrid):
    """Separate-then-fuse (§2.2.3; Milvus, Infinity): each weighted path's own top ``depth`` (faiss HNSW,
    exact SPLADE, BM25), summed with the same calibrated weights; a path that missed a node adds 0."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"hybrid_graph", "dense", "dense_hnsw", "splade", "bm25"})
    op: Literal["multipath"]
    depth: Count = 100

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        paths = (DenseHNSW(op="dense_hnsw", k=self.depth), Splade(op="splade", k=self.depth), BM25(op="bm25", k=self.depth))
        fused: dict[int, float] = {}
        for weight, path in zip(self.scaled(request, indexes), paths, strict=True):
            if weight:
                (found,) = shared_run(path, request.of([query]), indexes)
                for row, score in zip(found.rows.tolist(), found.scores.tolist(), strict=True):
                    fused[row] = fused.get(row, 0.0) + weight * score
        required = self.required(query, request, indexes)
        if required is not None:  # the paths searched the filter's nodes already
            holders = set(self.holders(required, indexes).tolist())
            fused = {row: score for row, score in fused.items() if row in holders}
        rows = np.fromiter(fused, dtype=np.int64, count=len(fused))
        for row, extra in zip(rows.tolist(), self.kg_reward(self.kg_query(query, request, indexes), indexes, rows).tolist(), strict=True):
            fused[row] += extra
        top = from_dict(fused, self.k)
        return self.keep(top.rows, top.scores, request, indexes)
