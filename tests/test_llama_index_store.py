"""graphlake as LlamaIndex's vector store, as an application uses it: ``VectorStoreIndex.from_vector_store``,
``insert`` of a document split into several nodes, a retriever and a query engine with
``MetadataFilters``, ``delete_ref_doc`` removing every node, ``get_nodes``, ``delete_nodes`` and
``clear``; in process and through a real ``graphlake serve``. The query engine's LLM is LlamaIndex's
``MockLLM`` (no model can answer here; what is checked is what the store retrieves)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core", reason="llama-index-core is not installed: pip install -e '.[llamaindex]'")

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import NodeRelationship
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery, VectorStoreQueryMode

from graphlake.api import GraphLake, RemoteLake, RequestError
from graphlake.api.llama_index_store import GraphLakeVectorStore
from served import KEY, Server

SURVEY = " ".join(
    f"Dive {i} of the Nereid survey logged {name} at {depth} metres off the northern reef."
    for i, (name, depth) in enumerate([("sea otters", 4), ("kelp holdfasts", 9), ("urchin barrens", 12), ("a sunken tide gauge", 18), ("humpback song", 25), ("bleached coral", 7)] * 3)
)


@pytest.fixture(scope="module")
def lakes(tmp_path_factory):
    home = tmp_path_factory.mktemp("lake")
    server = Server(home, tmp_path_factory.mktemp("server") / "server.log", KEY)
    remote = RemoteLake(server.url, api_key=KEY)
    try:
        yield {"in_process": GraphLake(home), "remote": remote}
    finally:
        remote.close()
        server.stop()


@pytest.mark.parametrize("where", ["in_process", "remote"])
def test_a_vector_store_index_inserts_queries_and_deletes_through_the_lake(lakes, where):
    lake = lakes[where]
    store = GraphLakeVectorStore(lake=lake, corpus=f"li-{where}")
    index = VectorStoreIndex.from_vector_store(store, embed_model=store.embed_model, transformations=[SentenceSplitter(chunk_size=64, chunk_overlap=0)])
    index.insert(Document(text=SURVEY, id_="survey", metadata={"year": 2022, "kind": "log"}))
    index.insert(Document(text="The harbour master's notes on mooring fees.", id_="fees", metadata={"year": 2019, "kind": "memo"}))
    nodes = store.get_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="kind", value="log")]))
    assert len(nodes) >= 4 and all(n.ref_doc_id == "survey" and n.metadata == {"year": 2022, "kind": "log"} for n in nodes)
    assert "".join(n.text for n in sorted(nodes, key=lambda n: SURVEY.index(n.text))).replace(" ", "") == SURVEY.replace(" ", "")  # the splits, whole

    retrieved = index.as_retriever(similarity_top_k=3).retrieve("Where were the urchin barrens logged?")
    assert retrieved[0].node.ref_doc_id == "survey" and "urchin barrens" in retrieved[0].node.text
    assert retrieved[0].score >= retrieved[-1].score
    memo_only = MetadataFilters(filters=[MetadataFilter(key="year", value=2020, operator=FilterOperator.LT)])
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3, filters=memo_only)
    answer = engine.query("Where were the urchin barrens logged?")
    assert [n.node.node_id for n in answer.source_nodes] == [n.node_id for n in store.get_nodes(node_ids=[n.node.node_id for n in answer.source_nodes])]
    assert {n.node.ref_doc_id or n.node.node_id for n in answer.source_nodes} == {"fees"}
    hybrid = store.query(VectorStoreQuery(query_str="mooring fees", similarity_top_k=2, mode=VectorStoreQueryMode.HYBRID))
    assert hybrid.ids[0] == store.get_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="kind", value="memo")]))[0].node_id
    with pytest.raises(RequestError, match="mode 'mmr' has no graphlake method"):
        store.query(VectorStoreQuery(query_str="x", mode=VectorStoreQueryMode.MMR))

    index.delete_ref_doc("survey")
    assert store.get_nodes(node_ids=[n.node_id for n in nodes]) == []
    left = store.get_nodes()
    assert len(left) == 1 and left[0].relationships[NodeRelationship.SOURCE].node_id == "fees"
    assert all(n.node.ref_doc_id == "fees" for n in index.as_retriever(similarity_top_k=5).retrieve("urchin barrens"))
    store.add([left[0].model_copy(update={"id_": "copy"})])
    store.delete_nodes(node_ids=["copy"])
    assert [n.node_id for n in store.get_nodes()] == [left[0].node_id]
    store.clear()
    assert store.get_nodes() == [] and store.query(VectorStoreQuery(query_str="mooring", similarity_top_k=3)).nodes == []
    assert lake.drop_corpus(f"li-{where}")
