"""Entity extraction, SPRIG-EL aliases, entity-graph weights worked by hand, and a real demo build."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from graphlake.kernels.text.entities import (
    collect_mentions,
    conceptual_weights,
    cooccurrence_weights,
    normalise,
    regex_entities,
    spacy_entities,
    title_aliases,
)
from graphlake.warehouse.storage import LakeStorage

DEMO_CORPUS = Path(__file__).resolve().parents[1] / "warehouse" / "demo" / "corpus.jsonl"
SPACY_RECALL_FLOOR = 0.9  # measured 0.938 (121/129 per-document PERSON/ORG names) with en_core_web_sm 3.8.0


def test_regex_extracts_one_to_four_capitalised_words():
    text = "Ingrid Valtersen sailed from Port Ostrel to Tarn Island aboard the RV Kestrel Dawn. She met Colm Dempsey of the Estmere Maritime Science Council Board."
    [found] = regex_entities([text])
    assert found == [(name, "CAPITALISED") for name in ["Ingrid Valtersen", "Port Ostrel", "Tarn Island", "Kestrel Dawn", "She", "Colm Dempsey", "Estmere Maritime Science Council", "Board"]]


def test_spacy_finds_named_entities_skips_quantities_and_trims_articles():
    found = spacy_entities(
        ["Barack Obama visited Microsoft in Seattle on Monday with two engineers.", "Angela Merkel met Emmanuel Macron in Berlin.", ""],
        batch_size=2,
    )
    assert set(found[0]) == {("Barack Obama", "PERSON"), ("Microsoft", "ORG"), ("Seattle", "GPE"), ("Monday", "DATE")}
    assert set(found[1]) == {("Angela Merkel", "PERSON"), ("Emmanuel Macron", "PERSON"), ("Berlin", "GPE")}
    assert found[2] == []
    assert not any(name.lower().startswith("the ") for name, _ in spacy_entities(["He joined the Halvane Marine Institute."])[0])


def test_normalise_lowercases_and_deletes_non_alphanumerics():
    assert normalise("Tidewatch-3") == "tidewatch3"
    assert normalise("  The   HALVANE  Sound! ") == "the halvane sound"
    assert normalise("O'Brien") == "obrien"
    assert normalise("Café_Noir (1998)") == "cafénoir 1998"


def test_title_aliases_keep_only_unambiguous_parenthetical_strips():
    titles = ["Paris", "Paris (band)", "Mercury (planet)", "Mercury (element)", "Kent (band)", "Tarn Island (Estmere)", "Plain Title"]
    # "paris" is a title itself and "mercury" strips from two titles: both stay unlinked
    assert title_aliases(titles) == {"kent": "kent band", "tarn island": "tarn island estmere"}


def test_collect_mentions_links_aliases_counts_and_drops_short_norms():
    collected = collect_mentions(
        ["n0", "n1"],
        [[("Kent", "ORG"), ("KENT", "ORG"), ("Kent (band)", "ORG"), ("X", "ORG")], [("Paris", "GPE")]],
        {"kent": "kent band"},
    )
    assert collected.counts == {("n0", "kent band"): 3, ("n1", "paris"): 1}
    assert collected.linked == 2
    assert collected.name_and_type("kent band") == ("Kent", "ORG")


# Five passages; n4 mentions nothing. Codes: entity A=0, B=1, C=2; nodes n0..n4 = 0..4.
# A: n0 (tf 2), n1 (tf 1) -> df 2;  B: n0..n3 (tf 1) -> df 4;  C: n2 (tf 3) -> df 1.
ENTITY = np.array([0, 0, 1, 1, 1, 1, 2])
NODE = np.array([0, 1, 0, 1, 2, 3, 2])
TF = np.array([2, 1, 1, 1, 1, 1, 3])


def _weights(**options) -> dict[tuple[int, int], float]:
    rows, weight = cooccurrence_weights(ENTITY, NODE, TF, 5, **options)
    return {(int(ENTITY[r]), int(NODE[r])): w for r, w in zip(rows, weight)}


def test_cooccurrence_tfidf_without_hub_down_weighting():
    a, b, c = math.log(5 / 2), math.log(5 / 4), math.log(5 / 1)
    expected = {(0, 0): 2 * a, (0, 1): a, (1, 0): b, (1, 1): b, (1, 2): b, (1, 3): b, (2, 2): 3 * c}
    assert _weights(gamma=0.0) == pytest.approx(expected)


def test_cooccurrence_hub_down_weighting_by_df_to_the_minus_gamma():
    a, b, c = math.log(5 / 2), math.log(5 / 4), math.log(5)
    got = _weights(gamma=0.5)
    assert got[(0, 0)] == pytest.approx(2 * a / math.sqrt(2))
    assert got[(1, 3)] == pytest.approx(b / 2)
    assert got[(2, 2)] == pytest.approx(3 * c)


def test_cooccurrence_hub_pruning_and_degree_cap():
    assert set(_weights(hub_prune_percent=34)) == {(0, 0), (0, 1), (2, 2)}  # floor(3 * 0.34) = 1 hub: B
    assert set(_weights(hub_prune_percent=67)) == {(2, 2)}  # 2 hubs: B (df 4), A (df 2)
    assert set(_weights(degree_cap=1)) == {(0, 0), (1, 0), (2, 2)}  # heaviest edge each; B's tie -> first node


def test_cooccurrence_drops_entities_in_every_passage():
    rows, _ = cooccurrence_weights(np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([1, 1, 1]), 2)
    assert rows.tolist() == [2]


def test_conceptual_weight_divides_by_the_targets_entities():
    # n0 {A, B}, n1 {A}, n2 {B, C, D}, n3 {B, E}; codes A..E = 0..4
    node = np.array([0, 0, 1, 2, 2, 2, 3, 3])
    entity = np.array([0, 1, 0, 1, 2, 3, 1, 4])
    src, dst, weight = conceptual_weights(node, entity, 4, 5)
    got = {(int(s), int(d)): w for s, d, w in zip(src, dst, weight)}
    assert got == pytest.approx({(0, 1): 1 / 1, (1, 0): 1 / 2, (0, 2): 1 / 3, (2, 0): 1 / 2, (0, 3): 1 / 2, (3, 0): 1 / 2, (2, 3): 1 / 2, (3, 2): 1 / 3})
    # B (df 3) is over the limit: it links nothing but still counts in |E(n0)|
    src, dst, weight = conceptual_weights(node, entity, 4, 5, max_entity_df=2)
    assert list(zip(src.tolist(), dst.tolist(), weight.tolist())) == [(0, 1, 1.0), (1, 0, 0.5)]


@pytest.fixture(scope="module")
def enriched(demo_lake) -> LakeStorage:
    """The session's demo lake (conftest.py), whose run built the entities and entity graphs with the rest."""
    assert {"entities_spacy", "mentions_spacy", "entities_regex", "mentions_regex", "cooccurrence_edges", "conceptual_edges"} <= set(demo_lake.materializations())
    return LakeStorage(demo_lake.home)


def test_demo_spacy_recalls_the_gold_people_and_organisations(enriched):
    nodes = enriched.read("nodes", {"corpus": "demo"}).to_pylist()
    mentions = enriched.read("mentions", {"corpus": "demo", "extractor": "spacy"}).to_pylist()
    doc_of = {n["node_id"]: n["doc_id"] for n in nodes}
    found: dict[str, set[str]] = defaultdict(set)
    for row in mentions:
        found[doc_of[row["node_id"]]].add(row["entity_id"].removeprefix("spacy:"))
    gold = {(doc["id"], normalise(e["name"])) for doc in map(json.loads, DEMO_CORPUS.read_text(encoding="utf-8").splitlines()) for e in doc["metadata"]["entities"] if e["type"] in ("PERSON", "ORG")}
    recalled = sum(norm in found[doc_id] for doc_id, norm in gold)
    assert len(gold) > 50
    assert recalled / len(gold) >= SPACY_RECALL_FLOOR, sorted(g for g in gold if g[1] not in found[g[0]])


@pytest.mark.parametrize("extractor", ["spacy", "regex"])
def test_demo_mentions_and_entities_agree(enriched, extractor):
    partition = {"corpus": "demo", "extractor": extractor}
    entities = enriched.read("entities", partition).to_pylist()
    mentions = enriched.read("mentions", partition).to_pylist()
    node_ids = set(enriched.read("nodes", {"corpus": "demo"}).column("node_id").to_pylist())
    nodes_per_entity: dict[str, set[str]] = defaultdict(set)
    for row in mentions:
        nodes_per_entity[row["entity_id"]].add(row["node_id"])
    assert mentions and {row["node_id"] for row in mentions} <= node_ids
    assert {e["entity_id"]: e["df"] for e in entities} == {e: len(n) for e, n in nodes_per_entity.items()}
    assert all(e["entity_id"] == f"{extractor}:{e['norm']}" for e in entities)


def test_demo_edges_have_no_dangling_endpoints(enriched):
    node_ids = set(enriched.read("nodes", {"corpus": "demo"}).column("node_id").to_pylist())
    entity_ids = set(enriched.read("entities", {"corpus": "demo", "extractor": "spacy"}).column("entity_id").to_pylist())
    cooccurrence = enriched.read("edges", {"corpus": "demo", "kind": "cooccurrence"})
    conceptual = enriched.read("edges", {"corpus": "demo", "kind": "conceptual"})
    assert cooccurrence.num_rows and conceptual.num_rows
    assert set(cooccurrence.column("src").to_pylist()) <= entity_ids
    assert set(cooccurrence.column("dst").to_pylist()) <= node_ids
    assert set(conceptual.column("src").to_pylist()) | set(conceptual.column("dst").to_pylist()) <= node_ids
    assert min(cooccurrence.column("weight").to_pylist()) > 0
    assert all(0 < w <= 1 for w in conceptual.column("weight").to_pylist())
    assert set(cooccurrence.column("source").to_pylist()) == set(conceptual.column("source").to_pylist()) == {"spacy"}
