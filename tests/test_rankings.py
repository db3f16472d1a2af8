"""Every declared method returns the rankings (node ids and scores) recorded before retrieval got its
own package: the reshaping changed where code lives, not what it computes. Scores are compared
within float32 noise, and ranks whose scores tie within it may come in either order.

The demo lake's trained reranker depends on how far training got in its time budget, so the lake's
copy gets the cross-encoder's seeded initial weights instead: every input is then reproducible (two
independent demo builds gave bit-identical rankings), and the cross-encoder methods are compared too,
on the first CROSS_ENCODED recorded queries: at 2-3 s a query on a CPU they were nine tenths of the
test's time on all twelve. A learned fusion over one of them (graphlake_ltr_full, over FastInsight at
its catalogue budget of 100 pairs a query) is one of them: its ranker scores each query's candidates
by that query's own features, so its rankings on those queries are the ones recorded on all twelve
(checked: equal to the last digit), and on all twelve it was two thirds of the test's time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from graphlake.kernels.rerank.cross_encoder import CrossEncoder
from graphlake.retrieval.core import needs, uses_llm
from graphlake.retrieval.methods import load_methods
from graphlake.retrieval.models.grasp_reranker import TunedReranker
from graphlake.retrieval.runs import run_method
from graphlake.warehouse.storage import LakeStorage

RECORDED = Path(__file__).parent / "data" / "demo_rankings.json"
# float32 noise: another CPU's kernels move the encoder's vectors by ~1e-7, and training (GAT, SPRIG's
# graph) carries that to ~1e-4 of a score; a changed computation moves scores by far more than this
REL, ABS = 1e-3, 1e-6
TRAINED = {"grapher_gat", "grapher_mlp"}  # networks trained on those vectors: seen 1.1e-4 apart on small scores between two Xeons
TRAINED_ABS = 3e-4
CROSS_ENCODED = 4


def cross_encoded(method) -> bool:
    """A method that reranks with a cross-encoder, itself or through an input (a learned fusion of one)."""
    return any(kind.split("/")[0] in {"reranker", "grasp_reranker"} for kind in needs(method))


def current_rankings(home: Path, queries: list[str], top: int) -> tuple[dict[str, dict[str, list]], dict[str, list[str]]]:
    """Top ``top`` (node id, score) of every declared method on the given test queries (a cross-encoder
    method on the first CROSS_ENCODED of them), and the queries each was asked."""
    lake = LakeStorage(home)
    lake.write_artifact("reranker", {}, lambda folder: CrossEncoder.initial(192, 0).save(folder, {}))
    # GRASP's reranker is not trained on the demo: grasp ranks by Stage 2, grasp_zs by the initial cross-encoder
    lake.write_artifact("grasp_reranker", {"corpus": "demo"}, TunedReranker(None, {}, {"untrained": "rankings test"}).save)
    stored = lake.read("queries", {"corpus": "demo"})  # the recorded queries alone, for time
    methods = load_methods(home)
    found, asked, written = {}, {}, None
    for name, method in ((n, m) for n, m in methods.items() if not uses_llm(m)):  # an LLM server's answers are no recording
        subset = queries[:CROSS_ENCODED] if cross_encoded(method) else queries
        if subset != written:
            lake.write("queries", {"corpus": "demo"}, stored.filter(pc.is_in(stored.column("query_id"), value_set=pa.array(subset))))
            written = subset
        table, _ = run_method(name, method, methods.params(name), lake, "demo", "test")
        per_query: dict[str, list] = {}
        for row in table.select(["query_id", "rank", "node_id", "score"]).to_pylist():
            if row["rank"] <= top:
                per_query.setdefault(row["query_id"], []).append([row["node_id"], row["score"]])
        found[name], asked[name] = per_query, subset
    return found, asked


def tie_groups(scores: list[float], noise: float = ABS) -> list[list[int]]:
    """Runs of consecutive ranks whose scores are equal within float noise: their order is the noise's."""
    groups = [[0]]
    for i in range(1, len(scores)):
        if scores[i] == pytest.approx(scores[i - 1], rel=REL, abs=noise):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def dump(recorded: dict) -> str:
    """The recording as JSON with one line per (method, query), so a re-recording diffs by method."""
    head = ",\n".join(f" {json.dumps(key)}: {json.dumps(value)}" for key, value in recorded.items() if key != "rankings")
    methods = ",\n".join(f"  {json.dumps(name)}: {{\n" + ",\n".join(f"   {json.dumps(q)}: {json.dumps(r)}" for q, r in per_query.items()) + "\n  }" for name, per_query in recorded["rankings"].items())
    return "{\n" + head + ',\n "rankings": {\n' + methods + "\n }\n}\n"


def test_every_method_returns_the_recorded_rankings(demo_copy):
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    found, asked = current_rankings(demo_copy, recorded["queries"], recorded["top"])
    if os.environ.get("GRAPHLAKE_RECORD_RANKINGS"):
        RECORDED.write_text(dump({**recorded, "rankings": found}), encoding="utf-8")
        pytest.skip("recorded")
    assert sorted(found) == sorted(recorded["rankings"])
    for name, expected in recorded["rankings"].items():
        expected = {query_id: ranking for query_id, ranking in expected.items() if query_id in asked[name]}
        assert sorted(found[name]) == sorted(expected), name
        noise = TRAINED_ABS if name in TRAINED else ABS
        for query_id, ranking in expected.items():
            got = found[name][query_id]
            assert [score for _, score in got] == pytest.approx([score for _, score in ranking], rel=REL, abs=noise), (name, query_id)
            for group in tie_groups([score for _, score in ranking], noise):
                if group[-1] < len(ranking) - 1 or len(group) == 1:  # a tie cut by the top-k may bring in another member
                    assert {got[i][0] for i in group} == {ranking[i][0] for i in group}, (name, query_id, group)
