"""The index registry, and one corpus's indexes loaded through it.

Each index kind an operator may read is declared once, here: its name, the assets that build it,
where it is stored, how it is loaded, and, for learned ones, the other corpora it learns from and
what it reads on them. Asset lineage, freshness (``retrieval/freshness.py``), the learned assets'
inputs and ``LakeIndexes`` all follow from these declarations.

Every index is built over the nodes in the order of the ``nodes`` table and keeps that order's node
ids beside it (or is a table keyed by node id), so a row number means the same node in every index.
Kernels are imported where an index is loaded, so a command loads only what its method reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from graphlake.kernels.text.encoders import DENSE_MODEL, SPLADE_MODEL
from graphlake.retrieval.methods import MethodError
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import Lake, StorageError

if TYPE_CHECKING:
    from graphlake.retrieval.methods import Methods
    from graphlake.warehouse.pair_cache import PairCache

NODE_IDS_FILE = "node_ids.json"
EDGE_KINDS = ("cooccurrence", "structural", "contextual", "citation", "semantic", "conceptual")
CORPUS_GRAPH = "corpus_graph"  # what ``graph: auto`` reads: the corpus's own edge kinds, known only per corpus


@dataclass(frozen=True)
class Stored:
    """Where an index lives: a partition of a lake table, or an artefact folder (per corpus or lake-wide)."""

    table: str | None = None
    artifact: str | None = None
    partition: tuple[tuple[str, str], ...] = ()
    lake_wide: bool = False

    def written_at(self, lake: Lake, corpus: str) -> float | None:
        partition = {} if self.lake_wide else {"corpus": corpus, **dict(self.partition)}
        if self.artifact is not None:
            return lake.artifact_written_at(self.artifact, partition)
        return lake.written_at(self.table, partition)


@dataclass(frozen=True)
class IndexKind:
    """An index operators may read, declared once.

    ``sources(home, corpus)``: the corpora a learned index learns from, whose ``reads(methods)``
    kinds must be built before it; ``parts(lake, corpus)``: the optional parts a stored one holds
    (trained networks), built on request through ``part_config(parts)``, its asset's run config.
    """

    name: str
    assets: tuple[str, ...]  # what builds it; the last is written last
    stored: Stored | None  # None: a name resolved per corpus (``corpus_graph``)
    load: Callable[[LakeIndexes], Any] | None
    sources: Callable[[Path, str], list[str]] | None = None
    reads: Callable[[Methods], frozenset[str]] | None = None
    parts: Callable[[Lake, str], set[str]] | None = None
    part_config: Callable[[set[str]], dict] | None = None


INDEXES: dict[str, IndexKind] = {}


def register_index(kind: IndexKind) -> IndexKind:
    INDEXES[kind.name] = kind
    return kind


def index_kind(name: str) -> IndexKind:
    """The kind of ``name`` (``kind`` or ``kind/part``); an unknown one is a declaration error."""
    kind = INDEXES.get(name.partition("/")[0])
    if kind is None:
        raise MethodError(f"unknown index {name!r}; registered: {', '.join(INDEXES)}")
    return kind


def graph_indexes(kinds) -> frozenset[str]:
    """The indexes a corpus graph of these edge kinds is read from (conceptual edges come from spaCy mentions)."""
    return frozenset(kinds) | ({"mentions_spacy"} if "conceptual" in kinds else frozenset())


def corpus_needs(found: set[str], spec: CorpusSpec) -> dict[str, set[str]]:
    """Index kinds (with the parts asked of each) read on this corpus: ``corpus_graph`` resolved to its edge kinds."""
    needed: dict[str, set[str]] = {}
    for name in found:
        kind, _, part = name.partition("/")
        for resolved in graph_indexes(spec.corpus_graph) if kind == CORPUS_GRAPH else (index_kind(kind).name,):
            needed.setdefault(resolved, set()).update({part} if part else set())
    return needed


def asset_written_at(lake: Lake, corpus: str, asset: str) -> float | None:
    """When an asset last wrote its output for a corpus (epoch seconds), None when it never did."""
    for kind in INDEXES.values():
        if kind.stored is not None and kind.assets[-1] == asset:
            return kind.stored.written_at(lake, corpus)
    return lake.written_at(asset, {"corpus": corpus})


def index_assets(names) -> list[str]:
    """The assets that build these index kinds, in the registry's order of each kind's assets."""
    return list(dict.fromkeys(asset for name in sorted(names) for asset in index_kind(name).assets))


def retrieval_texts(nodes: pa.Table, documents: pa.Table) -> list[str]:
    """``title + " " + text`` per node: the input every encoder and index sees (BEIR's convention)."""
    titles = dict(zip(documents.column("doc_id").to_pylist(), documents.column("title").to_pylist(), strict=True))
    return [
        f"{titles[doc_id]} {text}".strip() if titles[doc_id] else text
        for doc_id, text in zip(nodes.column("doc_id").to_pylist(), nodes.column("text").to_pylist(), strict=True)
    ]


def dense_matrix(vectors: pa.Table) -> np.ndarray:
    column = vectors.column("dense").combine_chunks()
    if len(column) == 0:
        return np.zeros((0, 384), dtype=np.float32)
    return np.ascontiguousarray(column.flatten().to_numpy().reshape(len(column), -1), dtype=np.float32)


class LakeIndexes:
    """One corpus's indexes, each loaded through the registry on first use and checked to share the
    nodes table's order; ``memo`` keeps what operators derive from them (pruned graphs, unions)."""

    def __init__(self, lake: Lake, corpus: str, reuse_pairs: bool = False) -> None:
        self.lake, self.corpus, self.reuse_pairs = lake, corpus, reuse_pairs
        self._loaded: dict[Any, Any] = {}
        self.notes: dict[str, None] = {}  # what operators did in place of what they could not (an untrained model), in order, once each
        self.node_ids: list[str] = self.nodes().column("node_id").to_pylist()  # the row order every index shares

    def get(self, name: str) -> Any:
        """The loaded index ``name``, loaded once."""
        if name not in self._loaded:
            kind = index_kind(name)
            if kind.load is None:
                raise MethodError(f"index {name!r} is resolved per corpus; read its edge kinds instead")
            self._loaded[name] = kind.load(self)
        return self._loaded[name]

    def note(self, text: str) -> None:
        self.notes.setdefault(text)

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """A structure derived from the indexes, computed once per key."""
        if key not in self._loaded:
            self._loaded[key] = compute()
        return self._loaded[key]

    @cached_property
    def spec(self) -> CorpusSpec:
        return CorpusRegistry(self.lake.home).get(self.corpus)

    def check_order(self, name: str, node_ids: list[str]) -> None:
        if node_ids != self.node_ids:
            raise StorageError(f"{name} of corpus {self.corpus!r} was built from other nodes; materialize it again")

    def artifact(self, name: str) -> Path:
        folder = self.lake.artifact(name, {"corpus": self.corpus})
        self.check_order(name, json.loads((folder / NODE_IDS_FILE).read_text(encoding="utf-8")))
        return folder

    def vectors(self, model: str) -> pa.Table:
        table = self.lake.read("vectors", {"corpus": self.corpus, "model": model})
        self.check_order(f"{model} vectors", table.column("node_id").to_pylist())
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
        from graphlake.kernels.text import encoders

        return encoders.encode_dense([text])[0]

    def encode_splade(self, text: str) -> sp.csr_matrix:
        from graphlake.kernels.text import encoders

        return encoders.encode_splade([text])

    def pair_features(self, query: str, rows: np.ndarray) -> np.ndarray:
        """The cross-encoder's [CLS] vectors of (query, node row) pairs; read back from the lake's
        pair cache when this index set reuses pairs (``graphlake eval --reuse-pairs``)."""
        encoder, texts = self.get("reranker"), self.texts()

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


def corpus_graph(indexes: LakeIndexes, kinds: tuple[str, ...]) -> tuple[sp.csr_matrix, np.ndarray]:
    """The union of the ``kinds`` edge sets, undirected 0/1, and its node degrees (FastInsight's, GAR's graph)."""

    def union() -> tuple[sp.csr_matrix, np.ndarray]:
        graph = sum((indexes.get(kind) for kind in kinds), sp.csr_matrix((len(indexes.node_ids),) * 2)).tocsr()
        graph.data[:] = 1.0  # an edge present in several kinds is still one edge
        return graph, np.diff(graph.indptr)

    return indexes.memo(("corpus_graph", *sorted(kinds)), union)


# ---------------------------------------------------------------- loaders


def _bm25(indexes: LakeIndexes):
    from graphlake.kernels.text.bm25 import BM25Index

    return BM25Index.load(indexes.artifact("bm25"))


def _hnsw(indexes: LakeIndexes):
    import faiss

    return faiss.read_index(str(indexes.artifact("dense_hnsw") / "hnsw.faiss"))


def _splade(indexes: LakeIndexes) -> sp.csc_matrix:
    from graphlake.kernels.text.encoders import splade_vocab_size

    table = indexes.vectors(SPLADE_MODEL)
    values, positions = table.column("values").combine_chunks(), table.column("indices").combine_chunks()
    indptr = np.asarray(positions.offsets, dtype=np.int64)
    matrix = sp.csr_matrix((values.flatten().to_numpy(), positions.flatten().to_numpy(), indptr), shape=(len(table), splade_vocab_size()))
    return matrix.tocsc()


def _linked(kind: str) -> Callable[[LakeIndexes], sp.csr_matrix]:
    """The corpus's ``kind`` edges as an undirected 0/1 adjacency over node rows, no loops."""

    def load(indexes: LakeIndexes) -> sp.csr_matrix:
        edges = indexes.lake.read("edges", {"corpus": indexes.corpus, "kind": kind})
        src = indexes.node_rows(edges.column("src").to_pylist(), f"{kind} edges")
        dst = indexes.node_rows(edges.column("dst").to_pylist(), f"{kind} edges")
        n = len(indexes.node_ids)
        linked = sp.csr_matrix((np.ones(2 * len(src)), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
        linked.data[:] = 1.0  # weight 1 between linked objects, however many links
        linked.setdiag(0)
        linked.eliminate_zeros()
        return linked

    return load


def _mentions(extractor: str) -> Callable[[LakeIndexes], sp.csr_matrix]:
    """Node rows x entities, 1 where the node mentions the entity."""

    def load(indexes: LakeIndexes) -> sp.csr_matrix:
        mentions = indexes.lake.read("mentions", {"corpus": indexes.corpus, "extractor": extractor})
        entity = mentions.column("entity_id").combine_chunks().dictionary_encode()
        node = indexes.node_rows(mentions.column("node_id").to_pylist(), f"{extractor} mentions")
        shape = (len(indexes.node_ids), len(entity.dictionary))
        matrix = sp.csr_matrix((np.ones(len(node)), (node, entity.indices.to_numpy())), shape=shape)
        matrix.data[:] = 1.0
        return matrix

    return load


class EntityEdges:
    """The cooccurrence edges as SPRIG reads them: the entity-passage graph (per pruning) and the
    query's entities, linked to the corpus's entities as the graph's were."""

    def __init__(self, indexes: LakeIndexes) -> None:
        self.indexes = indexes
        self.edges = indexes.lake.read("edges", {"corpus": indexes.corpus, "kind": "cooccurrence"})

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


def hybrid_vectors(indexes: LakeIndexes):
    """Allan-Poe's stored side: the corpus's dense, SPLADE and BM25-weight rows, in node order."""
    from graphlake.kernels.hybrid.vectors import HybridVectors

    return indexes.memo(("hybrid_vectors",), lambda: HybridVectors.of(indexes.get("dense"), indexes.get("splade"), indexes.get("bm25").weights()))


def _hybrid_graph(indexes: LakeIndexes):
    from graphlake.kernels.hybrid.graph import HybridGraph, Searcher

    return Searcher(HybridGraph.load(indexes.artifact("hybrid_graph")), hybrid_vectors(indexes))


def _hybrid_weights(indexes: LakeIndexes):
    from graphlake.retrieval.hybrid_weights import TunedWeights

    return TunedWeights.load(indexes.lake.artifact("hybrid_weights", {"corpus": indexes.corpus}))


def _hybrid_weight_sources(home: Path, corpus: str) -> list[str]:
    from graphlake.retrieval.training import training_queries

    return [training_queries(home, corpus)[0]]


def _graph_rankers(indexes: LakeIndexes):
    from graphlake.retrieval.graph_rankers import TunedRankers

    return TunedRankers.load(indexes.lake.artifact("graph_rankers", {"corpus": indexes.corpus}))


def _reranker(indexes: LakeIndexes):
    from graphlake.kernels.rerank.cross_encoder import CrossEncoder
    from graphlake.retrieval.training import Untrained

    folder = indexes.lake.artifact("reranker", {})
    return Untrained.load(folder) or CrossEncoder.load(folder)


def _graph_ranker_sources(home: Path, corpus: str) -> list[str]:
    from graphlake.retrieval.training import graph_ranker_sources

    return graph_ranker_sources(home, corpus)


def _graph_ranker_reads(methods: Methods) -> frozenset[str]:
    from graphlake.retrieval.graph_rankers import reads

    return reads(methods)


def _graph_ranker_parts(lake: Lake, corpus: str) -> set[str]:
    from graphlake.retrieval.graph_rankers import NETWORKS

    try:
        folder = lake.artifact("graph_rankers", {"corpus": corpus})
    except StorageError:
        return set()
    return {name for name in NETWORKS if (folder / name).is_dir()}


def _reranker_sources(home: Path, corpus: str) -> list[str]:
    from graphlake.retrieval.training import reranker_sources

    return reranker_sources(home)


def _reranker_reads(methods: Methods) -> frozenset[str]:
    from graphlake.retrieval.reranker import reads

    return reads(methods)


def _skb(indexes: LakeIndexes):
    """SKBs of the corpus by source (``auto``: the corpus's first), each loaded on first use."""
    from graphlake.retrieval.skb import LoadedSKB

    def load(source: str) -> LoadedSKB:
        source = indexes.spec.skb_sources[0] if source == "auto" else source
        return indexes.memo(("skb", source), lambda: LoadedSKB(indexes, source))

    return load


def _grasp_fusion(indexes: LakeIndexes):
    from graphlake.retrieval.grasp_fusion import TunedFusion

    return TunedFusion.load(indexes.lake.artifact("grasp_fusion", {"corpus": indexes.corpus}))


def _grasp_fusion_parts(lake: Lake, corpus: str) -> set[str]:
    from graphlake.retrieval.grasp_fusion import TunedFusion

    try:
        return TunedFusion.load(lake.artifact("grasp_fusion", {"corpus": corpus})).held()
    except (StorageError, FileNotFoundError):
        return set()


def _grasp_reranker(indexes: LakeIndexes):
    from graphlake.retrieval.grasp_reranker import TunedReranker

    return TunedReranker.load(indexes.lake.artifact("grasp_reranker", {"corpus": indexes.corpus}))


def _grasp_reranker_reads(methods: Methods) -> frozenset[str]:
    from graphlake.retrieval.grasp_reranker import reads

    return reads(methods)


def _grasp_fusion_sources(home: Path, corpus: str) -> list[str]:
    from graphlake.retrieval.training import training_queries

    return [training_queries(home, corpus)[0]]


def _grasp_fusion_reads(methods: Methods) -> frozenset[str]:
    from graphlake.retrieval.grasp_fusion import reads

    return reads(methods)


for _kind in (
    IndexKind("bm25", ("bm25_index",), Stored(artifact="bm25"), _bm25),
    IndexKind("dense", ("dense_vectors",), Stored("vectors", partition=(("model", DENSE_MODEL),)), lambda ix: dense_matrix(ix.vectors(DENSE_MODEL))),
    IndexKind("dense_hnsw", ("dense_hnsw_index",), Stored(artifact="dense_hnsw"), _hnsw),
    IndexKind("splade", ("splade_vectors",), Stored("vectors", partition=(("model", SPLADE_MODEL),)), _splade),
    IndexKind("cooccurrence", ("cooccurrence_edges",), Stored("edges", partition=(("kind", "cooccurrence"),)), EntityEdges),
    *(IndexKind(k, (f"{k}_edges",), Stored("edges", partition=(("kind", k),)), _linked(k)) for k in EDGE_KINDS[1:]),
    # one multi-asset each: entities and mentions are built together
    *(IndexKind(f"mentions_{x}", (f"entities_{x}", f"mentions_{x}"), Stored("mentions", partition=(("extractor", x),)), _mentions(x)) for x in ("spacy", "regex")),
    IndexKind(
        "graph_rankers",
        ("graph_rankers",),
        Stored(artifact="graph_rankers"),
        _graph_rankers,
        sources=_graph_ranker_sources,
        reads=_graph_ranker_reads,
        parts=_graph_ranker_parts,
        part_config=lambda parts: {"networks": sorted(parts)},
    ),
    IndexKind("reranker", ("reranker",), Stored(artifact="reranker", lake_wide=True), _reranker, sources=_reranker_sources, reads=_reranker_reads),
    IndexKind("hybrid_graph", ("hybrid_graph_index",), Stored(artifact="hybrid_graph"), _hybrid_graph),
    IndexKind(
        "hybrid_weights",
        ("hybrid_weights",),
        Stored(artifact="hybrid_weights"),
        _hybrid_weights,
        sources=_hybrid_weight_sources,
        reads=lambda methods: frozenset({"dense", "splade", "bm25"}),
    ),
    # GRASP: the SKBs (the entity source reads spaCy mentions and citations), their node vectors, the tuned fusion
    IndexKind("skb", ("entities_spacy", "mentions_spacy", "citation_edges", "skb"), Stored(artifact="skb"), _skb),
    IndexKind("skb_vectors", ("skb_vectors",), Stored(artifact="skb_vectors"), None),
    IndexKind(
        "grasp_fusion",
        ("grasp_fusion",),
        Stored(artifact="grasp_fusion"),
        _grasp_fusion,
        sources=_grasp_fusion_sources,
        reads=_grasp_fusion_reads,
        parts=_grasp_fusion_parts,
    ),
    IndexKind(
        "grasp_reranker",
        ("grasp_reranker",),
        Stored(artifact="grasp_reranker"),
        _grasp_reranker,
        sources=_grasp_fusion_sources,
        reads=_grasp_reranker_reads,
    ),
    # ``graph: auto``: for the asset graph's lineage any edge kind a corpus may use; a run reads its corpus's (corpus_needs)
    IndexKind(CORPUS_GRAPH, ("citation_edges", "semantic_edges", "conceptual_edges", "structural_edges", "contextual_edges", "entities_spacy", "mentions_spacy"), None, None),
):
    register_index(_kind)
