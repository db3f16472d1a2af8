"""The partner signals against hand-computed values, and the rule that keeps them: a model that learns
from them only where, on the training queries' folds, they beat the model without them beyond noise."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from graphlake.assets.retrieval.learned_fusion import LearnedFusionConfig
from graphlake.kernels.partners import DENSE, ENTITIES, TITLES, NodeEntities, NodeTitles, anchors_of, dense_signals, entity_signals, title_signals
from graphlake.kernels.text.entities import normalise
from graphlake.retrieval.core import Candidates, needs, parse_operator
from graphlake.retrieval.models.learned_fusion import Partners, key
from graphlake.retrieval.training.learned_fusion import fit, ranked_docs

pytestmark = pytest.mark.fast


def test_dense_signals_read_each_candidate_beside_the_anchors_but_itself():
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # unit: e1, e2, (e1+e2)/sqrt2
    query = np.array([3.0, 0.0])
    anchors = anchors_of(np.array([0.1, 0.9, 0.5]), np.arange(3), 2)
    assert anchors.tolist() == [1, 2]
    assert anchors_of(np.array([0.1, 0.9, 0.5, 0.7]), np.array([0, 1, 2, 1]), 2).tolist() == [1, 2]  # one anchor per document: 3 is 1's page
    got = dense_signals(vectors, query, np.arange(3), anchors)
    assert got.shape == (3, len(DENSE))
    half = 1 / math.sqrt(2)
    # candidate 0 beside anchors 1 (cos 0) and 2 (cos half); expanded by 2: (e1+e1/sqrt2+e2/sqrt2) normalised
    expanded_by_2 = np.array([1 + half, half]) / np.linalg.norm([1 + half, half])
    assert got[0, 0] == pytest.approx(half) and got[0, 1] == pytest.approx(max(expanded_by_2[0], half))
    assert got[0, 2] == pytest.approx(got[0, 1] - 1.0)  # its cosine to the question alone is 1
    assert got[1, 0] == pytest.approx(half)  # anchor 1 is never its own partner: only anchor 2 counts
    assert got[2, 0] == pytest.approx(half)  # anchor 2 beside anchor 1: (e1+e2)/sqrt2 . e2
    same = dense_signals(vectors, query, np.array([0, 1, 1]), anchors)  # candidates 1 and 2: chunks of one document
    assert np.isnan(same[1:, :2]).all() and same[0, 0] == pytest.approx(half)  # no partner within its own document


def test_title_and_entity_signals_follow_the_bridge():
    # node 0 "Ed Wood" mentions Glen or Glenda; node 1 is "Glen or Glenda" (the bridge's target);
    # node 2 "Paris (band)" is named by the question; node 3 shares nothing
    raw = ["Ed Wood directed Glen or Glenda in 1953.", "A film of 1953.", "A band.", "Unrelated text."]
    titles = NodeTitles.build(["Ed Wood", "Glen or Glenda", "Paris (band)", "Other"], lambda row: raw[row])
    rows, anchors, documents = np.array([0, 1, 2, 3]), np.array([0]), np.arange(4)
    got = title_signals(titles, rows, documents, anchors, normalise("Did Paris and the director of Glen or Glenda meet?"))
    assert got.shape == (4, len(TITLES))
    assert got[:, 0].tolist() == [0, 1, 0, 0]  # only node 1's title is in the anchor's text (the anchor is not its own partner)
    assert got[:, 1].tolist() == [0, 0, 0, 0]  # no text names the anchor's title "ed wood" but its own
    assert got[:, 2].tolist() == [0, 1, 1, 0]  # "glen or glenda" and "paris" are in the question

    norms = ["glen or glenda", "1953", "paris"]
    entities = NodeEntities.build(4, norms, np.array([0, 1, 1, 1, 0, 2]), np.array([0, 0, 1, 2, 2, 3]), ["ed wood", "glen or glenda", "paris", "other"])
    idf = entities.idf
    assert entities.title.tolist() == [-1, 0, 2, -1] and idf[1] < idf[0] < idf[2]  # 1953 in three nodes, paris in one
    got = entity_signals(entities, rows, documents, anchors, np.array([2]))
    assert got.shape == (4, len(ENTITIES)) and np.isnan(got[0, :2]).all()  # the anchor has no partner but itself
    assert got[1:, 0] == pytest.approx([idf[1], idf[0] + idf[1], 0])  # shared with the anchor, by weight
    assert got[1:, 1].tolist() == [1, 0, 0]  # node 1's title is an entity the anchor mentions
    assert got[:, 2] == pytest.approx([0, 0, 0, idf[2]]) and got[:, 3] == pytest.approx([0, 0, 0, idf[2]])  # the question's, not the anchor's
    assert got[:, 4].tolist() == [0, 0, 1, 0]  # node 2's title is the question's entity
    assert np.isnan(entity_signals(entities, rows, np.array([0, 0, 2, 3]), anchors, np.array([2]))[1, :2]).all()  # node 1 now a chunk of the anchor's page


def test_title_links_survive_punctuation_and_skip_titles_that_name_nothing():
    # the anchor (node 0) names "O'Brien" as "O’Brien" (another apostrophe) and the page "It";
    # node 1 "O'Brien" must link, node 2 "It" (a stop word) and node 3 "UK" (two letters) must not
    raw = ["O’Brien met the band It in the UK.", "O'Brien was born in 1902 and mentions Ed's-Diner.", "It is a band.", "A country."]
    titles = NodeTitles.build(["Ed's-Diner", "O'Brien", "It", "UK"], lambda row: raw[row])
    assert titles.titles == ["edsdiner", "obrien", None, None] and titles.probes[:2] == ["diner", "brien"]
    got = title_signals(titles, np.arange(4), np.arange(4), np.array([0]), normalise("Where was O'Brien born, it asks"))
    assert got[:, 0].tolist() == [0, 1, 0, 0]  # only "obrien" of the three is linked from the anchor's text
    assert got[:, 1].tolist() == [0, 1, 0, 0]  # node 1 writes the anchor's title "Ed's-Diner": its probe "diner" finds it
    assert got[:, 2].tolist() == [0, 1, 0, 0]  # the question names O'Brien, and "it" links nothing


def _synthetic(count: int, informative: bool, seed: int):
    """``count`` queries over 30 candidates each, which two inputs rank at random; the one relevant
    candidate's title is in the question where ``informative``, a random candidate's otherwise."""
    rng = np.random.default_rng(seed)
    titles = [f"page {i}" for i in range(30 * count)]
    texts = ["text"] * len(titles)
    node_titles = NodeTitles.build(titles, lambda row: texts[row])
    queries, found, partners, gold = [], [], [], {}
    for q in range(count):
        rows = np.arange(30 * q, 30 * q + 30)
        relevant = int(rng.choice(rows))
        named = relevant if informative else int(rng.choice(rows))
        inputs = [Candidates(scores=np.linspace(1, 0, 30), rows=rng.permutation(rows)) for _ in range(2)]
        queries.append({"query_id": f"q{q}", "text": f"about page {named}"})
        found.append(inputs)
        vectors = rng.normal(size=(30 * count, 4)).astype(np.float32)
        partners.append(Partners(("dense", "titles"), 3, np.arange(30 * count), vectors, rng.normal(size=4), node_titles, f"about page {named}"))
        gold[f"q{q}"] = {f"d{relevant}": 1}
    return queries, found, partners, gold, np.array([f"d{i}" for i in range(30 * count)], dtype=object)


@pytest.mark.parametrize("informative", [True, False])
def test_partner_signals_are_kept_only_where_they_help_beyond_noise(informative):
    queries, found, partners, gold, doc_ids = _synthetic(60, informative, seed=1)
    config = LearnedFusionConfig(min_data_in_leaf=5, rounds=60, patience=20)
    ranker, trained = fit(SimpleNamespace(depth=30, k=30, partners=["dense", "titles"]), queries, found, partners, gold, doc_ids, config, across_corpora=False)
    signals = trained["partner_signals"]
    assert trained["folds"] == 5 and ranker.partners is signals["kept"] is (signals["gain"][1] > 0)
    if informative:  # the question names the relevant page: nothing but the title signal finds it
        assert signals["kept"] and signals["ndcg_with"] > 0.9 > 0.6 > signals["ndcg_without"]
        assert ranked_docs(ranker, queries[0]["text"], found[0], partners[0], 30, doc_ids)[0] == next(iter(gold["q0"]))
    else:  # a random page named: no gain beyond noise, the model without them is kept
        assert not signals["kept"] and signals["gain"][1] <= 0


def test_a_fusion_declares_its_partner_families_once_and_reads_what_they_read():
    spec = lambda partners: {"op": "learned_fusion", "inputs": [{"op": "bm25"}, {"op": "splade"}], "partners": partners}  # noqa: E731
    shuffled, ordered = (parse_operator(spec(p), "ltr") for p in (["entities", "dense", "entities"], ["dense", "entities"]))
    assert shuffled.partners == ["dense", "entities"] and key(shuffled) == key(ordered)  # one ranker, however it is written
    assert needs(shuffled) == {f"learned_fusion/{key(shuffled)}", "bm25", "splade", "dense", "cooccurrence"}  # dense and entities read beyond the inputs
    alone = parse_operator(spec([]), "ltr")
    assert needs(alone) == {f"learned_fusion/{key(alone)}", "bm25", "splade"} and key(alone) != key(ordered)
