"""graphlake as a LlamaIndex vector store (the ``llamaindex`` extra): a corpus the lake owns behind
``BasePydanticVectorStore``, in process (``GraphLake``) or through a running server (``RemoteLake``), for
``VectorStoreIndex.from_vector_store``, ``index.insert``, ``index.delete_ref_doc``, ``as_retriever`` and
``as_query_engine``.

    from llama_index.core import VectorStoreIndex
    from graphlake.api.llama_index_store import GraphLakeVectorStore

    store = GraphLakeVectorStore(lake=open_lake("lake"), corpus="notes")     # declared when it is not yet
    index = VectorStoreIndex.from_vector_store(store, embed_model=store.embed_model)
    index.insert(Document(text=long_text, metadata={"year": 2021}))       # split, each node a document
    index.as_retriever(similarity_top_k=3, filters=MetadataFilters(...)).retrieve("who dived?")

The lake stores the text (``stores_text``) and encodes it with its own models when it is written, and
encodes a query itself (``is_embedding_query`` is False: no query vector is made for it). The
``embed_model`` LlamaIndex needs to insert is the lake's dense model (``GraphLakeEmbedding``, also usable
alone); the vectors LlamaIndex computes with it are not stored: the lake's are. Each node is one
document of the corpus under its node id, its metadata as given; the document it was split from is kept
as ``ref_doc_id`` (its SOURCE again when read), which ``delete(ref_doc_id)`` removes every node of.
Query modes map onto methods: ``default`` dense, ``hybrid`` rrf (BM25, dense and SPLADE fused),
``sparse`` splade, ``text_search`` bm25; the others are refused by name. Scores: the method's calibrated
relevance where the lake has fitted one, else its own score (for ``dense``, a cosine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters, VectorStoreQuery, VectorStoreQueryMode, VectorStoreQueryResult
from pydantic import ConfigDict, PrivateAttr

from graphlake.api.llama_index import REF_DOC_ID, delete_document, from_metadata_filters, kept_metadata
from graphlake.api.results import RequestError, StoredDocument
from graphlake.api.retriever_settings import STORE_SETTINGS, no_extra_arguments, upserted
from graphlake.warehouse.write_checks import MAX_WRITE_DOCUMENTS

MODES = {VectorStoreQueryMode.DEFAULT: "dense", VectorStoreQueryMode.HYBRID: "rrf", VectorStoreQueryMode.SPARSE: "splade", VectorStoreQueryMode.TEXT_SEARCH: "bm25"}


class GraphLakeEmbedding(BaseEmbedding):
    """A corpus's dense model as a LlamaIndex embedding: texts as its nodes are encoded, queries as its
    searches encode them."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    lake: Any
    corpus: str

    def __init__(self, lake: Any, corpus: str, **kwargs: Any) -> None:
        super().__init__(lake=lake, corpus=corpus, model_name=f"graphlake:{corpus}", **kwargs)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.lake.embed(self.corpus, [query], "query")[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.lake.embed(self.corpus, [text], "passage")[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self.lake.embed(self.corpus, texts, "passage")


class GraphLakeVectorStore(BasePydanticVectorStore):
    """A corpus the lake owns as a LlamaIndex vector store; ``lake``: a ``GraphLake`` or a ``RemoteLake``."""

    stores_text: bool = True
    is_embedding_query: bool = False
    lake: Any
    corpus: str
    _written: int | None = PrivateAttr(None)  # the number of its last write: its queries read at least through it

    def __init__(self, lake: Any, corpus: str, **kwargs: Any) -> None:
        super().__init__(lake=lake, corpus=corpus, **kwargs)
        lake.create_corpus(corpus)

    @property
    def client(self) -> Any:
        return self.lake

    @property
    def embed_model(self) -> GraphLakeEmbedding:
        return GraphLakeEmbedding(self.lake, self.corpus)

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Upsert each node whole as a document under its id (its ``ref_doc_id`` kept); the ids, once durable."""
        no_extra_arguments("add", kwargs)
        for start in range(0, len(nodes), MAX_WRITE_DOCUMENTS):
            batch = nodes[start : start + MAX_WRITE_DOCUMENTS]
            self._written = self.lake.upsert(self.corpus, [upserted(node.node_id, node.get_content(), kept_metadata(node), retrieved=False) for node in batch]).seq
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        """Delete the document ``ref_doc_id`` and every node added from it."""
        no_extra_arguments("delete", kwargs)
        self._written = delete_document(self.lake, self.corpus, ref_doc_id)

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any) -> None:
        """Delete the nodes with these ids, those passing ``filters``, or (both) those of the ids passing them."""
        no_extra_arguments("delete_nodes", kwargs)
        if node_ids is None and filters is None:
            raise RequestError("delete_nodes: give node_ids, filters or both (clear() deletes every node)")
        self._delete(self._ids(node_ids, filters))

    def clear(self) -> None:
        """Delete every node of the corpus (it stays declared, with its settings)."""
        self._delete(self.lake.document_ids(self.corpus))

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The nodes with these ids, those passing ``filters``, or (both) those of the ids passing them, as written."""
        ids = self._ids(node_ids, filters) if filters is not None or node_ids is None else list(node_ids)
        return [_node(d) for start in range(0, len(ids), MAX_WRITE_DOCUMENTS) for d in self.lake.get_documents(self.corpus, ids[start : start + MAX_WRITE_DOCUMENTS])]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The top ``similarity_top_k`` nodes for ``query_str`` by the method its mode maps onto, those
        passing ``filters``."""
        if not query.query_str:
            raise RequestError("query: graphlake encodes the query itself and needs its text (query_str), not a vector")
        if query.mode not in MODES:
            raise RequestError(f"query: mode {query.mode.value!r} has no graphlake method ({', '.join(f'{m.value}: {n}' for m, n in MODES.items())})")
        if query.doc_ids or query.node_ids:
            raise RequestError("query: restricting to doc_ids or node_ids is not supported; filter on their metadata (filters=) instead")
        if query.alpha is not None:
            raise RequestError("query: alpha has no meaning here; mode 'hybrid' fuses BM25, dense and SPLADE by their ranks (method rrf)")
        fixed = sorted(set(kwargs) & STORE_SETTINGS)
        if fixed:
            raise RequestError(f"query: {fixed[0]} is the store's own (whole documents, its own writes read; similarity_top_k and filters set the rest)")
        reading = {"after_write": self._written} if self._written is not None else {}
        where = from_metadata_filters(query.filters) if query.filters is not None else None
        result = self.lake.search(self.corpus, MODES[query.mode], query.query_str, k=query.similarity_top_k, filter=where, group_by="document", context="document", **reading, **kwargs)
        found = [_node(StoredDocument(hit.doc_id, hit.context if hit.context is not None else hit.text, hit.title, hit.metadata)) for hit in result.hits]
        scores = [hit.relevance if hit.relevance is not None else hit.score for hit in result.hits]
        return VectorStoreQueryResult(nodes=found, similarities=scores, ids=[node.node_id for node in found])

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **kwargs: Any) -> None:
        await asyncio.to_thread(self.delete, ref_doc_id, **kwargs)

    async def adelete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any) -> None:
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **kwargs)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def aget_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """``query`` in a worker thread: the event loop stays free while the lake searches."""
        return await asyncio.to_thread(self.query, query, **kwargs)

    def _ids(self, node_ids: list[str] | None, filters: MetadataFilters | None) -> list[str]:
        """The ids of the nodes passing ``filters`` (all without), those of ``node_ids`` when given."""
        where = from_metadata_filters(filters) if filters is not None else None
        passing = self.lake.document_ids(self.corpus, where)
        if node_ids is None:
            return passing
        wanted = set(node_ids)
        return [i for i in passing if i in wanted]

    def _delete(self, ids: list[str]) -> None:
        for start in range(0, len(ids), MAX_WRITE_DOCUMENTS):
            self._written = self.lake.delete(self.corpus, ids[start : start + MAX_WRITE_DOCUMENTS]).seq


def _node(document: StoredDocument) -> TextNode:
    """A stored document as the node it was added as: its metadata as given, its ``ref_doc_id`` its SOURCE."""
    metadata = {key: value for key, value in document.metadata.items() if key != REF_DOC_ID}
    source = document.metadata.get(REF_DOC_ID)
    related = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=source)} if source is not None else {}
    return TextNode(id_=document.id, text=document.text, metadata=metadata, relationships=related)
