"""graphlake in the two RAG frameworks, with their real libraries: LangChain's and LlamaIndex's
retrievers over the lake in process and over a real ``graphlake serve``, answering with those
libraries' own types, whose metadata cite the hit; and the hits' citations themselves: a source, and
offsets that slice the stored document text back to the chunk."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from served import KEY

from graphlake.api import GraphLake
from graphlake.api.client import RemoteLake
from graphlake.warehouse.storage import LakeStorage

QUESTION = "Which vessel carried the BenthoCam sled?"


def test_hits_cite_their_document_by_source_and_offsets(demo_lake):
    documents = {row["doc_id"]: row for row in LakeStorage(demo_lake.home).read("documents", {"corpus": "demo"}).to_pylist()}
    result, cited = GraphLake(demo_lake.home).search("demo", "rrf", QUESTION, k=10), False
    for hit in result.hits:
        stored = documents[hit.doc_id]
        assert stored["text"][hit.start : hit.end] == hit.text and hit.corpus == "demo" and hit.title == stored["title"]
        assert hit.metadata == json.loads(stored["metadata"])
        if hit.source.endswith("tables.json"):  # a table of the demo's schema: the file it was read from
            continue
        with open(hit.source, encoding="utf-8") as corpus:  # a JSON-lines record: the file it was read from holds it
            assert hit.doc_id in {json.loads(line)["id"] for line in corpus}
        cited = True
    assert cited
    top = result.hits[0]
    assert {t.lower() for t in top.terms} >= {"benthocam", "sled"} and all(term in top.text for term in top.terms), top.terms  # as the text spells them
    assert len(top.snippet) <= 250 and any(term in top.snippet for term in top.terms), top.snippet


def test_the_readme_python_runs_on_the_demo_lake(demo_lake):
    """The README's Python blocks, in order, on the lake the demo built: a filtered search and a retriever."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    printed, namespace = io.StringIO(), {}
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(block.replace('open_lake("lake")', f"open_lake({str(demo_lake.home)!r})"), namespace)  # noqa: S102
    lines = printed.getvalue().splitlines()
    assert len(lines) == 5 + 4 and all("corpus.jsonl" in line for line in lines), lines  # five hits, four documents, each citing its file


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_framework_retriever_answers_in_process_and_through_the_server(framework, served, demo_lake):
    in_process, remote = GraphLake(demo_lake.home), RemoteLake(served.url, api_key=KEY)
    expected = [hit.node_id for hit in in_process.search("demo", "rrf", QUESTION, k=3, filter="year >= 2016").hits]
    for lake in (in_process, remote):
        if framework == "langchain":
            from langchain_core.documents import Document

            from graphlake.api.langchain import GraphLakeRetriever

            documents = GraphLakeRetriever(lake=lake, corpus="demo", k=3, filter="year >= 2016").invoke(QUESTION)
            assert all(isinstance(d, Document) for d in documents)
            found = [(d.id, d.page_content, d.metadata) for d in documents]
        else:
            from llama_index.core.schema import NodeWithScore
            from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter

            from graphlake.api.llama_index import GraphLakeRetriever

            nodes = GraphLakeRetriever(lake, "demo", k=3, filter=MetadataFilter(key="year", value=2016, operator=FilterOperator.GTE)).retrieve(QUESTION)
            assert all(isinstance(n, NodeWithScore) for n in nodes)
            assert all(n.node.end_char_idx - n.node.start_char_idx == len(n.node.get_content()) for n in nodes)
            found = [(n.node.node_id, n.node.get_content(), n.node.metadata) for n in nodes]
        assert [node_id for node_id, _, _ in found] == expected, (framework, type(lake).__name__)
        for node_id, text, metadata in found:  # the citation travels in the framework's own metadata
            assert metadata["node_id"] == node_id and metadata["year"] >= 2016 and metadata["corpus"] == "demo"
            assert metadata["source"].endswith("corpus.jsonl") and metadata["end"] - metadata["start"] == len(text)
    remote.close()
