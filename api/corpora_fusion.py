"""One query's rankings from several corpora, fused by reciprocal rank into one answer."""

from __future__ import annotations

from dataclasses import replace

from graphlake.api.results import SearchResult
from graphlake.kernels.fusion import rrf_term


def fused(results: tuple[SearchResult, ...], k: int) -> SearchResult:
    """One query's rankings from several corpora fused by reciprocal rank (each hit keeps its corpus;
    its score becomes the fused one)."""
    scored = sorted(((rrf_term(hit.rank), position, hit) for position, result in enumerate(results) for hit in result.hits), key=lambda item: (-item[0], item[2].rank, item[1]))
    hits = [replace(hit, rank=rank, score=score) for rank, (score, _, hit) in enumerate(scored[:k], start=1)]
    return SearchResult(
        corpus="+".join(r.corpus for r in results),
        method=results[0].method,
        snapshot=-1,
        latency_ms=round(sum(r.latency_ms for r in results), 3),
        hits=hits,
        notes=[f"{r.corpus}: {note}" for r in results for note in r.notes],
        snapshots={r.corpus: r.snapshot for r in results},
        calibration="; ".join(f"{r.corpus}: {r.calibration}" for r in results),
    )
