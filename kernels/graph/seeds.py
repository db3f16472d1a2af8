"""Seed distributions for Personalized PageRank (SPRIG §3.3).

A query seeds the walk through the entities it names (uniform, down-weighted by how common each
entity is) and/or through the passages a first-stage retriever ranks highest (weighted by rank,
softmax of score, or raw score); the two are then mixed into one distribution.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Weighting = Literal["rank", "softmax", "raw"]
Mixing = Literal["mass", "adaptive"]


def entity_seed_weights(df: np.ndarray, delta: float) -> np.ndarray:
    """Uniform over the matched entities, each scaled by ``df ** -delta`` so a common entity seeds less."""
    return np.maximum(np.asarray(df, dtype=np.float64), 1.0) ** -delta


def passage_seed_weights(scores: np.ndarray, weighting: Weighting) -> np.ndarray:
    """Weights for a retriever's top passages, given best first.

    ``rank``: 1 / rank (SPRIG's choice: robust to score scales); ``softmax``: exp(score - max);
    ``raw``: the score shifted so the lowest is just above zero (cosine and BM25 differ in sign range).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if weighting == "rank":
        return 1.0 / np.arange(1, len(scores) + 1)
    if weighting == "softmax":
        return np.exp(scores - scores.max()) if len(scores) else scores
    if weighting == "raw":
        return scores - scores.min() + 1e-9 if len(scores) else scores
    raise ValueError(f"unknown seed weighting {weighting!r}; choose rank, softmax or raw")


def mix_seeds(
    size: int,
    entity_rows: np.ndarray,
    entity_weights: np.ndarray,
    passage_rows: np.ndarray,
    passage_weights: np.ndarray,
    mixing: Mixing = "mass",
) -> np.ndarray:
    """One seed vector over ``size`` graph nodes from entity and passage seeds.

    ``mass``: the raw weights side by side, so each side's share is its raw mass (SPRIG's default).
    ``adaptive`` (SPRIG-MIX): each side normalised, then mixed with
    ``lambda = (n_e + 1) / (n_e + n_p + 2)`` for ``n_e`` entity and ``n_p`` passage seeds (Laplace
    smoothed). Either side empty: the other alone. Both empty: all zeros (the caller falls back).
    """
    seeds = np.zeros(size)
    if mixing not in ("mass", "adaptive"):
        raise ValueError(f"unknown seed mixing {mixing!r}; choose mass or adaptive")
    n_e, n_p = int(np.count_nonzero(entity_weights)), int(np.count_nonzero(passage_weights))
    if mixing == "adaptive" and n_e and n_p:
        share = (n_e + 1) / (n_e + n_p + 2)
        entity_weights = share * entity_weights / entity_weights.sum()
        passage_weights = (1 - share) * passage_weights / passage_weights.sum()
    np.add.at(seeds, entity_rows, entity_weights)
    np.add.at(seeds, passage_rows, passage_weights)
    return seeds
