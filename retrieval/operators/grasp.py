"""GRASP's operators (Tao et al.): Stage 1, a plan executed over the corpus's SKB (``skb_plan``), and
Stage 2, its ranking fused with a partner's by static or plan-conditioned RRF (``plan_rrf``), and
Stage 3, a reranker reading each candidate with its SKB neighbours, fused back by RRF (``grasp_rerank``).

``skb_plan`` returns passage / table nodes, with the plan's metadata (valid, n_cand, risk_level) in
``Candidates.meta``; ``plan_rrf`` reads it. ``mode: tuned`` takes the mode and the weights the
``grasp_fusion`` index chose on the training corpus's validation queries (never on evaluated ones).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphlake.kernels.fusion import RRF_CONSTANT
from graphlake.kernels.plan.fusion import BUCKETS, fuse_stage2
from graphlake.kernels.plan.sql import Emit
from graphlake.retrieval.core import Candidates, Count, Input, ModelCalls, Op, PerQuery, Request, register
from graphlake.retrieval.index.derived import GRASP_FUSION_CHOICE
from graphlake.retrieval.models.index_set import LakeIndexSet

if TYPE_CHECKING:
    from graphlake.retrieval.index.skb_stage_one import StageOneSettings


@register
class SkbPlan(Op):
    """Stage 1: plan (``rules``, or ``llm``), link the anchors (top-K within tau of the best cosine), match
    the plan on the SKB's adjacency, add the cosine of ``relevance_text`` with each candidate's document;
    a batch's plans are linked and matched together (``skb_stage_one.stage_one_batch``)."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"skb", "skb_vectors", "dense"})
    FILTER: ClassVar[Literal["index"]] = "index"
    op: Literal["skb_plan"]
    planner: Literal["rules", "llm"] = "rules"  # llm: the lake's LLM server (GRAPHLAKE_LLM_BASE_URL), App. B's prompt
    source: str = "auto"  # which SKB: auto = the first the corpus declares (warehouse/linking.py)
    emit: Emit = "path"
    name_k: int = Field(5, gt=0)
    name_tau: float = Field(0.95, ge=0, le=1)
    doc_k: int = Field(10, gt=0)
    doc_tau: float = Field(0.90, ge=0, le=1)
    rescore: bool = True
    max_rows: int = Field(100_000, gt=0)
    timeout_s: float = Field(10.0, gt=0)
    k: Count = 100

    def settings(self) -> StageOneSettings:
        from graphlake.retrieval.index.skb_stage_one import StageOneSettings  # spaCy and the SKB builders load with the first GRASP query only

        return StageOneSettings(self.emit, self.name_k, self.name_tau, self.doc_k, self.doc_tau, self.rescore, self.max_rows, self.timeout_s, self.k)

    def uses_llm(self) -> bool:
        return self.planner == "llm"

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        from graphlake.retrieval.index.skb_stage_one import planned, stage_one_batch

        skb = indexes.skb(self.source)
        plans, failures = zip(*(planned(query, skb, self.planner, indexes) for query in request.queries), strict=True) if request.queries else ((), ())
        allowed = None if request.allowed is None else request.allowed.mask
        found = stage_one_batch(list(request.queries), skb, list(plans), self.settings(), indexes.encoders.dense, list(failures), allowed, request.mentions)
        return [replace(result.candidates, meta=result.meta) for result in found]


@register
class PlanRRF(PerQuery):
    """Stage 2: ``static`` is ``w / (k + rank_g) + (1 - w) / (k + rank_m)``; ``dynamic`` weighs the graph by
    ``w_bucket[bucket(n_cand)] * m_risk[risk_level]`` (0 for an invalid or empty plan: the partner's ranking)."""

    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    op: Literal["plan_rrf"]
    inputs: list[Input] = Field(min_length=2, max_length=2)  # [graph branch, partner]
    mode: Literal["static", "dynamic", "tuned", "tuned_static", "tuned_dynamic"] = "tuned"  # tuned_<mode>: the best setting of that mode
    weight: float = Field(0.5, ge=0, le=1)
    constant: float = Field(RRF_CONSTANT, gt=0)
    w_bucket: list[float] = Field(default_factory=lambda: [1.0] * len(BUCKETS))
    m_risk: list[float] = Field(default_factory=lambda: [0.0, 0.5, 1.0, 1.0])
    k: Count = 100

    @model_validator(mode="after")
    def _sizes(self) -> PlanRRF:
        if len(self.w_bucket) != len(BUCKETS) or len(self.m_risk) != 4:
            raise ValueError(f"w_bucket takes {len(BUCKETS)} weights (one per n_cand bucket), m_risk 4 (no_trade, weak, normal, aggressive)")
        return self

    def reads(self) -> frozenset[str]:
        if not self.mode.startswith("tuned"):
            return frozenset()
        from graphlake.retrieval.models.grasp_fusion import key

        return frozenset({f"grasp_fusion/{key(self)}"})  # a part per fusion: declaring a new one re-tunes

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        graph, partner = inputs
        mode, weight, constant, w_bucket, m_risk = self.mode, self.weight, self.constant, self.w_bucket, self.m_risk
        if mode.startswith("tuned"):
            fusion = indexes.grasp_fusion
            if not fusion.choices:
                request.note(f"no tuned fusion for corpus {indexes.corpus!r} ({fusion.report.get('default')}): equal weights, constant {RRF_CONSTANT:g}")
            mode, chosen = indexes.derived(GRASP_FUSION_CHOICE, self)
            constant = chosen["constant"]
            weight, w_bucket, m_risk = chosen.get("weight", weight), chosen.get("w_bucket", w_bucket), chosen.get("m_risk", m_risk)
        setting = {"weight": weight, "constant": constant, "w_bucket": w_bucket, "m_risk": m_risk}
        scores, rows = fuse_stage2(graph.rows, partner.rows, graph.meta, mode, setting)
        return Candidates(scores=scores[: self.k].astype(np.float64), rows=rows[: self.k], meta=graph.meta)


class FuseSetting(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weight: float = Field(ge=0, le=1)  # the reranker's ranking; Stage 2's gets 1 - weight
    constant: float = Field(gt=0)


@register
class GraspRerank(PerQuery):
    """Stage 3: a cross-encoder scores Stage 2's top ``depth`` candidates, serialised with their SKB
    neighbours (``serialize: skb``, App. B.6) or as plain text, and its ranking is fused with Stage 2's
    by static RRF (``fuse: tuned`` reads the (w, k) chosen on validation). ``model: base`` is the lake's
    reranker (GRASP's zero-shot variant), ``grasp`` the one fine-tuned for GRASP (``grasp_reranker``)."""

    FILTER: ClassVar[Literal["inputs"]] = "inputs"
    op: Literal["grasp_rerank"]
    inputs: list[Input] = Field(min_length=1, max_length=1)
    model: Literal["base", "grasp"] = "grasp"
    depth: ModelCalls = 100
    fuse: Literal["tuned", "none"] | FuseSetting = "tuned"
    serialize: Literal["skb", "text"] = "skb"
    max_neighbours: int = Field(10, gt=0)
    max_field_tokens: int = Field(300, gt=0)
    k: Count = 100

    def first_stage(self) -> Op:
        return self.inputs[0]

    def reads(self) -> frozenset[str]:
        tuned = self.model == "grasp" or self.fuse == "tuned"
        return frozenset({"reranker"} | ({"skb"} if self.serialize == "skb" else set()) | ({"grasp_reranker"} if tuned else set()))

    def run_one(self, query: str, inputs: list[Candidates], request: Request, indexes: LakeIndexSet) -> Candidates:
        from graphlake.retrieval.models.grasp_reranker import candidate_texts
        from graphlake.retrieval.models.untrained import Untrained

        (stage,) = inputs
        top = stage.rows[: self.depth]
        tuned = indexes.grasp_reranker if "grasp_reranker" in self.reads() else None
        encoder = tuned.model if self.model == "grasp" else indexes.reranker
        if encoder is None or isinstance(encoder, Untrained):
            request.note(f"grasp_rerank: no {'GRASP-tuned' if self.model == 'grasp' else 'trained'} reranker in this lake; Stage 2's ranking is returned")
            return stage.top(self.k)
        scores = encoder.score(query, candidate_texts(indexes.snapshot, indexes.skb, top, self.serialize, self.max_neighbours, self.max_field_tokens))
        order = np.argsort(-scores, kind="stable")
        reranked = top[order]
        if self.fuse == "none":
            return Candidates(scores=scores[order][: self.k], rows=reranked[: self.k], meta=stage.meta)
        setting = tuned.setting(self.inputs[0], self.model) if self.fuse == "tuned" else self.fuse.model_dump()
        fused, rows = fuse_stage2(reranked, top, {}, "static", setting)
        return Candidates(scores=fused[: self.k], rows=rows[: self.k], meta=stage.meta)
