"""graphlake as a LangChain retriever (the ``langchain`` extra): a lake searched in process
(``GraphLake``) or through a running server (``RemoteLake``), its hits as LangChain ``Document``\\ s
whose metadata cite them.

    from graphlake.api import open_lake
    from graphlake.api.langchain import GraphLakeRetriever

    retriever = GraphLakeRetriever(lake=open_lake("lake"), corpus="demo", filter="year >= 2016")
    documents = retriever.invoke("Which vessel carried the BenthoCam sled?")
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict


class GraphLakeRetriever(BaseRetriever):
    """The top ``k`` nodes of ``method`` on ``corpus`` (a list: several, fused), those passing ``filter``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    lake: Any  # a GraphLake or a RemoteLake: anything with their search()
    corpus: str | list[str]
    method: str = "rrf"
    k: int = 4
    filter: dict | str | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        result = self.lake.search(self.corpus, self.method, query, self.k, self.filter)
        return [Document(page_content=hit.text, metadata=hit.citation(), id=hit.node_id) for hit in result.hits]
