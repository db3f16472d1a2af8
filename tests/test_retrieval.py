"""Operators, method declarations, the embedding cache, and the eval/query commands on the demo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from bm25s.stopwords import STOPWORDS_EN
from dagster import AssetSelection, DagsterInstance
from typer.testing import CliRunner

from conftest import materialize_committed
from graphlake.cli import app
from graphlake.kernels.text.bm25 import BM25Index
from graphlake.kernels.text.stopwords import ENGLISH
from graphlake.pipelines.definitions import build_definitions
from graphlake.pipelines.freshness import plan_refresh
from graphlake.retrieval.core import MethodError
from graphlake.retrieval.methods import load_methods, parse_methods
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage


class HandIndexes:
    """Indexes by name over hand-made arrays, as ``IndexSet`` gives them, so fused scores can be
    worked out on paper."""

    def __init__(self) -> None:
        self.loaded = {
            "bm25": BM25Index.build(["apple banana", "apple", "cherry", "banana cherry"]),
            "dense": np.eye(4, dtype=np.float32),
            "splade": sp.csr_matrix(np.array([[0, 1.0], [2.0, 0], [0, 0], [1.0, 1.0]], dtype=np.float32)),
        }

    def get(self, name: str):
        return self.loaded[name]

    def __getattr__(self, kind: str):  # the typed handles, ``indexes.bm25``
        try:
            return self.__dict__["loaded"][kind]
        except KeyError:
            raise AttributeError(kind) from None

    @property
    def encoders(self) -> HandEncoders:
        return HandEncoders()


class HandEncoders:
    """Every query encoded alike, so the rankings follow from the arrays above."""

    def dense(self, texts: list[str]) -> np.ndarray:
        return np.tile(np.array([0.1, 0.2, 0.9, 0.4], dtype=np.float32), (len(texts), 1))  # dense ranking: rows 2, 3, 1, 0

    def splade(self, texts: list[str]) -> sp.csr_matrix:
        return sp.csr_matrix(np.tile(np.array([[1.0, 0.5]], dtype=np.float32), (len(texts), 1)))  # scores: 0.5, 2.0, 0, 1.5


@pytest.mark.fast
def test_leaf_operators_rank_as_expected():
    methods = parse_methods({"b": {"op": "bm25", "k": 10}, "d": {"op": "dense", "k": 3}, "s": {"op": "splade"}})
    indexes = HandIndexes()
    bm25 = methods["b"].run("apple", indexes)
    assert bm25.rows.tolist() == [1, 0]  # shorter document first; non-matching rows are dropped
    assert sorted(ENGLISH) == sorted(STOPWORDS_EN)  # the stop set held beside the tokenizer is bm25s's own
    assert methods["d"].run("x", indexes).rows.tolist() == [2, 3, 1]
    splade = methods["s"].run("x", indexes)
    assert splade.rows.tolist() == [1, 3, 0] and splade.scores.tolist() == [2.0, 1.5, 0.5]


@pytest.mark.fast
def test_rrf_and_weighted_sum_by_hand():
    methods = parse_methods(
        {
            "d": {"op": "dense", "k": 4},
            "s": {"op": "splade"},
            "rrf": {"op": "rrf", "inputs": ["d", "s"], "constant": 1, "weights": [1, 2]},
            "ws": {"op": "weighted_sum", "inputs": ["d", "s"], "weights": [1, 1]},
        }
    )
    fused = methods["rrf"].run("x", HandIndexes())
    # dense ranks: 2->1, 3->2, 1->3, 0->4 ; splade ranks: 1->1, 3->2, 0->3 ; score = w / (1 + rank)
    expected = {2: 1 / 2, 3: 1 / 3 + 2 / 3, 1: 1 / 4 + 2 / 2, 0: 1 / 5 + 2 / 4}
    assert fused.rows.tolist() == [1, 3, 0, 2]
    assert fused.scores.tolist() == pytest.approx([expected[r] for r in fused.rows.tolist()])
    # min-max per input: dense (0.9, 0.4, 0.2, 0.1) -> 1, .375, .125, 0 ; splade (2, 1.5, .5) -> 1, .667, 0
    summed = methods["ws"].run("x", HandIndexes())
    assert dict(zip(summed.rows.tolist(), summed.scores.tolist())) == pytest.approx({2: 1.0, 3: 0.375 + 2 / 3, 1: 0.125 + 1.0, 0: 0.0})


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"x": {"op": "nope"}}, "unknown operator 'nope'"),
        ({"x": {"op": "bm25", "top": 3}}, "bm25.top: Extra inputs are not permitted"),
        ({"x": {"op": "dense", "k": 0}}, "dense.k: Input should be greater than 0"),
        ({"x": {"op": "rrf", "inputs": ["missing"]}}, "input 'missing' is not a declared method"),
        ({"x": {"op": "rrf", "inputs": ["y"]}, "y": {"op": "rrf", "inputs": ["x"]}}, "cycle"),
        ({"x": {"op": "rrf", "inputs": [{"op": "bm26"}]}}, "unknown operator 'bm26'"),
        ({"x": "bm25"}, "expected a mapping"),
        ({"bm25_b0.5": {"op": "bm25"}}, "'bm25_b0.5': a name is letters, digits and underscores"),
    ],
)
def test_method_declaration_errors_name_the_problem(declared, message):
    with pytest.raises(MethodError, match=message):
        parse_methods(declared)


def test_a_lakes_misshapen_declaration_is_named_at_its_line(tmp_path):
    (tmp_path / "methods.yaml").write_text("use: [bm25]\nmethods: {x: {op: bm25}}\n")  # methods nested one level too deep
    with pytest.raises(MethodError, match="^" + re.escape(f"{tmp_path / 'methods.yaml'}:2: method 'methods': expected a mapping with 'op'")):
        load_methods(tmp_path)


def test_weights_must_match_inputs():
    methods = parse_methods({"d": {"op": "dense"}, "f": {"op": "rrf", "inputs": ["d", "d"], "weights": [1]}})
    with pytest.raises(MethodError, match="1 weights for 2 inputs"):
        methods["f"].run("x", HandIndexes())


def _embed(home: Path, instance: DagsterInstance) -> dict:
    defs = build_definitions(home)
    result = materialize_committed(
        home,
        list(defs.assets),
        instance=instance,
        resources=defs.resources,
        partition_key="tiny",
        selection=AssetSelection.groups("ingest", "chunking") | AssetSelection.assets("dense_vectors"),
    )
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "dense_vectors"]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_embedding_cache_encodes_only_new_or_changed_nodes(tmp_path):
    source = tmp_path / "docs.jsonl"
    docs = [{"id": f"t{i}", "title": f"Title {i}", "text": f"Plain sentence number {i}."} for i in range(5)]
    source.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    CorpusRegistry(tmp_path).add(CorpusSpec(name="tiny", format="jsonl", path=str(source)))
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("corpus", ["tiny"])
        assert (_embed(tmp_path, instance)["encoded"], _embed(tmp_path, instance)["encoded"]) == (5, 0)
        first = LakeStorage(tmp_path).read("vectors", {"corpus": "tiny", "model": "all-MiniLM-L6-v2"})
        docs[3]["text"] = "A different sentence now."
        source.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
        metadata = _embed(tmp_path, instance)
    assert (metadata["encoded"], metadata["reused"]) == (1, 4)
    second = LakeStorage(tmp_path).read("vectors", {"corpus": "tiny", "model": "all-MiniLM-L6-v2"})
    before, after = first.column("dense").to_pylist(), second.column("dense").to_pylist()
    assert [np.allclose(a, b) for a, b in zip(before, after)] == [True, True, True, False, True]
    assert np.linalg.norm(after[3]) == pytest.approx(1.0, abs=1e-5)


def test_eval_cli_on_the_demo_end_to_end(lake):
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25,dense,rrf", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [r["method"] for r in report] == ["bm25", "dense", "rrf"]
    for row in report:
        assert (row["corpus"], row["split"]) == ("demo", "test")
        assert {"ndcg@10", "recall@10", "hit@10", "mrr"} <= set(row["metrics"])
        assert all(0.0 <= v <= 1.0 for v in row["metrics"].values())
        assert row["latency_ms"]["p50"] > 0 and row["latency_ms"]["p95"] >= row["latency_ms"]["p50"]
    assert report[0]["metrics"]["hit@10"] >= 0.9  # the demo's single-hop questions are easy for BM25
    lake_ = LakeStorage(lake)
    run_id = lake_.read("runs", {"corpus": "demo", "method": "bm25"}).column("run_id")[0].as_py()
    again = runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25", "--json"], catch_exceptions=False)
    assert json.loads(again.stdout)[0]["metrics"] == report[0]["metrics"]
    assert lake_.read("runs", {"corpus": "demo", "method": "bm25"}).column("run_id")[0].as_py() == run_id  # nothing re-ran
    assert "tr@10" not in report[0]["metrics"]  # no corpus graph yet; once it is built, the same run gets its TR
    assert runner.invoke(app, ["materialize", "--corpus", "demo", "--select", "key:citation_edges"], catch_exceptions=False).exit_code == 0
    with_tr = json.loads(runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25", "--json"], catch_exceptions=False).stdout)[0]
    assert with_tr["metrics"]["tr@10"] >= with_tr["metrics"]["recall@10"] and with_tr["metrics"]["ndcg@10"] == report[0]["metrics"]["ndcg@10"]
    assert lake_.read("runs", {"corpus": "demo", "method": "bm25"}).column("run_id")[0].as_py() == run_id

    def run_ids() -> dict[str, str]:
        return {m: lake_.read("runs", {"corpus": "demo", "method": m}).column("run_id")[0].as_py() for m in ("bm25", "dense", "rrf")}

    before = run_ids()
    rebuilt = runner.invoke(app, ["materialize", "--corpus", "demo", "--select", "key:bm25_index"], catch_exceptions=False)
    assert rebuilt.exit_code == 0, rebuilt.output
    runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25,dense,rrf", "--json"], catch_exceptions=False)
    after = run_ids()  # a rebuilt index outdates the runs that read it, and only those
    assert after["dense"] == before["dense"] and after["bm25"] != before["bm25"] and after["rrf"] != before["rrf"]
    run_id = after["bm25"]
    (lake / "methods.yaml").write_text("bm25: {op: bm25, k: 5}\n", encoding="utf-8")
    changed = runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "bm25", "--k", "5", "--json"], catch_exceptions=False)
    assert changed.exit_code == 0
    runs = lake_.read("runs", {"corpus": "demo", "method": "bm25"})
    assert runs.column("run_id")[0].as_py() != run_id and max(runs.column("rank").to_pylist()) <= 5
    compared = runner.invoke(app, ["compare", "--corpus", "demo", "--baseline", "bm25", "--method", "rrf", "--metric", "recall@10", "--json"])
    result = json.loads(compared.stdout)
    assert result["queries"] == 23 and result["low"] <= result["difference"] <= result["high"]
    trec = runner.invoke(app, ["trec", "--corpus", "demo", "--method", "rrf"]).stdout.splitlines()
    first = trec[0].split()
    assert len(first) == 6 and first[1] == "Q0" and first[3] == "1" and first[5] == "graphlake-rrf"
    assert len({(line.split()[0], line.split()[2]) for line in trec}) == len(trec)  # one line per (query, document)
    unknown = runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "nope"])
    assert unknown.exit_code == 1 and "unknown method 'nope'" in unknown.stderr


def test_eval_runs_only_the_queries_of_the_split_it_reports(lake):
    runner, lake_ = CliRunner(), LakeStorage(lake)

    def stored(table: str) -> tuple[str, set[str]]:
        split_of = {q["query_id"]: q["split"] for q in lake_.read("queries", {"corpus": "demo"}).to_pylist()}
        rows = lake_.read(table, {"corpus": "demo", "method": "dense"})
        found = {split_of[q] for q in rows.column("query_id").to_pylist()} if table == "runs" else set(rows.column("split").to_pylist())
        return rows.column("run_id")[0].as_py(), found

    for split in ("train", "test"):  # another split than the stored run's runs again
        result = runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "dense", "--split", split, "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)[0]["split"] == split
        (run_id, run_splits), (metrics_run_id, metric_splits) = stored("runs"), stored("metrics")
        assert run_splits == metric_splits == {split} and metrics_run_id == run_id
    runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "dense", "--split", "test", "--json"], catch_exceptions=False)
    assert stored("runs")[0] == run_id  # the same split again: nothing re-ran
    missing = runner.invoke(app, ["eval", "--corpus", "demo", "--methods", "dense", "--split", "nope"])
    assert missing.exit_code == 1 and "no queries in split 'nope'" in missing.stderr


def test_query_cli_prints_titled_hits(reads_demo):
    result = CliRunner().invoke(app, ["query", "--corpus", "demo", "--method", "bm25", "BenthoCam camera sled"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "BenthoCam" in result.stdout and "bm25 on demo" in result.stdout


@pytest.mark.parametrize(
    ("fmt", "built", "not_built"),
    [
        ("2wiki", {"conceptual_edges", "mentions_spacy"}, {"citation_edges", "semantic_edges", "structural_edges", "contextual_edges"}),
        ("beir", {"semantic_edges", "conceptual_edges", "mentions_spacy"}, {"citation_edges", "structural_edges", "contextual_edges"}),
        ("demo", {"citation_edges"}, {"conceptual_edges", "mentions_spacy", "semantic_edges", "structural_edges"}),
    ],
)
def test_graph_auto_builds_only_the_edge_kinds_of_the_corpus_graph(tmp_path, fmt, built, not_built):
    CorpusRegistry(tmp_path).add(CorpusSpec(name="c", format=fmt, path=str(tmp_path)))
    (tmp_path / "methods.yaml").write_text("use: [gar, fastinsight]\n")  # the cross-encoder methods are off by default
    selected = set(plan_refresh(LakeStorage(tmp_path), "c", ["gar", "fastinsight"], tmp_path).assets)
    assert built <= selected and not (not_built & selected)
    assert {"run_gar", "run_fastinsight", "reranker"} <= selected


def test_a_hybrid_graph_method_plans_the_triples_its_kg_is_built_from(tmp_path):
    """The hybrid graph index's default ``kg: spacy`` reads spaCy's triples: an eval on a fresh corpus builds them."""
    CorpusRegistry(tmp_path).add(CorpusSpec(name="c", format="beir", path=str(tmp_path)))
    selected = plan_refresh(LakeStorage(tmp_path), "c", ["ap_three"], tmp_path).assets
    assert "triples_spacy" in selected and "hybrid_graph_index" in selected


def test_corpora_that_train_each_other_are_planned_in_stages_each_after_what_it_learns_from(tmp_path):
    """Spider's ranker learns on BIRD's queries and BIRD's on Spider's: BIRD's rankers need Spider's vectors
    first, and Spider's fusion needs BIRD's rankers; a fusion that learns from its own output is refused."""
    registry = CorpusRegistry(tmp_path)
    registry.add(CorpusSpec(name="a", format="jsonl", path=str(tmp_path), train_corpus="b"))
    registry.add(CorpusSpec(name="b", format="jsonl", path=str(tmp_path), train_corpus="a"))
    stages = plan_refresh(LakeStorage(tmp_path), "a", ["graphlake_ltr"], tmp_path, "dev").order()
    stage = {(corpus, asset): i for i, (corpus, assets) in enumerate(stages) for asset in assets}
    assert len(stage) == sum(len(assets) for _, assets in stages)  # each asset once
    assert stage[("a", "dense_vectors")] < stage[("b", "graph_rankers")] < stage[("a", "learned_fusion")] <= stage[("a", "run_graphlake_ltr")]
    assert stage[("b", "hybrid_graph_index")] < stage[("a", "learned_fusion")] and stage[("a", "hybrid_graph_index")] < stage[("b", "grasp_fusion")]
    (tmp_path / "methods.yaml").write_text("nested: {op: learned_fusion, inputs: [graphlake_ltr, bm25]}\n")
    with pytest.raises(MethodError, match="learned_fusion of corpus 'a' learns from what itself needs"):
        plan_refresh(LakeStorage(tmp_path), "a", ["nested"], tmp_path, "dev")
