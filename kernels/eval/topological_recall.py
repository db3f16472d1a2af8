"""Topological Recall and MissTR (FastInsight, Definition 7 and Corollary 1).

TR gives each oracle node credit ``1 / (1 + u)``, where ``u`` is the uncertainty of reaching it from
the nearest retrieved node: the sum of ``ln(1 + degree)`` over the nodes of the shortest path from
that retrieved node to the oracle node, the oracle node itself excluded. A retrieved oracle node has
``u = 0`` (credit 1), an unreachable one ``u = inf`` (credit 0), so TR = Recall + MissTR, MissTR being
the partial credit of the oracle nodes that were missed.

The corpus graph is taken as undirected (a citation can be followed either way), degrees are its
undirected degrees, and "the shortest path" is by hop count; when several hop-shortest paths join a
retrieved node to an oracle node, the least uncertain one counts, as the definition already takes
the least uncertain retrieved node.

Stored runs are scored at document level like every other metric: nodes are merged into their
documents (two documents are linked when any of their nodes are; where nodes are whole documents,
as in every benchmark set, nothing changes), and a gold document absent from the corpus counts as
unreachable (credit 0) just as Recall counts it missed, so TR >= Recall query by query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


class CorpusGraph:
    """An undirected corpus graph prepared once for many TR evaluations: CSR adjacency and log-degrees."""

    def __init__(self, adjacency: sp.spmatrix):
        if adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"adjacency must be square, got {adjacency.shape}")
        undirected = (sp.csr_matrix(adjacency, dtype=bool) + sp.csr_matrix(adjacency, dtype=bool).T).tocsr()
        undirected.setdiag(False)
        undirected.eliminate_zeros()
        self.adjacency = undirected
        self.log_degree = np.log1p(np.diff(undirected.indptr)).astype(np.float64)

    @property
    def size(self) -> int:
        return self.adjacency.shape[0]

    def uncertainty(self, oracle: int, retrieved: Iterable[int]) -> float:
        """``u``: least accumulated log-degree over hop-shortest paths from a retrieved node to ``oracle``.

        One breadth-first search from the oracle node, layer by layer. ``cost[x]`` is the least
        uncertainty of a hop-shortest path from ``x`` to the oracle (``x``'s own term included, the
        oracle's excluded). Every node on a path has degree >= 1, so cost grows with every layer and
        the search stops once a layer cannot beat the best retrieved node already reached.
        """
        sources = np.zeros(self.size, dtype=bool)
        sources[np.fromiter(retrieved, dtype=np.int64)] = True
        if sources[oracle]:
            return 0.0
        cost = np.full(self.size, np.inf)
        cost[oracle] = 0.0
        seen = np.zeros(self.size, dtype=bool)
        seen[oracle] = True
        frontier = np.array([oracle])
        best = np.inf
        while frontier.size:
            rows = self.adjacency[frontier]
            parents = np.repeat(frontier, np.diff(rows.indptr))
            fresh = ~seen[rows.indices]
            children, parents = rows.indices[fresh], parents[fresh]
            if children.size == 0:
                break
            layer = np.full(self.size, np.inf)
            np.minimum.at(layer, children, cost[parents])
            frontier = np.unique(children)
            seen[frontier] = True
            cost[frontier] = layer[frontier] + self.log_degree[frontier]
            hits = frontier[sources[frontier]]
            if hits.size:
                best = min(best, float(cost[hits].min()))
            if cost[frontier].min() >= best:
                break
        return best


def topological_recall(graph: CorpusGraph, retrieved: Iterable[int], oracle: Iterable[int]) -> float:
    """TR: mean over the oracle nodes of ``1 / (1 + u)``; an empty oracle set is an error."""
    retrieved, oracle = list(retrieved), list(dict.fromkeys(oracle))
    if not oracle:
        raise ValueError("topological recall needs at least one oracle node")
    return float(np.mean([1.0 / (1.0 + graph.uncertainty(node, retrieved)) for node in oracle]))


def miss_topological_recall(graph: CorpusGraph, retrieved: Iterable[int], oracle: Iterable[int]) -> float:
    """MissTR = |missed| / |oracle| * TR over the missed oracle nodes, i.e. TR - Recall (Corollary 1)."""
    retrieved, oracle = list(retrieved), list(dict.fromkeys(oracle))
    if not oracle:
        raise ValueError("topological recall needs at least one oracle node")
    found = set(retrieved)
    missed = [node for node in oracle if node not in found]
    if not missed:
        return 0.0
    return len(missed) / len(oracle) * topological_recall(graph, retrieved, missed)


TR_CUTOFFS = (10, 100)  # R@10's cutoff, and FastInsight's b_max (every retrieved node)


@dataclass(frozen=True)
class DocumentGraph:
    graph: CorpusGraph
    position: dict[str, int]  # document id -> graph node

    @classmethod
    def from_nodes(cls, adjacency: sp.spmatrix, doc_ids: Sequence[str]) -> DocumentGraph:
        """Merge a node graph into its documents (``doc_ids[i]`` owns node ``i``)."""
        position = {doc: i for i, doc in enumerate(dict.fromkeys(doc_ids))}
        owner = [position[doc] for doc in doc_ids]
        incidence = sp.csr_matrix((np.ones(len(doc_ids)), (np.arange(len(doc_ids)), owner)), shape=(len(doc_ids), len(position)))
        return cls(CorpusGraph(incidence.T @ sp.csr_matrix(adjacency) @ incidence), position)


def topological_values(rankings: Mapping[str, Sequence[str]], gold: Mapping[str, Mapping[str, int]], documents: DocumentGraph) -> dict[str, dict[str, float]]:
    """Per query with relevant gold: ``tr@k`` and ``misstr@k`` of its document ranking, k in TR_CUTOFFS."""
    values: dict[str, dict[str, float]] = {}
    for query_id, judged in gold.items():
        relevant = [doc for doc, grade in judged.items() if grade > 0]
        if not relevant:
            continue
        oracle = [documents.position[doc] for doc in relevant if doc in documents.position]
        share = len(oracle) / len(relevant)
        ranking = list(dict.fromkeys(rankings.get(query_id, ())))
        values[query_id] = {}
        for k in TR_CUTOFFS:
            retrieved = [documents.position[doc] for doc in ranking[:k] if doc in documents.position]
            tr = share * topological_recall(documents.graph, retrieved, oracle) if oracle else 0.0
            found = len(set(oracle) & set(retrieved)) / len(relevant)
            values[query_id] |= {f"tr@{k}": tr, f"misstr@{k}": tr - found}  # Corollary 1: one search per oracle, not two
    return values
