"""Our metrics against pytrec_eval (trec_eval itself) on random runs, and by hand where it has no twin."""

from __future__ import annotations

import random

import numpy as np
import pytest
import pytrec_eval

from graphlake.kernels.eval.metrics import evaluate, mean, ndcg_at_k, parse_metric, random_ndcg_at_k, rank_by_score

pytestmark = pytest.mark.fast  # unit tests over small in-memory data: `pytest -m fast`

CUTOFFS = (1, 2, 5, 10)


def random_case(seed: int, graded: bool):
    rng = random.Random(seed)
    docs = [f"d{i:03d}" for i in range(60)]
    qrels, run = {}, {}
    for q in range(40):
        query = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 8))
        qrels[query] = {d: (rng.choice([0, 1, 2, 3]) if graded else rng.choice([0, 1, 1])) for d in judged}
        if q % 9 == 0:
            continue  # no run at all for this query
        retrieved = rng.sample(docs, rng.randint(0, 25))
        # coarse scores so that ties are frequent
        run[query] = {d: float(rng.randint(0, 5)) for d in retrieved}
    qrels["q_nogold"] = {"d001": 0}
    return qrels, run


@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_agrees_with_pytrec_eval_on_random_runs_with_ties(seed, graded):
    qrels, run = random_case(seed, graded)
    measures = {f"recall_{k}" for k in CUTOFFS} | {f"ndcg_cut_{k}" for k in CUTOFFS} | {f"success_{k}" for k in CUTOFFS} | {"recip_rank"}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {f"{m}.{','.join(map(str, CUTOFFS))}" for m in ("recall", "ndcg_cut", "success")} | {"recip_rank"}).evaluate(run)
    names = [f"{m}@{k}" for m in ("recall", "ndcg", "hit") for k in CUTOFFS] + ["mrr"]
    ours = evaluate({q: rank_by_score(scores) for q, scores in run.items()}, qrels, names)
    judged_with_gold = {q for q, gold in qrels.items() if any(r > 0 for r in gold.values())}
    assert set(ours) == judged_with_gold
    twin = {"recall": "recall_{}", "ndcg": "ndcg_cut_{}", "hit": "success_{}"}
    compared = 0
    for query, values in ours.items():
        if not run.get(query):
            assert all(v == 0.0 for v in values.values())  # an empty run scores zero, as trec_eval -c would
            continue
        for name, value in values.items():
            base, k = parse_metric(name)
            key = "recip_rank" if base == "mrr" else twin[base].format(k)
            assert key in measures
            assert value == pytest.approx(reference[query][key], abs=1e-9), (query, name)
            compared += 1
    assert compared > 300


def test_capped_recall_and_pr_by_hand():
    qrels = {"q": {"a": 1, "b": 2, "c": 1, "z": 0}}
    ranking = {"q": ["x", "a", "z", "b", "y", "c"]}
    values = evaluate(ranking, qrels, ["recall@2", "capped_recall@2", "capped_recall@5", "pr@4", "pr@6", "hit@1", "mrr"])["q"]
    assert values["recall@2"] == pytest.approx(1 / 3)
    assert values["capped_recall@2"] == pytest.approx(1 / 2)  # min(k=2, 3 relevant) in the denominator
    assert values["capped_recall@5"] == pytest.approx(2 / 3)
    assert (values["pr@4"], values["pr@6"]) == (0.0, 1.0)
    assert (values["hit@1"], values["mrr"]) == (0.0, 0.5)


def test_ndcg_by_hand_graded():
    # DCG@3 = 2/log2(2) + 0 + 1/log2(4) = 2.5 ; IDCG@3 = 2 + 1/log2(3) + 1/log2(4)
    values = evaluate({"q": ["b", "x", "a"]}, {"q": {"a": 1, "b": 2, "c": 1}}, ["ndcg@3"])["q"]
    assert values["ndcg@3"] == pytest.approx(2.5 / (2 + 1 / 1.584962500721156 + 0.5))


def test_mean_and_errors():
    per_query = {"a": {"mrr": 1.0}, "b": {"mrr": 0.5}}
    assert mean(per_query, "mrr") == 0.75 and mean({}, "mrr") == 0.0
    for bad in ("ndcg", "recall@0", "map@10", "mrr@x"):
        with pytest.raises(ValueError, match="unknown metric"):
            parse_metric(bad)
    assert rank_by_score({"a": 1.0, "b": 1.0, "c": 2.0}) == ["c", "b", "a"]


def test_paired_bootstrap_interval_and_p_value():
    from graphlake.kernels.eval.metrics import paired_bootstrap

    same = paired_bootstrap([0.2, 0.5, 0.9], [0.2, 0.5, 0.9])
    assert (same["difference"], same["low"], same["high"], same["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    rng = random.Random(1)
    base = [rng.random() for _ in range(200)]
    better = paired_bootstrap(base, [min(1.0, b + 0.1 + rng.uniform(-0.05, 0.05)) for b in base], samples=2000)
    assert better["low"] > 0 and better["p_value"] < 0.01 and better["low"] <= better["difference"] <= better["high"]
    noisy = paired_bootstrap(base, [b + rng.uniform(-0.3, 0.3) for b in base], samples=2000)
    assert noisy["low"] < 0 < noisy["high"] and noisy["p_value"] > 0.05
    assert paired_bootstrap(base, base[::-1], seed=7) == paired_bootstrap(base, base[::-1], seed=7)
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap([1.0], [1.0, 2.0])


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_queries():
    from graphlake.kernels.eval.metrics import bootstrap_interval

    rng = np.random.default_rng(3)
    few, many = rng.uniform(0, 1, 30), rng.uniform(0, 1, 3000)
    low, high = bootstrap_interval(few, samples=2000)
    assert low < few.mean() < high
    wide, narrow = high - low, np.subtract(*bootstrap_interval(many, samples=2000)[::-1])
    assert narrow < wide / 5  # ~ 1 / sqrt(100) as wide
    assert bootstrap_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_interval([])


def test_random_ndcg_is_the_mean_over_random_rankings():
    rng = np.random.default_rng(0)
    documents = [f"d{i}" for i in range(30)]
    gold = {"d3": 2, "d7": 1, "d9": 0}
    simulated = np.mean([ndcg_at_k(list(rng.permutation(documents)), gold, 10) for _ in range(20_000)])
    assert random_ndcg_at_k(gold, len(documents), 10) == pytest.approx(simulated, abs=0.005)
    assert random_ndcg_at_k({"d0": 1}, 1, 10) == 1.0  # a corpus of one document: any ranking is ideal
