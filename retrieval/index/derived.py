"""The structures operators derive from a snapshot's indexes, declared once each (``Derived``) and made
once per index set: the corpus graph of some edge kinds, Allan-Poe's hybrid vectors, SPRIG's entity
graph per pruning, the titles' aliases, GRASP's SKB per source, and what a learned
kind resolves for one declaration (GRASP's fusion choice, the learned fusion's ranker). Also the
``cooccurrence`` kind's loaded form (``EntityEdges``), which reads the entity graph through them."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from graphlake.retrieval.core import Request
from graphlake.retrieval.index.index_set import Derived, IndexSet
from graphlake.warehouse.storage import StorageError

if TYPE_CHECKING:
    from graphlake.kernels.graph.entity_graph import EntityGraph
    from graphlake.kernels.hybrid.vectors import HybridVectors
    from graphlake.kernels.partners import NodeEntities, NodeTitles
    from graphlake.retrieval.index.skb import LoadedSKB


def _corpus_graph(indexes: IndexSet, kinds: tuple[str, ...]) -> tuple[sp.csr_matrix, np.ndarray]:
    graph = sum((indexes.get(kind) for kind in kinds), sp.csr_matrix((len(indexes.snapshot.node_ids),) * 2)).tocsr()
    graph.data[:] = 1.0  # an edge present in several kinds is still one edge
    return graph, np.diff(graph.indptr)


def _hybrid_vectors(indexes: IndexSet) -> HybridVectors:
    from graphlake.kernels.hybrid.vectors import HybridVectors

    return HybridVectors.of(indexes.dense, indexes.splade, indexes.bm25.weights())


def _title_aliases(indexes: IndexSet) -> dict[str, str]:
    from graphlake.kernels.text.entities import title_aliases

    return title_aliases(list(indexes.snapshot.titles().values()))


def _mentions(indexes: IndexSet, edges) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The cooccurrence edges as (entity norms, each edge's code into them, each edge's node row)."""
    entity_ids = edges.column("src").combine_chunks().dictionary_encode()
    norms = [entity_id.split(":", 1)[1] for entity_id in entity_ids.dictionary.to_pylist()]
    return norms, entity_ids.indices.to_numpy(), indexes.snapshot.node_rows(edges.column("dst").to_pylist(), "cooccurrence edges")


def _entity_graph(indexes: IndexSet, hub_prune_percent: float, degree_cap: int) -> EntityGraph:
    from graphlake.kernels.graph.entity_graph import EntityGraph

    edges = indexes.get("cooccurrence").edges
    norms, entities, rows = _mentions(indexes, edges)
    return EntityGraph.build(len(indexes.snapshot.node_ids), norms, entities, rows, edges.column("weight").to_numpy(), hub_prune_percent, degree_cap)


def _node_entities(indexes: IndexSet) -> NodeEntities | None:
    """None where the corpus has no cooccurrence edges (a schema corpus without entity mentions)."""
    from graphlake.kernels.partners import NodeEntities
    from graphlake.kernels.text.entities import normalise

    snapshot = indexes.snapshot
    if not indexes.lake.has("edges", {"corpus": indexes.corpus, "kind": "cooccurrence"}):
        return None
    edges = indexes.get("cooccurrence").edges
    if not edges.num_rows:
        return None
    norms, entities, rows = _mentions(indexes, edges)
    titles = snapshot.titles()
    title_norms = [normalise(titles.get(doc_id) or "") for doc_id in snapshot.doc_ids().tolist()]
    return NodeEntities.build(len(snapshot.node_ids), norms, entities, rows, title_norms)


def _node_titles(indexes: IndexSet) -> NodeTitles:
    from graphlake.kernels.partners import NodeTitles

    snapshot = indexes.snapshot
    titles = snapshot.titles()
    texts = snapshot.nodes().column("text")
    return NodeTitles.build([titles.get(doc_id) or "" for doc_id in snapshot.doc_ids().tolist()], lambda row: texts[row].as_py() or "")


def _skb(indexes: IndexSet, source: str) -> LoadedSKB:
    from graphlake.retrieval.index.skb import LoadedSKB

    return LoadedSKB(indexes.snapshot, source, lambda: indexes.dense)


CORPUS_GRAPH: Derived[tuple[sp.csr_matrix, np.ndarray]] = Derived("corpus_graph", _corpus_graph)
"""(kinds): the union of those edge sets, undirected 0/1, and its node degrees (FastInsight's, GAR's graph)."""
HYBRID_VECTORS: Derived[HybridVectors] = Derived("hybrid_vectors", _hybrid_vectors)
"""Allan-Poe's stored side: the corpus's dense, SPLADE and BM25-weight rows, in node order."""
TITLE_ALIASES: Derived[dict[str, str]] = Derived("title_aliases", _title_aliases)
"""The documents' titles as entity aliases (``kernels/text/entities.py``): what queries' entities link by."""
ENTITY_GRAPH: Derived[EntityGraph] = Derived("entity_graph", _entity_graph)
"""(hub_prune_percent, degree_cap): SPRIG's entity-passage graph of the cooccurrence edges."""
NODE_ENTITIES: Derived[NodeEntities | None] = Derived("node_entities", _node_entities)
"""The cooccurrence edges as a node-by-entity matrix with the titles' entities: what partner signals read."""
NODE_TITLES: Derived[NodeTitles] = Derived("node_titles", _node_titles)
"""Each node's title as text mentions it, and its text normalised on demand: what title links read."""
SKB: Derived[LoadedSKB] = Derived("skb", _skb)
"""(source): one of GRASP's SKBs, loaded."""
GRASP_FUSION_CHOICE: Derived[tuple[str, dict]] = Derived("grasp_fusion_choice", lambda indexes, op: indexes.get("grasp_fusion").choice(op))
"""(op, hashed by its declaration): the tuned fusion's mode and setting for that declaration."""
LEARNED_RANKER: Derived[Any] = Derived("learned_ranker", lambda indexes, op: indexes.get("learned_fusion").ranker(op))
"""(op): the learned fusion's ranker trained for that declaration (None where none was)."""


def corpus_graph(indexes: IndexSet, kinds: tuple[str, ...]) -> tuple[sp.csr_matrix, np.ndarray]:
    """The corpus graph of ``kinds`` (any order), made once per index set."""
    return indexes.derived(CORPUS_GRAPH, tuple(sorted(kinds)))


def hybrid_vectors(indexes: IndexSet) -> HybridVectors:
    return indexes.derived(HYBRID_VECTORS)


def skb_of(indexes: IndexSet, source: str) -> LoadedSKB:
    """The SKB of ``source`` (``auto``: the corpus's first)."""
    return indexes.derived(SKB, indexes.snapshot.linking.skb_sources[0] if source == "auto" else source)


class EntityEdges:
    """The cooccurrence edges as SPRIG reads them: the entity-passage graph (per pruning) and the
    query's entities, linked to the corpus's entities as the graph's were."""

    def __init__(self, indexes: IndexSet) -> None:
        self._owner = weakref.ref(indexes)  # the index set keeps this object: a strong reference would be a cycle
        self.edges = indexes.lake.read("edges", {"corpus": indexes.corpus, "kind": "cooccurrence"})

    @property
    def extractor(self) -> str | None:
        """The extractor the mentions came from (None: no edges)."""
        return self.edges.column("source")[0].as_py() if self.edges.num_rows else None

    def graph(self, hub_prune_percent: float = 0.0, degree_cap: int = 0) -> EntityGraph:
        return self._owner().derived(ENTITY_GRAPH, hub_prune_percent, degree_cap)

    def query_entities(self, text: str, extractor: str, request: Request) -> list[str]:
        """The query's entity norms, found by the extractor the graph was built with (read once per
        request: ``Request.mentions``) and alias-linked like it."""
        from graphlake.kernels.text.entities import normalise

        indexes = self._owner()
        built_with = self.extractor or extractor
        if built_with != extractor:
            raise StorageError(f"cooccurrence edges of corpus {indexes.corpus!r} come from {built_with!r} mentions, not {extractor!r}")
        aliases = indexes.derived(TITLE_ALIASES)
        norms = [normalise(name) for name, _ in request.mentions([text], extractor)[0]]
        return [aliases.get(norm, norm) for norm in norms if norm]
