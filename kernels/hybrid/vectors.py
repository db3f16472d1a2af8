"""Allan-Poe's unified semantic metric space (§3.1–3.2): dense, learned-sparse and lexical vectors of
the same nodes, scored together as one inner product.

A node is stored as ``[dense, SPLADE, BM25 weights]``; a query as ``[w_d·s_d·dense, w_s·s_s·SPLADE,
w_f·s_f·token counts]``, so any weights are one maximum-inner-product search over the same stored
vectors (Theorem 1), and the lexical part is BM25 exactly (the Lucene formula is a sum of per-token
document weights). ``s_p`` is each path's calibration: raw SPLADE and BM25 scores are about a hundred
times a cosine, so uncalibrated "equal weights" would mean lexical only (the authors' code rescales
the same way; the paper does not say so). A node used as a query (to build the graph, to calibrate)
is its own dense and SPLADE vectors and its token counts: what retrieval sees when its text is asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from graphlake.kernels.results import SearchParams

PATHS = ("dense", "sparse", "lexical")
CALIBRATION_SAMPLE = 256


@dataclass(frozen=True)
class Queries:
    """A batch of queries on the three paths: dense ``(b, m)``, SPLADE ``(b, Vs)``, BM25 token counts ``(b, Vb)``."""

    dense: np.ndarray
    sparse: sp.csr_matrix
    lexical: sp.csr_matrix

    def __len__(self) -> int:
        return len(self.dense)

    def take(self, rows: np.ndarray) -> Queries:
        return Queries(self.dense[rows], self.sparse[rows], self.lexical[rows])


@dataclass(frozen=True)
class KGQuery:
    """A query's KG part: each entity's hop from the query's entities (``KnowledgeGraph.hops``), the
    reward weight (calibrated units), the hop limit, and whether logical edges are walked."""

    entity_hops: np.ndarray
    weight: float
    hops: int = 3
    edges: bool = True


@dataclass(frozen=True, eq=False)
class HybridParams(SearchParams):
    """How the hybrid graph is searched (``Searcher.search``): the path weights, calibrated, ``(3,)``
    (dense, SPLADE, BM25); the candidate pool ``L``; and per query, the BM25 token ids every result holds
    (``required``) and its KG part (``kg``), None for none. The pool and ``k`` are clamped to the corpus."""

    weights: np.ndarray = field(default_factory=lambda: np.ones(3))
    pool: int = 128
    required: list[np.ndarray | None] | None = None
    kg: list[KGQuery | None] | None = None

    def per_query(self, n: int) -> tuple[list[np.ndarray | None], list[KGQuery | None]]:
        """``required`` and ``kg`` for a batch of ``n`` queries, None each where unset."""
        return self.required or [None] * n, self.kg or [None] * n


@dataclass(frozen=True)
class HybridVectors:
    """The stored side: dense ``(N, m)``, SPLADE ``(N, Vs)`` and BM25 weights ``(N, Vb)``, CSR with sorted indices."""

    dense: np.ndarray
    sparse: sp.csr_matrix
    lexical: sp.csr_matrix

    @classmethod
    def of(cls, dense: np.ndarray, sparse: sp.spmatrix, lexical: sp.spmatrix) -> HybridVectors:
        return cls(np.ascontiguousarray(dense, dtype=np.float32), _csr(sparse), _csr(lexical))

    def __len__(self) -> int:
        return len(self.dense)

    def take(self, rows: np.ndarray) -> HybridVectors:
        return HybridVectors(self.dense[rows], self.sparse[rows], self.lexical[rows])

    def path_scores(self, queries: Queries, paths: tuple[bool, bool, bool] = (True, True, True), rows: np.ndarray | None = None) -> np.ndarray:
        """Raw inner products per path, ``(3, b, N)`` float32 (or only the nodes ``rows``); a path not asked for is zeros.
        The sparse paths multiply the nodes' CSR rows by the queries (not the queries by the nodes' transpose,
        which scipy would first convert: 4x slower for a filter's thousands of rows)."""
        scores = np.zeros((3, len(queries), len(self) if rows is None else len(rows)), dtype=np.float32)
        for path, (wanted, stored, asked) in enumerate(zip(paths, (self.dense, self.sparse, self.lexical), (queries.dense, queries.sparse, queries.lexical), strict=True)):
            if wanted:
                stored = stored if rows is None else stored[rows]
                product = stored @ asked.T
                scores[path] = (product if path == 0 else product.toarray()).T
        return scores

    def fused(self, queries: Queries, weights: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """``Σ_p weights[p]·sim_p``, ``(b, N)`` (or ``(b, len(rows))``): weights already multiplied by the calibration."""
        scores = self.path_scores(queries, tuple(bool(w) for w in weights), rows)
        return np.tensordot(np.asarray(weights, dtype=np.float32), scores, axes=1)

    @cached_property
    def postings(self) -> sp.csc_matrix:
        """The BM25 weights by token: column ``t`` holds the nodes that contain token ``t``."""
        postings = self.lexical.tocsc()
        postings.sort_indices()
        return postings

    def containing(self, tokens: np.ndarray) -> np.ndarray:
        """The rows that contain every token (BM25 weights are positive exactly where a token occurs)."""
        rows = np.arange(len(self))
        for token in tokens:
            rows = np.intersect1d(rows, self.postings.indices[self.postings.indptr[token] : self.postings.indptr[token + 1]], assume_unique=True)
        return rows

    def rarest(self, tokens: np.ndarray) -> int | None:
        """Of ``tokens``, the one fewest nodes contain, at least one (highest IDF; ties: lower id); ``None`` if none occurs."""
        frequency = np.diff(self.postings.indptr)[tokens]
        present = np.asarray(tokens)[frequency > 0]
        if len(present) == 0:
            return None
        return int(present[np.lexsort((present, frequency[frequency > 0]))[0]])

    def calibration(self, nodes: Queries, sample: int = CALIBRATION_SAMPLE, seed: int = 0) -> np.ndarray:
        """``s_p = 1 / median over sampled nodes of their best other node's sim_p``: after it, a node's
        nearest neighbour scores about 1 on every path. A path with no positive similarity keeps 1."""
        rows = np.sort(np.random.default_rng(seed).permutation(len(self))[:sample])
        scores = self.path_scores(nodes.take(rows))
        scores[:, np.arange(len(rows)), rows] = -np.inf  # never a node's own similarity
        best = scores.max(axis=2) if len(self) > 1 else np.zeros((3, len(rows)), np.float32)
        medians = np.median(best, axis=1) if len(rows) else np.zeros(3)
        return np.where(medians > 0, 1.0 / np.where(medians > 0, medians, 1.0), 1.0).astype(np.float64)


def _csr(matrix: sp.spmatrix) -> sp.csr_matrix:
    matrix = sp.csr_matrix(matrix, dtype=np.float32)
    matrix.sort_indices()
    return matrix
