"""``eval`` on a freshly ingested corpus whose training corpus is fresh too builds everything its
methods read, on both corpora: the entity mentions under SPRIG's co-occurrence graph, the training
corpus's spaCy triples and hybrid graph that Allan-Poe's KG weight is tuned on. (Each once failed or
fell back to a default: the plans named an index's last asset, not what it reads.)"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.warehouse.storage import LakeStorage

PASSAGES = {
    "w1": ("Humpback song", "Male humpback whales sing long songs in the breeding season off Hawaii."),
    "w2": ("Blue whale size", "The blue whale is the largest animal known, up to thirty metres long."),
    "w3": ("Orca hunting", "Orcas hunt seals near Norway in pods and share the catch."),
    "w4": ("Sperm whale diving", "Sperm whales dive two kilometres deep to hunt giant squid."),
    "w5": ("Grey whale migration", "Grey whales migrate from Alaska to Mexican lagoons every winter."),
    "w6": ("Beluga voices", "Belugas whistle and click; sailors called them sea canaries."),
}
TEST = {"q1": ("Which whale sings near Hawaii?", "w1"), "q2": ("What do sperm whales hunt?", "w4"), "q3": ("Where do grey whales go from Alaska?", "w5")}
TRAIN = {"t1": ("humpback songs in Hawaii", "w1"), "t2": ("largest animal", "w2"), "t3": ("orcas near Norway", "w3"), "t4": ("whales from Alaska", "w5")}


def beir(folder, queries: dict, split: str) -> str:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in PASSAGES.items()))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in queries.items()))
    (folder / "qrels" / f"{split}.tsv").write_text("".join(f"{q}\t{d}\t1\n" for q, (_, d) in queries.items()))
    return str(folder)


def test_eval_on_fresh_corpora_builds_what_every_family_reads(lake, tmp_path):
    lake.mkdir(parents=True)
    (lake / "methods.yaml").write_text('use: ["*"]\n')
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", "beir", beir(tmp_path / "trainer", TRAIN, "train"), "--corpus", "trainer"], catch_exceptions=False).exit_code == 0
    ingested = runner.invoke(app, ["ingest", "beir", beir(tmp_path / "held", TEST, "test"), "--corpus", "held", "--train-corpus", "trainer"], catch_exceptions=False)
    assert ingested.exit_code == 0, ingested.output
    evaluated = runner.invoke(app, ["eval", "--corpus", "held", "--methods", "graph,rrf_ppr,ap_three_kg,fused_three", "--json"], catch_exceptions=False)
    assert evaluated.exit_code == 0, evaluated.output
    assert {row["method"] for row in json.loads(evaluated.stdout)} == {"graph", "rrf_ppr", "ap_three_kg", "fused_three"}
    assert "trainer: " in evaluated.stderr and "ap_three_kg on held 3/3 queries" in evaluated.stderr  # --json keeps the progress, on stderr
    assert "stands in" not in evaluated.stderr  # no default weight took a tuned one's place
    stored = LakeStorage(lake)
    for method in ("graph", "rrf_ppr", "ap_three_kg", "fused_three"):
        assert stored.rows("runs", {"corpus": "held", "method": method}) > 0, method
    assert stored.rows("mentions", {"corpus": "held", "extractor": "spacy"}) > 0
    assert stored.rows("triples", {"corpus": "trainer", "extractor": "spacy"}) > 0 and stored.artifact("hybrid_graph", {"corpus": "trainer"}) is not None
    weights = json.loads(next(stored.artifact("hybrid_weights", {"corpus": "held"}).glob("*.json")).read_text())
    assert weights["kg"] is not None and weights["report"]["kg"]["extractor"] == "spacy", weights
