"""The lake tunes its own dense encoder on the demo's training queries (models.yaml ``tune:``), and
keeps it only when it ranks held-out training queries better: with the demo's settings the tuned
encoder wins and is kept; with a learning rate that wrecks it the encoder it started from is kept.
Either way the corpus's vectors and its queries come from the kept one, and a build on the same data
does not tune again."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from graphlake.kernels.text.model_files import folder_revision
from graphlake.kernels.text.query_encoders import cache_dir
from graphlake.cli import app
from graphlake.warehouse.corpora import DEMO_CONFIG, TUNED_ARTIFACT, TUNING_DECISION
from graphlake.warehouse.storage import LakeStorage


def build(home: Path, tuning: dict) -> str:
    """``materialize --corpus demo --select key:dense_vectors`` with these tuning settings; its stderr."""
    config = home.parent / "tuning.yaml"
    config.write_text(yaml.safe_dump({"ops": {"dense_vectors": {"config": {"tuning": tuning}}}}))
    done = CliRunner().invoke(app, ["materialize", "--corpus", "demo", "--select", "key:dense_vectors", "--config", str(config)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return " ".join(done.stderr.split())


def decision(home: Path) -> tuple[dict, Path]:
    folder = LakeStorage(home).artifact(TUNED_ARTIFACT, {"corpus": "demo"})
    return json.loads((folder / TUNING_DECISION).read_text()), folder


def test_the_tuned_encoder_is_kept_only_when_it_ranks_held_out_queries_better(demo_copy):
    from graphlake.api import GraphLake
    from graphlake.kernels.text.encoders import dense_model_path

    home = demo_copy
    (home / "models.yaml").write_text("use: {dense: tuned}\nmodels:\n  tuned: {kind: dense, tune: all-MiniLM-L6-v2}\n")
    demo = yaml.safe_load(DEMO_CONFIG.read_text())["ops"]["dense_vectors"]["config"]["tuning"]

    said = build(home, demo)
    made, folder = decision(home)
    assert made["kept"] == "tuned" and made["held_out"]["tuned"] > made["held_out"]["untuned"], made
    assert made["held_out"]["queries"] == 3 and made["training"] == {**made["training"], "source": "demo", "queries": 8}
    assert "tuning the dense encoder 8/8 steps" in said and "kept the tuned encoder" in said and "138 by dense_vectors (0 reused)" in said, said
    tuned = folder_revision(folder / "model", cache_dir())
    vectors = LakeStorage(home).read("vectors", {"corpus": "demo", "model": "tuned"})
    assert set(vectors.column("revision").to_pylist()) == {tuned} and vectors.num_rows == 138
    assert len(GraphLake(home).search("demo", "dense", "Which shipyard built the RV Kestrel Dawn?", 5).hits) == 5  # queries through the tuned one

    said = build(home, demo)  # the same data and settings: the decision stands, nothing is encoded
    assert "tuned before on the same data; the tuned encoder stays" in said and "0 by dense_vectors (138 reused)" in said and "tuning the dense" not in said, said

    said = build(home, {**demo, "learning_rate": 1e-2, "epochs": 2})  # a step size that wrecks the encoder
    made, folder = decision(home)
    assert made["kept"] == "base" and made["held_out"]["tuned"] < made["held_out"]["untuned"], made
    assert not (folder / "model").exists() and "kept the base encoder" in said
    vectors = LakeStorage(home).read("vectors", {"corpus": "demo", "model": "tuned"})
    assert set(vectors.column("revision").to_pylist()) == {folder_revision(dense_model_path(), cache_dir())}
    hits = GraphLake(home).search("demo", "dense", "Which shipyard built the RV Kestrel Dawn?", 5).hits
    assert len(hits) == 5
