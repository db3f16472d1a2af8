"""graphlake as a LlamaIndex retriever (the ``llamaindex`` extra): a lake searched in process
(``GraphLake``) or through a running server (``RemoteLake``), its hits as ``NodeWithScore``\\ s of
``TextNode``\\ s. A node carries its document's metadata as ingested and graphlake's citation and
provenance under ``"graphlake"``; its ``ref_doc_id`` is its document, its PREVIOUS and NEXT the
document's neighbouring nodes; only its text and the fields named in ``llm_metadata`` (the title, by
default) reach an LLM's prompt or an embedding. LlamaIndex's ``MetadataFilters`` work as graphlake's
filters do, every operator graphlake can mean mapped, the others refused by name.

    from graphlake.api import open_lake
    from graphlake.api.llama_index import GraphLakeRetriever

    retriever = GraphLakeRetriever(open_lake("lake"), corpus="demo", similarity_top_k=3, filter="year >= 2016")
    nodes = retriever.retrieve("Which vessel carried the BenthoCam sled?")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import BaseNode, NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from graphlake.api.results import NAMESPACE, RequestError, SearchResult
from graphlake.api.retriever_settings import SearchSettings, no_extra_arguments, upserted, written_corpus
from graphlake.warehouse.write_checks import MAX_WRITE_DOCUMENTS

_SAME = {FilterOperator.EQ: "eq", FilterOperator.NE: "ne", FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte"}
_LISTED = {FilterOperator.IN: "in", FilterOperator.ANY: "in"}  # ANY: a list field holding any of the values, as graphlake's in means on lists
MAPPED = "==, !=, >, >=, <, <=, in, nin, any, all, contains, text_match, is_empty"
REF_DOC_ID = "ref_doc_id"  # the metadata key a node split from a document keeps that document's id under


def from_metadata_filters(filters: MetadataFilters) -> dict | None:
    """LlamaIndex's filters as graphlake's JSON form, None for none. ``contains`` (a list holding the value)
    is graphlake's ``eq`` on a list, ``any`` its ``in``, ``all`` one ``eq`` per value, ``text_match`` its
    ``contains``, ``is_empty`` ``exists: false``; the NOT condition holds where none of its filters does.
    An operator graphlake cannot mean is refused naming it."""
    parts = [part for item in filters.filters if (part := _part(item)) is not None]
    if not parts:
        return None
    if filters.condition == FilterCondition.NOT:
        return {"not": parts[0] if len(parts) == 1 else {"or": parts}}
    group = {FilterCondition.AND: "and", FilterCondition.OR: "or"}.get(filters.condition or FilterCondition.AND)
    if group is None:
        raise RequestError(f"filter: LlamaIndex's condition {filters.condition!r} has no graphlake counterpart (and, or, not)")
    return parts[0] if len(parts) == 1 else {group: parts}


def _part(item: MetadataFilter | MetadataFilters) -> dict | None:
    if isinstance(item, MetadataFilters):
        return from_metadata_filters(item)
    key, operator, value = item.key, item.operator, item.value
    values = list(value) if isinstance(value, list) else [value]  # one value for in: a list of one, never its characters
    if operator in _SAME:
        return {"field": key, _SAME[operator]: value}
    if operator in _LISTED:
        return {"field": key, "in": values}
    if operator == FilterOperator.NIN:
        return {"not": {"field": key, "in": values}}
    if operator == FilterOperator.ALL:
        return {"and": [{"field": key, "eq": one} for one in values]}
    if operator == FilterOperator.CONTAINS:
        return {"field": key, "eq": value}
    if operator == FilterOperator.TEXT_MATCH:
        return {"field": key, "contains": value}
    if operator == FilterOperator.IS_EMPTY:
        return {"field": key, "exists": False}
    raise RequestError(f"filter: LlamaIndex's {operator.value!r} on {key!r} has no graphlake counterpart ({MAPPED}; text_match is case-sensitive)")


class GraphLakeRetriever(BaseRetriever):
    """The top ``similarity_top_k`` (or ``k``) nodes of ``method`` on ``corpus`` (a list: several, fused),
    those passing ``filter`` (graphlake's JSON or text form, or LlamaIndex's ``MetadataFilters``);
    ``search_kwargs``: the method's query-time parameters; ``llm_metadata``: the metadata fields an LLM
    and an embedding see beside the text (``"title"`` is the document's title where its metadata have none)."""

    def __init__(
        self,
        lake: Any,
        corpus: str | list[str],
        method: str = "rrf",
        k: int | None = None,
        filter: MetadataFilters | MetadataFilter | dict | str | None = None,
        similarity_top_k: int | None = None,
        search_kwargs: dict[str, Any] | None = None,
        llm_metadata: Sequence[str] = ("title",),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if k is not None and similarity_top_k is not None and k != similarity_top_k:
            raise RequestError(f"k ({k}) and similarity_top_k ({similarity_top_k}) name the same setting: give one")
        if isinstance(filter, MetadataFilter):
            filter = MetadataFilters(filters=[filter])
        where = from_metadata_filters(filter) if isinstance(filter, MetadataFilters) else filter
        self.lake, self.llm_metadata = lake, tuple(llm_metadata)
        self.settings = SearchSettings(corpus, method, k or similarity_top_k or 4, where).updated(search_kwargs or {}, "search_kwargs")
        self.written: int | None = None  # the number of its last write: its searches read at least through it

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(self.settings.reading(self.written).search(self.lake, query_bundle.query_str), self.llm_metadata)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(await self.settings.reading(self.written).asearch(self.lake, query_bundle.query_str), self.llm_metadata)

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Upsert ``nodes`` (documents or text nodes, each kept whole under its id) into the corpus (one
        the lake owns), as a LlamaIndex vector store's ``add``; their ids, once the write is durable. A
        node split from a document keeps that document's id under ``ref_doc_id`` in its metadata (as
        LlamaIndex's own vector stores keep it), which ``delete`` and a retrieved node's SOURCE read."""
        no_extra_arguments("add", kwargs)
        self.written = self.lake.upsert(written_corpus(self.settings.corpus), [upserted(node.node_id, node.get_content(), kept_metadata(node)) for node in nodes]).seq
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        """Delete the document ``ref_doc_id`` and every node added from it from the corpus (one the lake
        owns), as a vector store's ``delete``: the nodes a search reads now, in as many writes as they
        take (a node added meanwhile stays)."""
        no_extra_arguments("delete", kwargs)
        self.written = delete_document(self.lake, written_corpus(self.settings.corpus), ref_doc_id)


def delete_document(lake: Any, corpus: str, ref_doc_id: str) -> int:
    """Delete the document ``ref_doc_id`` and every node added from it (those a search reads now), in as
    many writes as they take (a node added meanwhile stays); the last write's number."""
    ids = [ref_doc_id, *lake.document_ids(corpus, {"field": REF_DOC_ID, "eq": ref_doc_id})]
    for start in range(0, len(ids), MAX_WRITE_DOCUMENTS):  # a document split into more nodes than one write takes
        written = lake.delete(corpus, ids[start : start + MAX_WRITE_DOCUMENTS]).seq
    return written


def kept_metadata(node: BaseNode) -> dict[str, Any]:
    """The metadata a node is written with: its own, and the document it was split from."""
    ref = node.ref_doc_id
    if ref is None or ref == node.node_id:
        return dict(node.metadata)
    if node.metadata.get(REF_DOC_ID, ref) != ref:
        raise RequestError(f"add: node {node.node_id!r}: its metadata's {REF_DOC_ID!r} ({node.metadata[REF_DOC_ID]!r}) is not the document it was split from ({ref!r})")
    return {**node.metadata, REF_DOC_ID: ref}


def nodes(result: SearchResult, shown: tuple[str, ...]) -> list[NodeWithScore]:
    found = []
    for hit in result.hits:
        own = {key: value for key, value in hit.metadata.items() if key != REF_DOC_ID}  # LlamaIndex's bookkeeping, back in its relationship
        metadata = {**own, **({"title": hit.title} if "title" in shown and "title" not in own else {}), NAMESPACE: result.provenance(hit)}
        hidden = [key for key in metadata if key not in shown]
        related = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.metadata.get(REF_DOC_ID, hit.doc_id))}
        if hit.prev_node_id is not None:
            related[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=hit.prev_node_id)
        if hit.next_node_id is not None:
            related[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=hit.next_node_id)
        widened = hit.context is not None  # the context asked, in place of the hit's own span: what a prompt reads
        node = TextNode(
            id_=hit.node_id, text=hit.context if widened else hit.text, metadata=metadata, excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=hidden,
            relationships=related, start_char_idx=hit.context_start if widened else hit.start, end_char_idx=hit.context_end if widened else hit.end,
        )  # fmt: skip
        found.append(NodeWithScore(node=node, score=hit.score if hit.relevance is None else hit.relevance))  # one scale for every method where calibrated
    return found
