"""graphlake's learned fusion: its features against hand-computed values, the ranker the demo trained on
its training queries only (ids recorded, an evaluated query refused), the trained order as the model
scores it, and the fallback to rrf of the inputs where nothing was trained."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphlake.retrieval.core import Candidates, run_inputs
from graphlake.retrieval.index.lake import LakeIndexes
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.learned_fusion import LearnedRankers, key
from graphlake.retrieval.operators.learned import candidate_rows, feature_names, features, rrf
from graphlake.retrieval.queries import check_disjoint
from graphlake.warehouse.storage import Lake, StorageError

INPUTS = ["bm25", "dense", "splade", "ap_three", "graph_rrf", "grapher_gcs", "grasp_graph", "grasp_fused"]


def test_features_are_each_inputs_score_rank_and_gap_with_the_plans_signals():
    first = Candidates(np.array([4, 2, 9]), np.array([3.0, 2.5, 1.0]))
    second = Candidates(np.array([2, 7]), np.array([0.9, 0.4]), {"valid": True, "n_cand": 37, "risk_level": "aggressive"})
    rows = candidate_rows([first, second], depth=2)  # the 9 is below depth
    assert rows.tolist() == [4, 2, 7]
    table = features("who wrote it", [first, second], rows, depth=2)
    names = feature_names(["a", "b"])
    assert table.shape == (3, len(names)) and names[:3] == ["a_score", "a_rank", "a_gap"]
    got = {name: table[:, i].tolist() for i, name in enumerate(names)}
    assert got["a_score"][:2] == [3.0, 2.5] and math.isnan(got["a_score"][2])
    assert got["a_rank"][:2] == [1, 2] and got["a_gap"][:2] == [0.0, 0.5]
    assert math.isnan(got["b_rank"][0]) and got["b_rank"][1:] == [1, 2] and got["b_gap"][2] == pytest.approx(0.5)
    assert got["retrieved_by"] == [1, 2, 1] and got["best_rank"] == [1, 1, 2]
    assert got["query_words"] == [3] * 3 and got["plan_valid"] == [1] * 3 and got["plan_candidates"] == [37] * 3
    assert got["plan_risk"] == [3] * 3  # aggressive, the last of no_trade, weak, normal, aggressive
    assert math.isnan(features("q", [first], candidate_rows([first], 3), 3)[0, -1])  # no plan: missing, not zero


def test_the_demo_ranker_learns_from_training_queries_only_and_ranks_as_the_model_scores(demo_lake):
    lake = Lake(demo_lake.home)
    methods = load_methods(demo_lake.home)
    op = methods["graphlake_ltr"]
    metadata = demo_lake.materializations()["learned_fusion"]
    assert metadata["trained"] is True and metadata["train_corpus"] == "demo"
    stored = LearnedRankers.load(lake.artifact("learned_fusion", {"corpus": "demo"}))
    trained = stored.report["fusions"][key(op)]
    assert trained["inputs"] == INPUTS and trained["rounds"] >= 1
    assert set(trained["importance"]) == set(feature_names(INPUTS)) and sum(trained["importance"].values()) > 0
    queries = lake.read("queries", {"corpus": "demo"}).to_pylist()
    train = {q["query_id"] for q in queries if q["split"] == "train"}
    seen = set(trained["training_queries"]) | set(trained["stopping_queries"])
    assert seen <= train and set(trained["training_queries"]).isdisjoint(trained["stopping_queries"]) and trained["stopping_queries"]
    with pytest.raises(StorageError, match="learned_fusion for 'demo' would learn from its evaluated queries"):
        check_disjoint(lake, "demo", "demo", [q for q in queries if q["split"] == "test"][:1], "learned_fusion")

    indexes = LakeIndexes(lake, "demo")
    text = next(q["text"] for q in queries if q["split"] == "test")
    found = run_inputs(op, text, indexes)
    result = op.run(text, indexes)
    rows = candidate_rows(found, op.depth)
    scores = stored.ranker(op).predict(features(text, found, rows, op.depth))
    assert result.rows.tolist() == rows[np.lexsort((rows, -scores))][: op.k].tolist()
    assert set(result.rows.tolist()) <= set(rows.tolist()) and not indexes.notes

    untrained = LakeIndexes(lake, "demo")
    untrained._loaded["learned_fusion"] = LearnedRankers({}, {key(op): "corpus 'demo' has fewer than 2 training queries with gold"})
    fallback = op.run(text, untrained)
    assert fallback.rows.tolist() == rrf(found, op.depth, op.k).rows.tolist()
    assert any("no ranker trained" in note and "rrf of its inputs" in note for note in untrained.notes)
    with pytest.raises(StorageError, match="materialize learned_fusion again"):  # a declaration it was not trained for
        op.model_copy(update={"depth": 50}).run(text, indexes)
