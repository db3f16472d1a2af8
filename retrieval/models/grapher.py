"""GraphER's learned part as stored (the ``graph_rankers`` index): alpha per propagation ranker and the
trained GAT / MLP networks, loaded for the ``graph_rerank`` operator. They are fitted by
``retrieval/training/grapher.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graphlake.retrieval.models.untrained import Untrained

# GraphER gives no default alpha: it grid-searches it once on BIRD's training queries and fixes it for
# every corpus (A.3). These are the values that search picks here (benchmarks/results/graph_methods.md),
# the default for a corpus with nothing to tune on.
DEFAULT_ALPHA = {"ppr": 0.8, "gcs": 0.1}
NETWORKS = ("gat", "mlp")  # the GAT, and its message-passing-free MLP ablation
DEFAULT_BASE = "grapher_base"


@dataclass
class TunedRankers:
    """What GraphER learns on a training corpus: alpha per propagation ranker, and the trained networks."""

    alpha: dict[str, float]
    models: dict[str, Any] = field(default_factory=dict)  # "gat" / "mlp" -> kernels.graph_rankers.GraphRanker, or Untrained
    report: dict = field(default_factory=dict)
    alpha_default: str | None = None  # why alpha is DEFAULT_ALPHA rather than tuned

    def save(self, folder: Path) -> None:
        from graphlake.kernels.graph.grapher_networks import save_ranker

        saved = {"alpha": self.alpha, "alpha_default": self.alpha_default, "report": self.report}
        (folder / "rankers.json").write_text(json.dumps(saved, indent=2), encoding="utf-8")
        for name, model in self.models.items():
            if isinstance(model, Untrained):
                (folder / name).mkdir()
                model.save(folder / name)
            else:
                save_ranker(model, folder / name)

    @classmethod
    def load(cls, folder: Path) -> TunedRankers:
        saved = json.loads((folder / "rankers.json").read_text(encoding="utf-8"))
        return cls(saved["alpha"], _Networks(folder), saved["report"], saved.get("alpha_default"))


class _Networks(Mapping[str, Any]):
    """The stored networks, loaded on first use: PPR and GCS read alpha alone, and the networks' torch
    and PyG cost a fresh query 3.5 s to import."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._loaded: dict[str, Any] | None = None

    def _networks(self) -> dict[str, Any]:
        if self._loaded is None:
            from graphlake.kernels.graph.grapher_networks import load_ranker

            held = [name for name in NETWORKS if (self.folder / name).is_dir()]
            self._loaded = {name: Untrained.load(self.folder / name) or load_ranker(self.folder / name) for name in held}
        return self._loaded

    def __getitem__(self, name: str) -> Any:
        return self._networks()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._networks())

    def __len__(self) -> int:
        return len(self._networks())


def ranking_graph(seed_scores: np.ndarray, query: np.ndarray, nodes: np.ndarray, adjacency: sp.spmatrix, labels: np.ndarray | None = None):
    """The GAT's input for one query: GCS scores, embeddings and the candidate edges."""
    from graphlake.kernels.graph.grapher_networks import RankingGraph

    edges = sp.coo_matrix(adjacency)
    return RankingGraph(seed_scores, query, nodes, edges.row.astype(np.int64), edges.col.astype(np.int64), labels)
