"""The retrieval package's registries at work: an operator defined here alone is a method like any
other, and learned indexes bring up what they learn from on other corpora, training only what the
methods asked for need."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import pytest
from dagster import DagsterInstance
from pydantic import Field
from typer.testing import CliRunner

from conftest import use_lake
from graphlake.cli import app
from graphlake.pipelines.definitions import build_definitions
from graphlake.pipelines.freshness import plan_refresh
from graphlake.retrieval.core import Candidates, MethodError, Op, Request, register, unfill
from graphlake.retrieval.index.index_set import Handle
from graphlake.retrieval.learned_kinds import INDEX_KINDS
from graphlake.retrieval.methods import parse_methods
from graphlake.retrieval.models.grapher import TunedRankers
from graphlake.retrieval.models.index_set import LakeIndexSet
from graphlake.retrieval.queries import select_queries
from graphlake.warehouse.corpora import DEMO_PATH
from graphlake.warehouse.linking import EDGE_KINDS
from graphlake.warehouse.storage import LakeStorage


@register
class ShortestFirst(Op):
    """BM25's matches, the shortest node text first: an operator known to this test module alone."""

    INDEXES: ClassVar[frozenset[str]] = frozenset({"bm25"})
    op: Literal["shortest_first"]
    k: int = Field(10, gt=0)

    def run_batch(self, request: Request, indexes: LakeIndexSet) -> list[Candidates]:
        return [self.shortest(matched.rows, indexes) for matched in unfill(*indexes.bm25.search(request.queries, self.k))]

    @staticmethod
    def shortest(matched: np.ndarray, indexes: LakeIndexSet) -> Candidates:
        lengths = np.array([len(indexes.snapshot.texts()[row]) for row in matched], dtype=np.float64)
        order = np.lexsort((matched, lengths))
        return Candidates(scores=-lengths[order], rows=matched[order])


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_every_index_an_operator_may_read_by_name_has_one_typed_handle():
    """Operators reach an index through ``LakeIndexSet.<kind>``; only the kinds named by data (the corpus
    graph's edge kinds and mentions) are read with ``get``."""
    handles = {name for cls in LakeIndexSet.__mro__ for name, value in vars(cls).items() if isinstance(value, Handle)}
    by_data = set(EDGE_KINDS) - {"cooccurrence"} | {"mentions_spacy", "mentions_regex"}
    loadable = {name for name, kind in INDEX_KINDS.items() if kind.load is not None}
    assert handles == loadable - by_data
    assert all(getattr(LakeIndexSet, name).kind == name for name in handles)


def test_an_operator_registered_in_a_test_module_is_a_method_with_assets_that_go_stale(demo_copy):
    with pytest.raises(MethodError, match="shortest_first.depth: Extra inputs are not permitted"):
        parse_methods({"x": {"op": "shortest_first", "depth": 3}})
    (demo_copy / "methods.yaml").write_text("shortest: {op: shortest_first, k: 5}\n", encoding="utf-8")
    keys = {key.to_user_string() for key in build_definitions(demo_copy).resolve_asset_graph().get_all_asset_keys()}
    assert {"run_shortest", "metrics_shortest", "query_metrics_shortest"} <= keys

    result = invoke("eval", "--corpus", "demo", "--methods", "shortest,bm25", "--json")
    assert result.exit_code == 0, result.output
    report = {row["method"]: row for row in json.loads(result.stdout)}
    assert report["shortest"]["split"] == "test"  # the held-out split, unasked
    assert report["shortest"]["metrics"]["recall@10"] == pytest.approx(report["bm25"]["metrics"]["recall@10"], abs=0.2)
    runs = LakeStorage(demo_copy).read("runs", {"corpus": "demo", "method": "shortest"})
    first = runs.filter(runs.column("rank").to_numpy() == 1).column("score").to_numpy()
    assert len(first) and (first <= 0).all()  # its own scores: minus the text length
    assert plan_refresh(LakeStorage(demo_copy), "demo", ["shortest"], demo_copy, "test").assets == []

    rebuilt = invoke("materialize", "--corpus", "demo", "--select", "key:bm25_index")
    assert rebuilt.exit_code == 0, rebuilt.output
    stale = plan_refresh(LakeStorage(demo_copy), "demo", ["shortest"], demo_copy, "test").assets
    assert stale == ["run_shortest", "metrics_shortest", "query_metrics_shortest"]

    sampled = invoke("eval", "--corpus", "demo", "--methods", "shortest", "--sample", "3", "--json")  # a seeded sample of the test split
    assert sampled.exit_code == 0, sampled.output
    queries = LakeStorage(demo_copy).read("queries", {"corpus": "demo"})
    drawn = select_queries(queries, "test", 3).column("query_id").to_pylist()
    assert len(drawn) == 3 and drawn == select_queries(queries, "test", 3).column("query_id").to_pylist()
    ran = LakeStorage(demo_copy).read("runs", {"corpus": "demo", "method": "shortest"}).column("query_id").unique().to_pylist()
    assert sorted(ran) == sorted(drawn)
    scored = LakeStorage(demo_copy).read("query_metrics", {"corpus": "demo", "method": "shortest"}).column("query_id").unique().to_pylist()
    assert set(scored) <= set(drawn) and scored  # the sample's judged queries, no other
    assert plan_refresh(LakeStorage(demo_copy), "demo", ["shortest"], demo_copy, "test", sample=3).assets == []
    assert plan_refresh(LakeStorage(demo_copy), "demo", ["shortest"], demo_copy, "test").assets[0] == "run_shortest"  # a sample covers no full split


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory) -> Path:
    """A newcomer's lake: a corpus that learns GraphER's rankers from another, both only ingested, then
    ``graphlake eval --methods grapher_gcs`` and nothing else."""
    home = tmp_path_factory.mktemp("two") / "lake"
    corpus = DEMO_PATH / "corpus.jsonl"  # the demo's passages, without its table schemas
    passages = {json.loads(line)["id"] for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()}
    rows = [json.loads(line) for line in (DEMO_PATH / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [row for row in rows if set(row["qrels"]) <= passages]
    for name, kept in (("learn", rows), ("target", [row for row in rows if row["split"] == "test"])):
        (home.parent / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        use_lake(patch, home)
        learn = invoke("ingest", "jsonl", str(corpus), "--corpus", "learn", "--queries", str(home.parent / "learn.jsonl"))
        assert learn.exit_code == 0, learn.output
        target = invoke("ingest", "jsonl", str(corpus), "--corpus", "target", "--queries", str(home.parent / "target.jsonl"), "--train-corpus", "learn")
        assert target.exit_code == 0, target.output
        result = invoke("eval", "--corpus", "target", "--methods", "grapher_gcs", "--json")
    assert result.exit_code == 0, result.output
    (home / "eval.json").write_text(result.stdout, encoding="utf-8")
    return home


def test_eval_brings_up_what_a_learned_index_reads_on_its_training_corpus(two_corpora):
    [row] = json.loads((two_corpora / "eval.json").read_text(encoding="utf-8"))
    assert row["method"] == "grapher_gcs" and row["split"] == "test" and row["metrics"]["recall@10"] > 0.3
    lake = LakeStorage(two_corpora)
    for table, partition in (("vectors", {"model": "all-MiniLM-L6-v2"}), ("edges", {"kind": "structural"}), ("mentions", {"extractor": "spacy"})):
        assert lake.has(table, {"corpus": "learn", **partition}), table  # built on the training corpus, unasked
    assert lake.artifact_written_at("bm25", {"corpus": "learn"}) is not None
    assert not lake.has("runs", {"corpus": "learn", "method": "grapher_gcs"})  # its inputs, not its runs
    report = TunedRankers.load(lake.artifact("graph_rankers", {"corpus": "target"})).report
    assert report["train_corpus"] == "learn" and report["split"] == "all"
    with DagsterInstance.from_config(str(two_corpora / "dagster")) as instance:  # the training corpus's run first
        runs = [(run.job_name, run.tags["graphlake/corpus"]) for run in reversed(instance.get_runs()) if run.tags["graphlake/command"] == "eval"]
    assert runs[:2] == [("evaluate", "learn"), ("evaluate", "target")]


def test_propagation_rankers_train_no_network_and_a_network_ranker_trains_its_own(two_corpora, monkeypatch):
    use_lake(monkeypatch, two_corpora)
    (two_corpora / "methods.yaml").write_text("use: [grapher_ppr, grapher_gat]\n")  # grapher_gcs is a default
    rankers = LakeStorage(two_corpora).artifact("graph_rankers", {"corpus": "target"})
    assert TunedRankers.load(rankers).models == {} and "networks" not in TunedRankers.load(rankers).report
    result = invoke("eval", "--corpus", "target", "--methods", "grapher_ppr,grapher_gcs", "--json")
    assert result.exit_code == 0, result.output
    assert LakeStorage(two_corpora).artifact("graph_rankers", {"corpus": "target"}) == rankers  # nothing retrained
    result = invoke("eval", "--corpus", "target", "--methods", "grapher_gat", "--json")
    assert result.exit_code == 0, result.output
    assert set(TunedRankers.load(LakeStorage(two_corpora).artifact("graph_rankers", {"corpus": "target"})).models) == {"gat"}
