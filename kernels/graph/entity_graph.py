"""SPRIG's entity-passage graph prepared for querying: one walk over passages and entities together.

Graph rows ``0 .. n_passages - 1`` are the corpus's nodes in the nodes table's order (so a
retriever's candidate rows seed the walk directly), the entities follow. Every ``cooccurrence``
edge is walked both ways with its weight, so the walk alternates passage -> entity -> passage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.graph.propagation import Walk
from graphlake.kernels.text.entities import prune_hubs


@dataclass(frozen=True)
class EntityGraph:
    walk: Walk
    n_passages: int
    entity_rows: dict[str, int]  # entity norm -> graph row
    entity_df: np.ndarray  # passages per entity, indexed by graph row - n_passages

    @classmethod
    def build(
        cls,
        n_passages: int,
        entity_norms: list[str],
        entity: np.ndarray,
        node: np.ndarray,
        weight: np.ndarray,
        hub_prune_percent: float = 0.0,
        degree_cap: int = 0,
    ) -> EntityGraph:
        """From entity->node edges given as codes into ``entity_norms`` and node rows; SPRIG-PRUNE optional."""
        keep = prune_hubs(entity, node, weight, hub_prune_percent, degree_cap)
        entity, node, weight = entity[keep], node[keep], weight[keep]
        size = n_passages + len(entity_norms)
        rows = np.concatenate([n_passages + entity, node])
        cols = np.concatenate([node, n_passages + entity])
        adjacency = sp.csr_matrix((np.concatenate([weight, weight]), (rows, cols)), shape=(size, size))
        df = np.bincount(entity, minlength=len(entity_norms))
        return cls(
            Walk.from_adjacency(adjacency, split=n_passages),
            n_passages,
            {norm: n_passages + i for i, norm in enumerate(entity_norms) if df[i]},
            df,
        )

    def match(self, norms: list[str]) -> np.ndarray:
        """Graph rows of the entities among ``norms`` (unknown or pruned ones are skipped), deduplicated."""
        return np.unique(np.fromiter((self.entity_rows[n] for n in norms if n in self.entity_rows), dtype=np.int64))

    def df(self, rows: np.ndarray) -> np.ndarray:
        return self.entity_df[rows - self.n_passages]
