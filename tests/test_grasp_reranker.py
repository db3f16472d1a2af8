"""GRASP Stages 1-3 on the demo lake and the reranker's recipes (spec G1, G4, G5, G9): an invalid plan
leaves the partner's ranking, tuning and training read only training queries, records hold one
positive and the pool's hardest negatives, the serialisation is App. B.6's, and the GPU recipe's
batched loss equals the CPU recipe's."""

import json

import numpy as np
import pytest
import torch

from graphlake.kernels.plan.fusion import fuse_stage2
from graphlake.kernels.plan.skb_serialise import serialise
from graphlake.kernels.rerank.cross_encoder import CrossEncoder, Group, Pool, _rate_factor, step_loss, train
from graphlake.kernels.text import encoders
from graphlake.pipelines.freshness import plan_refresh
from graphlake.retrieval.index.skb_stage_one import StageOneSettings as Settings
from graphlake.retrieval.index.skb_stage_one import stage_one
from graphlake.retrieval.learned_kinds import grasp_rerankers, open_index_set, tuned_fusions
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grasp_fusion import TunedFusion
from graphlake.retrieval.queries import check_disjoint
from graphlake.retrieval.training.grasp_fusion import validation_queries
from graphlake.retrieval.training.grasp_reranker import RECIPES, gold_rows, mine, stage_two
from graphlake.warehouse.storage import LakeStorage, StorageError

GOLDEN = """[Type] film
[name] Free Guy
[text] Free Guy is a 2021 American
[country of origin] United States
[director] Shawn Levy
[producer] P01; P02; P03; P04; P05; P06; P07; P08; P09; P10"""


def test_serialisation_follows_app_b6():
    neighbours = {"director": ["Shawn Levy"], "producer": [f"P{i:02d}" for i in range(1, 13)], "country of origin": ["United States", "United States"]}
    text = serialise("film", [("name", "Free Guy"), ("text", "Free Guy is a 2021 American action comedy film.")], neighbours, 10, 6)
    assert text == GOLDEN


def test_the_demo_skb_serialises_both_edge_directions(demo_lake):
    indexes = open_index_set(LakeStorage(demo_lake.home), "demo")
    skb = indexes.skb("auto")
    edges = LakeStorage(demo_lake.home).read("skb_edges", {"corpus": "demo", "source": skb.source}).to_pylist()
    cited = next(((e["dst"], e["src"]) for e in edges if e["relation"] == "CITES"), None)
    assert cited is not None, "the demo's SKB has citations"
    target_row = skb.node_row[skb.by_id[cited[0]]]
    text = skb.serialised(int(target_row), "body")
    citing_name = skb.names[skb.by_id[cited[1]]]
    assert text.startswith("[Type] passage\n[name] ") and "\n[text] body" in text
    assert any(line.startswith("[CITES] ") and citing_name in line for line in text.splitlines())  # an in-edge, named
    assert all(len(line.split("; ")) <= 10 for line in text.splitlines() if line.startswith("[MENTIONS]"))


def test_an_invalid_plan_gives_no_candidates_no_trade_and_the_partner_ranking(demo_lake):
    indexes = open_index_set(LakeStorage(demo_lake.home), "demo")
    skb = indexes.skb("auto")
    question = "Which vessel carried the BenthoCam sled?"
    invalid = {"anchors": [{"var": "A", "text": "BenthoCam", "label": "spaceship", "match_mode": "name"}], "target": {"var": "A"}}
    result = stage_one(question, skb, invalid, Settings(), encoders.encode_dense)
    assert not result.valid and "'spaceship' is not an SKB node type" in result.error
    assert result.risk_level == "no_trade" and result.n_cand == 0 and len(result.candidates.rows) == 0
    partner = load_methods(demo_lake.home)["rrf"].run(question, indexes)
    for mode, setting in (("dynamic", {"constant": 5, "w_bucket": [2.0] * 5, "m_risk": [1.0] * 4}), ("static", {"weight": 0.0, "constant": 60})):
        rows = fuse_stage2(result.candidates.rows, partner.rows, result.meta, mode, setting).rows
        assert rows.tolist() == partner.rows.tolist()
    unparsable = stage_one(question, skb, "{not json", Settings(), encoders.encode_dense)
    assert not unparsable.valid and unparsable.error.startswith("not a plan") and unparsable.plan is None


def test_the_rules_plan_runs_and_records_its_metadata(demo_lake):
    indexes = open_index_set(LakeStorage(demo_lake.home), "demo")
    graph = load_methods(demo_lake.home)["grasp_graph"].run("Which vessel carried the BenthoCam sled?", indexes)
    assert set(graph.meta) == {"valid", "n_cand", "risk_level"} and graph.meta["valid"]
    assert graph.meta["n_cand"] >= len(graph.rows) > 0


def test_tuning_and_training_read_only_the_training_queries(demo_lake):
    lake = LakeStorage(demo_lake.home)
    source, validation, learning = validation_queries(lake, "demo", 0.2, 0)
    assert source == "demo" and validation and learning
    assert {q["split"] for q in validation + learning} == {"train"}
    assert not {q["query_id"] for q in validation} & {q["query_id"] for q in learning}
    fusion = TunedFusion.load(lake.artifact("grasp_fusion", {"corpus": "demo"}))
    tuned_on = set(fusion.report["validation_queries"])
    evaluated = {q["query_id"] for q in lake.read("queries", {"corpus": "demo"}).to_pylist() if q["split"] != "train"}
    assert tuned_on == {q["query_id"] for q in validation} and not tuned_on & evaluated
    for report in fusion.report["fusions"].values():
        assert report["settings"] == {"static": 189, "dynamic": 1_290_240}
        best = report["static"]["hits"] if report["mode"] == "static" else report["dynamic"]["hits"]
        assert best >= report["partner_hits"]
    leaked = [q for q in lake.read("queries", {"corpus": "demo"}).to_pylist() if q["split"] == "test"][:1]
    with pytest.raises(StorageError, match="evaluated queries"):
        check_disjoint(lake, "demo", "demo", leaked, "grasp_fusion")


def test_a_fusion_whose_skb_the_training_corpus_lacks_is_left_untuned_and_says_why(demo_copy):
    """An oracle method declared beside the others (as benchmarks/grasp.py declares them) must not stop
    the corpus's other fusions from being tuned; running it names what is missing."""
    from graphlake.assets.retrieval.grasp import GraspFusionConfig
    from graphlake.retrieval.training.grasp_fusion import learn

    (demo_copy / "methods.yaml").write_text("g_oracle: {op: skb_plan, planner: rules, source: wiki_evidence}\nf_oracle: {op: plan_rrf, inputs: [g_oracle, rrf], mode: tuned}\n", encoding="utf-8")
    methods, lake = load_methods(demo_copy), LakeStorage(demo_copy)
    assert "grasp_fusion" in plan_refresh(lake, "demo", ["f_oracle"], demo_copy, "test").assets  # a fusion declared after the tuning re-tunes
    tuned, _ = learn(lake, "demo", GraspFusionConfig(), lambda line: None)
    oracle = methods["f_oracle"]
    assert len(tuned.choices) == len(tuned_fusions(methods)) - 1 and len(tuned.report["untuned"]) == 1
    assert tuned.choice(methods["grasp_fused"])[0] in ("static", "dynamic")
    with pytest.raises(StorageError, match="could not tune this plan_rrf on 'demo'.*no 'wiki_evidence' SKB"):
        tuned.choice(oracle)
    lake.write_artifact("grasp_fusion", {"corpus": "demo"}, tuned.save)
    assert "grasp_fusion" not in plan_refresh(lake, "demo", ["f_oracle", "grasp_fused"], demo_copy, "test").assets  # untuned, with its reason, is held


def test_records_hold_one_positive_and_the_pools_hardest_negatives(demo_lake):
    lake = LakeStorage(demo_lake.home)
    _, _, learning = validation_queries(lake, "demo", 0.2, 0)
    indexes = open_index_set(lake, "demo")
    fusion = TunedFusion.load(lake.artifact("grasp_fusion", {"corpus": "demo"}))
    stage = next(iter(grasp_rerankers(load_methods(demo_lake.home)).values()))
    gold = gold_rows(lake, "demo", indexes)
    pools = mine(stage, fusion, learning, indexes, gold, lambda rows: [str(r) for r in rows.tolist()], 100, 30, 8)
    assert pools
    for query in learning:
        rows = stage_two(stage, fusion, query["text"], indexes, 100)
        mine_of = [p for p in pools if p.query == query["text"]]
        expected_negatives = tuple(str(r) for r in rows if r not in gold.get(query["query_id"], ()))[:30]
        assert sorted(int(p.positive) for p in mine_of) == sorted(int(r) for r in rows if r in gold.get(query["query_id"], ()))
        assert all(p.negatives == expected_negatives for p in mine_of)
    rng = np.random.default_rng(0)
    draws = [pools[0].draw(rng) for _ in range(5)]
    assert all(d.positive == pools[0].positive and len(d.negatives) == min(7, len(pools[0].negatives)) for d in draws)
    assert all(set(d.negatives) <= set(pools[0].negatives) for d in draws)
    if len(pools[0].negatives) > 7:
        assert len({d.negatives for d in draws}) > 1  # a fresh draw every visit


@pytest.fixture(scope="module")
def tiny_encoder() -> CrossEncoder:
    return CrossEncoder.initial(max_tokens=32, seed=0, weights=None)


def _toy_groups(size: int) -> list[Group]:
    words = ["reef", "vessel", "sled", "camera", "depth", "survey", "coral", "tide", "storm", "harbour", "net", "buoy"]
    groups = []
    for q in range(3):
        negatives = tuple(f"{words[(q + i) % len(words)]} {words[(q * 5 + i) % len(words)]} log {i}" for i in range(size - 1))
        groups.append(Group(f"where is the {words[q]}", f"the {words[q]} is in the harbour", negatives))
    return groups


def test_the_gpu_recipes_batched_loss_and_gradients_equal_the_cpu_paths(tiny_encoder):
    groups = _toy_groups(RECIPES["gpu"].group_size)
    grads = []
    losses = []
    for batched in (False, True):
        tiny_encoder.model.train()
        torch.manual_seed(0)
        tiny_encoder.model.zero_grad()
        tiny_encoder.model.eval()  # dropout off: the two passes must see the same network
        loss = step_loss(tiny_encoder, groups, batched)
        loss.backward()
        losses.append(float(loss))
        grads.append(torch.cat([p.grad.flatten() for p in tiny_encoder.model.parameters() if p.grad is not None]).clone())
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_the_gpu_recipe_takes_a_step_on_the_cpu(tiny_encoder):
    recipe = RECIPES["gpu"]
    assert (recipe.group_size, recipe.groups_per_step, recipe.schedule, recipe.warmup) == (24, 16, "cosine", 0.05)
    pools = [Pool(g.query, g.positive, g.negatives, recipe.group_size) for g in _toy_groups(30)]
    before = [p.detach().clone() for p in tiny_encoder.model.parameters()]
    report = train(tiny_encoder, pools, lambda encoder: 0.0, recipe.learning_rate, recipe.groups_per_step, 1, validate_every=1, schedule="cosine", warmup=0.05, batched=True)
    assert report.steps == 1 and report.curve[-1]["loss"] > 0
    assert _rate_factor(0.05, 0.05, "cosine") == pytest.approx(1.0) and _rate_factor(1.0, 0.05, "cosine") == pytest.approx(0.0)
    assert _rate_factor(0.525, 0.05, "cosine") == pytest.approx(0.5)
    # the best validation (0.0) is the initial one, so training keeps the initial weights, as it should
    assert all(torch.equal(a, b) for a, b in zip(before, tiny_encoder.model.parameters(), strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the GPU run of the recipe is checked on a GPU machine only")
def test_the_gpu_recipe_matches_on_cuda():
    encoder = CrossEncoder.initial(max_tokens=32, seed=0)
    encoder.model.eval()
    groups = _toy_groups(24)
    on_gpu = float(step_loss(encoder, groups, batched=True))
    cpu = CrossEncoder(encoder.model.to("cpu"), encoder.tokenizer, 32, torch.device("cpu"))
    assert on_gpu == pytest.approx(float(step_loss(cpu, groups, batched=False)), abs=1e-5)


def test_fusion_report_is_json(demo_lake):
    fusion = TunedFusion.load(LakeStorage(demo_lake.home).artifact("grasp_fusion", {"corpus": "demo"}))
    assert json.loads(json.dumps(fusion.report))["train_corpus"] == "demo"


def test_the_grasp_reranker_trains_on_the_demo_and_grasp_ranks_with_it(reranked_copy, tmp_path):
    """The asset end to end on the demo's few training queries (from the demo's trained cross-encoder):
    records, a curve, a kept checkpoint, both final fusions; then ``grasp`` (and ``grasp_zs``) answer a
    query with it."""
    from typer.testing import CliRunner

    from graphlake.cli import app
    from graphlake.retrieval.models.grasp_reranker import TunedReranker

    config = tmp_path / "run.yaml"
    config.write_text("ops: {grasp_reranker: {config: {budget_minutes: 0.15, validate_every: 2, validation_depth: 10, depth: 20}}}\n")
    built = CliRunner().invoke(app, ["materialize", "--corpus", "demo", "--select", "key:grasp_reranker", "--config", str(config)], catch_exceptions=False)
    assert built.exit_code == 0, built.stderr
    tuned = TunedReranker.load(LakeStorage(reranked_copy).artifact("grasp_reranker", {"corpus": "demo"}))
    training = tuned.report["training"]
    assert training["records"] > 0 and training["steps"] > 0 and len(training["curve"]) >= 2
    assert set(tuned.report["training_queries"]).isdisjoint(tuned.report["validation_queries"])
    [fusion] = tuned.fusion.values()
    assert set(fusion) == {"base", "grasp"} and all(0 <= f["weight"] <= 1 and f["queries"] > 0 for f in fusion.values())
    # retrained with next to no budget: the new model is compared with this one on the same validation queries
    first = _grasp_metadata()
    config.write_text("ops: {grasp_reranker: {config: {budget_minutes: 0.001, validate_every: 1000, validation_depth: 10, depth: 20}}}\n")
    again = CliRunner().invoke(app, ["materialize", "--corpus", "demo", "--select", "key:grasp_reranker", "--config", str(config)], catch_exceptions=False)
    assert again.exit_code == 0, again.stderr
    second = _grasp_metadata()
    assert second["previous_hit@1"] == pytest.approx(first["validation_hit@1"], abs=1e-4)
    assert second["kept"] == ("previous" if second["previous_hit@1"] > second["validation_hit@1"] else "new")
    stored = TunedReranker.load(LakeStorage(reranked_copy).artifact("grasp_reranker", {"corpus": "demo"}))
    if second["kept"] == "previous":
        assert stored.report["training"] == training and "kept the previous model" in " ".join(again.stderr.split())
    else:
        assert stored.report["training"]["best_validation"] == pytest.approx(second["validation_hit@1"], abs=1e-4)
    for method in ("grasp", "grasp_zs"):
        answered = CliRunner().invoke(app, ["query", "--corpus", "demo", "--method", method, "--top", "3", "--json", "Which vessel carried the BenthoCam sled?"])
        assert answered.exit_code == 0, answered.stderr
        assert len(json.loads(answered.stdout)["hits"]) == 3


def _grasp_metadata() -> dict:
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.get() as instance:
        event = instance.get_latest_materialization_event(AssetKey(["grasp_reranker"]))
    return {name: value.value for name, value in event.asset_materialization.metadata.items()}
