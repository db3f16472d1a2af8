"""The offline knowledge graph: spaCy triples, Allan-Poe logical edges, and their Dagster assets."""

from __future__ import annotations

from graphlake.kernels.text.entities import spacy_entities
from graphlake.kernels.text.triples import logical_edges as link_nodes
from graphlake.kernels.text.triples import normalize_entity, spacy_mentions_and_triples
from graphlake.pipelines.definitions import STATIC_ASSETS
from graphlake.warehouse.catalog import Catalog


def test_spacy_extracts_subject_verb_object_triples_and_the_ner_pipes_entities():
    texts = [
        "Marie Curie discovered polonium in Paris.",
        "Ingrid Valtersen coordinated the fieldwork and Colm Dempsey maintained the camera systems.",
        "The survey was funded by the Estmere Maritime Science Council.",
        "Alice and Bob founded Acme Corporation.",
        "It rained.",
    ]
    parsed = spacy_mentions_and_triples(texts)
    assert [mentions for mentions, _ in parsed] == spacy_entities(texts)  # one pass, the NER pipe's entities
    found = [[t.key() for t in triples] for _, triples in parsed]
    assert found == [
        [("Marie Curie", "discover", "polonium"), ("Marie Curie", "discover in", "Paris")],
        [("Ingrid Valtersen", "coordinate", "fieldwork"), ("Colm Dempsey", "maintain", "camera systems")],
        [("Estmere Maritime Science Council", "fund", "survey")],
        [("Alice", "found", "Acme Corporation"), ("Bob", "found", "Acme Corporation")],
        [],
    ]


def test_logical_edges_follow_allan_poe_exactly():
    rows = [
        # node a: Curie discovered polonium; node b names polonium; node c names Curie and Paris
        ("a", "Marie Curie", "discovered", "polonium"),
        ("b", "Polonium", "is", "radioactive element"),
        ("c", "marie curie", "lived in", "Paris"),
        ("d", "Paris", "is capital of", "France"),
    ]
    # V(a)={curie, polonium} V(b)={polonium, radioactive element} V(c)={curie, paris} V(d)={paris, france}
    # (curie, discovered, polonium): s in V(c), polonium not in V(c) -> c->a, c->b
    # (curie, lived in, paris):      s in V(a), paris not in V(a)    -> a->c, a->d
    # (paris, is capital of, france): s in V(c), france not in V(c)   -> c->d
    # (polonium, is, radioactive element): s in V(a) -> a->b
    assert link_nodes(rows) == [("a", "b", 1), ("a", "c", 1), ("a", "d", 1), ("c", "a", 1), ("c", "b", 1), ("c", "d", 1)]


def test_logical_edge_weight_counts_distinct_linking_triples():
    rows = [
        ("x", "Ann", "met", "Bob"),
        ("y", "Ann", "hired", "Bob"),
        ("y", "Ann", "hired", "Bob"),  # a repeated triple counts once
        ("z", "Ann", "knows", "Cy"),
    ]
    # x and y name {ann, bob}; z names {ann, cy}: z -> x and z -> y by 'met' and 'hired'; x,y -> z by 'knows'
    assert link_nodes(rows) == [("x", "z", 1), ("y", "z", 1), ("z", "x", 2), ("z", "y", 2)]
    assert normalize_entity("The  Vesk Reef") == "vesk reef"


def test_demo_knowledge_graph_materializes_without_dangling_edges(demo_lake):
    materialized = set(demo_lake.materializations())  # the session's one `graphlake demo` (conftest.py)
    assert {"triples_spacy", "logical_edges"} <= materialized and "triples_llm" not in materialized
    with Catalog(demo_lake.home).reader() as con:
        triples = con.execute("SELECT count(*), count(DISTINCT node_id) FROM triples WHERE extractor = 'spacy'").fetchone()
        assert triples[0] > 100 and triples[1] > 20
        edges = con.execute("SELECT count(*), min(weight) FROM edges WHERE kind = 'logical'").fetchone()
        assert edges[0] > 0 and edges[1] >= 1
        dangling = con.execute(
            """SELECT count(*) FROM edges e WHERE kind = 'logical'
               AND (e.src NOT IN (SELECT node_id FROM nodes) OR e.dst NOT IN (SELECT node_id FROM nodes) OR e.src = e.dst)"""
        ).fetchone()[0]
        assert dangling == 0


def test_llm_triples_sit_in_their_own_group():
    """The group is the stage's subpackage, given where the Definitions load it."""
    groups = {key.to_user_string(): group for a in STATIC_ASSETS for key, group in a.group_names_by_key.items()}
    assert {key: groups[key] for key in ("triples_spacy", "triples_llm", "triples_evidence", "logical_edges")} == {
        "triples_spacy": "enrichment",
        "triples_llm": "llm",
        "triples_evidence": "enrichment",
        "logical_edges": "graphs",
    }
