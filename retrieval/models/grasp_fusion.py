"""GRASP's tuned Stage-2 fusion as stored (the ``grasp_fusion`` index): the setting chosen per tuned
``plan_rrf``, found by ``retrieval/training/grasp_fusion.py``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from graphlake.kernels.fusion import RRF_CONSTANT
from graphlake.retrieval.core import Op
from graphlake.warehouse.digest import fingerprint
from graphlake.warehouse.storage import StorageError

FUSION_FILE = "fusion.json"
# where nothing could be tuned: equal weights and RRF's usual constant; dynamic opts out on no_trade only
DEFAULT_CHOICE = {
    "mode": "static",
    "static": {"weight": 0.5, "constant": RRF_CONSTANT},
    "dynamic": {"constant": RRF_CONSTANT, "w_bucket": [1.0] * 5, "m_risk": [0.0, 1.0, 1.0, 1.0]},
}
TUNED_MODES = ("tuned", "tuned_static", "tuned_dynamic")


def key(op: Op) -> str:
    """What identifies a tuned fusion: its two inputs, as declared."""
    graph, partner = op.inputs
    return fingerprint({"graph": graph.model_dump(mode="json"), "partner": partner.model_dump(mode="json")})


@dataclass
class TunedFusion:
    """The chosen setting per tuned fusion, and the report (grids, cells, Table 2 analogue)."""

    choices: dict[str, dict]
    report: dict = field(default_factory=dict)

    def choice(self, op: Op) -> tuple[str, dict]:
        """(mode, setting) for a tuned ``plan_rrf``: the winner for ``tuned``, the best of one mode for ``tuned_<mode>``."""
        if self.choices:
            try:
                chosen = self.choices[key(op)]
            except KeyError:
                why = self.report.get("untuned", {}).get(key(op))
                raise StorageError(
                    f"grasp_fusion could not tune this plan_rrf {why}" if why else "grasp_fusion holds no setting for this plan_rrf (its inputs changed); materialize grasp_fusion again"
                ) from None
        else:
            chosen = DEFAULT_CHOICE
        mode = chosen["mode"] if op.mode == "tuned" else op.mode.removeprefix("tuned_")
        return mode, chosen[mode]

    def save(self, folder: Path) -> None:
        (folder / FUSION_FILE).write_text(json.dumps({"choices": self.choices, "report": self.report}, indent=1), encoding="utf-8")

    def held(self) -> set[str]:
        """The fusions (keys) this artefact answers for: tuned, or left untuned with a reason."""
        return set(self.choices) | set(self.report.get("untuned", {}))

    @classmethod
    def load(cls, folder: Path) -> TunedFusion:
        saved = json.loads((folder / FUSION_FILE).read_text(encoding="utf-8"))
        return cls(saved["choices"], saved["report"])
