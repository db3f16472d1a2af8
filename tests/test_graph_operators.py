"""SPRIG's ``ppr`` and GraphER's ``graph_rerank`` operators: by hand on tiny graphs, then end to end
on the demo lake through ``graphlake eval`` (the demo's graph_rankers tuned and trained on the demo's train split)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from dagster import AssetKey, DagsterInstance
from typer.testing import CliRunner

from graphlake.api.searchers import SearcherManager
from graphlake.cli import app
from graphlake.kernels.graph.entity_graph import EntityGraph
from graphlake.kernels.text.bm25 import BM25Index
from graphlake.retrieval.core import MethodError
from graphlake.retrieval.methods import parse_methods
from graphlake.retrieval.models.grapher import TunedRankers
from graphlake.retrieval.queries import alpha_source as alpha_queries
from graphlake.retrieval.queries import training_source as training_queries
from graphlake.warehouse.corpora import DEMO_PATH, CorpusRegistry, CorpusSpec
from graphlake.warehouse.linking import Linking
from graphlake.warehouse.storage import LakeStorage


class HandEntities:
    """The cooccurrence index over four passages: entity "alpha" in passages 0 and 1, "beta" in 2 and 3."""

    def __init__(self) -> None:
        self.graphs: dict = {}

    def graph(self, hub_prune_percent: float = 0.0, degree_cap: int = 0) -> EntityGraph:
        key = (hub_prune_percent, degree_cap)
        if key not in self.graphs:
            self.graphs[key] = EntityGraph.build(4, ["alpha", "beta"], np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3]), np.array([1.0, 2.0, 1.0, 1.0]), hub_prune_percent, degree_cap)
        return self.graphs[key]

    def query_entities(self, text: str, extractor: str, request) -> list[str]:
        return [word for word in text.lower().split() if word in ("alpha", "beta")]


class GraphIndexes:
    """Indexes by name, as ``IndexSet`` gives them: BM25 over the four passages' words, their
    entity graph, and structural links where passage 1 is a hub linked to 0, 2 and 3."""

    def __init__(self) -> None:
        links = np.zeros((4, 4))
        for a, b in ((1, 0), (1, 2), (1, 3)):
            links[a, b] = links[b, a] = 1.0
        self.loaded = {
            "bm25": BM25Index.build(["red fox", "red fox den", "blue whale", "grey whale song"]),
            "cooccurrence": HandEntities(),
            "structural": sp.csr_matrix(links),
            "graph_rankers": TunedRankers({"ppr": 0.15, "gcs": 0.5}),
        }
        self.linking = Linking(proximity="structural")
        self.snapshot, self.encoders = self, None  # its own snapshot (``linking``); these operators encode no query

    def get(self, name: str):
        return self.loaded[name]

    def __getattr__(self, kind: str):  # the typed handles, ``indexes.bm25``
        try:
            return self.__dict__["loaded"][kind]
        except KeyError:
            raise AttributeError(kind) from None


METHODS = {
    "bm25": {"op": "bm25", "k": 10},
    "graph": {"op": "ppr", "fallback": "bm25"},
    "graph_nofallback": {"op": "ppr", "fallback": None},
    "graph_hybrid": {"op": "ppr", "inputs": ["bm25"], "seed_k": 1},
    "graph_push": {"op": "ppr", "mode": "push", "epsilon": 1e-10},
    "graph_converged": {"op": "ppr", "iterations": 500},
    "graph_cg": {"op": "ppr", "mode": "cg", "epsilon": 1e-12},
    "graph_pruned": {"op": "ppr", "hub_prune_percent": 50},
    "base": {"op": "weighted_sum", "inputs": ["bm25"], "normalise": [False], "k": 10},
    "gcs": {"op": "graph_rerank", "inputs": ["base"], "ranker": "gcs"},
    "ppr_rerank": {"op": "graph_rerank", "inputs": ["base"], "ranker": "ppr"},
}


@pytest.mark.fast
def test_ppr_walks_from_query_entities_and_seed_passages():
    methods, indexes = parse_methods(METHODS), GraphIndexes()
    by_entity = methods["graph"].run("where does alpha live", indexes)
    assert sorted(by_entity.rows.tolist()) == [0, 1]  # only alpha's passages are reachable
    assert by_entity.rows[0] == 1  # the heavier edge carries more of the walk
    hybrid = methods["graph_hybrid"].run("alpha whale song", indexes)
    assert set(hybrid.rows.tolist()) == {0, 1, 2, 3}  # BM25's top passage (3) seeds beta's side too
    pushed = methods["graph_push"].run("alpha", indexes)
    converged = methods["graph_converged"].run("alpha", indexes)
    solved = methods["graph_cg"].run("alpha", indexes)
    assert pushed.rows.tolist() == converged.rows.tolist() and np.allclose(pushed.scores, converged.scores, atol=1e-8)
    assert solved.rows.tolist() == converged.rows.tolist() and np.allclose(solved.scores, converged.scores, atol=1e-10)


def test_ppr_falls_back_to_bm25_and_prunes_hubs():
    methods, indexes = parse_methods(METHODS), GraphIndexes()
    fallback = methods["graph"].run("whale song", indexes)  # no entity in the query
    assert set(fallback.rows.tolist()) == {2, 3}
    assert len(methods["graph_nofallback"].run("whale song", indexes).rows) == 0
    assert indexes.cooccurrence.graph(50, 0).entity_rows.keys() == {"beta"}  # alpha (ties broken by code) is the pruned hub
    assert len(methods["graph_pruned"].run("alpha", indexes).rows) == 0
    with pytest.raises(MethodError, match="ppr needs seeds"):
        parse_methods({"g": {"op": "ppr", "query_entities": False}})


def test_graph_rerank_gcs_lifts_neighbours_of_relevant_nodes_ppr_lifts_the_hub():
    methods, indexes = parse_methods(METHODS), GraphIndexes()
    base = methods["base"].run("red fox whale", indexes)
    smoothed = methods["gcs"].run("red fox whale", indexes)
    ppr = methods["ppr_rerank"].run("red fox whale", indexes)
    assert set(smoothed.rows.tolist()) == set(base.rows.tolist())
    base_score = dict(zip(base.rows.tolist(), base.scores.tolist()))
    assert all(s >= base_score[r] - 1e-12 for r, s in zip(smoothed.rows.tolist(), smoothed.scores.tolist()))  # max(p, s)
    assert ppr.rows[0] == 1  # the hub collects the walk from all its neighbours


def test_grapher_and_sprig_methods_end_to_end_on_the_demo(demo_copy):
    lake = demo_copy  # a private copy of the session's demo lake: graph_rankers trained on its train split
    names = "rrf,graph,graph_rrf,rrf_ppr,grapher_base,grapher_ppr,grapher_gcs,grapher_gat,grapher_mlp"
    result = CliRunner().invoke(app, ["eval", "--corpus", "demo", "--methods", names, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = {row["method"]: row["metrics"] for row in json.loads(result.stdout)}
    assert list(report) == names.split(",")
    assert all(0.0 <= value <= 1.0 for metrics in report.values() for value in metrics.values())
    assert report["graph_rrf"]["recall@10"] > 0.5 and report["grapher_gcs"]["recall@10"] > 0.5
    lake_ = LakeStorage(lake)
    rankers = TunedRankers.load(lake_.artifact("graph_rankers", {"corpus": "demo"}))
    assert rankers.report["train_corpus"] == "demo" and rankers.report["split"] == "train"  # never the test queries
    assert rankers.alpha["gcs"] in [round(0.1 * i, 1) for i in range(1, 10)] and set(rankers.models) == {"gat", "mlp"}
    runs = lake_.read("runs", {"corpus": "demo", "method": "grapher_gcs"})
    base = lake_.read("runs", {"corpus": "demo", "method": "grapher_base"})
    assert set(runs.column("query_id").to_pylist()) == set(base.column("query_id").to_pylist())
    assert runs.num_rows == base.num_rows  # a reranker reorders its candidates, it never adds or drops any

    # two corpora learning from the same queries share one training: the second copies the first's rankers
    registry = CorpusRegistry(lake)
    for name in ("twin-a", "twin-b"):
        registry.add(CorpusSpec(name=name, format="demo", path=str(DEMO_PATH), train_corpus="demo"))
    for name, retrained in (("twin-a", True), ("twin-b", False), ("twin-a", False)):
        result = CliRunner().invoke(app, ["materialize", "--corpus", name, "--select", "key:graph_rankers"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        with DagsterInstance.get() as instance:
            metadata = instance.get_latest_materialization_event(AssetKey("graph_rankers")).asset_materialization.metadata
        assert metadata["retrained"].value is retrained
    twin_a = lake_.artifact("graph_rankers", {"corpus": "twin-a"})
    twin_b = lake_.artifact("graph_rankers", {"corpus": "twin-b"})
    assert (twin_a / "rankers.json").read_text() == (twin_b / "rankers.json").read_text()
    assert TunedRankers.load(twin_a).report["split"] == "all"  # the training corpus's queries, all of them

    # a running lake serves an edited declaration at once, as a new process would; another corpus's leaves it warm
    searchers = SearcherManager(lake)
    served = searchers.served("twin-a")
    assert served.indexes.snapshot.linking.proximity == "contextual"
    registry.add(CorpusSpec(name="twin-c", format="demo", path=str(DEMO_PATH)))
    assert searchers.served("twin-a") is served
    registry.add(CorpusSpec(name="twin-a", format="demo", path=str(DEMO_PATH), train_corpus="demo", linking={"proximity": "structural"}))
    assert searchers.served("twin-a").indexes.snapshot.linking.proximity == "structural"


@pytest.mark.fast
def test_a_corpus_declares_how_its_passages_link_and_keeps_its_formats_otherwise(tmp_path):
    """What GraphER's proximity, ``graph: auto`` and GRASP's ``source: auto`` read: the corpus's own
    declaration in corpora.yaml, field by field over its format's, never the format's name at query time."""
    registry = CorpusRegistry(tmp_path)
    assert CorpusSpec(name="hp", format="hotpotqa", path=".").effective_linking == Linking(proximity="conceptual", corpus_graph=("conceptual",))
    assert CorpusSpec(name="t", format="bird", path=".").effective_linking.skb_sources == ("sql_schema",)
    registry.add(CorpusSpec(name="notes", format="jsonl", path=str(tmp_path), linking={"proximity": "conceptual", "skb_sources": ["entities", "sql_schema"]}))
    assert "proximity: conceptual" in (tmp_path / "corpora.yaml").read_text()
    declared = CorpusRegistry(tmp_path).get("notes").effective_linking  # read back from the file
    assert declared == Linking(proximity="conceptual", corpus_graph=("citation", "semantic"), skb_sources=("entities", "sql_schema"))
    with pytest.raises(ValueError, match="unknown knowledge-base source 'wiki'; one of sql_schema"):
        CorpusSpec(name="x", format="jsonl", path=".", linking={"skb_sources": ["wiki"]})
    with pytest.raises(ValueError, match="corpus_graph"):
        CorpusSpec(name="x", format="jsonl", path=".", linking={"corpus_graph": ["citations"]})


def test_rankers_learn_from_the_declared_training_corpus_or_the_train_split(tmp_path):
    registry = CorpusRegistry(tmp_path)
    registry.add(CorpusSpec(name="tables", format="jsonl", path=str(tmp_path), train_corpus="other"))
    assert training_queries(tmp_path, "demo") == ("demo", "train")
    with pytest.raises(KeyError, match="corpus 'other' is not declared"):
        training_queries(tmp_path, "tables")
    registry.add(CorpusSpec(name="other", format="jsonl", path=str(tmp_path)))
    assert training_queries(tmp_path, "tables") == ("other", None)  # all of the training corpus's queries
    assert alpha_queries(tmp_path, "tables") == ("other", None)  # alpha follows the training queries by default
    registry.add(CorpusSpec(name="passages", format="jsonl", path=str(tmp_path), train_corpus="other", alpha_corpus="tables"))
    assert alpha_queries(tmp_path, "passages") == ("tables", None)  # GraphER: alpha tuned once, on BIRD
    with pytest.raises(ValueError, match="alpha_corpus must be another corpus"):
        CorpusSpec(name="tables", format="jsonl", path=str(tmp_path), alpha_corpus="tables")
