"""The stored index kinds, declared: BM25, dense (exact and HNSW), SPLADE, each edge kind, the entity
mentions, Allan-Poe's hybrid graph and GRASP's SKBs. The learned kinds are declared in
``retrieval/learned_kinds.py``."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from graphlake.common import settings
from graphlake.retrieval.index.config import DeviceError
from graphlake.retrieval.index.derived import EntityEdges, hybrid_vectors, skb_of
from graphlake.retrieval.index.index_set import IndexSet
from graphlake.retrieval.index.kinds import CORPUS_GRAPH, IndexKind, Stored
from graphlake.retrieval.index.tables import dense_matrix, numbers
from graphlake.warehouse.linking import EDGE_KINDS


def _bm25(indexes: IndexSet):
    from graphlake.kernels.text.bm25 import BM25Index

    return BM25Index.load(indexes.snapshot.artifact("bm25"))


def _dense(indexes: IndexSet) -> np.ndarray:
    from graphlake.warehouse.encoder_specs import dimension

    snapshot = indexes.snapshot
    return dense_matrix(snapshot.vectors("dense"), dimension(snapshot.models.spec("dense")) or 0)


def _hnsw(indexes: IndexSet):
    import faiss

    return faiss.read_index(str(indexes.snapshot.artifact("dense_hnsw") / "hnsw.faiss"))


def _splade(indexes: IndexSet) -> sp.csc_matrix:
    from graphlake.kernels.text.model_files import model_config

    table = indexes.snapshot.vectors("sparse")
    vocabulary = int(model_config(indexes.snapshot.models.spec("sparse").path())["vocab_size"])
    values, positions = table.column("values").combine_chunks(), table.column("indices").combine_chunks()
    indptr = numbers(positions.offsets).astype(np.int64)
    matrix = sp.csr_matrix((numbers(values.flatten()), numbers(positions.flatten()), indptr), shape=(len(table), vocabulary))
    return matrix.tocsc()


def _linked(kind: str) -> Callable[[IndexSet], sp.csr_matrix]:
    """The corpus's ``kind`` edges as an undirected 0/1 adjacency over node rows, no loops."""

    def load(indexes: IndexSet) -> sp.csr_matrix:
        edges = indexes.lake.read("edges", {"corpus": indexes.corpus, "kind": kind})
        src = indexes.snapshot.node_rows(edges.column("src").to_pylist(), f"{kind} edges")
        dst = indexes.snapshot.node_rows(edges.column("dst").to_pylist(), f"{kind} edges")
        n = len(indexes.snapshot.node_ids)
        linked = sp.csr_matrix((np.ones(2 * len(src)), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
        linked.data[:] = 1.0  # weight 1 between linked objects, however many links
        linked.setdiag(0)
        linked.eliminate_zeros()
        return linked

    return load


def _mentions(extractor: str) -> Callable[[IndexSet], sp.csr_matrix]:
    """Node rows x entities, 1 where the node mentions the entity."""

    def load(indexes: IndexSet) -> sp.csr_matrix:
        mentions = indexes.lake.read("mentions", {"corpus": indexes.corpus, "extractor": extractor})
        entity = mentions.column("entity_id").combine_chunks().dictionary_encode()
        node = indexes.snapshot.node_rows(mentions.column("node_id").to_pylist(), f"{extractor} mentions")
        shape = (len(indexes.snapshot.node_ids), len(entity.dictionary))
        matrix = sp.csr_matrix((np.ones(len(node)), (node, entity.indices.to_numpy())), shape=shape)
        matrix.data[:] = 1.0
        return matrix

    return load


def _hybrid_graph(indexes: IndexSet):
    """The index's searcher on the configured device (``config.py``): the CUDA kernel's, or the CPU
    walk; both take a batch and return a ``Ranking``, and ``device`` says which it is. Where the CUDA
    kernel cannot hold the index (degree, entry points or dense dimension beyond its shared memory),
    ``GRAPHLAKE_DEVICE=cuda`` is an error and ``auto`` walks on the CPU, saying why (``fallback``)."""
    from graphlake.kernels.hybrid.graph_index import HybridGraph, Searcher

    snapshot = indexes.snapshot
    graph, vectors = HybridGraph.load(snapshot.artifact("hybrid_graph")), hybrid_vectors(indexes)
    if snapshot.config.device != "cuda":
        return Searcher(graph, vectors)
    from graphlake.kernels.hybrid.cuda_search import DeviceSearcher

    try:
        return DeviceSearcher(graph, vectors)
    except ValueError as why:
        if snapshot.config.asked == "cuda":
            raise DeviceError(f"corpus {snapshot.corpus!r}: the CUDA kernel cannot search its hybrid graph ({why}); set {settings.DEVICE.name} to auto or cpu") from None
        return Searcher(graph, vectors, fallback=f"the CUDA kernel cannot hold this index ({why}), so it was walked on the CPU")


def _skb(indexes: IndexSet):
    """SKBs of the corpus by source (``auto``: the corpus's first), each loaded on first use."""
    owner = weakref.ref(indexes)  # the loader sits among the indexes' own: a strong reference would be a
    # cycle, and every index they loaded would outlive them until the cyclic garbage collector ran
    return lambda source: skb_of(owner(), source)


STORED_KINDS: tuple[IndexKind, ...] = (
    IndexKind("bm25", ("bm25_index",), Stored(artifact="bm25"), _bm25),
    IndexKind("dense", ("dense_vectors",), Stored("vectors", partition=(("model", "@dense"),)), _dense),
    IndexKind("dense_hnsw", ("dense_hnsw_index",), Stored(artifact="dense_hnsw"), _hnsw),
    IndexKind("splade", ("splade_vectors",), Stored("vectors", partition=(("model", "@sparse"),)), _splade),
    IndexKind("cooccurrence", ("cooccurrence_edges",), Stored("edges", partition=(("kind", "cooccurrence"),)), EntityEdges),
    *(IndexKind(k, (f"{k}_edges",), Stored("edges", partition=(("kind", k),)), _linked(k)) for k in EDGE_KINDS[1:]),
    # one multi-asset each: entities and mentions are built together
    *(IndexKind(f"mentions_{x}", (f"entities_{x}", f"mentions_{x}"), Stored("mentions", partition=(("extractor", x),)), _mentions(x)) for x in ("spacy", "regex")),
    # the graph's KG part reads spaCy's triples (the asset's default kg)
    IndexKind("hybrid_graph", ("triples_spacy", "hybrid_graph_index"), Stored(artifact="hybrid_graph"), _hybrid_graph),
    # GRASP: the SKBs (the entity source reads spaCy mentions and citations) and their node vectors
    IndexKind("skb", ("entities_spacy", "mentions_spacy", "citation_edges", "skb"), Stored(artifact="skb", layout="adjacency-*.npz"), _skb),  # skb.adjacency_file
    IndexKind("skb_vectors", ("skb_vectors",), Stored(artifact="skb_vectors"), None),
    # ``graph: auto``: for the asset graph's lineage any edge kind a corpus may use; a run reads its corpus's (corpus_needs)
    IndexKind(CORPUS_GRAPH, ("citation_edges", "semantic_edges", "conceptual_edges", "structural_edges", "contextual_edges", "entities_spacy", "mentions_spacy"), None, None),
)
