"""Allan-Poe's tuned path weights as stored (the ``hybrid_weights`` index), read by the ``hybrid_graph``
methods with ``weights: tuned_two`` / ``tuned_three``. Tuned by ``retrieval/training/hybrid_weights.py``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from graphlake.retrieval.models.untrained import Untrained

WEIGHTS_FILE = "hybrid_weights.json"


@dataclass(frozen=True)
class TunedWeights:
    """The tuned calibrated weights (dense, sparse, lexical) and how they were found."""

    two: tuple[float, float, float]
    three: tuple[float, float, float]
    report: dict
    kg: float | None = None

    def save(self, folder: Path) -> None:
        (folder / WEIGHTS_FILE).write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> TunedWeights | Untrained:
        untrained = Untrained.load(folder)
        if untrained is not None:
            return untrained
        content = json.loads((folder / WEIGHTS_FILE).read_text(encoding="utf-8"))
        return cls(tuple(content["two"]), tuple(content["three"]), content["report"], content.get("kg"))
