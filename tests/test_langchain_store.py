"""LangChain's own conformance suites on graphlake: ``VectorStoreIntegrationTests`` on
``GraphLakeVectorStore`` and ``RetrieversIntegrationTests`` on ``GraphLakeRetriever``, each in process and
through ``RemoteLake`` on a real ``graphlake serve``; then what the suites leave out (scores, MMR,
filters, the lake's own embeddings, a foreign one refused)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests

from graphlake.api import GraphLake, RemoteLake, RequestError
from graphlake.api.langchain import GraphLakeRetriever
from graphlake.api.langchain_store import GraphLakeEmbeddings, GraphLakeVectorStore
from served import KEY, Server

NOTES = [
    ("kelp", "Sea otters keep kelp forests alive by eating the urchins that graze them.", {"year": 2019, "topic": "ecology"}),
    ("reef", "Coral reefs bleach when the water stays too warm for weeks.", {"year": 2021, "topic": "ecology"}),
    ("sled", "The BenthoCam sled photographed the seabed from the research vessel Nereid.", {"year": 2022, "topic": "survey"}),
    ("tide", "Tide gauges record the height of the sea every six minutes.", {"year": 2016, "topic": "survey"}),
    ("whale", "Humpback whales sing songs that change from one season to the next.", {"year": 2020, "topic": "ecology"}),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> object:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def in_process(home) -> GraphLake:
    return GraphLake(home)


@pytest.fixture(scope="module")
def remote(home, tmp_path_factory) -> Iterator[RemoteLake]:
    server = Server(home, tmp_path_factory.mktemp("server") / "server.log", KEY)
    client = RemoteLake(server.url, api_key=KEY)
    try:
        yield client
    finally:
        client.close()
        server.stop()


def _fresh_store(lake) -> Iterator[GraphLakeVectorStore]:
    """An empty corpus of its own per test (the suite's contract), dropped after it."""
    name = f"lc-{uuid.uuid4().hex[:10]}"
    store = GraphLakeVectorStore(lake, name)
    yield store
    assert lake.drop_corpus(name)


class TestVectorStoreInProcess(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, in_process) -> Iterator[GraphLakeVectorStore]:
        yield from _fresh_store(in_process)


class TestVectorStoreThroughTheServer(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, remote) -> Iterator[GraphLakeVectorStore]:
        yield from _fresh_store(remote)


@pytest.fixture(scope="module")
def notes(in_process) -> str:
    store = GraphLakeVectorStore(in_process, "notes")
    store.add_texts([text for _, text, _ in NOTES], [meta for *_, meta in NOTES], ids=[i for i, *_ in NOTES])
    return "notes"


class _Retriever(RetrieversIntegrationTests):
    lake: object = None

    @property
    def retriever_constructor(self) -> type[GraphLakeRetriever]:
        return GraphLakeRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"lake": self.lake, "corpus": "notes", "method": "rrf"}

    @property
    def retriever_query_example(self) -> str:
        return "what keeps kelp forests alive?"


class TestRetrieverInProcess(_Retriever):
    @pytest.fixture(autouse=True)
    def _lake(self, in_process, notes) -> None:
        type(self).lake = in_process


class TestRetrieverThroughTheServer(_Retriever):
    @pytest.fixture(autouse=True)
    def _lake(self, remote, notes) -> None:
        type(self).lake = remote


@pytest.mark.parametrize("where", ["in_process", "remote"])
def test_scores_filters_mmr_and_the_lakes_own_vectors(where, request, notes):
    """What the suites do not check: scores are cosines (dense, no calibration on this corpus) in
    descending order, thresholds drop what is below, a filter is graphlake's, MMR trades relevance for
    novelty, the store's embeddings are the lake's vectors, and a foreign embedding is refused in one line."""
    lake = request.getfixturevalue(where)
    store = GraphLakeVectorStore(lake, notes)
    scored = store.similarity_search_with_score("Which vessel carried the camera sled?", k=5)
    assert scored[0][0] == Document(page_content=NOTES[2][1], metadata=NOTES[2][2], id="sled")
    scores = [s for _, s in scored]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1 and len(scored) == 5
    kept = store.similarity_search_with_relevance_scores("Which vessel carried the camera sled?", k=5, score_threshold=scores[1] - 1e-6)
    assert [d.id for d, _ in kept] == [d.id for d, _ in scored[:2]]
    assert {d.id for d in store.similarity_search("the sea", k=5, filter="topic = 'survey'")} == {"sled", "tide"}

    relevance_only = store.max_marginal_relevance_search("ocean animals", k=3, fetch_k=5, lambda_mult=1.0)
    assert [d.id for d in relevance_only] == [d.id for d in store.similarity_search("ocean animals", k=3)]
    assert len({d.id for d in store.max_marginal_relevance_search("ocean animals", k=3, fetch_k=5, lambda_mult=0.0)}) == 3

    embeddings = store.embeddings
    query, passage = np.asarray(embeddings.embed_query("Which vessel carried the camera sled?")), np.asarray(embeddings.embed_documents([NOTES[2][1]])[0])
    assert abs(float(query @ passage) - scores[0]) < 2e-2  # the search's own cosine, up to the stored vector's precision
    with pytest.raises(RequestError, match="'rrf' has no calibrated relevance on corpus 'notes'"):
        GraphLakeVectorStore(lake, notes, method="rrf").similarity_search_with_relevance_scores("kelp", k=2, score_threshold=0.5)
    with pytest.raises(RequestError, match="group_by: a vector store returns whole documents"):
        store.similarity_search("kelp", k=2, group_by="chunk")
    with pytest.raises(RequestError, match="'graphlake' is the key graphlake's provenance travels under"):
        store.add_texts(["A note."], [{"graphlake": {"rank": 1}}])
    with pytest.raises(RequestError, match="encoded by the lake's own models"):
        GraphLakeVectorStore(lake, notes, embedding=DeterministicFakeEmbedding(size=8))
    assert GraphLakeVectorStore.from_texts(["A seal hauled out on the jetty."], GraphLakeEmbeddings(lake, "seals"), ids=["seal"], lake=lake, corpus="seals").get_by_ids(["seal"])[0].id == "seal"
    assert lake.drop_corpus("seals")
