"""Citation, structural and semantic edges: the detector on hand-written texts, the assets on real corpora."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from dagster import DagsterInstance, build_asset_context

from conftest import materialize_committed
from graphlake.assets.graphs.link_edges import SemanticConfig, nearest_neighbours, neighbour_recall, semantic_edges
from graphlake.kernels.text.citations import CitationIndex, find_citations, find_links
from graphlake.pipelines.definitions import STATIC_ASSETS, resources
from graphlake.warehouse.corpora import DEMO_PATH, CorpusRegistry, CorpusSpec
from graphlake.warehouse.storage import LakeStorage

INGEST = ["documents", "queries", "qrels", "foreign_keys"]

DOCS = {
    "v14": ("A Baseline Benthic Survey of Halvane Sound", ["Ingrid Valtersen", "Colm Dempsey", "Oona Fairweather"], 2014),
    "b16": ("The Halvane Dive Log", ["Aurelio Brandt", "Dmitri Osei"], 2016),
    "b16x": ("Dive Computers", ["Aurelio Brandt", "Leonie Dragan"], 2016),  # same first author and year as b16
    "f18": ("Two Decades Aboard the RV Kestrel Dawn", ["Oona Fairweather"], 2018),
    "m15": ("Tarn Eelgrass", ["Marrow, Elspeth"], 2015),
    "dup1": ("Annual Report", [], None),
    "dup2": ("Annual Report", [], None),
}


def index(with_metadata: bool = True) -> CitationIndex:
    meta = [{"authors": a, "year": y} if with_metadata else None for _, a, y in DOCS.values()]
    return CitationIndex.build(DOCS, [t for t, _, _ in DOCS.values()], meta)


def cited(text: str, doc_id: str | None = None, idx: CitationIndex | None = None) -> list[tuple[str, str, str]]:
    """(cited text, doc id, style) per citation, so the expected offsets are readable."""
    return [(text[c.start : c.end], c.doc_id, c.style) for c in find_citations(text, idx or index(), doc_id)]


# ---------------------------------------------------------------- the detector


def test_author_year_parenthetical_and_narrative_forms():
    text = "As surveyed (Valtersen et al., 2014) and logged by Brandt and Osei (2016), see also (Marrow, 2015; Fairweather, 2018) and Fairweather (2018)."
    assert cited(text) == [
        ("Valtersen et al., 2014", "v14", "author_year"),
        ("Brandt and Osei (2016)", "b16", "author_year"),
        ("Marrow, 2015", "m15", "author_year"),
        ("Fairweather, 2018", "f18", "author_year"),
        ("Fairweather (2018)", "f18", "author_year"),
    ]


def test_author_year_ambiguous_unknown_and_self_citations_are_dropped():
    # Brandt 2016 names two documents: only the second author tells them apart
    assert cited("(Brandt et al., 2016) and Brandt (2016)") == []
    assert cited("Brandt and Dragan (2016)") == [("Brandt and Dragan (2016)", "b16x", "author_year")]
    assert cited("(Nobody et al., 2014), Valtersen (2099), Storm Ilse (2018)") == []
    assert cited("as in (Fairweather, 2018)", doc_id="f18") == []


def test_numbered_citations_resolve_through_the_reference_list():
    text = (
        "Surveys [1, 3] and logs [2-3] matter; [4] and [9] are not in the list. "
        "References: [1] A baseline benthic survey of Halvane Sound. [2] The Halvane Dive Log. "
        "[3] Two Decades Aboard the RV Kestrel Dawn. [4] A Paper Nobody Wrote."
    )
    assert cited(text) == [
        ("[1, 3]", "v14", "numbered"),
        ("[1, 3]", "f18", "numbered"),
        ("[2-3]", "b16", "numbered"),
        ("[2-3]", "f18", "numbered"),
    ]
    assert cited("Markers [1] without a reference list cite nothing.") == []


def test_title_mentions_quoted_or_long_and_exact():
    text = 'As reported in "The Halvane Dive Log", and in Two Decades Aboard the RV Kestrel Dawn, but not the Halvane Dive Log unquoted (too short), nor "Annual Report" (two documents share it).'
    assert cited(text) == [
        ('"The Halvane Dive Log"', "b16", "title"),
        ("Two Decades Aboard the RV Kestrel Dawn", "f18", "title"),
    ]
    assert cited("two decades aboard the RV Kestrel Dawn") == []  # unquoted titles match case-sensitively
    assert cited("Crew notes: Two Decades Aboard") == []  # a text ending inside a title's first words


def test_corpus_without_author_metadata_still_resolves_numbers_and_titles():
    text = 'Fairweather (2018) and [1] and "Tarn Eelgrass". References: [1] The Halvane Dive Log.'
    assert cited(text, idx=index(with_metadata=False)) == [("[1]", "b16", "numbered"), ('"Tarn Eelgrass"', "m15", "title")]


def test_markdown_and_html_links_resolve_by_relative_path():
    paths = {p: p for p in ["a.md", "b.md", "sub/c.md", "sub/page 2.md"]}
    text = '[b](b.md) [c](sub/c.md#part) [self](a.md) [web](https://example.org/b.md) [gone](missing.md) <a href="sub/page%202.md?x=1">two</a>'
    assert [link.doc_id for link in find_links(text, "a.md", paths)] == ["b.md", "sub/c.md", "sub/page 2.md"]
    assert [link.doc_id for link in find_links('[up](../a.md) <A HREF="c.md">c</A>', "sub/page 2.md", paths)] == ["a.md", "sub/c.md"]


# ---------------------------------------------------------------- semantic kNN


def test_nearest_neighbours_are_exact_and_exclude_self():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]], dtype=np.float32)
    indices, scores = nearest_neighbours(vectors, k=2)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosine = unit @ unit.T
    np.fill_diagonal(cosine, -np.inf)
    assert indices.tolist() == np.argsort(-cosine, axis=1)[:, :2].tolist() == [[1, 3], [0, 3], [3, 1], [2, 1], [2, 3]]
    np.testing.assert_allclose(scores, np.take_along_axis(cosine, indices, axis=1), rtol=1e-6)


def test_nearest_neighbours_above_the_exact_limit_come_from_hnsw_with_their_recall():
    vectors = np.random.default_rng(0).normal(size=(1500, 24)).astype(np.float32)
    exact, _ = nearest_neighbours(vectors, k=5)
    found, scores = nearest_neighbours(vectors, k=5, exact_up_to=1000)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert (found >= 0).all() and (found != np.arange(1500)[:, None]).all()
    np.testing.assert_allclose(scores, np.einsum("ij,ikj->ik", unit, unit[found]), rtol=1e-5)  # the true cosines
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    recall = np.mean([len(set(e) & set(f)) / 5 for e, f in zip(exact.tolist(), found.tolist(), strict=True)])
    assert recall >= 0.95 and neighbour_recall(vectors, exact) == 1.0
    assert abs(neighbour_recall(vectors, found) - recall) < 0.05  # the seeded sample estimates the whole


def test_semantic_edges_asset_on_a_tiny_vector_table():
    # as the IO manager hands the partition over: with its model column (the edges' source)
    vectors = pa.table({"model": ["all-MiniLM-L6-v2"] * 3, "node_id": ["a#0", "b#0", "c#0"], "dense": pa.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]], pa.list_(pa.float32()))})
    edges = semantic_edges(build_asset_context(), SemanticConfig(k=1), vectors).to_pylist()
    assert [(e["src"], e["dst"], round(e["weight"], 6), e["kind"], e["source"]) for e in edges] == [
        ("a#0", "b#0", 0.8, "semantic", "all-MiniLM-L6-v2"),
        ("b#0", "a#0", 0.8, "semantic", "all-MiniLM-L6-v2"),
        ("c#0", "b#0", 0.6, "semantic", "all-MiniLM-L6-v2"),
    ]


# ---------------------------------------------------------------- real materializations


def build(home: Path, corpus: str, selection: list[str]):
    """Materialize ``selection`` for one corpus through Dagster, as the pipeline would."""
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("corpus", [corpus])
        result = materialize_committed(home, STATIC_ASSETS, instance=instance, resources=resources(home), partition_key=corpus, selection=selection)
    assert result.success
    return result


def metadata(result, asset: str) -> dict:
    [event] = result.asset_materializations_for_node(asset)
    return {name: value.value for name, value in event.metadata.items()}


@pytest.fixture(scope="module")
def demo(demo_lake) -> tuple[Path, dict[str, dict]]:
    """The session's demo lake (conftest.py) and the metadata of what its run materialized."""
    return demo_lake.home, demo_lake.materializations()


def edges(home: Path, corpus: str, kind: str) -> list[dict]:
    return LakeStorage(home).read("edges", {"corpus": corpus, "kind": kind}).to_pylist()


def test_demo_citation_edges_match_the_cited_documents(demo):
    home, materialized = demo
    node_doc = {n["node_id"]: n["doc_id"] for n in LakeStorage(home).read("nodes", {"corpus": "demo"}).to_pylist()}
    found = edges(home, "demo", "citation")
    predicted = {(node_doc[e["src"]], node_doc[e["dst"]]) for e in found}
    gold = set()
    for line in (DEMO_PATH / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        gold |= {(record["id"], target) for target in record["metadata"]["cites"]}
    precision, recall = len(predicted & gold) / len(predicted), len(predicted & gold) / len(gold)
    print(f"demo citations: {len(predicted)} predicted, {len(gold)} gold, precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.9 and recall >= 0.9
    assert all(e["dst"].endswith("#0") and e["weight"] == 1.0 and e["source"] == "regex" for e in found)
    assert sum(materialized["citation_edges"]["citations_by_style"].values()) >= len(gold)


def test_demo_structural_edges_are_its_six_foreign_keys(demo):
    home, materialized = demo
    found = {(e["src"], e["dst"]): e for e in edges(home, "demo", "structural")}
    keys = LakeStorage(home).read("foreign_keys", {"corpus": "demo"}).to_pylist()
    assert set(found) == {(f"{k['src_doc_id']}#0", f"{k['dst_doc_id']}#0") for k in keys} and len(keys) == 6
    assert ("halvane_survey.dives#0", "halvane_survey.sites#0") in found
    assert all(e["weight"] == 1.0 and e["source"] == "foreign_key" for e in found.values())
    assert materialized["structural_edges"]["foreign_key_declarations_covered"] == 6


def test_demo_semantic_edges_are_k_nearest_other_nodes(demo):
    home, materialized = demo
    found = edges(home, "demo", "semantic")
    nodes = LakeStorage(home).read("nodes", {"corpus": "demo"}).num_rows
    assert len(found) == 10 * nodes and all(e["src"] != e["dst"] and -1.0 <= e["weight"] <= 1.0001 for e in found)
    assert materialized["semantic_edges"]["p95_out_degree"] == 10


def test_files_corpus_links_become_structural_edges(tmp_path):
    raw = tmp_path / "notes"
    (raw / "sub").mkdir(parents=True)
    (raw / "index.md").write_text("# Index\n\nSee [setup](sub/setup.md) and [setup again](sub/setup.md#top).\n", encoding="utf-8")
    (raw / "sub" / "setup.md").write_text('# Setup\n\nBack to <a href="../index.md">the index</a>.\n', encoding="utf-8")
    (raw / "plain.txt").write_text("No links here, only [brackets] (and parentheses).\n", encoding="utf-8")
    home = tmp_path / "lake"
    CorpusRegistry(home).add(CorpusSpec(name="notes", format="files", path=str(raw)))
    result = build(home, "notes", [*INGEST, "nodes", "structural_edges"])
    found = {(e["src"], e["dst"]): (e["weight"], e["source"]) for e in edges(home, "notes", "structural")}
    assert found == {("index.md#0", "sub/setup.md#0"): (2.0, "link"), ("sub/setup.md#0", "index.md#0"): (1.0, "link")}
    assert metadata(result, "structural_edges")["links"] == 3


@pytest.mark.datasets
@pytest.mark.parametrize(("fmt", "folder", "declared"), [("spider", "spider", 849), ("bird", "bird", 102)])
def test_schema_structural_edges_cover_every_declared_key(datasets_dir, tmp_path, fmt, folder, declared):
    home = tmp_path / "lake"
    CorpusRegistry(home).add(CorpusSpec(name=fmt, format=fmt, path=str(datasets_dir / folder)))
    result = build(home, fmt, [*INGEST, "nodes", "structural_edges"])
    meta = metadata(result, "structural_edges")
    found = edges(home, fmt, "structural")
    print(f"{fmt}: {meta['foreign_key_declarations']} declared keys -> {meta['foreign_key_edges']} distinct table pairs ({meta['foreign_key_self_references']} self-references)")
    assert meta["foreign_key_declarations"] == meta["foreign_key_declarations_covered"] == declared
    assert sum(e["weight"] for e in found) == declared and len(found) == meta["foreign_key_edges"]


def test_llm_citations_resolve_like_regex_findings():
    """The resolution step alone; the model answer is scripted here (tests/test_llm.py runs a real server)."""
    from graphlake.kernels.text.citations import CitedWork, CitedWorks, llm_citations

    class Scripted:
        def structured(self, prompt, schema):
            assert "Urchins graze" in prompt and schema is CitedWorks
            return CitedWorks(
                works=[
                    CitedWork(title="kelp forests of vesk reef"),  # normalised title match
                    CitedWork(first_author_surname="Okafor", year=2019),  # author-year
                    CitedWork(title="A Paper Nobody Wrote"),  # unknown: dropped
                    CitedWork(title="Urchin Grazing"),  # itself: dropped
                ]
            )

    index = CitationIndex.build(
        ["a", "b", "c"],
        ["Kelp Forests of Vesk Reef", "Urchin Grazing", "Tides"],
        [None, None, json.dumps({"authors": ["Ada Okafor"], "year": 2019})],
    )
    assert llm_citations(Scripted(), "Urchins graze the kelp.", index, "b") == ["a", "c"]
