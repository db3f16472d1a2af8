"""GRASP's LLM planner for real (spec G8): App. B's prompt blocks, and SmolLM2 served by llama.cpp
planning 10 2Wiki dev questions through the ``skb_plans`` asset. SmolLM2-135M is weak: each answer must be
a schema-valid plan or a recorded failure, whose graph branch is empty so Stage 2 returns the partner."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from dagster import AssetSelection, DagsterInstance

from conftest import LLM_MODEL, materialize_committed
from graphlake.assets.graphs.skb import skb
from graphlake.assets.retrieval.grasp import skb_plans
from graphlake.assets.vectors.encoders import dense_vectors
from graphlake.assets.vectors.skb_vectors import skb_vectors
from graphlake.common.llm import ENV_BASE_URL, LAKE_CACHE
from graphlake.kernels.plan.fusion import fuse_stage2
from graphlake.kernels.plan.plans import Schema, check, parse_plan
from graphlake.kernels.plan.prompt import FUSION_CONTROL, PLAN_STRUCTURE, RISK_ADDENDUM, ROLE, system_prompt, user_prompt
from graphlake.pipelines.definitions import STATIC_ASSETS, resources
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage

QUESTIONS = 10


def test_the_prompt_holds_every_block_of_app_b1():
    schema = Schema.of([("film", "director", "person")], {"film", "person", "date"})
    system = system_prompt(schema, "wiki", [])
    for block in (ROLE, PLAN_STRUCTURE, FUSION_CONTROL, "## Knowledge base schema", "- film -director- person", "## Guidance"):
        assert block in system
    assert system.index("## Role") < system.index("## Knowledge base schema") < system.index("## Plan structure") < system.index("## Fusion control")
    user = user_prompt("Who directed Free Guy?")
    assert user.endswith(RISK_ADDENDUM) and '"Who directed Free Guy?"' in user


def test_smollm2_plans_ten_2wiki_questions_or_its_failures_fall_back_to_the_partner(llm_server, datasets_dir, tmp_path, monkeypatch):
    records = [json.loads(line) for line in gzip.open(datasets_dir / "2wikimultihopqa/migres/data/wikihop.json.gz", "rt")]
    source = tmp_path / "dev10.json"
    source.write_text(json.dumps([r for r in records if r.get("context")][:QUESTIONS]))
    home = tmp_path / "lake"
    CorpusRegistry(home).add(CorpusSpec(name="wiki10", format="2wiki", path=str(source)))
    monkeypatch.setenv(ENV_BASE_URL, llm_server)
    monkeypatch.setenv("GRAPHLAKE_LLM_MODEL", LLM_MODEL)
    selection = AssetSelection.groups("ingest", "chunking") | AssetSelection.assets(dense_vectors, skb, skb_vectors, skb_plans)
    config = {"ops": {"skb": {"config": {"sources": ["wiki_rules"]}}, "skb_plans": {"config": {"planners": ["llm"]}}}}
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("corpus", ["wiki10"])
        result = materialize_committed(home, STATIC_ASSETS, instance=instance, resources=resources(home), partition_key="wiki10", selection=selection, run_config=config)
    assert result.success
    lake = LakeStorage(home)
    plans = lake.read("skb_plans", {"corpus": "wiki10", "source": "wiki_rules", "planner": "llm"}).to_pylist()
    assert len(plans) == QUESTIONS
    indexes = open_index_set(lake, "wiki10")
    schema = indexes.skb("wiki_rules").schema
    dense = load_methods(home)["dense"]
    for row in plans:
        if row["valid"]:
            plan, error = parse_plan(row["plan"])
            assert error is None and check(plan, schema) == [], row
        else:
            assert row["error"] and row["risk_level"] == "no_trade" and row["n_cand"] == 0, row
            partner = dense.run(row["query"], indexes).rows
            meta = {"valid": False, "n_cand": 0, "risk_level": "no_trade"}
            fused = fuse_stage2(np.zeros(0, np.int64), partner, meta, "dynamic", {"constant": 60, "w_bucket": [1.0] * 5, "m_risk": [1.0] * 4}).rows
            assert fused.tolist() == partner.tolist()
    print(f"\nSmolLM2 plans: {sum(r['valid'] for r in plans)}/{len(plans)} valid; errors: {[r['error'][:80] for r in plans if not r['valid']][:3]}")
    prompts = [json.loads(p.read_text())["prompt"] for p in (home / LAKE_CACHE).rglob("*.json")]
    unreadable = sum(not r["valid"] and r["error"].startswith("the LLM's plan is unusable") for r in plans)
    assert len(prompts) == QUESTIONS - unreadable  # one real request per question; answers that parse are cached
    assert all(FUSION_CONTROL in m[0]["content"] and RISK_ADDENDUM in m[-1]["content"] for m in prompts)


@pytest.fixture(autouse=True)
def _no_stray_server(monkeypatch):
    monkeypatch.delenv("GRAPHLAKE_LLM_API_KEY", raising=False)
