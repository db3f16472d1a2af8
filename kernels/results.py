"""What every search kernel returns: ``(scores, rows)``, each of shape ``(queries, k)``, best first
(ties to the lower row), as faiss's ``search(x, k)`` does. A query with fewer than ``k`` results has its
list filled after its last one with score −inf and row −1; :func:`unfilled` takes one query's results
without the fill.

BM25's list is never short (a node sharing no term scores 0, and ``k`` is clamped to the corpus)."""

from __future__ import annotations

import numpy as np

FILL_ROW = -1
FILL_SCORE = -np.inf


def unfilled(scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One query's ``(scores, rows)`` without the fill."""
    kept = rows != FILL_ROW
    return scores[kept], rows[kept]
