"""graphlake as a LlamaIndex retriever (the ``llamaindex`` extra): a lake searched in process
(``GraphLake``) or through a running server (``RemoteLake``), its hits as ``NodeWithScore``\\ s of
``TextNode``\\ s that carry their document's metadata and their place in it; LlamaIndex's own
``MetadataFilters`` work as graphlake's filters do.

    from graphlake.api import open_lake
    from graphlake.api.llama_index import GraphLakeRetriever

    retriever = GraphLakeRetriever(open_lake("lake"), corpus="demo", filter="year >= 2016")
    nodes = retriever.retrieve("Which vessel carried the BenthoCam sled?")
"""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from graphlake.api.results import RequestError

_OPERATORS = {FilterOperator.EQ: "eq", FilterOperator.NE: "ne", FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte", FilterOperator.IN: "in"}


def from_metadata_filters(filters: MetadataFilters) -> dict:
    """LlamaIndex's filters as graphlake's JSON form (``nin`` as ``not in``); an operator graphlake has
    no counterpart for is refused naming it."""
    parts = []
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            parts.append(from_metadata_filters(item))
        elif item.operator == FilterOperator.NIN:
            parts.append({"not": {"field": item.key, "in": list(item.value)}})
        elif item.operator in _OPERATORS:
            parts.append({"field": item.key, _OPERATORS[item.operator]: list(item.value) if item.operator == FilterOperator.IN else item.value})
        else:
            raise RequestError(f"filter: LlamaIndex's {item.operator.value!r} on {item.key!r} has no graphlake counterpart (eq, ne, gt, gte, lt, lte, in, nin)")
    group = {FilterCondition.AND: "and", FilterCondition.OR: "or"}.get(filters.condition)
    if group is None:
        raise RequestError(f"filter: LlamaIndex's condition {filters.condition!r} has no graphlake counterpart (and, or)")
    return parts[0] if len(parts) == 1 else {group: parts}


class GraphLakeRetriever(BaseRetriever):
    """The top ``k`` nodes of ``method`` on ``corpus`` (a list: several, fused), those passing ``filter``
    (graphlake's JSON or text form, or LlamaIndex's ``MetadataFilters``)."""

    def __init__(self, lake: Any, corpus: str | list[str], method: str = "rrf", k: int = 4, filter: MetadataFilters | MetadataFilter | dict | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(filter, MetadataFilter):
            filter = MetadataFilters(filters=[filter])
        self.lake, self.corpus, self.method, self.k = lake, corpus, method, k
        self.filter = from_metadata_filters(filter) if isinstance(filter, MetadataFilters) else filter

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self.lake.search(self.corpus, self.method, query_bundle.query_str, self.k, self.filter)
        return [
            NodeWithScore(node=TextNode(id_=hit.node_id, text=hit.text, metadata=hit.citation(), start_char_idx=hit.start, end_char_idx=hit.end), score=hit.score)
            for hit in result.hits
        ]
