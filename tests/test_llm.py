"""The LLM path end to end against a real OpenAI-compatible server: llama.cpp serving SmolLM2-135M.

The model is tiny and weak, so these tests check mechanics (schema-valid objects, caching,
counters, failures that name the server), not the quality of what it extracts.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from dagster import AssetSelection, DagsterInstance

from conftest import LLM_MODEL as MODEL
from conftest import free_port, materialize_committed
from graphlake.assets.llm.entities import llm_entity_assets
from graphlake.assets.llm.triples import triples_llm
from graphlake.common.llm import ENV_BASE_URL, LAKE_CACHE, LLMClient, LLMConfig, LLMUnavailable, parse_json
from graphlake.kernels.text.triples import Entities, Triple, llm_entities, llm_triples
from graphlake.pipelines.definitions import STATIC_ASSETS, resources
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage

TEXTS = [
    "Marie Curie discovered polonium in Paris in 1898.",
    "The Halvane Marine Institute surveyed Vesk Reef with the research vessel Kestrel Dawn.",
]


def _config(base_url: str, **overrides) -> LLMConfig:
    return LLMConfig(base_url=base_url, model=MODEL, **({"max_tokens": 384, "price_per_1k_tokens": 0.5} | overrides))


def test_ner_and_triples_are_schema_valid_and_cached(llm_server, tmp_path):
    client = LLMClient(_config(llm_server), tmp_path / "cache")
    started = time.perf_counter()
    first = [(llm_entities(client, text), llm_triples(client, text)) for text in TEXTS]
    print(f"\n{client.stats.calls} calls in {time.perf_counter() - started:.1f}s: {client.stats.as_metadata()}")
    for entities, triples in first:
        assert all(isinstance(e, str) and e for e in entities)
        assert all(isinstance(t, Triple) and t.subject and t.relation and t.object for t in triples)
    # llm_triples runs NER itself with the same prompt, so that one is already a cache hit
    assert client.stats.calls == 2 * len(TEXTS) and client.stats.cache_hits == len(TEXTS)
    assert client.stats.prompt_tokens > 0 and client.stats.completion_tokens > 0 and client.stats.seconds > 0
    assert client.stats.cost == pytest.approx((client.stats.prompt_tokens + client.stats.completion_tokens) / 1000 * 0.5)
    [entry] = [json.loads(p.read_text()) for p in (tmp_path / "cache" / MODEL).glob("*.json")][:1]
    assert {"key", "model", "prompt", "schema", "response", "prompt_tokens", "completion_tokens", "seconds"} <= set(entry)

    again = LLMClient(_config(llm_server), tmp_path / "cache")
    second = [(llm_entities(again, text), llm_triples(again, text)) for text in TEXTS]
    assert second == first
    assert again.stats.calls == 0 and again.stats.cache_hits == 3 * len(TEXTS)
    assert again.stats.as_metadata()["llm_prompt_tokens"] == 0


def test_triples_llm_asset_records_llm_metadata(llm_server, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_BASE_URL, llm_server)
    monkeypatch.setenv("GRAPHLAKE_LLM_MODEL", MODEL)
    monkeypatch.setenv("GRAPHLAKE_LLM_API_KEY", "sk-test-secret")
    source = tmp_path / "raw.jsonl"
    source.write_text("".join(json.dumps({"id": f"t{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    CorpusRegistry(tmp_path).add(CorpusSpec(name="tiny", format="jsonl", path=str(source)))
    selection = AssetSelection.groups("ingest", "chunking") | AssetSelection.assets(triples_llm, llm_entity_assets)
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("corpus", ["tiny"])
        runs = [materialize_committed(tmp_path, STATIC_ASSETS, instance=instance, resources=resources(tmp_path), partition_key="tiny", selection=selection) for _ in range(2)]
    metadata = [next(e for e in r.get_asset_materialization_events() if e.asset_key.to_user_string() == "triples_llm").materialization.metadata for r in runs]
    entities = [next(e for e in r.get_asset_materialization_events() if e.asset_key.to_user_string() == "entities_llm").materialization.metadata for r in runs]
    # one NER and one triple prompt per text in all; entities_llm and triples_llm share the NER prompt via the cache
    assert metadata[0]["llm_calls"].value + entities[0]["llm_calls"].value == 2 * len(TEXTS)
    assert metadata[1]["llm_calls"].value == entities[1]["llm_calls"].value == 0
    assert metadata[1]["llm_cache_hits"].value == 2 * len(TEXTS)
    assert set(LakeStorage(tmp_path).read("triples", {"corpus": "tiny", "extractor": "llm"}).column("source").to_pylist()) <= {f"llm:{MODEL}"}
    assert "sk-test-secret" not in "".join(p.read_text() for p in (tmp_path / LAKE_CACHE).rglob("*.json"))
    mentions = LakeStorage(tmp_path).read("mentions", {"corpus": "tiny", "extractor": "llm"})
    assert set(mentions.column("source").to_pylist()) <= {"llm"}


def test_a_server_that_is_down_fails_naming_its_url(tmp_path):
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    client = LLMClient(_config(base_url, max_retries=2, backoff_s=0.01, timeout_s=2), tmp_path)
    with pytest.raises(LLMUnavailable, match=re.escape(base_url) + ".*3 attempts"):
        llm_entities(client, TEXTS[0])
    assert client.stats.calls == 0 and not any(tmp_path.rglob("*.json"))


def test_configuration_comes_from_the_environment_and_hides_the_key(monkeypatch):
    monkeypatch.delenv(ENV_BASE_URL, raising=False)
    with pytest.raises(LLMUnavailable, match=ENV_BASE_URL):
        LLMConfig.from_env()
    monkeypatch.setenv(ENV_BASE_URL, "http://127.0.0.1:9/v1")
    monkeypatch.setenv("GRAPHLAKE_LLM_MODEL", "some/model")
    monkeypatch.setenv("GRAPHLAKE_LLM_API_KEY", "sk-test-secret")
    monkeypatch.setenv("GRAPHLAKE_LLM_PRICE_PER_1K_TOKENS", "0.002")
    config = LLMConfig.from_env()
    assert (config.model, config.api_key, config.price_per_1k_tokens) == ("some/model", "sk-test-secret", 0.002)
    assert "sk-test-secret" not in repr(config)


def test_json_is_dug_out_of_prose_when_the_server_ignores_the_schema():
    assert parse_json('Sure! Here it is: {"entities": ["Paris"]} Hope that helps.', Entities).entities == ["Paris"]


def test_llm_citation_detector_resolves_against_the_corpus_and_caches(llm_server, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_BASE_URL, llm_server)
    monkeypatch.setenv("GRAPHLAKE_LLM_MODEL", MODEL)
    docs = [
        {"id": "a", "title": "Kelp Forests of Vesk Reef", "text": "Kelp dominates the exposed rock of Vesk Reef."},
        {"id": "b", "title": "Urchin Grazing", "text": 'Urchins graze the kelp described in "Kelp Forests of Vesk Reef".'},
    ]
    source = tmp_path / "raw.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs))
    CorpusRegistry(tmp_path).add(CorpusSpec(name="cites", format="jsonl", path=str(source)))
    selection = AssetSelection.groups("ingest", "chunking") | AssetSelection.assets("citation_edges")
    config = {"ops": {"citation_edges": {"config": {"detector": "llm"}}}}
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("corpus", ["cites"])
        runs = [materialize_committed(tmp_path, STATIC_ASSETS, instance=instance, resources=resources(tmp_path), partition_key="cites", selection=selection, run_config=config) for _ in range(2)]
    metadata = [next(e for e in r.get_asset_materialization_events() if e.asset_key.to_user_string() == "citation_edges").materialization.metadata for r in runs]
    assert metadata[0]["llm_calls"].value == len(docs) and metadata[1]["llm_calls"].value == 0  # one prompt per node, then cached
    edges = LakeStorage(tmp_path).read("edges", {"corpus": "cites", "kind": "citation"})
    # the weak model may miss the citation; whatever it finds must resolve to a real, other document
    assert set(zip(edges.column("src").to_pylist(), edges.column("dst").to_pylist())) <= {("b#0", "a#0"), ("a#0", "b#0")}
    assert set(edges.column("source").to_pylist()) <= {f"llm:{MODEL}"}
