"""The LLM client and the LLM assets against a faulty server: a local fake OpenAI-compatible server
(a real HTTP server on 127.0.0.1; the fault modes cannot be had from llama.cpp on demand).

Each fault ends within the configured timeout x attempts with a message naming the server, the model
and the attempts; garbage answers after a good run fail the asset, and the good tables stay; a key
the server echoes back reaches no file and no output."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest
from rich.console import Console

from fake_llm import MODEL, FakeServer
from graphlake.common.llm import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, ENV_RETRIES, ENV_TIMEOUT, LLMClient, LLMConfig, LLMError, LLMOutputError, LLMUnavailable
from graphlake.common.redact import redact
from graphlake.kernels.text.triples import llm_entities
from graphlake.pipelines.runner import MaterializeError, materialize_corpus
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


def client(fake: FakeServer, tmp_path, retries: int = 2, timeout: float = 1.0) -> LLMClient:
    return LLMClient(LLMConfig(base_url=fake.url, model=MODEL, timeout_s=timeout, max_retries=retries, backoff_s=0.05), tmp_path / "cache")


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("500", LLMUnavailable, r"failed after 3 of 3 attempts.*500"),
        ("429", LLMUnavailable, r"failed after 3 of 3 attempts.*retry after 1 s"),
        ("slow", LLMUnavailable, r"failed after 3 of 3 attempts.*Timeout"),
        ("not-json", LLMError, r"attempt 1 of 3: answered with a body that is not an OpenAI chat completion \(the server's fault"),
        ("garbage", LLMOutputError, r"reply does not fit Entities"),
    ],
)
def test_each_fault_ends_in_time_with_a_message_naming_server_model_and_attempts(fake, tmp_path, mode, error, message):
    fake.mode = mode
    asking = client(fake, tmp_path)  # made first: the bound is on the calls, not on importing the SDK
    started = time.monotonic()
    with pytest.raises(error, match=message) as raised:
        llm_entities(asking, "Marie Curie lived in Paris.")
    assert time.monotonic() - started <= 1.0 * 3 + 0.5  # timeout x attempts, and a little for the test's own work
    assert fake.url in str(raised.value) and f"model {MODEL}" in str(raised.value)
    assert fake.requests == (3 if mode in ("500", "429", "slow") else 1)


def test_retry_after_is_honoured_and_a_wait_beyond_the_budget_is_not_made(fake, tmp_path):
    fake.mode = "429"
    fake.retry_after = "2"  # the client must wait 2 s, not its 0.05 s backoff, between attempts
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="retry after 2 s"):
        llm_entities(client(fake, tmp_path, retries=1, timeout=3.0), "text")
    assert 2.0 <= time.monotonic() - started < 6.0 and fake.requests == 2
    fake.requests = 0
    fake.retry_after = "3600"  # an hour does not fit in 2 x 1 s: give up at once, saying why
    with pytest.raises(LLMUnavailable, match="failed after 1 of 2 attempts.*retry after 3600 s"):
        llm_entities(client(fake, tmp_path, retries=1), "text")
    assert fake.requests == 1


def test_timeout_and_retries_come_from_the_environment_and_bad_values_are_named(monkeypatch):
    monkeypatch.setenv(ENV_BASE_URL, "http://127.0.0.1:9/v1")
    monkeypatch.setenv(ENV_MODEL, MODEL)
    monkeypatch.setenv(ENV_TIMEOUT, "2.5")
    monkeypatch.setenv(ENV_RETRIES, "0")
    config = LLMConfig.from_env()
    assert (config.timeout_s, config.max_retries) == (2.5, 0)
    monkeypatch.setenv(ENV_RETRIES, "many")
    with pytest.raises(LLMUnavailable, match=re.escape(f"{ENV_RETRIES}='many' is not a whole number")):
        LLMConfig.from_env()


def test_a_key_the_server_echoes_is_written_nowhere(fake, tmp_path, monkeypatch, capfd):
    secret = "sk-test-SECRET123-do-not-store"
    monkeypatch.setenv(ENV_API_KEY, secret)
    home = tiny_corpus(tmp_path, monkeypatch, fake)
    fake.mode = "echo-key"
    with pytest.raises(MaterializeError) as failed:
        materialize_corpus(home, "tiny", "key:documents or key:nodes or key:entities_llm", Console(file=sys.stderr))
    said = str(failed.value) + "".join(capfd.readouterr())
    assert "401" in said and "[redacted]" in said and secret not in said
    stored = [path for path in home.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
    assert fake.requests > 0 and stored == []  # the lake, the LLM cache and Dagster's run storage (sqlite) alike
    assert redact(f"Bearer abc.def-123456 and sk-{'x' * 20}") == "Bearer [redacted] and [redacted]"


def tiny_corpus(tmp_path, monkeypatch, fake: FakeServer):
    """A three-document corpus in a fresh lake whose LLM is ``fake``."""
    monkeypatch.setenv("GRAPHLAKE_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv(ENV_BASE_URL, fake.url)
    monkeypatch.setenv(ENV_MODEL, MODEL)
    source = tmp_path / "raw.jsonl"
    texts = ["Marie Curie worked in Paris.", "Paris is in France.", "Curie won two prizes."]
    source.write_text("".join(json.dumps({"id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts)))
    CorpusRegistry(tmp_path).add(CorpusSpec(name="tiny", format="jsonl", path=str(source)))
    return tmp_path


def test_garbage_answers_after_a_good_run_fail_and_leave_the_good_tables(fake, tmp_path, monkeypatch):
    tiny_corpus(tmp_path, monkeypatch, fake)
    console = Console(file=open("/dev/null", "w"))
    selection = "key:documents or key:nodes or key:entities_llm or key:mentions_llm"
    materialize_corpus(tmp_path, "tiny", selection, console)
    lake = LakeStorage(tmp_path)
    partition = {"corpus": "tiny", "extractor": "llm"}
    good = (lake.read("entities", partition), lake.read("mentions", partition))
    assert good[0].num_rows == 2 and good[1].num_rows == 3 * 2  # Marie Curie and Paris, in each of the three nodes
    fake.mode = "garbage"
    for path in (tmp_path / "llm_cache").rglob("*.json"):  # a fresh question for each node: no cached answer
        path.unlink()
    with pytest.raises(MaterializeError, match=r"3 of 3 LLM answers for entities_llm \(corpus 'tiny'\) failed \(all of them\)"):
        materialize_corpus(tmp_path, "tiny", selection, console)
    assert lake.read("entities", partition).equals(good[0]) and lake.read("mentions", partition).equals(good[1])
