"""The lake's cross-encoder as stored (the ``reranker`` index), trained by ``retrieval/training/reranker.py``."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from graphlake.retrieval.models.untrained import Untrained


def load_reranker(folder: Path) -> Any:
    """The trained cross-encoder in ``folder``, or the ``Untrained`` marker stored in its place."""
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder

    return Untrained.load(folder) or CrossEncoder.load(folder)


@lru_cache(maxsize=8)
def held_out_quality(folder: Path) -> tuple[float, float] | None:
    """The stored model's nDCG@10 reranking its held-out training queries' dense lists, and dense's own
    on them; None for a model without that record (an untrained one, a hand-placed one)."""
    path = folder / "training.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    if "training" not in report or "validation_dense_ndcg@10" not in report:
        return None
    return float(report["training"]["best_validation"]), float(report["validation_dense_ndcg@10"])
