"""graphlake's learned fusion as stored (the ``learned_fusion`` index): one LightGBM ranker per declared
``learned_fusion`` operator, keyed by its inputs, trained by ``retrieval/training/learned_fusion.py``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphlake.warehouse.digest import fingerprint
from graphlake.warehouse.storage import StorageError

if TYPE_CHECKING:
    import lightgbm

    from graphlake.retrieval.core import Op

REPORT_FILE = "learned_fusion.json"


def key(op: Op) -> str:
    """What identifies a learned fusion: its inputs as declared and its depth (``k`` only cuts the list)."""
    return fingerprint({"inputs": [item.model_dump(mode="json") for item in op.inputs], "depth": op.depth})


@dataclass(frozen=True)
class Ranker:
    """One trained LightGBM model; scores a query's candidates (rows of ``operators.learned.features``)."""

    booster: lightgbm.Booster

    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(self.booster.predict(features, num_threads=1), dtype=np.float64)


@dataclass
class LearnedRankers:
    """The rankers of a corpus by :func:`key`, why any declared fusion has none, and the training report
    (training and early-stopping query ids, rounds, feature importances)."""

    rankers: dict[str, Ranker]
    untrained: dict[str, str] = field(default_factory=dict)
    report: dict = field(default_factory=dict)

    def ranker(self, op: Op) -> Ranker | None:
        """The trained ranker of ``op``; None where it could not be trained (:meth:`why` says why)."""
        name = key(op)
        if name in self.rankers:
            return self.rankers[name]
        if name in self.untrained:
            return None
        raise StorageError("learned_fusion holds no ranker for this operator (its inputs changed); materialize learned_fusion again")

    def why(self, op: Op) -> str:
        return self.untrained.get(key(op), "trained")

    def held(self) -> set[str]:
        return set(self.rankers) | set(self.untrained)

    def save(self, folder: Path) -> None:
        for name, ranker in self.rankers.items():
            ranker.booster.save_model(str(folder / f"{name}.txt"))
        saved = {"rankers": sorted(self.rankers), "untrained": self.untrained, "report": self.report}
        (folder / REPORT_FILE).write_text(json.dumps(saved, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> LearnedRankers:
        import lightgbm

        saved = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
        rankers = {name: Ranker(lightgbm.Booster(model_file=str(folder / f"{name}.txt"))) for name in saved["rankers"]}
        return cls(rankers, saved["untrained"], saved["report"])
