"""A method's ranking with a lake-owned corpus's pending documents in it (``retrieval/pending/segment.py``).

A first stage (BM25, dense, its HNSW, SPLADE) ranks the pending nodes by its own score, on the snapshot's
scale, and the two lists merge by score: what the folded lake will rank, up to BM25's words new to the
corpus. A method that needs the graphs (and the fusions above them) cannot rank a node its graphs do not
hold until the next build, so pending nodes go through its first stages instead: each is placed where
the reciprocal-rank fusion of BM25, dense and SPLADE over snapshot and pending nodes together puts it
among the snapshot's nodes, with the score of its place (the hit says it is fresh).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.fusion import RRF_CONSTANT
from graphlake.retrieval.core import Candidates, Op, Request, masked
from graphlake.retrieval.filters import Filter
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.operators.vector import BM25, RRF, Dense, Splade
from graphlake.retrieval.pending.segment import SIGNALS, FreshSegment

FIRST_STAGES = {"bm25": "bm25", "dense": "dense", "dense_hnsw": "dense", "splade": "splade"}  # a first stage's op: the signal it ranks by


def with_pending(op: Op, request: Request, indexes: LakeIndexSet, fresh: FreshSegment, expression: Filter | None, found: list[Candidates], pool: int) -> list[Candidates]:
    """``found`` (the method's ranking of the snapshot) without the rows ``request`` masks, and with the
    pending nodes ``expression`` allows in their places, ``pool`` long."""
    found = [masked(candidates, request.allowed) for candidates in found]
    if not fresh.present:
        return found
    signal, pending = _pending(op, request, fresh, expression, pool)
    if signal is not None:
        return [_by_score(mine, theirs, pool) for mine, theirs in zip(found, pending[signal], strict=True)]
    stages = _stages(pool)
    fusion = RRF(op="rrf", inputs=stages, k=2 * pool, constant=RRF_CONSTANT)
    snapshot = [stage.run_batch(request, indexes) for stage in stages]
    placed = []
    for i, ranked in enumerate(found):
        merged = [_by_score(snapshot[s][i], pending[signal][i], pool) for s, signal in enumerate(SIGNALS)]
        placed.append(_placed(ranked, fusion.fuse(merged), len(indexes.snapshot.node_ids), pool))
    return placed


def pending_alone(op: Op, request: Request, fresh: FreshSegment | None, expression: Filter | None, pool: int) -> list[Candidates]:
    """A never-built corpus's ranking: its pending nodes alone, by the op's own signal for a first stage,
    by its own fusion for a fusion of first stages (``rrf``), else by the reciprocal-rank fusion of BM25,
    dense and SPLADE (what every other method's graphs and learned indexes need is a build; the answer's
    note says so)."""
    if fresh is None or not fresh.present:
        return [Candidates(scores=np.zeros(0), rows=np.zeros(0, np.int64)) for _ in request.queries]
    signal, pending = _pending(op, request, fresh, expression, pool)
    if signal is not None:
        return pending[signal]
    if fuses_first_stages(op):  # rrf itself: its own fusion of its own first stages, on its own scale
        return [op.fuse([pending[FIRST_STAGES[stage.op]][i] for stage in op.inputs]) for i in range(len(request.queries))]
    fusion = RRF(op="rrf", inputs=_stages(pool), k=pool, constant=RRF_CONSTANT)
    return [fusion.fuse([pending[s][i] for s in SIGNALS]) for i in range(len(request.queries))]


def _pending(op: Op, request: Request, fresh: FreshSegment, expression: Filter | None, pool: int) -> tuple[str | None, dict[str, list[Candidates]]]:
    """The signal ``op`` ranks by (None: not a first stage), and the pending nodes' top ``pool`` by it,
    or by each of ``SIGNALS`` for any other op."""
    signal = FIRST_STAGES.get(getattr(op, "op", ""))
    signals = SIGNALS if signal is None else (signal,)
    request.prime(set(signals))
    allowed = fresh.pending_allowed(expression)
    return signal, {s: fresh.search(s, request.queries, _encoded(request, s), pool, allowed) for s in signals}


def _stages(pool: int) -> list[Op]:
    """BM25, dense and SPLADE first stages, in ``SIGNALS``' order."""
    return [BM25(op="bm25", k=pool), Dense(op="dense", k=pool), Splade(op="splade", k=pool)]


def fuses_first_stages(op: Op) -> bool:
    """Whether ``op`` is a reciprocal-rank fusion of first stages alone (``rrf``): a never-built corpus
    ranks by it exactly, its scores on its own scale."""
    return isinstance(op, RRF) and bool(op.inputs) and all(first_stage(stage) for stage in op.inputs)


def first_stage(op: Op) -> bool:
    """Whether ``op`` ranks by one signal the fresh segment has (BM25, dense, SPLADE) itself."""
    return getattr(op, "op", "") in FIRST_STAGES


def _by_score(mine: Candidates, theirs: Candidates, k: int) -> Candidates:
    """Two rankings on one scale, merged (ties: the snapshot's node first)."""
    rows, scores = np.concatenate([mine.rows, theirs.rows]), np.concatenate([mine.scores, theirs.scores]).astype(np.float64)
    order = np.argsort(-scores, kind="stable")[:k]
    return Candidates(scores=scores[order], rows=rows[order], meta=mine.meta)


def _placed(ranked: Candidates, fused: Candidates, snapshot_rows: int, k: int) -> Candidates:
    """``ranked`` with each pending node of ``fused`` inserted after as many of ``ranked``'s nodes as the
    fusion puts before it, with the score of its place (the next node's, the last one's at the end; the
    fusion's own where the method ranked none, as when a filter allows pending documents only), so
    that the scores stay ordered for whatever sorts by them."""
    is_pending = fused.rows >= snapshot_rows
    if not is_pending.any():
        return ranked
    ahead = np.cumsum(~is_pending)[is_pending]  # snapshot nodes the fusion ranks above each pending one
    rows, scores, alone = ranked.rows.tolist(), ranked.scores.astype(np.float64).tolist(), not len(ranked.rows)
    for inserted, (row, place, own) in enumerate(zip(fused.rows[is_pending].tolist(), ahead.tolist(), fused.scores[is_pending].tolist(), strict=True)):
        at = min(int(place) + inserted, len(rows))
        rows.insert(at, row)
        scores.insert(at, own if alone else scores[at] if at < len(scores) else scores[-1])
    return Candidates(scores=np.asarray(scores[:k]), rows=np.asarray(rows[:k], np.int64), meta=ranked.meta)


def _encoded(request: Request, signal: str) -> np.ndarray | sp.csr_matrix | None:
    """The request's queries as ``signal`` reads them (BM25 tokenises them itself)."""
    if signal == "dense":
        return np.stack([request.dense(q) for q in request.queries])
    if signal == "splade":
        return sp.vstack([request.splade(q) for q in request.queries], format="csr")
    return None
