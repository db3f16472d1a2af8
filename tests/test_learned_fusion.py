"""graphlake's learned fusion: its features against hand-computed values, the ranker the demo trained on
its training queries only (ids recorded, an evaluated query refused), the trained order as the model
scores it, the fallback to rrf of the inputs where nothing was trained, and the scale-free features of a
ranker trained on another corpus."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from graphlake.assets.retrieval.learned_fusion import LearnedFusionConfig
from graphlake.kernels.partners import SIGNALS
from graphlake.kernels.results import Allowed
from graphlake.retrieval.core import Candidates, Request, masked, run_inputs_batch
from graphlake.retrieval.index.index_set import new_request
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.learned_fusion import FEATURES_VERSION, IN_CORPUS, REPORT_FILE, SCALE_FREE, LearnedRankers, candidate_rows, feature_names, features, key, partners_of
from graphlake.retrieval.operators.learned import rrf
from graphlake.retrieval.queries import check_disjoint, gold_by_query
from graphlake.retrieval.training.learned_fusion import fit, partner_runs
from graphlake.warehouse.storage import LakeStorage, StorageError

INPUTS = ["bm25", "dense", "splade", "ap_three", "graph_rrf", "grapher_gcs", "grasp_graph", "grasp_fused"]


def test_features_are_each_inputs_rank_and_scores_with_the_plans_signals():
    first = Candidates(scores=np.array([3.0, 2.5, 1.0]), rows=np.array([4, 2, 9]))
    second = Candidates(scores=np.array([0.9, 0.4]), rows=np.array([2, 7]), meta={"valid": True, "n_cand": 37, "risk_level": "aggressive"})
    rows = candidate_rows([first, second], depth=2)  # the 9 is below depth
    assert rows.tolist() == [4, 2, 7]
    table = features("who wrote it", [first, second], rows, 2, IN_CORPUS)
    names = feature_names(["a", "b"], IN_CORPUS)
    assert table.shape == (3, len(names)) and names[:4] == ["a_rank", "a_scaled", "a_score", "a_gap"]
    got = {name: table[:, i].tolist() for i, name in enumerate(names)}
    assert got["a_score"][:2] == [3.0, 2.5] and math.isnan(got["a_score"][2])
    assert got["a_rank"][:2] == [1, 2] and got["a_gap"][:2] == [0.0, 0.5] and got["a_scaled"][:2] == [1.0, 0.0]
    assert math.isnan(got["b_rank"][0]) and got["b_rank"][1:] == [1, 2] and got["b_gap"][2] == pytest.approx(0.5)
    assert got["retrieved_by"] == [1, 2, 1] and got["in_top3"] == [1, 2, 1] and got["best_rank"] == [1, 1, 2]
    assert got["query_words"] == [3] * 3 and got["plan_valid"] == [1] * 3 and got["plan_candidates"] == [37] * 3
    assert got["plan_risk"] == [3] * 3  # aggressive, the last of no_trade, weak, normal, aggressive
    alone = features("q", [first], candidate_rows([first], 3), 3, IN_CORPUS)
    assert math.isnan(alone[0, feature_names(["a"], IN_CORPUS).index("plan_risk")])  # no plan: missing, not zero
    assert np.isnan(table[:, -len(SIGNALS) :]).all()  # no partners given: the partner signals are missing, not zero
    # trained on another corpus: only what means the same on any corpus (ranks, scores scaled to the list)
    scale_free = features("who wrote it", [first, second], rows, 2, SCALE_FREE)
    assert feature_names(["a", "b"], SCALE_FREE)[:4] == ["a_rank", "a_scaled", "b_rank", "b_scaled"]
    assert np.array_equal(scale_free[:, :4], table[:, [0, 1, 4, 5]], equal_nan=True) and np.array_equal(scale_free[:, 4:], table[:, 8:], equal_nan=True)


def test_the_demo_ranker_learns_from_training_queries_only_and_ranks_as_the_model_scores(demo_lake):
    lake = LakeStorage(demo_lake.home)
    methods = load_methods(demo_lake.home)
    op = methods["graphlake_ltr"]
    metadata = demo_lake.materializations()["learned_fusion"]
    assert metadata["trained"] is True and metadata["train_corpus"] == "demo"
    stored = LearnedRankers.load(lake.artifact("learned_fusion", {"corpus": "demo"}))
    trained = stored.report["fusions"][key(op)]
    assert trained["inputs"] == INPUTS and trained["rounds"] >= 1
    assert trained["across_corpora"] is False and stored.ranker(op).across_corpora is False  # the demo learns on its own train split
    assert set(trained["importance"]) == set(feature_names(INPUTS, IN_CORPUS)) and sum(trained["importance"].values()) > 0
    queries = lake.read("queries", {"corpus": "demo"}).to_pylist()
    train = {q["query_id"] for q in queries if q["split"] == "train"}
    assert set(trained["training_queries"]) <= train and trained["folds"] == min(5, len(trained["training_queries"]))
    signals = trained["partner_signals"]
    assert stored.ranker(op).partners is signals["kept"] is (signals["gain"][1] > 0) and trained["out_of_fold_ndcg"] is not None
    with pytest.raises(StorageError, match="learned_fusion for 'demo' would learn from its evaluated queries"):
        check_disjoint(lake, "demo", "demo", [q for q in queries if q["split"] == "test"][:1], "learned_fusion")

    indexes = open_index_set(lake, "demo")
    text = next(q["text"] for q in queries if q["split"] == "test")
    (found,) = run_inputs_batch(op, new_request(indexes, [text]), indexes)
    request = new_request(indexes, [text])
    (result,) = op.run_batch(request, indexes)
    rows = candidate_rows(found, op.depth)
    (partners,) = partners_of(indexes, request) if stored.ranker(op).partners else (None,)
    scores = stored.ranker(op).booster.predict(features(text, found, rows, op.depth, IN_CORPUS, partners))
    assert result.rows.tolist() == rows[np.lexsort((rows, -scores))][: op.k].tolist()
    assert set(result.rows.tolist()) <= set(rows.tolist()) and not request.notes

    untrained = open_index_set(lake, "demo")
    untrained._loaded["learned_fusion"] = LearnedRankers({}, {key(op): "corpus 'demo' has fewer than 2 training queries with gold"})
    request = new_request(untrained, [text])
    (fallback,) = op.run_batch(request, untrained)
    assert fallback.rows.tolist() == rrf(found, op.depth, op.k).rows.tolist()
    assert any("no ranker trained" in note and "rrf of its inputs" in note for note in request.notes)
    with pytest.raises(StorageError, match="materialize learned_fusion again"):  # a declaration it was not trained for
        op.model_copy(update={"depth": 50}).run(text, indexes)


def test_rows_the_request_masks_are_dropped_before_the_learned_fusion_ranks(demo_lake, monkeypatch):
    """An input that searches every row (FastInsight's dense fallback, GAR's frontier) may return a node
    the request masks, such as the snapshot's node of a document written since: the learned fusion drops
    it before choosing candidates, so it is neither returned nor read as a partner of the others."""
    import graphlake.retrieval.operators.learned as learned

    lake = LakeStorage(demo_lake.home)
    op = load_methods(demo_lake.home)["graphlake_ltr"]
    indexes = open_index_set(lake, "demo")
    ranker = LearnedRankers.load(lake.artifact("learned_fusion", {"corpus": "demo"})).ranker(op)
    text = next(q["text"] for q in lake.read("queries", {"corpus": "demo"}).to_pylist() if q["split"] == "test")
    (unmasked,) = op.run_batch(new_request(indexes, [text]), indexes)
    top = int(unmasked.rows[0])
    mask = np.ones(len(indexes.snapshot.doc_ids()), bool)
    mask[top] = False
    allowed = Allowed(mask, np.flatnonzero(mask), "all but the top row")
    everything = run_inputs_batch(op, new_request(indexes, [text]), indexes)  # the inputs as if each searched every row
    assert any(top in c.rows[: op.depth] for c in everything[0])
    monkeypatch.setattr(learned, "run_inputs_batch", lambda *_: everything)
    request = Request([text], indexes.encoders, op.k, allowed)
    (result,) = op.run_batch(request, indexes)
    found = [masked(c, allowed) for c in everything[0]]
    rows = candidate_rows(found, op.depth)
    (partners,) = partners_of(indexes, request) if ranker.partners else (None,)
    scores = ranker.booster.predict(features(text, found, rows, op.depth, IN_CORPUS, partners))
    assert top not in result.rows.tolist() and result.rows.tolist() == rows[np.lexsort((rows, -scores))][: op.k].tolist()


def test_a_ranker_trained_on_another_corpus_reads_the_scale_free_features_only(demo_lake, tmp_path):
    """What a corpus with a ``train_corpus`` gets (Spider trained on BIRD): the demo's training queries
    stand in for the other corpus's; the ranker keeps that through saving and loading."""
    lake = LakeStorage(demo_lake.home)
    op = load_methods(demo_lake.home)["graphlake_ltr"]
    indexes = open_index_set(lake, "demo")
    queries = [q for q in lake.read("queries", {"corpus": "demo"}).to_pylist() if q["split"] == "train"]
    found = run_inputs_batch(op, new_request(indexes, [q["text"] for q in queries]), indexes)
    partners = partner_runs([q["text"] for q in queries], indexes, ["dense", "titles", "entities"])
    gold = gold_by_query(lake.read("qrels", {"corpus": "demo"}))
    ranker, trained = fit(op, queries, found, partners, gold, indexes.snapshot.doc_ids(), LearnedFusionConfig(min_data_in_leaf=2), across_corpora=True)
    assert ranker.across_corpora and ranker.booster.num_feature() == len(feature_names(INPUTS, SCALE_FREE)) and trained["rounds"] >= 1
    assert ranker.partners is trained["partner_signals"]["kept"] is (trained["partner_signals"]["gain"][1] > 0)  # kept by the same rule
    LearnedRankers({key(op): ranker}).save(tmp_path)
    loaded = LearnedRankers.load(tmp_path).ranker(op)
    rows = [candidate_rows(inputs, op.depth) for inputs in found[:3]]
    older = json.loads((tmp_path / REPORT_FILE).read_text()) | {"features": FEATURES_VERSION - 1}
    (tmp_path / REPORT_FILE).write_text(json.dumps(older))
    assert LearnedRankers.load(tmp_path).held() == set()  # rankers of older features are retrained, not misread
    texts = [query["text"] for query in queries[:3]]
    together = loaded.score(texts, found[:3], rows, op.depth, lambda: partners[:3])  # a batch in one prediction: each query as alone
    alone = [ranker.score([text], [inputs], [chosen], op.depth, lambda p=p: [p])[0] for text, inputs, chosen, p in zip(texts, found, rows, partners, strict=False)]
    assert loaded.partners is ranker.partners
    assert loaded.across_corpora and len(together) == 3 and all(np.array_equal(a, b) for a, b in zip(together, alone, strict=True))
