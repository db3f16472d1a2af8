"""One corpus's indexes, loaded through the declared index kinds on first use and checked to share the
nodes table's order, and what operators derive from them (the corpus graph, the hybrid vectors, the
entity graph). Kernels are imported where an index is loaded, so a command loads only what its
method reads."""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from graphlake.retrieval.core import MethodError
from graphlake.retrieval.filters import Filter
from graphlake.retrieval.index.kinds import index_kind, read_models, read_node_order
from graphlake.retrieval.index.metadata import Allowed, DocumentMetadata, FilterCache
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec, corpus_model
from graphlake.warehouse.models import ModelSpec, dense_encoder, made_before_identities, model_identity, same_weights
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


LEXICAL = frozenset({"bm25", "splade"})  # a method reading only these encodes no dense query vector
SPLADE_READERS = frozenset({"splade", "hybrid_graph"})


def query_encodings(read: set[str] | frozenset[str]) -> tuple[bool, bool]:
    """Whether a method reading the index kinds ``read`` (``core.needs``) encodes its queries with the dense
    model, and with SPLADE."""
    return not read <= LEXICAL, bool(read & SPLADE_READERS)


def retrieval_texts(nodes: pa.Table, documents: pa.Table) -> list[str]:
    """``title + " " + text`` per node: the input every encoder and index sees (BEIR's convention)."""
    titles = dict(zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist(), strict=True))
    return [
        f"{titles[doc_id]} {text}".strip() if titles[doc_id] else text
        for doc_id, text in zip(nodes.column("doc_id").to_pylist(), nodes.column("text").to_pylist(), strict=True)
    ]


def dense_matrix(vectors: pa.Table, dimension: int) -> np.ndarray:
    """The dense vectors as one ``(nodes, dimension)`` float32 matrix (``dimension``: an empty table's)."""
    column = vectors.column("dense").combine_chunks()
    if len(column) == 0:
        return np.zeros((0, dimension), dtype=np.float32)
    return np.ascontiguousarray(column.flatten().to_numpy().reshape(len(column), -1), dtype=np.float32)


class Index(Generic[T]):
    """A typed handle on the declared index kind of its attribute's name: ``indexes.bm25`` is the corpus's
    loaded BM25 index, so an operator's call into its kernel (``indexes.bm25.search(queries, k)``) is a
    method call a reader and a type checker can follow. The kind's declaration (``retrieval/index/``)
    says how it loads."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.kind = name

    @overload
    def __get__(self, indexes: None, owner: type) -> Index[T]: ...

    @overload
    def __get__(self, indexes: CorpusIndexes, owner: type) -> T: ...

    def __get__(self, indexes, owner):
        return self if indexes is None else indexes.get(self.kind)


class CorpusIndexes:
    """One corpus's indexes, each loaded through the registry on first use and checked to share the
    nodes table's order; ``memo`` keeps what operators derive from them (pruned graphs, unions).

    Operators read an index through its typed handle below; ``get(name)`` is for a kind named by data
    (an edge kind of the corpus graph)."""

    bm25: Index[BM25Index] = Index()
    dense: Index[np.ndarray] = Index()  # (nodes, dimension) float32, the corpus's dense model's
    dense_hnsw: Index[faiss.Index] = Index()
    splade: Index[sp.csc_matrix] = Index()  # (nodes, vocabulary)
    cooccurrence: Index[EntityEdges] = Index()
    hybrid_graph: Index[Searcher | DeviceSearcher] = Index()
    skb: Index[Callable[[str], LoadedSKB]] = Index()  # by source, ``auto`` the corpus's first
    reranker: Index[CrossEncoder | Untrained] = Index()
    graph_rankers: Index[TunedRankers] = Index()
    grasp_fusion: Index[TunedFusion] = Index()
    grasp_reranker: Index[TunedReranker] = Index()
    hybrid_weights: Index[TunedWeights] = Index()
    learned_fusion: Index[LearnedRankers] = Index()

    def __init__(self, lake: LakeStorage, corpus: str, reuse_pairs: bool = False) -> None:
        self.lake, self.corpus, self.reuse_pairs = lake, corpus, reuse_pairs
        self._loaded: dict[Any, Any] = {}
        self._loading = threading.RLock()  # requests served on several threads load each index once
        self.notes: dict[str, None] = {}  # what operators did in place of what they could not (an untrained model), in order, once each
        self._queries: dict[str, tuple[np.ndarray | None, sp.csr_matrix | None]] = {}  # encoded ahead (``prime``)
        self._ran: dict[tuple[str, str], Any] | None = None  # a request's operators' candidates per query (``shared``)
        self.allowed: Allowed | None = None  # a request's filter: the node rows it allows (None: all)
        self.root: CorpusIndexes = self  # what loads indexes: a request's view (``request``) loads through its root
        self._filters = FilterCache()
        self.loading: str | None = None  # the index being loaded now, for a caller that says what it waits for

    @cached_property
    def node_ids(self) -> list[str]:
        """The row order every index shares: the nodes table's (read when first asked, so that a request's
        other mistakes, an unknown method, are named before a corpus never built is)."""
        return self.nodes().column("node_id").to_pylist()

    def get(self, name: str) -> Any:
        """The loaded index ``name``, loaded once."""
        if name not in self._loaded:
            kind = index_kind(name)
            if kind.load is None:
                raise MethodError(f"index {name!r} is resolved per corpus; read its edge kinds instead")
            with self._loading:
                if name not in self._loaded:  # loaded by the root: a loaded index may keep (a weak reference to) what loaded it
                    self.root.loading = name
                    try:
                        self._loaded[name] = kind.load(self.root)
                    finally:
                        self.root.loading = None
        return self._loaded[name]

    def note(self, text: str) -> None:
        self.notes.setdefault(text)

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """A structure derived from the indexes, computed once per key."""
        if key not in self._loaded:
            with self._loading:
                if key not in self._loaded:
                    self._loaded[key] = compute()
        return self._loaded[key]

    def request(self, expression: Filter | None = None, check: bool = True) -> CorpusIndexes:
        """These indexes for one request: what is loaded stays shared (warm), the notes, the queries
        encoded ahead, the operators' candidates (``shared``) and the filter's allowed rows are the
        request's own. A filter naming a field no document has raises ``FilterError`` (unless not ``check``)."""
        _ = self.spec, self._positions, self.pair_cache  # computed once here, so that every view shares them
        view = copy.copy(self)
        view.notes, view._queries, view._ran = {}, {}, {}
        view.allowed = None if expression is None else self._filters.allowed(expression, self.metadata(), self.node_documents(), check)
        return view

    def metadata(self) -> DocumentMetadata:
        """The documents' metadata as filters read it."""
        return self.memo(("metadata",), lambda: DocumentMetadata(self.corpus, self.documents()))

    def node_documents(self) -> np.ndarray:
        """Per node row, its document's row in the documents table."""

        def positions() -> np.ndarray:
            where = {doc_id: i for i, doc_id in enumerate(self.documents().column("doc_id").to_pylist())}
            return np.fromiter((where[doc_id] for doc_id in self.doc_ids()), dtype=np.int64, count=len(self.node_ids))

        return self.memo(("node documents",), positions)

    def shared(self, key: str, queries: list[str], compute: Callable[[list[str]], list]) -> list:
        """Per query, what ``compute`` gives for the operator ``key`` names, computed for the queries this
        request has not asked it of yet (all of them outside a request: nothing is kept across requests)."""
        if self._ran is None:
            return compute(queries)
        missing = [q for q in dict.fromkeys(queries) if (key, q) not in self._ran]
        if missing:
            self._ran.update(((key, q), found) for q, found in zip(missing, compute(missing), strict=True))
        return [self._ran[key, q] for q in queries]

    def prime(self, texts: list[str], read: set[str] | frozenset[str]) -> None:
        """Encode a batch of queries at once (each encoder one batched call) for a method reading the index
        kinds ``read`` (``core.needs``), for ``encode_dense`` and ``encode_splade`` to answer from."""
        from graphlake.kernels.text import query_encoders

        dense, splade = query_encodings(read)
        texts = [t for t in dict.fromkeys(texts) if t not in self._queries]
        if not texts:
            return
        vectors = self.encode_dense_queries(texts) if dense else [None] * len(texts)
        weights = query_encoders.encode_queries_splade(texts, self.splade_folder()) if splade else None
        for i, text in enumerate(texts):
            self._queries[text] = (vectors[i], weights[i] if weights is not None else None)

    @cached_property
    def spec(self) -> CorpusSpec:
        return CorpusRegistry(self.lake.home).get(self.corpus)

    def setting(self, name: str) -> Any:
        """A setting the corpus's declaration resolves (``proximity``, ``corpus_graph``, ``skb_sources``), resolved once."""
        return self.memo(("setting", name), lambda: getattr(self.spec, name))

    def check_order(self, name: str, node_ids: list[str]) -> None:
        if node_ids != self.node_ids:
            raise StorageError(f"{name} of corpus {self.corpus!r} was built from other nodes; materialize it again")

    def artifact(self, name: str) -> Path:
        folder = self.lake.artifact(name, {"corpus": self.corpus})
        self.check_order(name, read_node_order(folder))
        for role, made_by in read_models(folder).items():
            self.check_model(name, role, made_by)
        return folder

    def model(self, role: str) -> ModelSpec:
        """The model this corpus uses for ``role`` (models.yaml, or its own choice in corpora.yaml)."""
        return self.memo(("model", role), lambda: corpus_model(self.lake, self.corpus, role))

    def identity(self, role: str) -> dict:
        """The model's name and revision, as vectors and indexes record who made them."""
        from graphlake.kernels.text.query_encoders import cache_dir

        return self.memo(("identity", role), lambda: model_identity(self.model(role), cache_dir()))

    def check_model(self, what: str, role: str, made_by: dict[str, str]) -> None:
        """Refuse vectors or an index made by another model than the one that encodes this corpus's queries."""
        current = self.identity(role)
        if not same_weights(made_by, current):
            raise StorageError(
                f"{what} of corpus {self.corpus!r}: made by {made_by['name']} ({made_by['revision']}), but the corpus's {role} queries are encoded by "
                f"{current['name']} ({current['revision']}): materialize the corpus again"
            )

    def vectors(self, role: str) -> pa.Table:
        """The corpus's vectors of its ``role`` model, checked to be that model's and in node order."""
        name = self.model(role).name
        table = self.lake.read("vectors", {"corpus": self.corpus, "model": name})
        self.check_order(f"{name} vectors", table.column("node_id").to_pylist())
        if "revision" not in table.column_names:
            self.check_model(f"{name} vectors", role, made_before_identities(role))
        for revision in table.column("revision").unique().to_pylist() if "revision" in table.column_names else []:
            self.check_model(f"{name} vectors", role, {"name": name, "revision": revision})
        return table

    def node_rows(self, node_ids: list[str], table: str) -> np.ndarray:
        """Rows of ``node_ids`` in the nodes table; an id it lacks means ``table`` is stale."""
        position = self._positions
        missing = next((n for n in node_ids if n not in position), None)
        if missing is not None:
            raise StorageError(f"{table} of corpus {self.corpus!r} names node {missing!r}, which is not in nodes; materialize it again")
        return np.fromiter((position[n] for n in node_ids), dtype=np.int64, count=len(node_ids))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {node_id: row for row, node_id in enumerate(self.node_ids)}

    def nodes(self) -> pa.Table:
        return self.memo(("nodes",), lambda: self.lake.read("nodes", {"corpus": self.corpus}))

    def documents(self) -> pa.Table:
        return self.memo(("documents",), lambda: self.lake.read("documents", {"corpus": self.corpus}))

    def titles(self) -> dict[str, str]:
        """Title by document id."""
        columns = ("doc_id", "title")
        return self.memo(("titles",), lambda: dict(zip(*(self.documents().column(c).to_pylist() for c in columns), strict=True)))

    def texts(self) -> list[str]:
        """``title + text`` of every node row, what the encoders and the cross-encoder read."""
        return self.memo(("texts",), lambda: retrieval_texts(self.nodes(), self.documents()))

    def doc_ids(self) -> np.ndarray:
        return self.memo(("doc_ids",), lambda: np.asarray(self.nodes().column("doc_id").to_pylist(), dtype=object))

    def encode_dense(self, text: str) -> np.ndarray:
        primed = self._queries.get(text, (None, None))[0]
        if primed is not None:
            return primed
        return self.encode_dense_queries([text])[0]

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

    def encode_splade(self, text: str) -> sp.csr_matrix:
        primed = self._queries.get(text, (None, None))[1]
        if primed is not None:
            return primed
        from graphlake.kernels.text import query_encoders

        return query_encoders.encode_queries_splade([text], self.splade_folder())

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

    def query_entities(self, text: str, extractor: str) -> list[str]:
        """The query's entity norms, found by the extractor the graph was built with and alias-linked like it."""
        from graphlake.kernels.text.entities import normalise, regex_entities, spacy_entities, title_aliases

        built_with = self.edges.column("source")[0].as_py() if self.edges.num_rows else extractor
        if built_with != extractor:
            raise StorageError(f"cooccurrence edges of corpus {self.indexes.corpus!r} come from {built_with!r} mentions, not {extractor!r}")
        extract = {"spacy": spacy_entities, "regex": regex_entities}[extractor]
        aliases = self.indexes.memo(("aliases",), lambda: title_aliases(list(self.indexes.titles().values())))
        norms = [normalise(name) for name, _ in extract([text])[0]]
        return [aliases.get(norm, norm) for norm in norms if norm]


def hybrid_vectors(indexes: CorpusIndexes):
    """Allan-Poe's stored side: the corpus's dense, SPLADE and BM25-weight rows, in node order."""
    from graphlake.kernels.hybrid.vectors import HybridVectors

    return indexes.memo(("hybrid_vectors",), lambda: HybridVectors.of(indexes.dense, indexes.splade, indexes.bm25.weights()))
