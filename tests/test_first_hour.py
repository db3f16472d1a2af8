"""A newcomer's first hour, run as they run it (the ``graphlake`` command, in processes of its own) on
the lake ``graphlake demo`` built: every command the demo's closing lines and the README name exits 0
there; a folder of their own files builds, a rebuild with nothing changed says ``up to date`` and
commits nothing, and a one-file edit runs only that file's nodes through each model.

In CI the lake is the one the demo phase built (``$GRAPHLAKE_HOME``), copied; elsewhere the demo is
built here first."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import copy_lake
from graphlake.cli.lake import DEMO_NEXT
from graphlake.pipelines.definitions import build_definitions

ROOT = Path(__file__).resolve().parents[1]
GRAPHLAKE = str(Path(sys.executable).with_name("graphlake"))
OWN_FOLDER = "path/to/notes"  # the README's stand-in for the reader's folder


def readme_commands() -> list[str]:
    """The ``graphlake`` command lines of the README's bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.DOTALL)
    lines = [line.split("  # ")[0] for block in blocks for line in block.splitlines()]  # without a comment beside the command
    return [line.removeprefix(".venv/bin/") for line in lines if line.startswith(".venv/bin/graphlake ")]


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory) -> dict[str, str]:
    """The environment of a newcomer's lake after ``graphlake demo`` (a copy of CI's, else built here)."""
    home = tmp_path_factory.mktemp("newcomer") / "lake"
    built = Path(os.environ.get("GRAPHLAKE_HOME", "/nonexistent"))
    env = {**os.environ, "GRAPHLAKE_HOME": str(home), "COLUMNS": "100"}
    env.pop("DAGSTER_HOME", None)
    if (built / "snapshots" / "demo").is_dir() and not (built / "methods.yaml").exists():
        copy_lake(built, home)
    else:
        done = subprocess.run([GRAPHLAKE, "demo"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        assert all(command.split('"')[0].strip() in " ".join(done.stdout.split()) for command, _ in DEMO_NEXT), done.stdout[-2000:]
    return env


def run(env: dict[str, str], command: str, folder: Path | None = None) -> subprocess.CompletedProcess:
    args = shlex.split(command.replace(OWN_FOLDER, str(folder)) if folder else command)
    assert args[0] == "graphlake", command
    return subprocess.run([GRAPHLAKE, *args[1:]], env=env, capture_output=True, text=True, timeout=900)


def serve_ui(env: dict[str, str], command: str) -> None:
    """``graphlake ui`` until it shows the lake's asset graph, every asset in its stage's group; then
    stopped as Ctrl-C stops it: exit 0, none of Dagster's advice for its own projects."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([GRAPHLAKE, *shlex.split(command)[1:], "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    query = json.dumps({"query": "{ assetNodes { assetKey { path } groupName } }"}).encode()
    answer = None
    try:
        deadline = time.monotonic() + 300  # a loaded CI machine starts it slowly
        while answer is None and time.monotonic() < deadline:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", query, {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    answer = json.loads(response.read()) if response.status == 200 else None
                if answer is not None and not answer.get("data", {}).get("assetNodes"):
                    answer = None  # the code location is still loading
            except OSError:
                assert process.poll() is None, process.stdout.read()
            if answer is None:
                time.sleep(1)
        assert answer is not None, "graphlake ui did not answer within 300 s"
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, output
    assert "dg dev" not in output and "Traceback" not in output, output
    groups = {"/".join(node["assetKey"]["path"]): node["groupName"] for node in answer["data"]["assetNodes"]}
    graph = build_definitions(Path(env["GRAPHLAKE_HOME"])).resolve_asset_graph()
    assert groups == {key.to_user_string(): graph.get(key).group_name for key in graph.get_all_asset_keys()}
    assert set(groups.values()) == {"ingest", "enrichment", "chunking", "graphs", "vectors", "indexes", "retrieval", "evaluation", "llm"}


def write_own_files(folder: Path) -> dict[str, str]:
    """A newcomer's folder: Markdown, reStructuredText, an extension-less README and a Debian one, a
    picture that is skipped; their texts by file."""
    texts = {
        "survey.md": "# Kelp survey\n\nKelp forests shrank near the headland after the marine heatwave of 2023.\n\nDivers counted urchins on every transect.\n",
        "otters.rst": "Otter census\n============\n\nSea otters returned to the estuary and ate the urchins that had grazed the kelp.\n",
        "README": "Field notes of the Monterey Bay team. The BenthoCam sled filmed the seabed from the vessel Aurora.\n",
        "buoys/README.Debian": "The buoy logged warmer water and stronger swell in March, then calmer seas in April.\n",
        "buoys/log.txt": "Buoy 4 went silent on 12 May; the Aurora recovered it with a cracked solar panel.\n",
    }
    for name, text in texts.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "map.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    return texts


def test_every_command_the_demo_and_the_readme_name_works_on_the_built_lake(newcomer, tmp_path):
    commands = [command for command, _ in DEMO_NEXT] + readme_commands()
    assert any(c.startswith("graphlake ingest files") for c in commands) and "graphlake ui" in commands
    folder = tmp_path / "notes"
    texts = write_own_files(folder)
    for command in dict.fromkeys(commands):  # each once, in the order a reader meets them
        if command == "graphlake ui":
            serve_ui(newcomer, command)
            continue
        done = run(newcomer, command, folder)
        assert done.returncode == 0, (command, done.stderr[-3000:])
        if command.startswith("graphlake ingest files"):
            said = " ".join(done.stderr.split())
            assert "skipped 1 file: 1 .png" in said and "--ext .png" not in said, said  # an image is not text to read
        if command.startswith("graphlake methods"):
            assert "rrf" in done.stdout and "error" not in done.stderr
    # a method that reranks is in its catalogue, off by default
    assert "* re2" not in run(newcomer, "graphlake methods").stdout

    # eval twice: the second runs nothing
    again = run(newcomer, "graphlake eval --corpus demo --methods bm25,dense,rrf")
    assert again.returncode == 0 and not re.search(r"demo: \d+/\d+ ", again.stderr), again.stderr

    # the newcomer's corpus: a rebuild with nothing changed runs nothing and commits nothing
    home = Path(newcomer["GRAPHLAKE_HOME"])
    snapshots = sorted((home / "snapshots" / "mine").iterdir())
    rebuilt = run(newcomer, "graphlake materialize --corpus mine")
    assert rebuilt.returncode == 0 and "mine: up to date" in rebuilt.stderr, rebuilt.stderr
    assert sorted((home / "snapshots" / "mine").iterdir()) == snapshots

    # a one-file edit: only that file's nodes go through each model
    (folder / "otters.rst").write_text(texts["otters.rst"] + "\nA second count in June found forty otters.\n", encoding="utf-8")
    edited = run(newcomer, "graphlake materialize --corpus mine")
    assert edited.returncode == 0, edited.stderr
    counted = run(newcomer, "graphlake sql \"select count(*) as n from nodes where corpus = 'mine' and doc_id = 'otters.rst'\" --json")
    nodes = json.loads(counted.stdout)[0]["n"]
    summary = next(line for line in edited.stderr.splitlines() if line.startswith("mine: nodes through a model: "))
    steps = {step: int(count) for count, step in re.findall(r"(\d+) by (\w+) \(\d+ reused\)", summary)}
    assert {"dense_vectors", "splade_vectors", "entities_spacy"} <= set(steps), summary
    assert all(steps[step] == nodes for step in ("dense_vectors", "splade_vectors", "entities_spacy")), (nodes, summary)
    # and launches nothing its change cannot reach: a corpus without queries keeps its learned defaults, empty runs and report
    launched = set(re.findall(r"^mine: \d+/\d+ (\w+) \(", edited.stderr, flags=re.MULTILINE))
    assert "dense_vectors" in launched and not launched & {"graph_rankers", "grasp_fusion", "learned_fusion", "skb_plans", "report", "run_bm25"}, launched

    # switching a method on in a built lake: it is written, listed, and the command exits 0
    switched = run(newcomer, "graphlake methods --use grasp_static")
    assert switched.returncode == 0 and "* grasp_static" in switched.stdout, switched.stderr
