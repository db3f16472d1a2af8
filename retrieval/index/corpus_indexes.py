"""The index registry: one corpus's indexes, loaded through the declared index kinds on first use and
checked to share the nodes table's order, kept warm and shared between requests, and what operators
derive from them (the corpus graph, the hybrid vectors, the entity graph); a search's own state is the
``Request`` it makes (``retrieval/core.py``). Kernels are imported where an index is loaded, so a
command loads only what its method reads."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np
import scipy.sparse as sp

from graphlake.retrieval.core import MethodError, Request
from graphlake.retrieval.filters import Filter
from graphlake.retrieval.index.kinds import IndexKinds
from graphlake.retrieval.index.metadata import FilterCache
from graphlake.retrieval.index.tables import CorpusTables
from graphlake.common.settings import model_cache
from graphlake.warehouse.corpora import CorpusRegistry
from graphlake.warehouse.encoder_specs import dense_encoder
from graphlake.warehouse.storage import LakeStorage, StorageError

if TYPE_CHECKING:
    import faiss

    from graphlake.kernels.hybrid.cuda_search import DeviceSearcher
    from graphlake.kernels.hybrid.graph_index import Searcher
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder
    from graphlake.kernels.text.bm25 import BM25Index
    from graphlake.retrieval.index.skb import LoadedSKB
    from graphlake.retrieval.models.grapher import TunedRankers
    from graphlake.retrieval.models.grasp_fusion import TunedFusion
    from graphlake.retrieval.models.grasp_reranker import TunedReranker
    from graphlake.retrieval.models.hybrid_weights import TunedWeights
    from graphlake.retrieval.models.learned_fusion import LearnedRankers
    from graphlake.retrieval.models.untrained import Untrained
    from graphlake.warehouse.pair_cache import PairCache

T = TypeVar("T")


class Handle(Generic[T]):
    """A typed handle on the declared index kind of its attribute's name: ``indexes.bm25`` is the corpus's
    loaded BM25 index, so an operator's call into its kernel (``indexes.bm25.search(queries, k)``) is a
    method call a reader and a type checker can follow. The kind's declaration (``retrieval/index/``)
    says how it loads."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.kind = name

    @overload
    def __get__(self, indexes: None, owner: type) -> Handle[T]: ...

    @overload
    def __get__(self, indexes: CorpusIndexes, owner: type) -> T: ...

    def __get__(self, indexes, owner):
        return self if indexes is None else indexes.get(self.kind)


class CorpusIndexes(CorpusTables):
    """One corpus's indexes, each loaded through the declared kinds on first use and checked to share the
    nodes table's order; ``memo`` keeps what operators derive from them (pruned graphs, unions). Long-lived
    and shared by the threads that serve requests: what one search owns is its ``Request`` (``request``).

    Operators read an index through its typed handle below; ``get(name)`` is for a kind named by data
    (an edge kind of the corpus graph)."""

    bm25: Handle[BM25Index] = Handle()
    dense: Handle[np.ndarray] = Handle()  # (nodes, dimension) float32, the corpus's dense model's
    dense_hnsw: Handle[faiss.Index] = Handle()
    splade: Handle[sp.csc_matrix] = Handle()  # (nodes, vocabulary)
    cooccurrence: Handle[EntityEdges] = Handle()
    hybrid_graph: Handle[Searcher | DeviceSearcher] = Handle()
    skb: Handle[Callable[[str], LoadedSKB]] = Handle()  # by source, ``auto`` the corpus's first
    reranker: Handle[CrossEncoder | Untrained] = Handle()
    graph_rankers: Handle[TunedRankers] = Handle()
    grasp_fusion: Handle[TunedFusion] = Handle()
    grasp_reranker: Handle[TunedReranker] = Handle()
    hybrid_weights: Handle[TunedWeights] = Handle()
    learned_fusion: Handle[LearnedRankers] = Handle()

    def __init__(self, lake: LakeStorage, corpus: str, kinds: IndexKinds, reuse_pairs: bool = False, registry: CorpusRegistry | None = None) -> None:
        """``kinds``: every kind it may load (``retrieval/learned_kinds.py``'s ``INDEX_KINDS``, through ``corpus_indexes``)."""
        super().__init__(lake, corpus, registry)
        self.kinds, self.reuse_pairs = kinds, reuse_pairs
        self._filters = FilterCache()
        self.loading: str | None = None  # the index being loaded now, for a caller that says what it waits for

    def get(self, name: str) -> Any:
        """The loaded index ``name``, loaded once (requests served on several threads load it once)."""
        if name not in self._loaded:
            kind = self.kinds.kind(name)
            if kind.load is None:
                raise MethodError(f"index {name!r} is resolved per corpus; read its edge kinds instead")
            with self._loading:
                if name not in self._loaded:
                    self.loading = name
                    try:
                        self._loaded[name] = kind.load(self)
                    finally:
                        self.loading = None
        return self._loaded[name]

    def of_corpus(self, corpus: str) -> CorpusIndexes:
        """Another corpus's indexes of the same lake, loading through the same kinds."""
        return CorpusIndexes(self.lake, corpus, self.kinds, self.reuse_pairs)

    def request(self, queries: list[str], expression: Filter | None = None, check: bool = True, k: int = 10) -> Request:
        """A search's own state over these indexes: the queries, ``k``, and the rows ``expression`` allows (a
        filter naming a field no document has raises ``FilterError``, unless not ``check``)."""
        allowed = None if expression is None else self._filters.allowed(expression, self.metadata(), self.node_documents(), check)
        return Request(list(queries), self, k, allowed)

    def encode_dense_queries(self, texts: list[str]) -> np.ndarray:
        """Queries encoded by the corpus's dense model: ONNX for a local one, its endpoint for a hosted one."""
        return self.memo(("query encoder",), lambda: dense_encoder(self.model("dense"), queries=True))(texts)

    def dense_encoder(self) -> Callable[[list[str]], np.ndarray]:
        """The corpus's dense model as a function of texts, what GRASP links a plan's anchors with: its
        query encoder (ONNX for a local model, whose vectors are the passage encoder's to float32 noise;
        the endpoint for a hosted one), so a query loads no torch."""
        return self.encode_dense_queries

    def splade_folder(self) -> Path:
        """The folder of the corpus's SPLADE model, which encodes its queries."""
        return self.memo(("splade folder",), lambda: self.model("sparse").path())

    def encode_splade_queries(self, texts: list[str]) -> sp.csr_matrix:
        """Queries encoded by the corpus's SPLADE model, one row each."""
        from graphlake.kernels.text import query_encoders

        return query_encoders.encode_queries_splade(texts, self.splade_folder(), self.memo(("model cache",), model_cache))

    def pair_features(self, query: str, rows: np.ndarray) -> np.ndarray:
        """The cross-encoder's [CLS] vectors of (query, node row) pairs; read back from the lake's
        pair cache when this index set reuses pairs (``graphlake eval --reuse-pairs``)."""
        encoder, texts = self.reranker, self.texts()

        def compute(missing: np.ndarray) -> np.ndarray:
            return encoder.features(query, [texts[r] for r in missing])

        return self.pair_cache.features(query, rows, compute) if self.pair_cache else compute(rows)

    @cached_property
    def pair_cache(self) -> PairCache | None:
        if not self.reuse_pairs:
            return None
        from graphlake.warehouse.pair_cache import PairCache

        stamp = f"{self.lake.artifact_written_at('reranker', {}):.6f}-{self.lake.written_at('nodes', {'corpus': self.corpus}):.6f}"
        return PairCache(self.lake.home, self.corpus, stamp)


def corpus_graph(indexes: CorpusIndexes, kinds: tuple[str, ...]) -> tuple[sp.csr_matrix, np.ndarray]:
    """The union of the ``kinds`` edge sets, undirected 0/1, and its node degrees (FastInsight's, GAR's graph)."""

    def union() -> tuple[sp.csr_matrix, np.ndarray]:
        graph = sum((indexes.get(kind) for kind in kinds), sp.csr_matrix((len(indexes.node_ids),) * 2)).tocsr()
        graph.data[:] = 1.0  # an edge present in several kinds is still one edge
        return graph, np.diff(graph.indptr)

    return indexes.memo(("corpus_graph", *sorted(kinds)), union)


class EntityEdges:
    """The cooccurrence edges as SPRIG reads them: the entity-passage graph (per pruning) and the
    query's entities, linked to the corpus's entities as the graph's were."""

    def __init__(self, indexes: CorpusIndexes) -> None:
        self._owner = weakref.ref(indexes)  # they cache this object: a strong reference would be a cycle
        self.edges = indexes.lake.read("edges", {"corpus": indexes.corpus, "kind": "cooccurrence"})

    @property
    def indexes(self) -> CorpusIndexes:
        return self._owner()

    def graph(self, hub_prune_percent: float = 0.0, degree_cap: int = 0):
        from graphlake.kernels.graph.entity_graph import EntityGraph

        def build() -> EntityGraph:
            entity_ids = self.edges.column("src").combine_chunks().dictionary_encode()
            norms = [entity_id.split(":", 1)[1] for entity_id in entity_ids.dictionary.to_pylist()]
            return EntityGraph.build(
                len(self.indexes.node_ids),
                norms,
                entity_ids.indices.to_numpy(),
                self.indexes.node_rows(self.edges.column("dst").to_pylist(), "cooccurrence edges"),
                self.edges.column("weight").to_numpy(),
                hub_prune_percent,
                degree_cap,
            )

        return self.indexes.memo(("entity_graph", hub_prune_percent, degree_cap), build)

    def query_entities(self, text: str, extractor: str, request: Request) -> list[str]:
        """The query's entity norms, found by the extractor the graph was built with (read once per
        request: ``Request.mentions``) and alias-linked like it."""
        from graphlake.kernels.text.entities import normalise, title_aliases

        built_with = self.edges.column("source")[0].as_py() if self.edges.num_rows else extractor
        if built_with != extractor:
            raise StorageError(f"cooccurrence edges of corpus {self.indexes.corpus!r} come from {built_with!r} mentions, not {extractor!r}")
        aliases = self.indexes.memo(("aliases",), lambda: title_aliases(list(self.indexes.titles().values())))
        norms = [normalise(name) for name, _ in request.mentions([text], extractor)[0]]
        return [aliases.get(norm, norm) for norm in norms if norm]


def hybrid_vectors(indexes: CorpusIndexes):
    """Allan-Poe's stored side: the corpus's dense, SPLADE and BM25-weight rows, in node order."""
    from graphlake.kernels.hybrid.vectors import HybridVectors

    return indexes.memo(("hybrid_vectors",), lambda: HybridVectors.of(indexes.dense, indexes.splade, indexes.bm25.weights()))
