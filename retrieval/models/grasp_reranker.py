"""GRASP's Stage-3 reranker as stored (the ``grasp_reranker`` index): the fine-tuned cross-encoder and
the final fusion per Stage-2 operator, and what the reranker reads per candidate. Fine-tuned by
``retrieval/training/grasp_reranker.py``."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphlake.kernels.fusion import RRF_CONSTANT
from graphlake.retrieval.core import Op
from graphlake.warehouse.digest import fingerprint

if TYPE_CHECKING:
    from graphlake.retrieval.index.skb import LoadedSKB
    from graphlake.retrieval.index.snapshot import Snapshot

MODEL_FOLDER = "model"
REPORT_FILE = "grasp_reranker.json"


def stage_key(op: Op) -> str:
    return fingerprint(op.model_dump(mode="json"))


@dataclass
class TunedReranker:
    """The fine-tuned cross-encoder (None when nothing could be trained) and the final fusion per model."""

    model: Any
    fusion: dict[str, dict[str, dict]]  # stage key -> "base" | "grasp" -> {weight, constant}
    report: dict = field(default_factory=dict)

    def setting(self, stage: Op, model: str) -> dict:
        return self.fusion.get(stage_key(stage), {}).get(model, {"weight": 0.5, "constant": RRF_CONSTANT})

    def save(self, folder: Path) -> None:
        if self.model is not None:
            self.model.save(folder / MODEL_FOLDER, {k: v for k, v in self.report.items() if k == "training"})
        (folder / REPORT_FILE).write_text(json.dumps({"fusion": self.fusion, "report": self.report}, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> TunedReranker:
        from graphlake.kernels.rerank.cross_encoder import CrossEncoder

        saved = json.loads((folder / REPORT_FILE).read_text(encoding="utf-8"))
        model = CrossEncoder.load(folder / MODEL_FOLDER) if (folder / MODEL_FOLDER).is_dir() else None
        return cls(model, saved["fusion"], saved["report"])


def candidate_texts(tables: Snapshot, skbs: Callable[[str], LoadedSKB], rows: np.ndarray, serialize: str, max_neighbours: int, max_field_tokens: int) -> list[str]:
    """What the reranker reads per candidate: the B.6 serialisation over the corpus's SKB (of ``skbs``,
    the corpus's by source), or ``title + text``."""
    texts = tables.texts()
    if serialize == "text":
        return [texts[r] for r in rows.tolist()]
    skb = skbs("auto")
    nodes = tables.nodes().column("text")
    return [skb.serialised(r, nodes[r].as_py(), max_neighbours, max_field_tokens) for r in rows.tolist()]
