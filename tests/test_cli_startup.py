"""The command line starts at once: the light commands import no model, no Dagster, no graph library,
and ``query`` imports only what its method reads. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("torch", "transformers", "spacy", "torch_geometric", "sentence_transformers", "dagster")
PROBE = """
import json, sys
from graphlake.cli import app
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


def test_corpora_trec_and_query_import_no_model_library(reads_demo):
    """Queries run through the encoders' ONNX graphs (exported by the build): a dense and an Allan-Poe
    query import neither torch nor transformers, never spaCy nor Dagster."""
    commands = [["corpora"], ["trec", "--corpus", "demo", "--method", "bm25"]]
    commands += [["query", "--corpus", "demo", "--method", method, "sled"] for method in ("bm25", "dense", "ap_three")]
    assert imported_after(reads_demo.home, commands) == set()


def test_graph_and_learned_queries_import_no_torch(reads_demo):
    """A fresh query of the graph and learned defaults loads only what it reads: GraphER's alpha without its
    networks (torch, PyG), spaCy's NER without the torch thinc offers, LightGBM's Booster without
    scikit-learn; these imports were most of a fresh graphlake_ltr query (6.8 s, now under 3 s on 2 cores)."""
    commands = [["query", "--corpus", "demo", "--method", method, "sled"] for method in ("graph_rrf", "grapher_gcs", "grasp_fused", "graphlake_ltr")]
    assert imported_after(reads_demo.home, commands, (*HEAVY, "sklearn")) == {"spacy"}
