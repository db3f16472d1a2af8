"""A newcomer's own corpus: failures are one clear line, a bad ingest declares nothing, and ``forget``
removes every trace of a corpus."""

from __future__ import annotations

import json
from pathlib import Path

from dagster import AssetKey, DagsterInstance
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.warehouse.catalog import Catalog


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)


def write_docs(path: Path, broken: bool = False) -> Path:
    lines = [json.dumps({"id": "a", "title": "Alpha", "text": "Alpha whales sing in the bay."}), json.dumps({"id": "b", "title": "Beta", "text": "Beta kelp grows."})]
    if broken:
        lines[1] = lines[1].replace('", "text"', '" "text"')  # a comma missing at line 2
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_failures_are_one_line_naming_the_file_or_the_step(lake, tmp_path):
    good = write_docs(tmp_path / "docs.jsonl")
    assert invoke("ingest", "jsonl", str(good), "--corpus", "mine").exit_code == 0
    declared = (lake / "corpora.yaml").read_bytes()

    bad = invoke("ingest", "jsonl", str(write_docs(tmp_path / "bad.jsonl", broken=True)), "--corpus", "other")
    assert bad.exit_code == 1 and len(bad.stderr.splitlines()) <= 3, bad.stderr
    assert f"{tmp_path / 'bad.jsonl'}:2: malformed JSON" in bad.stderr
    assert (lake / "corpora.yaml").read_bytes() == declared  # nothing declared, nothing run

    unknown = invoke("materialize", "--corpus", "nope")
    assert unknown.exit_code == 1 and len(unknown.stderr.splitlines()) <= 3 and "corpus 'nope' is not declared" in unknown.stderr

    write_docs(good, broken=True)  # the declared corpus's file goes bad: the failure is inside a Dagster step
    step = invoke("materialize", "--corpus", "mine", "--select", "key:documents")
    assert step.exit_code == 1 and len(step.stderr.splitlines()) <= 3, step.stderr
    assert f"raw_corpus (corpus 'mine'): {good}:2: malformed JSON" in step.stderr and "Error:" not in step.stderr
    verbose = invoke("--verbose", "materialize", "--corpus", "mine", "--select", "key:documents")
    assert verbose.exit_code == 1 and "Traceback" in verbose.stderr and len(verbose.stderr.splitlines()) > 10


def test_forget_removes_every_trace_of_a_corpus(lake, tmp_path):
    assert invoke("ingest", "jsonl", str(write_docs(tmp_path / "docs.jsonl")), "--corpus", "mine").exit_code == 0
    assert invoke("materialize", "--corpus", "mine", "--select", "key:bm25_index or key:contextual_edges").exit_code == 0
    with DagsterInstance.get() as instance:  # each CLI run belongs to the job named for its command
        runs = [(run.job_name, run.tags["graphlake/command"], run.tags["graphlake/corpus"]) for run in instance.get_runs()]
    assert sorted(runs) == [("index_corpus", "materialize", "mine"), ("ingest_corpus", "ingest", "mine")]
    traces = lambda: sorted(str(p.relative_to(lake)) for p in lake.rglob("corpus=mine"))  # noqa: E731
    assert any(t.startswith("tables/nodes") for t in traces()) and any(t.startswith("artifacts/bm25") for t in traces())

    kept = invoke("forget", "mine", input="n\n")
    assert kept.exit_code == 1 and traces()  # not confirmed: nothing removed
    assert invoke("forget", "mine", "--yes").exit_code == 0
    assert traces() == []
    assert "mine" not in {c["name"] for c in json.loads(invoke("corpora", "--json").stdout)}
    with DagsterInstance.get() as instance:
        assert not instance.has_dynamic_partition("corpus", "mine")
    with Catalog(lake).reader() as con:
        assert con.execute("SELECT count(*) FROM nodes WHERE corpus = 'mine'").fetchall() == [(0,)]
    assert invoke("forget", "mine", "--yes").exit_code == 1  # gone: nothing left to forget


NOTES = {
    "alpha": "has no train-split queries with gold; GraphER's alpha fixed from BIRD train, ppr 0.8, gcs 0.1",
    "networks": "gat and mlp not trained",
    "cross-encoder": "no trained cross-encoder: the lake has 0 train-split queries",
}


def write_notes(folder: Path) -> Path:
    """A newcomer's own Markdown notes: a heading, paragraphs, no queries."""
    folder.mkdir()
    topics = [
        ("Kelp survey", "kelp forests shrank near the headland after the marine heatwave"),
        ("Otter census", "sea otters returned to the estuary and ate the urchins"),
        ("Sled log", "the BenthoCam sled filmed the seabed from the vessel Aurora"),
        ("Buoy notes", "the buoy logged warmer water and stronger swell in March"),
    ]
    for number, (title, finding) in enumerate(topics):
        (folder / f"note{number}.md").write_text(f"# {title}\n\nField note by Dr. Lena Park. In Monterey Bay {finding}.\n\n## Next\n\nRepeat the {title.lower()} in spring.\n")
    return folder


def test_a_corpus_without_queries_materializes_and_every_method_searches_it(lake, tmp_path):
    from graphlake.retrieval.core import uses_llm
    from graphlake.retrieval.methods import load_methods

    docs = tmp_path / "docs.jsonl"
    lines = [json.dumps({"id": f"d{i}", "title": t, "text": f"{t} were seen off the coast by the survey team."}) for i, t in enumerate(["Whales", "Seals", "Crabs"])]
    docs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    lake.mkdir(parents=True)
    (lake / "methods.yaml").write_text("use: ['*']\n")  # every packaged method: each stand-in is checked
    notes_folder = write_notes(tmp_path / "notes")
    assert invoke("ingest", "files", str(notes_folder), "--corpus", "mine").exit_code == 0
    assert invoke("ingest", "jsonl", str(docs), "--corpus", "plain").exit_code == 0
    for corpus in ("mine",):  # a folder of files; a JSON-lines corpus builds the same steps (tests/test_first_hour.py builds files too)
        built = invoke("materialize", "--corpus", corpus)
        assert built.exit_code == 0, built.stderr
        said = " ".join(built.stderr.split())  # one note for what a corpus without queries means, not one a method
        assert f"corpus {corpus!r} has no queries: its methods are built for `graphlake query`" in said and "nothing to evaluate" not in said, said
        with Catalog(lake).reader() as con:  # every edge kind the corpus has, its vectors, and typed empty metrics
            assert con.execute("SELECT count(*) FROM metrics WHERE corpus = ?", [corpus]).fetchall() == [(0,)]
            assert con.execute("SELECT count(DISTINCT model) FROM vectors WHERE corpus = ?", [corpus]).fetchall() == [(2,)]
            assert con.execute("SELECT count(*) FROM edges WHERE corpus = ? AND kind = 'semantic'", [corpus]).fetchall()[0][0] > 0
    with DagsterInstance.get() as instance:
        evaluated = instance.get_latest_materialization_event(AssetKey("metrics_bm25")).asset_materialization.metadata
        assert "has no queries with gold" in evaluated["note"].value

    methods = load_methods(lake)
    for corpus, question, best in (("mine", "Who filmed the seabed?", "note2.md#0"),):
        hits, notes = {}, {}
        for name in (name for name, method in methods.items() if not uses_llm(method)):  # grasp_llm needs a server: below
            result = invoke("query", "--corpus", corpus, "--method", name, "--top", "3", "--json", question)
            assert result.exit_code == 0, (name, result.stderr)
            answer = json.loads(result.stdout)
            hits[name], notes[name] = [hit["node_id"] for hit in answer["hits"]], answer["notes"]
            assert [hit["rank"] for hit in answer["hits"]] == list(range(1, len(hits[name]) + 1)) and hits[name], name
        # each stand-in is what the notes say it is, and only those methods carry notes
        assert hits["grapher_gat"] == hits["grapher_mlp"] == hits["grapher_gcs"]
        assert hits["re2"] == hits["gar"] == hits["vector"] and hits["fastinsight"] == hits["dense"][: len(hits["fastinsight"])]
        assert all(any(NOTES["cross-encoder"] in note for note in notes[name]) for name in ("re2", "gar", "fastinsight"))
        assert any("no gat for corpus" in note for note in notes["grapher_gat"])
        stand_ins = {"re2", "gar", "fastinsight", *(f"grapher_{r}" for r in ("ppr", "gcs", "gat", "mlp"))}
        kg = {"ap_three_kg", "ap_three_kg_entry", "ap_dense_kg", "ap_sparse_kg", "ap_full_kg"}  # no tuned kg_weight, or no entity named
        grasp = {"grasp_fused", "grasp_static", "grasp_dynamic", "grasp_dense_partner", "grasp_zs", "grasp"}  # nothing tuned, no reranker
        short = {name for name, said in notes.items() if any("of the 3 hits asked" in note for note in said)}  # a tiny corpus: fewer than k, said why
        assert short == {name for name, found in hits.items() if len(found) < 3} and short
        said = {name for name, said in notes.items() if [note for note in said if "hits asked" not in note]}
        assert said == stand_ins | kg | grasp | {"ap_three_kw", "ap_two_tuned", "ap_three_tuned", "graphlake_ltr", "graphlake_ltr_full"}
        assert hits["grasp"] == hits["grasp_zs"] == hits["grasp_fused"]
        assert any("no tuned fusion" in note for note in notes["grasp_fused"])
        assert any("no tuned weights" in note for note in notes["ap_three_tuned"])
        # graphlake's learned fusion without training queries: rrf of its inputs, said in notes
        assert any("learned_fusion: no ranker trained" in note and "rrf of its inputs" in note for note in notes["graphlake_ltr"])
        assert any("scored exactly" in note for note in notes["ap_three_kw"])  # which keyword path ran: few holders, exact
        assert hits["bm25"][0] == best, hits["bm25"]
    # a file's hits cite it: its path in the folder, mtime and size are metadata a filter reads, the offsets slice the file
    where = 'path in ["note2.md"] and size > 100 and mtime >= "2000-01-01"'
    cited = invoke("query", "--corpus", "mine", "--method", "rrf", "--json", "--filter", where, "Who filmed the seabed?")
    assert cited.exit_code == 0, cited.stderr
    [*hits_of_note] = json.loads(cited.stdout)["hits"]
    for hit in hits_of_note:
        assert hit["doc_id"] == "note2.md" and hit["source"] == str(notes_folder / "note2.md") and hit["metadata"]["size"] > 100
        assert Path(hit["source"]).read_text()[hit["start"] : hit["end"]] == hit["text"] and {"filmed", "seabed"} <= set(hit["terms"])
    with Catalog(lake).reader() as con:  # SQL reads the same metadata on every node
        assert con.execute("SELECT count(*) FROM nodes WHERE corpus = 'mine' AND metadata->>'path' LIKE '%note2.md'").fetchone()[0] == len(hits_of_note)
    # several corpora in one call: their rankings fused, each hit naming its corpus
    assert invoke("materialize", "--corpus", "plain", "--select", "key:bm25_index").exit_code == 0
    both = invoke("query", "--corpus", "mine", "--corpus", "plain", "--method", "bm25", "--json", "Who saw the seals and filmed the seabed?")
    assert both.exit_code == 0, both.stderr
    fused = json.loads(both.stdout)
    assert fused["corpus"] == "mine+plain" and set(fused["snapshots"]) == {"mine", "plain"}
    assert {hit["corpus"] for hit in fused["hits"]} == {"mine", "plain"} and [h["rank"] for h in fused["hits"]] == list(range(1, len(fused["hits"]) + 1))
    unserved = invoke("query", "--corpus", "mine", "--method", "grasp_llm", "Who filmed the seabed?")
    assert unserved.exit_code == 1 and "GRAPHLAKE_LLM_BASE_URL" in unserved.stderr and "Traceback" not in unserved.stderr, unserved.stderr
    assert "no queries to evaluate on" in invoke("eval", "--corpus", "mine").stderr
    # a declared training corpus without queries is a mistake to name, not a default to stand in
    assert invoke("ingest", "jsonl", str(docs), "--corpus", "taught", "--alpha-corpus", "plain").exit_code == 0
    refused = invoke("materialize", "--corpus", "taught", "--select", "key:graph_rankers")
    assert refused.exit_code == 1 and "corpus 'plain' has no queries with gold to tune graph rankers on" in refused.stderr, refused.stderr


def test_an_alpha_corpus_tunes_the_alpha_of_a_corpus_without_queries(reranked_copy, tmp_path):
    from graphlake.retrieval.models.grapher import TunedRankers
    from graphlake.retrieval.models.reranker import held_out_quality
    from graphlake.retrieval.models.untrained import Untrained
    from graphlake.warehouse.storage import LakeStorage

    notes = write_notes(tmp_path / "notes")
    assert invoke("ingest", "files", str(notes), "--corpus", "mine", "--alpha-corpus", "demo").exit_code == 0
    tuned = invoke("materialize", "--corpus", "mine", "--select", "key:graph_rankers")
    assert tuned.exit_code == 0 and NOTES["networks"] in tuned.stderr and "alpha untuned" not in tuned.stderr, tuned.stderr
    rankers = TunedRankers.load(LakeStorage(reranked_copy).artifact("graph_rankers", {"corpus": "mine"}))
    assert rankers.alpha_default is None and rankers.report["alpha_corpus"] == "demo" and rankers.report["alpha_queries"] > 0
    assert all(isinstance(rankers.models[name], Untrained) for name in ("gat", "mlp"))
    # the lake's cross-encoder, trained on the demo's train split, serves the new corpus as it is; the
    # demo's 11 queries train it to no better than dense, and the answer says so, nothing else
    answer = json.loads(invoke("query", "--corpus", "mine", "--method", "re2", "--build", "--json", "Who filmed the seabed?").stdout)
    trained, dense = held_out_quality(LakeStorage(reranked_copy).artifact("reranker", {}))
    said = [note for note in answer["notes"] if "hits asked" not in note]  # a corpus of four nodes: fewer than k, said apart
    assert answer["hits"] and len(said) == (trained <= dense) and all("no better than dense retrieval" in note for note in said)
