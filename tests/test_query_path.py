"""A query's path stays short and stays in its layers: a warm search calls into the API, retrieval and
the kernels only (never the warehouse or the pipelines, which it left behind when the indexes loaded),
answering a query imports nothing of ``retrieval/training``, and the Definitions load neither numba
nor torch (a kernel loads them when it first runs).

Each check runs in a fresh interpreter, so that what it imports is what the path imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = """
import json, sys, threading
from pathlib import Path
from graphlake.api import open_lake
from graphlake.retrieval.methods import load_methods

root, home, defaults = sys.argv[1], sys.argv[2], sys.argv[3]
lake = open_lake(home)
called = {}
for name in load_methods(Path(defaults)):
    lake.search("demo", name, "Which vessel carried the sled?", 5)  # loads what it reads: not traced
    files = set()

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(root) and "/.venv/" not in path:
            files.add(path[len(root):])

    sys.setprofile(profile), threading.setprofile(profile)
    lake.search("demo", name, "Where did the expedition winter?", 5)
    sys.setprofile(None), threading.setprofile(None)
    called[name] = sorted(files)
print(json.dumps({"called": called, "modules": sorted(sys.modules)}))
"""


FRESH = """
import json, sys
from graphlake.cli import app

root, called = sys.argv[1], set()

def importing(frame):  # a project module's own code as it is imported, or importlib's: import time, not the path
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and code.co_filename.startswith(root) or code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False

def profile(frame, event, arg):
    path = frame.f_code.co_filename
    if event == "call" and path.startswith(root) and "/.venv/" not in path and not importing(frame):
        called.add(path[len(root):])

sys.setprofile(profile)
try:
    app(["query", "--corpus", "demo", "--method", "ap_three", "--json", "Which vessel carried the sled?"])
except SystemExit as end:
    assert not end.code, end.code
sys.setprofile(None)
print(json.dumps(sorted(called)))
"""
FRESH_FILES = 33  # issue 59 aimed at 12 (retired by issue 73); what a fresh query still calls is listed in docs/architecture.md


def test_a_fresh_query_from_the_command_line_reads_the_lake_and_no_pipeline(demo_lake):
    """Every project file a fresh ``graphlake query`` calls into once its modules are imported: the CLI,
    the API, the method's parse, the warehouse's reads of the corpus's snapshot and models, the index
    loaders and the kernels; never the pipelines, the assets or the training code."""
    done = subprocess.run([sys.executable, "-c", FRESH, f"{ROOT}/"], capture_output=True, text=True, check=True, env={**os.environ, "GRAPHLAKE_HOME": str(demo_lake.home)})
    called = json.loads(done.stdout.splitlines()[-1])
    assert {"cli/search.py", "api/lake.py", "kernels/hybrid/graph_index.py"} <= set(called), called
    assert not [f for f in called if f.startswith(("pipelines/", "assets/", "retrieval/training/"))], called
    assert len(called) <= FRESH_FILES, called


def test_a_warm_search_stays_in_the_api_retrieval_and_the_kernels(demo_lake, tmp_path):
    done = subprocess.run([sys.executable, "-c", TRACE, f"{ROOT}/", str(demo_lake.home), str(tmp_path)], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    called = found["called"]
    assert {"bm25", "ap_three", "grasp_fused", "graphlake_ltr"} <= set(called)  # the defaults, every one traced
    assert len(called["ap_three"]) <= 9, called["ap_three"]
    assert "kernels/hybrid/graph_index.py" in called["ap_three"]  # the trace reaches the kernel: it can fail
    strays = {name: [f for f in files if f.startswith(("warehouse/", "pipelines/", "assets/"))] for name, files in called.items()}
    assert not any(strays.values()), strays
    assert not [m for m in found["modules"] if m.startswith("graphlake.retrieval.training")]


def test_the_definitions_load_neither_numba_nor_torch(tmp_path):
    code = "import sys; from pathlib import Path; from graphlake.pipelines.definitions import build_definitions; build_definitions(Path(sys.argv[1])); print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "lake")], capture_output=True, text=True, check=True)
    modules = set(json.loads(done.stdout.splitlines()[-1].replace("'", '"')))
    assert "dagster" in modules and "graphlake.assets.indexes.hybrid_graph" in modules  # the assets were loaded
    assert not {name.partition(".")[0] for name in modules} & {"numba", "torch"}
