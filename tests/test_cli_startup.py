"""The command line starts at once: the light commands import no model, no Dagster, no graph library,
and ``query`` imports only what its method reads. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "spacy", "torch_geometric", "sentence_transformers", "dagster")
PROBE = """
import json, sys
from graphlake.pipelines.cli import app
for args in json.loads(sys.argv[1]):
    try:
        app(args)
    except SystemExit as done:
        assert not done.code, (args, done.code)
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in json.loads(sys.argv[2]))))
"""


def imported_after(home, commands: list[list[str]], watched=HEAVY) -> set[str]:
    """The watched top-level packages in ``sys.modules`` after running the commands in one interpreter."""
    env = {**os.environ, "GRAPHLAKE_HOME": str(home)}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(commands), json.dumps(watched)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return {name.split(".")[0] for name in json.loads(done.stdout.strip().splitlines()[-1])}


def test_help_and_sql_import_no_model_and_no_dagster(tmp_path):
    assert imported_after(tmp_path / "lake", [["--help"], ["sql", "select 1"]]) == set()


@pytest.mark.parametrize(("method", "allowed"), [("bm25", set()), ("dense", {"torch"})])
def test_corpora_trec_and_query_import_only_what_they_use(reads_demo, method, allowed):
    commands = [["corpora"], ["trec", "--corpus", "demo", "--method", "bm25"], ["query", "--corpus", "demo", "--method", method, "sled"]]
    found = imported_after(reads_demo.home, commands)
    assert found == allowed  # a BM25 query loads no model; a dense one its encoder (not sentence-transformers), never spaCy nor Dagster
