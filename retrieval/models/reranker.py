"""The lake's cross-encoder as stored (the ``reranker`` index), trained by ``retrieval/training/reranker.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphlake.retrieval.models.untrained import Untrained


def load_reranker(folder: Path) -> Any:
    """The trained cross-encoder in ``folder``, or the ``Untrained`` marker stored in its place."""
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder

    return Untrained.load(folder) or CrossEncoder.load(folder)
