"""Allan-Poe's tuned path weights (§5.7): tuned on the training queries only, the grid's best, equal to
what exact fusion scores on those queries, and read by the tuned methods."""

from __future__ import annotations

import numpy as np

from graphlake.kernels.eval.metrics import ndcg_at_k
from graphlake.retrieval.learned_kinds import open_index_set
from graphlake.retrieval.methods import load_methods, parse_methods
from graphlake.retrieval.models.hybrid_weights import TunedWeights
from graphlake.retrieval.queries import gold_by_query
from graphlake.retrieval.training.hybrid_weights import GRID, rule_of_thumb
from graphlake.warehouse.storage import LakeStorage


def test_the_rule_of_thumb_follows_the_gap():
    assert rule_of_thumb(0.70, 0.69) == (0.4, 0.6) and rule_of_thumb(0.70, 0.65) == (0.7, 0.8) and rule_of_thumb(0.70, 0.5) == (0.9, 1.0)


def test_weights_are_tuned_on_training_queries_and_read_by_the_tuned_methods(reads_demo):
    lake = LakeStorage(reads_demo.home)
    tuned = TunedWeights.load(lake.artifact("hybrid_weights", {"corpus": "demo"}))
    report = tuned.report
    queries = lake.read("queries", {"corpus": "demo"}).to_pylist()
    gold = gold_by_query(lake.read("qrels", {"corpus": "demo"}))
    train = [q for q in queries if q["split"] == "train" and q["query_id"] in gold]
    assert report["source"] == {"corpus": "demo", "split": "train", "queries": len(train)} and train  # never the test split
    for stage in ("two", "three"):
        grid = {float(alpha): value for alpha, value in report[stage]["ndcg@10"].items()}
        assert sorted(grid) == list(GRID) and grid[report[stage]["alpha"]] == max(grid.values())
    assert np.isclose(sum(tuned.two), 1) and tuned.two[2] == 0 and np.isclose(sum(tuned.three), 1)

    indexes = open_index_set(lake, "demo")
    exact = parse_methods({"m": {"op": "fused_exact", "weights": dict(zip(("dense", "sparse", "lexical"), tuned.three, strict=True))}})["m"]
    doc_ids = indexes.snapshot.doc_ids()
    values = [ndcg_at_k(list(dict.fromkeys(doc_ids[exact.run(q["text"], indexes).rows].tolist())), gold[q["query_id"]], 10) for q in train]
    assert np.isclose(np.mean(values), report["three"]["ndcg@10"][str(report["three"]["alpha"])], atol=1e-6)  # the tuning scored what the operator ranks

    methods = load_methods(reads_demo.home)
    for name, weights in (("ap_two_tuned", tuned.two), ("ap_three_tuned", tuned.three)):
        explicit = parse_methods({"m": {"op": "hybrid_graph", "weights": dict(zip(("dense", "sparse", "lexical"), weights, strict=True))}})["m"]
        for q in queries[:5]:
            assert methods[name].run(q["text"], indexes).rows.tolist() == explicit.run(q["text"], indexes).rows.tolist()
