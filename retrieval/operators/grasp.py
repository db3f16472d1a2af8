"""GRASP's operators (Tao et al.): Stage 1, a plan executed over the corpus's SKB (``skb_plan``), and
Stage 2, its ranking fused with a partner's by static or plan-conditioned RRF (``plan_rrf``).

``skb_plan`` returns passage / table nodes, with the plan's metadata (valid, n_cand, risk_level) in
``Candidates.meta``; ``plan_rrf`` reads it. ``mode: tuned`` takes the mode and the weights the
``grasp_fusion`` index chose on the training corpus's validation queries (never on evaluated ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from graphlake.kernels import encoders
from graphlake.kernels.plan_fusion import BUCKETS, fuse, graph_weight
from graphlake.kernels.plan_sql import Emit
from graphlake.retrieval.indexes import LakeIndexes
from graphlake.retrieval.methods import Candidates, Input, Op, register, run_inputs

if TYPE_CHECKING:
    from graphlake.retrieval.skb import Settings


@register
class SkbPlan(Op):
    """Stage 1: plan (``rules``), link the anchors (top-K within tau of the best cosine), run the plan as one
    DuckDB query over the SKB, add the cosine of ``relevance_text`` with each candidate's document."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"skb", "skb_vectors", "dense"})
    op: Literal["skb_plan"]
    planner: Literal["rules"] = "rules"
    source: str = "auto"  # which SKB: auto = the corpus's first (CorpusSpec.skb_sources)
    emit: Emit = "path"
    name_k: int = Field(5, gt=0)
    name_tau: float = Field(0.95, ge=0, le=1)
    doc_k: int = Field(10, gt=0)
    doc_tau: float = Field(0.90, ge=0, le=1)
    rescore: bool = True
    max_rows: int = Field(100_000, gt=0)
    timeout_s: float = Field(10.0, gt=0)
    k: int = Field(100, gt=0)

    def settings(self) -> Settings:
        from graphlake.retrieval.skb import Settings  # spaCy and the SKB builders load with the first GRASP query only

        return Settings(self.emit, self.name_k, self.name_tau, self.doc_k, self.doc_tau, self.rescore, self.max_rows, self.timeout_s, self.k)

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        from graphlake.retrieval.skb import stage_one

        result = stage_one(query, indexes.get("skb")(self.source), None, self.settings(), encoders.encode_dense)
        return Candidates(result.candidates.rows, result.candidates.scores, result.meta)


@register
class PlanRRF(Op):
    """Stage 2: ``static`` is ``w / (k + rank_g) + (1 - w) / (k + rank_m)``; ``dynamic`` weighs the graph by
    ``w_bucket[bucket(n_cand)] * m_risk[risk_level]`` (0 for an invalid or empty plan: the partner's ranking)."""

    op: Literal["plan_rrf"]
    inputs: list[Input] = Field(min_length=2, max_length=2)  # [graph branch, partner]
    mode: Literal["static", "dynamic", "tuned", "tuned_static", "tuned_dynamic"] = "tuned"  # tuned_<mode>: the best setting of that mode
    weight: float = Field(0.5, ge=0, le=1)
    constant: float = Field(60.0, gt=0)
    w_bucket: list[float] = Field(default_factory=lambda: [1.0] * len(BUCKETS))
    m_risk: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0, 1.0])
    k: int = Field(100, gt=0)

    @model_validator(mode="after")
    def _sizes(self) -> PlanRRF:
        if len(self.w_bucket) != len(BUCKETS) or len(self.m_risk) != 4:
            raise ValueError(f"w_bucket takes {len(BUCKETS)} weights (one per n_cand bucket), m_risk 4 (no_trade, weak, normal, aggressive)")
        return self

    def indexes(self) -> frozenset[str]:
        return frozenset({"grasp_fusion"}) if self.mode.startswith("tuned") else frozenset()

    def run(self, query: str, indexes: LakeIndexes) -> Candidates:
        graph, partner = run_inputs(self, query, indexes)
        mode, weight, constant, w_bucket, m_risk = self.mode, self.weight, self.constant, self.w_bucket, self.m_risk
        if mode.startswith("tuned"):
            mode, chosen = indexes.get("grasp_fusion").choice(self)
            constant = chosen["constant"]
            weight, w_bucket, m_risk = chosen.get("weight", weight), chosen.get("w_bucket", w_bucket), chosen.get("m_risk", m_risk)
        meta = graph.meta
        if mode == "static":
            rows, scores = fuse(graph.rows, partner.rows, weight, 1.0 - weight, constant)
        else:
            w_hat = graph_weight(bool(meta.get("valid", True)), int(meta.get("n_cand", len(graph.rows))), meta.get("risk_level", "normal"), w_bucket, m_risk)
            rows, scores = fuse(graph.rows, partner.rows, w_hat, 1.0, constant)
        return Candidates(rows[: self.k], scores[: self.k].astype(np.float64), meta)
