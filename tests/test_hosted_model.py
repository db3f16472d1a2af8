"""A hosted dense model: llama.cpp's server with ``--embedding`` serving the bundled GGUF (mean-pooled)
behind a forwarding proxy that can fail on demand (a real server cannot be told to). A build goes
through it, a query goes through it, an outage mid-build leaves the previous vectors whole, and the
next run asks only for what the outage kept it from; the key reaches the server and nothing else."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import llama_server
from crash_corpus import CORPUS, EDITED, SELECTION, TEXTS, write_corpus
from fake_llm import LoopbackServer, send_json
from typer.testing import CliRunner

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
