"""graphlake as a LangChain vector store (the ``langchain`` extra): a corpus the lake owns, written and
searched through LangChain's ``VectorStore`` calls, in process (``GraphLake``) or through a running
server (``RemoteLake``); LangChain's own conformance suite (``VectorStoreIntegrationTests``) runs on both.

    from graphlake.api import open_lake
    from graphlake.api.langchain_store import GraphLakeVectorStore

    store = GraphLakeVectorStore(open_lake("lake"), "notes")       # declared when it is not yet
    ids = store.add_documents([Document("The Nereid dived at dawn.", metadata={"year": 2021})])
    store.similarity_search_with_score("who dived?", k=3, filter="year >= 2020")

What comes back is what went in: a document's ``page_content`` is its whole text, its metadata exactly
as given, its ``id`` the id given (or made). Written documents are searched at once (the next search
reads them) and folded into the corpus's indexes by the next build. The lake's encoders decide the
vectors, so an ``embedding`` is accepted only as the lake's own (``GraphLakeEmbeddings``, which an
application can also use alone for the same vectors). ``method`` (default ``dense``, what a vector
store's similarity is) may be any switched-on method: ``rrf`` adds BM25 and SPLADE; the graph methods
rank the corpus once it is built. Scores: the method's calibrated relevance where the lake has fitted
one for the corpus, else the method's own score (for ``dense``, the cosine of the two vectors).
``as_retriever`` gives graphlake's retriever over the same corpus (its hits carry provenance under
``"graphlake"``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from graphlake.api.results import RequestError, SearchResult
from graphlake.api.retriever_settings import STORE_SETTINGS, no_extra_arguments, upserted
from graphlake.api.validation import MAX_EMBED_CHARS
from graphlake.retrieval.index.tables import retrieval_text
from graphlake.warehouse.write_checks import MAX_WRITE_DOCUMENTS


class GraphLakeEmbeddings(Embeddings):
    """A corpus's dense model as LangChain ``Embeddings``: passages as its nodes are encoded, queries as
    its searches encode them (the same vectors its dense search compares)."""

    def __init__(self, lake: Any, corpus: str) -> None:
        self.lake, self.corpus = lake, corpus

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [row for start in range(0, len(texts), _BATCH) for row in self.lake.embed(self.corpus, list(texts[start : start + _BATCH]), "passage")]

    def embed_query(self, text: str) -> list[float]:
        return self.lake.embed(self.corpus, [text], "query")[0]


class GraphLakeVectorStore(VectorStore):
    """A corpus the lake owns as a LangChain vector store; ``lake``: a ``GraphLake`` or a ``RemoteLake``."""

    def __init__(self, lake: Any, corpus: str, method: str = "dense", embedding: Embeddings | None = None) -> None:
        if embedding is not None and not (isinstance(embedding, GraphLakeEmbeddings) and embedding.corpus == corpus):
            raise RequestError(
                f"embedding: corpus {corpus!r} is encoded by the lake's own models, so its vectors cannot come from {type(embedding).__name__}; leave it out (GraphLakeEmbeddings gives the lake's vectors)"
            )
        self.lake, self.corpus, self.method = lake, corpus, method
        self._written: int | None = None  # the number of its last write: its searches read at least through it
        lake.create_corpus(corpus)

    @property
    def embeddings(self) -> GraphLakeEmbeddings:
        return GraphLakeEmbeddings(self.lake, self.corpus)

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str | None] | None = None, **kwargs: Any) -> list[str]:
        """Upsert the texts as documents (an id given is kept, a missing one made); their ids, once durable."""
        no_extra_arguments("add_texts", kwargs)
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [{}] * len(texts)
        given = list(ids) if ids is not None else [None] * len(texts)
        if not len(texts) == len(metadatas) == len(given):
            raise RequestError(f"add_texts: {len(texts)} texts, {len(metadatas)} metadatas and {len(given)} ids")
        made = [doc_id if doc_id is not None else uuid.uuid4().hex for doc_id in given]
        documents = [upserted(i, text, metadata, retrieved=False) for i, text, metadata in zip(made, texts, metadatas, strict=True)]
        for start in range(0, len(documents), MAX_WRITE_DOCUMENTS):  # one write each thousand: the log's bound on a write
            self._written = self.lake.upsert(self.corpus, documents[start : start + MAX_WRITE_DOCUMENTS]).seq
        return made

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete the documents ``ids`` (an unknown id is no error); True once durable."""
        no_extra_arguments("delete", kwargs)
        if ids is None:
            raise RequestError("delete: give the ids of the documents to delete (drop_corpus removes a whole corpus)")
        ids = list(ids)
        for start in range(0, len(ids), MAX_WRITE_DOCUMENTS):
            self._written = self.lake.delete(self.corpus, ids[start : start + MAX_WRITE_DOCUMENTS]).seq
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents with these ids, as written (unknown ones left out)."""
        ids = list(ids)
        found = [d for start in range(0, len(ids), MAX_WRITE_DOCUMENTS) for d in self.lake.get_documents(self.corpus, ids[start : start + MAX_WRITE_DOCUMENTS])]
        return [Document(page_content=d.text, metadata=d.metadata, id=d.id) for d in found]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [document for document, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, filter: dict | str | None = None, **kwargs: Any) -> list[tuple[Document, float]]:
        """The top ``k`` documents and their scores (see the module's note); ``filter``: graphlake's
        filter (a string or its JSON form); other keyword arguments are the method's query-time parameters."""
        result = self._search(query, k, filter, kwargs)
        return [(_document(hit), hit.relevance if hit.relevance is not None else hit.score) for hit in result.hits]

    def _similarity_search_with_relevance_scores(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """The top ``k`` documents with a relevance from 0 to 1, what ``score_threshold`` compares: the
        method's calibrated relevance, else (``dense``) the cosine clipped to [0, 1]; another method the
        lake has not calibrated on this corpus is refused, since its raw score is on no such scale."""
        hits = self._search(query, k, kwargs.pop("filter", None), kwargs).hits
        if any(hit.relevance is None for hit in hits) and self.method != "dense":
            raise RequestError(
                f"relevance scores: {self.method!r} has no calibrated relevance on corpus {self.corpus!r} (a stored run with judged queries fits one): use method 'dense', whose cosine is one, or similarity_search_with_score"
            )
        return [(_document(hit), hit.relevance if hit.relevance is not None else min(1.0, max(0.0, float(hit.score)))) for hit in hits]

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, filter: dict | str | None = None, **kwargs: Any) -> list[Document]:
        """``k`` of the top ``fetch_k`` documents, each the most relevant to the query and least alike to
        those chosen before it (``lambda_mult``: 1, relevance only), by the corpus's dense model's vectors
        of each document's best span (with its title, as its nodes are encoded)."""
        hits = self._search(query, fetch_k, filter, kwargs).hits
        if not hits:
            return []
        found = [_document(hit) for hit in hits]
        embeddings = self.embeddings  # each document's opening (what the model reads of it: 256 tokens), with its title as its nodes are encoded
        passages = [retrieval_text(hit.title, hit.text)[:MAX_EMBED_CHARS] for hit in hits]
        chosen = maximal_marginal_relevance(np.asarray(embeddings.embed_query(query)), embeddings.embed_documents(passages), lambda_mult=lambda_mult, k=k)
        return [found[i] for i in chosen]

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        lake: Any = None,
        corpus: str = "",
        method: str = "dense",
        **kwargs: Any,
    ) -> GraphLakeVectorStore:
        """A store over ``corpus`` of ``lake`` (both required) holding ``texts``."""
        no_extra_arguments("from_texts", kwargs)
        if lake is None or not corpus:
            raise RequestError("from_texts: give lake= (a GraphLake or RemoteLake) and corpus= (a corpus the lake owns, declared if new)")
        store = cls(lake, corpus, method, embedding)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    def from_documents(cls, documents: list[Document], embedding: Embeddings | None = None, **kwargs: Any) -> GraphLakeVectorStore:
        """A store over ``corpus`` of ``lake`` (both required) holding ``documents`` (their ids kept)."""
        ids = kwargs.pop("ids", None) or [document.id for document in documents]
        return cls.from_texts([d.page_content for d in documents], embedding, [d.metadata for d in documents], ids=ids, **kwargs)

    def as_retriever(self, **kwargs: Any) -> Any:
        """graphlake's retriever over this corpus and method (``search_kwargs``: k, filter, method and
        query-time parameters), reading at least through this store's last write."""
        search_type = kwargs.pop("search_type", "similarity")
        if search_type != "similarity":
            raise RequestError(
                f"as_retriever: search_type {search_type!r}: graphlake's retriever ranks by its method (similarity); use the store's max_marginal_relevance_search, or min_relevance in search_kwargs for a threshold"
            )
        retriever = self.lake.as_retriever(**{"corpus": self.corpus, "method": self.method, **kwargs})
        retriever._written = self._written
        return retriever

    def _search(self, query: str, k: int, filter: dict | str | None, overrides: dict[str, Any]) -> SearchResult:
        fixed = sorted(set(overrides) & STORE_SETTINGS)
        if fixed:
            raise RequestError(f"{fixed[0]}: a vector store returns whole documents, each once, reading its own writes; search the lake or its retriever to set {fixed[0]}")
        reading = {"after_write": self._written} if self._written is not None else {}
        return self.lake.search(self.corpus, overrides.pop("method", self.method), query, k=k, filter=filter, group_by="document", context="document", **reading, **overrides)


_BATCH = 256  # texts an embed call takes


def _document(hit) -> Document:
    return Document(page_content=hit.context if hit.context is not None else hit.text, metadata=hit.metadata, id=hit.doc_id)
