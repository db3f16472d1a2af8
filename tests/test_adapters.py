"""graphlake in the two RAG frameworks, with their real libraries: LangChain's and LlamaIndex's
retrievers over the lake in process and over a real ``graphlake serve``, answering with those
libraries' own types, whose metadata cite the hit; and the hits' citations themselves: a source, and
offsets that slice the stored document text back to the chunk."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from graphlake.api import GraphLake, RequestError
from graphlake.api.client import RemoteLake
from graphlake.warehouse.storage import LakeStorage
from served import KEY

QUESTION = "Which vessel carried the BenthoCam sled?"


def test_hits_cite_their_document_by_source_and_offsets(demo_lake):
    documents = {row["doc_id"]: row for row in LakeStorage(demo_lake.home).read("documents", {"corpus": "demo"}).to_pylist()}
    chunks = {(row["doc_id"], row["chunk_idx"]): row["node_id"] for row in LakeStorage(demo_lake.home).read("nodes", {"corpus": "demo"}).to_pylist()}
    result, cited = GraphLake(demo_lake.home).search("demo", "rrf", QUESTION, k=10, group_by="chunk"), False  # nodes: spans have their own test
    for hit in result.hits:
        stored = documents[hit.doc_id]
        assert stored["text"][hit.start : hit.end] == hit.text and hit.corpus == "demo" and hit.title == stored["title"]
        assert chunks[hit.doc_id, hit.chunk] == hit.node_id and (hit.prev_node_id, hit.next_node_id) == (chunks.get((hit.doc_id, hit.chunk - 1)), chunks.get((hit.doc_id, hit.chunk + 1)))
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
    few = GraphLake(demo_lake.home).search("demo", "bm25", "BenthoCam", k=100)  # fewer than k: said why
    assert len(few.hits) < 100 and few.notes == [f"{len(few.hits)} of the 100 hits asked: bm25 ranks no other node for this query"]


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
    """Each framework's retriever, on the lake and on a server, answers as the API does with the settings
    given where that framework gives them: LangChain's fields, ``search_kwargs``, ``as_retriever`` and
    per call (a setting the method does not take refused, not dropped); LlamaIndex's ``similarity_top_k``
    and ``MetadataFilters``. The document's metadata stay as ingested, graphlake's citation beside them."""
    in_process, remote = GraphLake(demo_lake.home), RemoteLake(served.url, api_key=KEY)
    hits = in_process.search("demo", "rrf", QUESTION, k=3, filter="year >= 2016").hits
    expected, documents_of = [hit.node_id for hit in hits], [hit.doc_id for hit in hits]  # LangChain's Document.id: the id the document was given
    stored = {hit.doc_id: hit.metadata for hit in in_process.search("demo", "rrf", QUESTION, k=50).hits}
    for lake in (in_process, remote):
        if framework == "langchain":
            from langchain_core.documents import Document
            from langchain_core.runnables import RunnableLambda

            from graphlake.api.langchain import GraphLakeRetriever

            retriever = lake.as_retriever(corpus="demo", search_kwargs={"k": 3, "filter": "year >= 2016"})
            documents = retriever.invoke(QUESTION)
            assert all(isinstance(d, Document) for d in documents)
            chain = retriever | RunnableLambda(lambda docs: [d.id for d in docs])  # inside an LCEL chain, its settings hold
            assert chain.invoke(QUESTION) == chain.batch([QUESTION])[0] == documents_of
            assert [d.id for d in retriever.invoke(QUESTION, k=1)] == documents_of[:1]  # per call, over search_kwargs
            assert {d.metadata["year"] for d in retriever.invoke(QUESTION, filter="year < 2016")} <= set(range(2000, 2016))
            assert [d.id for d in GraphLakeRetriever(lake=lake, corpus="demo", k=3, filter="year >= 2016").invoke(QUESTION)] == documents_of
            with pytest.raises(RequestError, match="depth cannot be set per query"):
                retriever.invoke(QUESTION, depth=5)  # rrf has no depth: refused, not dropped
            with pytest.raises(ValidationError, match="serach_kwargs"):
                lake.as_retriever(corpus="demo", serach_kwargs={"k": 1})
            found = [(d.metadata["graphlake"]["node_id"], d.page_content, d.metadata) for d in documents]
        else:
            from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore
            from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter

            from graphlake.api.llama_index import GraphLakeRetriever

            nodes = GraphLakeRetriever(lake, "demo", similarity_top_k=3, filter=MetadataFilter(key="year", value=2016, operator=FilterOperator.GTE)).retrieve(QUESTION)
            assert all(isinstance(n, NodeWithScore) for n in nodes)
            for n in nodes:  # what reaches a prompt: the title and the text, no citation, no other field
                assert n.node.end_char_idx - n.node.start_char_idx == len(n.node.get_content())
                title = n.node.metadata["graphlake"]["title"]
                assert n.node.get_content(MetadataMode.LLM) == n.node.get_content(MetadataMode.EMBED) == f"title: {title}\n\n{n.node.get_content()}"
                assert n.node.ref_doc_id == n.node.metadata["graphlake"]["doc_id"]
                chunk = int(n.node.node_id.rpartition("#")[2])  # the demo's node ids: document#chunk
                assert (NodeRelationship.PREVIOUS in n.node.relationships) == (chunk > 0)
                assert chunk == 0 or n.node.relationships[NodeRelationship.PREVIOUS].node_id == f"{n.node.ref_doc_id}#{chunk - 1}"
            bare = GraphLakeRetriever(lake, "demo", k=1, llm_metadata=()).retrieve(QUESTION)[0].node
            assert bare.get_content(MetadataMode.LLM) == bare.get_content()
            found = [(n.node.node_id, n.node.get_content(), {k: v for k, v in n.node.metadata.items() if k != "title"}) for n in nodes]
        assert [node_id for node_id, _, _ in found] == expected, (framework, type(lake).__name__)
        for node_id, text, metadata in found:  # the citation travels in the framework's own metadata, under its name
            cited = metadata.pop("graphlake")
            assert metadata == stored[cited["doc_id"]] and metadata["year"] >= 2016
            assert cited["node_id"] == node_id and cited["corpus"] == "demo" and cited["method"] == "rrf" and cited["snapshot"] >= 1
            assert cited["source"].endswith("corpus.jsonl") and cited["end"] - cited["start"] == len(text)
    remote.close()


def test_every_llama_index_filter_operator_is_mapped_or_refused_by_name(demo_lake):
    """Each of LlamaIndex's operators selects what its graphlake counterpart does, or is refused naming it;
    an operator a new LlamaIndex adds fails here until it is mapped. One value for ``in`` is a list of
    one, not its characters; an empty ``MetadataFilters`` is no filter; NOT holds where none of its filters does."""
    from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

    from graphlake.api.llama_index import GraphLakeRetriever

    lake, query = GraphLake(demo_lake.home), "sled survey vessel"
    pair = ["Colm Dempsey", "Ingrid Valtersen"]
    cases = {
        FilterOperator.EQ: ("year", 2015, "year = 2015"),
        FilterOperator.NE: ("year", 2015, "year != 2015"),
        FilterOperator.GT: ("year", 2015, "year > 2015"),
        FilterOperator.GTE: ("year", 2015, "year >= 2015"),
        FilterOperator.LT: ("year", 2016, "year < 2016"),
        FilterOperator.LTE: ("year", 2016, "year <= 2016"),
        FilterOperator.IN: ("doc_id", "d04", 'doc_id in ["d04"]'),
        FilterOperator.NIN: ("doc_id", ["d04", "d35"], 'doc_id not in ["d04", "d35"]'),
        FilterOperator.ANY: ("authors", pair, f"authors in {json.dumps(pair)}"),
        FilterOperator.ALL: ("authors", pair, f'authors = "{pair[0]}" and authors = "{pair[1]}"'),
        FilterOperator.CONTAINS: ("authors", pair[1], f'authors = "{pair[1]}"'),
        FilterOperator.TEXT_MATCH: ("title", "Sled", 'title contains "Sled"'),
        FilterOperator.IS_EMPTY: ("cites", None, "not cites exists"),
    }
    refused = {FilterOperator.TEXT_MATCH_INSENSITIVE}
    assert set(cases) | refused == set(FilterOperator)

    def ranked(where) -> list[str]:
        return [n.node.node_id for n in GraphLakeRetriever(lake, "demo", method="bm25", k=300, filter=where).retrieve(query)]

    def expected(text: str | None) -> list[str]:
        return [hit.node_id for hit in lake.search("demo", "bm25", query, 300, text).hits]

    everything = expected(None)
    for operator, (key, value, text) in cases.items():
        found = ranked(MetadataFilter(key=key, value=value, operator=operator))
        assert found == expected(text) and 0 < len(found) < len(everything), (operator, len(found))
    two = [MetadataFilter(key="year", value=2015, operator=FilterOperator.EQ), MetadataFilter(key="doc_id", value="d04", operator=FilterOperator.EQ)]
    assert ranked(MetadataFilters(filters=two, condition=FilterCondition.NOT)) == expected('not (year = 2015 or doc_id = "d04")')
    assert ranked(MetadataFilters(filters=[])) == everything
    with pytest.raises(RequestError, match="'text_match_insensitive' on 'title'"):
        ranked(MetadataFilter(key="title", value="sled", operator=FilterOperator.TEXT_MATCH_INSENSITIVE))


def test_awaited_searches_leave_the_event_loop_free(served, demo_lake):
    """Six concurrent ``aretrieve`` of graphlake_ltr (the slowest default) while a task ticks every
    millisecond: the loop never waits 20 ms for its turn (the best of three rounds: another process's
    load is not the retriever's doing; searching on the loop stalled it about six searches' time, 90 ms
    and more). The answers are the synchronous ones; a server's ``asearch`` answers as its ``search``."""
    from llama_index.core.schema import QueryBundle

    from graphlake.api.llama_index import GraphLakeRetriever

    lake = GraphLake(demo_lake.home)
    retriever = GraphLakeRetriever(lake, "demo", method="graphlake_ltr", k=5)
    questions = [QUESTION, "Where did the expedition winter?", "Who built the camera?", "What was measured at depth?", "Which institute ran the survey?", "When was the rig upgraded?"]
    expected = [[n.node.node_id for n in retriever.retrieve(q)] for q in questions]  # and loads what it reads

    async def round_() -> tuple[float, list[list[str]]]:
        gaps, done = [], asyncio.Event()

        async def tick() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                gaps.append(time.perf_counter() - last)
                last = time.perf_counter()

        ticking = asyncio.create_task(tick())
        found = await asyncio.gather(*(retriever.aretrieve(QueryBundle(q)) for q in questions))
        done.set()
        await ticking
        return max(gaps), [[n.node.node_id for n in nodes] for nodes in found]

    rounds = [asyncio.run(round_()) for _ in range(3)]
    assert all(found == expected for _, found in rounds)
    assert min(gap for gap, _ in rounds) < 0.020, [round(gap * 1000, 1) for gap, _ in rounds]
    remote = RemoteLake(served.url, api_key=KEY)
    assert asyncio.run(remote.asearch("demo", "rrf", QUESTION, k=3)).hits == remote.search("demo", "rrf", QUESTION, k=3).hits
    remote.close()


def test_hits_are_spans_of_their_document_one_a_document_when_grouped_and_widened_by_context(served, demo_lake):
    """By default no two hits of one document overlap (the demo's chunker carries sentences over: its
    overlapping nodes merge into one span, the document's text between its ends); grouped by document,
    one hit a document, its other ranked spans listed; with ``context``, the neighbouring nodes' text.
    The same through the server and a LangChain retriever; a bad grouping refused naming it."""
    storage = LakeStorage(demo_lake.home)
    texts = {row["doc_id"]: row["text"] for row in storage.read("documents", {"corpus": "demo"}).to_pylist()}
    nodes = {(row["start"], row["end"]) for row in storage.read("nodes", {"corpus": "demo"}).to_pylist()}
    lake = GraphLake(demo_lake.home)
    chunks, spans = (lake.search("demo", "rrf", QUESTION, k=30, group_by=by).hits for by in ("chunk", "span"))
    assert [h.node_id for h in spans[:3]] == [h.node_id for h in chunks[:3]] and len(spans) == 30
    assert any((h.start, h.end) not in nodes for h in spans)  # some merged: the check below can fail
    for i, hit in enumerate(spans):
        assert hit.text == texts[hit.doc_id][hit.start : hit.end] and hit.spans == [[hit.start, hit.end]]
        assert not [other for other in spans[:i] if other.doc_id == hit.doc_id and other.start < hit.end and hit.start < other.end], hit.node_id
    grouped = lake.search("demo", "rrf", QUESTION, k=8, group_by="document", context=1)
    first_seen = list(dict.fromkeys(h.doc_id for h in chunks))[:8]
    assert [h.doc_id for h in grouped.hits] == first_seen  # one a document, in the order its best node ranked
    for hit in grouped.hits:
        assert hit.spans[0] == [hit.start, hit.end] and hit.context == texts[hit.doc_id][hit.context_start : hit.context_end]
        assert hit.context_start <= hit.start < hit.end <= hit.context_end and (hit.context_start, hit.context_end) != (hit.start, hit.end) or len(texts[hit.doc_id]) == hit.end - hit.start
    assert sum(len(h.spans) for h in grouped.hits) > len(grouped.hits)  # other spans of a document: listed
    whole = lake.search("demo", "bm25", "sled", k=2, context="document").hits[0]
    assert whole.context == texts[whole.doc_id]
    remote = RemoteLake(served.url, api_key=KEY)
    assert remote.search("demo", "rrf", QUESTION, k=8, group_by="document", context=1).hits == grouped.hits
    documents = remote.as_retriever(corpus="demo", search_kwargs={"group_by": "document", "context": 1}).invoke(QUESTION, k=8)
    assert [d.page_content for d in documents] == [h.context for h in grouped.hits]
    with pytest.raises(RequestError, match="group_by: Input should be 'span', 'document' or 'chunk'"):
        remote.search("demo", "rrf", QUESTION, group_by="doc")
    with pytest.raises(RequestError, match="group_by: one of span, document, chunk, got 'doc'"):
        lake.search("demo", "rrf", QUESTION, group_by="doc")
    with pytest.raises(RequestError, match=r"context: neighbouring nodes a side, 0 to \d+, or \"document\", got 'doc'"):
        lake.search("demo", "rrf", QUESTION, context="doc")
    remote.close()


def test_relevance_is_one_scale_for_every_method_and_a_threshold_means_the_same(served, demo_lake):
    """Each hit's relevance is its method's score mapped (isotonic, fitted on the stored run's judged test
    queries) into [0, 1], never rising down the ranking; ``min_relevance`` keeps those above it, the same
    in process, over HTTP and through LlamaIndex, whose ``SimilarityPostprocessor(similarity_cutoff=0.5)``
    then keeps what ``min_relevance=0.5`` does, whatever the method's own score scale."""
    from llama_index.core.postprocessor import SimilarityPostprocessor

    from graphlake.api.llama_index import GraphLakeRetriever

    lake, remote = GraphLake(demo_lake.home), RemoteLake(served.url, api_key=KEY)
    scales = {}
    for method in ("bm25", "rrf", "ap_three", "graphlake_ltr"):
        result = lake.search("demo", method, QUESTION, k=20, group_by="chunk")
        relevance = [hit.relevance for hit in result.hits]
        assert result.calibration.startswith("isotonic on 23 judged queries") and all(0 <= r <= 1 for r in relevance), (method, result.calibration)
        assert relevance == sorted(relevance, reverse=True), method
        scales[method] = result.hits[0].score
        kept = lake.search("demo", method, QUESTION, k=20, min_relevance=0.5)
        assert all(hit.relevance >= 0.5 for hit in kept.hits) and [h.rank for h in kept.hits] == list(range(1, len(kept.hits) + 1))
        assert remote.search("demo", method, QUESTION, k=20, min_relevance=0.5).hits == kept.hits
        nodes = SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(GraphLakeRetriever(lake, "demo", method=method, k=20).retrieve(QUESTION))
        assert [n.node.node_id for n in nodes] == [h.node_id for h in kept.hits], method
    assert max(scales.values()) / min(scales.values()) > 100  # the raw scores' scales: far apart
    with pytest.raises(RequestError, match="min_relevance: a number from 0 to 1"):
        lake.search("demo", "rrf", QUESTION, min_relevance=2)
    remote.close()


def test_a_corpus_with_no_judged_queries_borrows_a_calibration_and_says_whose(demo_copy):
    """A corpus the application writes has no judged queries: its relevance is the fit of the same method
    on the lake's judged corpus with the same models (the demo), said in the answer, so that
    ``min_relevance`` and LlamaIndex's ``SimilarityPostprocessor`` keep what they keep on the demo."""
    pytest.importorskip("llama_index.core", reason="llama-index-core is not installed: pip install -e '.[llamaindex]'")
    from llama_index.core.postprocessor import SimilarityPostprocessor

    from graphlake.api.llama_index import GraphLakeRetriever

    lake = GraphLake(demo_copy)
    lake.create_corpus("notes")
    lake.upsert("notes", [{"id": "sled", "text": "The BenthoCam sled was carried by the research vessel Nereid."}, {"id": "fees", "text": "Mooring fees rose twice last year."}])
    result = lake.search("notes", "rrf", QUESTION, k=2)
    assert result.calibration.startswith("borrowed from corpus 'demo' (the same method and models; this corpus has no judged queries): isotonic on 23 judged queries"), result.calibration
    demo = lake.search("demo", "rrf", QUESTION, k=1)
    assert result.hits[0].doc_id == "sled" and result.hits[0].relevance is not None
    assert 0 <= result.hits[1].relevance <= result.hits[0].relevance <= 1 and result.hits[0].score == demo.hits[0].score  # rank 1 in both: rrf's score, and relevance, alike
    kept = SimilarityPostprocessor(similarity_cutoff=result.hits[0].relevance - 1e-9).postprocess_nodes(GraphLakeRetriever(lake, "notes", method="rrf", k=2).retrieve(QUESTION))
    assert [n.node.ref_doc_id for n in kept] == ["sled"] + (["fees"] if result.hits[1].relevance >= result.hits[0].relevance - 1e-9 else [])
