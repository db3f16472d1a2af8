"""The graph macros in the catalog and the edge/mention checks, on a small hand-made graph.

contextual (both ways): a#0-a#1, a#1-a#2, b#0-b#1
link (one way):         a#0->b#1 .4, a#1->c#0 .3, a#2->b#0 .9, b#1->c#0 .7, c#0->e:paris .5
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from dagster import DagsterEventType, DagsterInstance, asset
from typer.testing import CliRunner

from conftest import materialize_committed
from graphlake.assets.edge_checks import df_problems, edge_problems, mentions_match_df
from graphlake.cli import app
from graphlake.pipelines.definitions import resources
from graphlake.warehouse.catalog import Catalog
from graphlake.warehouse.io_manager import LakeResource
from graphlake.warehouse.partitions import corpus_partitions
from graphlake.warehouse.storage import LakeStorage

CONTEXTUAL = [("a#0", "a#1"), ("a#1", "a#2"), ("b#0", "b#1")]
LINK = [("a#0", "b#1", 0.4), ("a#1", "c#0", 0.3), ("a#2", "b#0", 0.9), ("b#1", "c#0", 0.7), ("c#0", "e:paris", 0.5)]
NODES = ["a#0", "a#1", "a#2", "b#0", "b#1", "c#0"]
ENTITIES = {  # extractor -> (entity_id, name, norm, df)
    "regex": [("e:paris", "Paris", "paris", 2), ("e:france", "France", "france", 1)],
    "spacy": [("e:paris", "Paris", "paris", 1)],
}
MENTIONS = {"regex": [("a#1", "e:paris", 2), ("b#0", "e:paris", 1), ("c#0", "e:france", 1)], "spacy": [("c#0", "e:paris", 3)]}


def edge_table(rows: list[tuple[str, str, float]], kind: str) -> pa.Table:
    src, dst, weight = zip(*rows) if rows else ((), (), ())
    return pa.table(
        {
            "src": pa.array(src, pa.string()),
            "dst": pa.array(dst, pa.string()),
            "kind": pa.array([kind] * len(src), pa.string()),
            "weight": pa.array(weight, pa.float64()),
            "source": pa.array(["test"] * len(src), pa.string()),
        }
    )


def nodes_table(ids: list[str]) -> pa.Table:
    return pa.table(
        {
            "node_id": ids,
            "doc_id": [i.split("#")[0] for i in ids],
            "chunk_idx": pa.array([int(i.split("#")[1]) for i in ids], pa.int32()),
            "text": ids,
            "start": pa.array([0] * len(ids), pa.int32()),
            "end": pa.array([1] * len(ids), pa.int32()),
            "content_hash": ids,
        }
    )


def entities_table(rows: list[tuple[str, str, str, int]], extractor: str) -> pa.Table:
    ids, names, norms, dfs = zip(*rows)
    return pa.table(
        {
            "extractor": [extractor] * len(ids),
            "entity_id": ids,
            "name": names,
            "norm": norms,
            "type": ["GPE"] * len(ids),
            "df": pa.array(dfs, pa.int32()),
        }
    )


def mentions_table(rows: list[tuple[str, str, int]], extractor: str) -> pa.Table:
    nodes, ids, counts = zip(*rows)
    return pa.table(
        {
            "extractor": [extractor] * len(ids),
            "node_id": nodes,
            "entity_id": ids,
            "count": pa.array(counts, pa.int32()),
            "source": ["test"] * len(ids),
        }
    )


def write_graph(home: Path) -> None:
    lake = LakeStorage(home)
    both_ways = [(a, b, 1.0) for a, b in CONTEXTUAL] + [(b, a, 1.0) for a, b in CONTEXTUAL]
    lake.write("edges", {"corpus": "g", "kind": "contextual"}, edge_table(both_ways, "contextual"))
    lake.write("edges", {"corpus": "g", "kind": "link"}, edge_table(LINK, "link"))
    lake.write("edges", {"corpus": "other", "kind": "contextual"}, edge_table([("a#0", "zz", 1.0)], "contextual"))
    lake.write("nodes", {"corpus": "g"}, nodes_table(NODES))
    for extractor, rows in ENTITIES.items():
        lake.write("entities", {"corpus": "g", "extractor": extractor}, entities_table(rows, extractor))
        lake.write("mentions", {"corpus": "g", "extractor": extractor}, mentions_table(MENTIONS[extractor], extractor))
    Catalog(home).refresh()


@pytest.fixture
def graph_lake(lake: Path) -> Path:
    write_graph(lake)
    return lake


def rows(home: Path, query: str) -> list[tuple]:
    """Through a read-only connection, as any catalog user would."""
    with Catalog(home).reader() as con:
        return con.execute(query).fetchall()


def cli_json(query: str) -> list[dict]:
    result = CliRunner().invoke(app, ["sql", query, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_neighbours_are_out_edges_of_the_corpus_strongest_first(graph_lake):
    assert rows(graph_lake, "select * from neighbours('g', 'a#0')") == [("a#1", "contextual", 1.0), ("b#1", "link", 0.4)]
    assert rows(graph_lake, "select * from neighbours('g', 'a#0', kind := 'link')") == [("b#1", "link", 0.4)]
    assert rows(graph_lake, "select * from neighbours('g', 'e:paris')") == []  # only in-edges


def test_degrees_count_nodes_per_degree_in_and_out(graph_lake):
    assert rows(graph_lake, "select * from degrees('g', kind := 'contextual')") == [
        ("contextual", "out", 1, 4),
        ("contextual", "out", 2, 1),
        ("contextual", "in", 1, 4),
        ("contextual", "in", 2, 1),
    ]
    assert rows(graph_lake, "select * from degrees('g') where kind = 'link'") == [
        ("link", "out", 1, 5),
        ("link", "in", 1, 3),
        ("link", "in", 2, 1),
    ]


def test_khop_gives_each_reachable_node_its_shortest_hop_distance(graph_lake):
    assert rows(graph_lake, "select * from khop('g', 'a#0', 2)") == [
        ("a#0", 0),
        ("a#1", 1),
        ("b#1", 1),
        ("a#2", 2),
        ("b#0", 2),
        ("c#0", 2),
    ]
    assert rows(graph_lake, "select node_id, hops from khop('g', 'a#0', 3) where hops = 3") == [("e:paris", 3)]
    assert rows(graph_lake, "select * from khop('g', 'a#0', 10, kind := 'contextual')") == [("a#0", 0), ("a#1", 1), ("a#2", 2)]
    assert rows(graph_lake, "select * from khop('g', 'e:paris', 5)") == [("e:paris", 0)]  # edges are followed forwards


def test_shortest_path_is_bounded_by_max_hops_and_kind(graph_lake):
    def path(args: str) -> list[tuple]:
        return rows(graph_lake, f"select path, length from shortest_path({args})")

    assert path("'g', 'a#0', 'e:paris', 5") == [(["a#0", "a#1", "c#0", "e:paris"], 3)]  # ties: smallest path
    assert path("'g', 'a#0', 'e:paris', 2") == []  # exists, but not within 2 hops
    assert path("'g', 'a#2', 'c#0', 5") == [(["a#2", "a#1", "c#0"], 2)]
    assert path("'g', 'a#2', 'c#0', 5, kind := 'link'") == []
    assert path("'g', 'b#0', 'c#0', 2") == [(["b#0", "b#1", "c#0"], 2)]
    assert path("'g', 'a#2', 'a#0', 5, kind := 'contextual'") == [(["a#2", "a#1", "a#0"], 2)]
    assert path("'g', 'a#0', 'c#0', 5, kind := 'contextual'") == []  # c#0 has no contextual edge
    assert path("'g', 'e:paris', 'a#0', 5") == []  # no way back against edge direction
    assert path("'g', 'b#0', 'b#0', 0") == [(["b#0"], 0)]


def test_entity_nodes_match_id_name_or_norm_across_extractors(graph_lake):
    expected = [("c#0", "e:paris", "Paris", "spacy", 3), ("a#1", "e:paris", "Paris", "regex", 2), ("b#0", "e:paris", "Paris", "regex", 1)]
    for entity in ("e:paris", "Paris", "paris"):
        assert rows(graph_lake, f"select * from entity_nodes('g', '{entity}')") == expected
    assert rows(graph_lake, "select node_id from entity_nodes('g', 'France')") == [("c#0",)]
    assert rows(graph_lake, "select * from entity_nodes('other', 'paris')") == []


def test_top_hubs_rank_by_distinct_neighbours(graph_lake):
    assert rows(graph_lake, "select * from top_hubs('g', NULL, 4)") == [
        ("a#1", 3, 3, 2),
        ("b#1", 3, 2, 2),
        ("c#0", 3, 1, 2),
        ("a#0", 2, 2, 1),
    ]
    assert rows(graph_lake, "select * from top_hubs('g', 'contextual', 1)") == [("a#1", 2, 2, 2)]
    assert rows(graph_lake, "select node_id, degree from top_hubs('g', kind := 'link', n := 2)") == [("c#0", 3), ("b#1", 2)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("select * from neighbours('g', 'b#1', 'link')", [{"node_id": "c#0", "kind": "link", "weight": 0.7}]),
        (
            "select * from degrees('g', 'link') where direction = 'in'",
            [
                {"kind": "link", "direction": "in", "degree": 1, "nodes": 3},
                {"kind": "link", "direction": "in", "degree": 2, "nodes": 1},
            ],
        ),
        ("select * from khop('g', 'b#0', 1)", [{"node_id": "b#0", "hops": 0}, {"node_id": "b#1", "hops": 1}]),
        ("select * from shortest_path('g', 'a#0', 'b#0', 4)", [{"path": ["a#0", "b#1", "b#0"], "length": 2}]),
        ("select node_id, extractor from entity_nodes('g', 'France')", [{"node_id": "c#0", "extractor": "regex"}]),
        ("select * from top_hubs('g', 'link', 1)", [{"node_id": "c#0", "degree": 3, "out_degree": 1, "in_degree": 2}]),
    ],
)
def test_macros_through_the_cli(graph_lake, query, expected):
    assert cli_json(query) == expected


def test_macros_exist_in_a_new_lake_with_empty_tables(lake):
    Catalog(lake).refresh()
    assert rows(lake, "select count(*) from khop('g', 'x', 3)") == [(1,)]  # just the start node
    assert rows(lake, "select * from shortest_path('g', 'x', 'y', 3)") == []


def test_edge_problems_flag_dangling_endpoints_and_duplicates_per_kind():
    nodes, entities = nodes_table(NODES), entities_table(ENTITIES["regex"], "regex")
    good = pa.concat_tables([edge_table([("a#0", "a#1", 1.0)], "contextual"), edge_table(LINK, "link")])
    result = edge_problems(good, nodes, entities)
    assert result.passed
    assert result.metadata["by_kind"].data == {
        "contextual": {"edges": 1, "dangling": 0, "duplicates": 0},
        "link": {"edges": 5, "dangling": 0, "duplicates": 0},
    }
    bad = pa.concat_tables([good, edge_table([("a#0", "ghost", 1.0), ("nowhere", "a#1", 1.0)], "link"), edge_table([("a#0", "a#1", 2.0)], "contextual")])
    result = edge_problems(bad, nodes, entities)
    assert not result.passed
    assert result.metadata["by_kind"].data == {
        "contextual": {"edges": 2, "dangling": 0, "duplicates": 1},
        "link": {"edges": 7, "dangling": 2, "duplicates": 0},
    }
    assert result.metadata["dangling_edges"].value == 2 and result.metadata["duplicate_edges"].value == 1
    assert result.metadata["dangling_examples"].data == {"link": ["ghost", "nowhere"]}
    assert not edge_problems(good, nodes.slice(0, 0), entities).passed  # without nodes nothing connects


def test_df_problems_compare_df_with_distinct_mentioning_nodes():
    entities = pa.concat_tables([entities_table(r, e) for e, r in ENTITIES.items()])
    mentions = pa.concat_tables([mentions_table(r, e) for e, r in MENTIONS.items()])
    assert df_problems(mentions, entities).passed
    wrong = entities_table([("e:paris", "Paris", "paris", 3), ("e:france", "France", "france", 1)], "regex")
    result = df_problems(mentions_table(MENTIONS["regex"] + [("a#0", "e:rome", 1)], "regex"), wrong)
    assert not result.passed
    assert (result.metadata["wrong_df"].value, result.metadata["unknown_entities"].value) == (1, 1)
    assert "e:paris: df 3 vs 2" in result.metadata["examples"].text


def test_edge_check_runs_on_the_demo_contextual_edges(demo_lake):
    """The check as the demo's Dagster run evaluated it (conftest.py builds the demo once)."""
    with DagsterInstance.from_config(str(demo_lake.home / "dagster")) as instance:
        [run] = instance.get_runs()
        records = instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    [evaluation] = [r.dagster_event.event_specific_data for r in records if r.dagster_event.event_specific_data.check_name == "contextual_edges_connect"]
    assert evaluation.passed
    counts = evaluation.metadata["by_kind"].data["contextual"]
    assert counts["edges"] == LakeStorage(demo_lake.home).read("edges", {"corpus": "demo", "kind": "contextual"}).num_rows > 0
    assert counts["dangling"] == counts["duplicates"] == 0


@pytest.mark.parametrize(("paris_df", "passed"), [(2, True), (5, False)])
def test_mentions_check_runs_in_dagster(tmp_path, paris_df, passed):
    @asset(partitions_def=corpus_partitions, metadata={"table": "mentions", "partition": {"extractor": "regex"}})
    def regex_mentions(lake: LakeResource) -> pa.Table:
        rows = [("e:paris", "Paris", "paris", paris_df), ("e:france", "France", "france", 1)]
        lake.storage.write("entities", {"corpus": "g", "extractor": "regex"}, entities_table(rows, "regex"))
        return mentions_table(MENTIONS["regex"], "regex")

    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("corpus", ["g"])
        result = materialize_committed(tmp_path, [regex_mentions, mentions_match_df("regex_mentions")], instance=instance, resources=resources(tmp_path), partition_key="g")
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.passed is passed
